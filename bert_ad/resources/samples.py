"""Files that ship inside bert_ad: BERT configs and small sample data sets.

In a checkout they are the root folders configs/ and data/; a wheel carries
them as bert_ad/configs and bert_ad/samples (setup.py maps the folders), so an
installed bert_ad needs no checkout. `package_file` finds either.

`tiny_model()` (`python -m bert_ad.assets tiny`) puts together what a smoke
run needs, in one folder of the asset cache:

  bert_config.json    configs/tiny_bert_config.json (hidden 32, 2 layers) with
                      vocab_size set to the vocab's
  vocab.txt           [PAD] [UNK] [CLS] [SEP] [MASK] + the sample's words
  sample_sentiment/   train.tsv (40 rows), dev.tsv, test.tsv: label<TAB>text

  bert-ad-classifier --task_name=sentiment --data_dir=TINY/sample_sentiment \\
    --vocab_file=TINY/vocab.txt --bert_config_file=TINY/bert_config.json ...

Standard library only (bottom layer): the asset command uses it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from typing import List

from bert_ad.errors import UserError
from bert_ad.files import cannot_write
from bert_ad.folders import staging_directory

# Folder inside the installed package -> folder at the root of a checkout.
CHECKOUT_FOLDERS = {"configs": "configs", "samples": "data"}
TINY_BERT_CONFIG = "configs/tiny_bert_config.json"
SAMPLE_SENTIMENT = "samples/sample_sentiment"
SAMPLE_SPLITS = ("train.tsv", "dev.tsv", "test.tsv")
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
TINY_FILES = ("bert_config.json", "vocab.txt", "sample_sentiment")


def _package_dir() -> str:
    # bert_ad/resources/samples.py -> bert_ad/
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def package_file(relative: str) -> str:
    """Absolute path of a file or folder that ships with bert_ad.

    Args:
      relative: "configs/..." or "samples/..." (e.g. TINY_BERT_CONFIG).
    Returns:
      The path inside the installed package, or in the checkout this
      bert_ad was imported from.
    Raises:
      UserError: neither exists (a broken install).
    """
    top, _, rest = relative.partition("/")
    if top not in CHECKOUT_FOLDERS:
        raise ValueError(f"{relative!r} is not under {' or '.join(CHECKOUT_FOLDERS)}")
    installed = os.path.join(_package_dir(), top, rest)
    if os.path.exists(installed):
        return installed
    checkout = os.path.join(os.path.dirname(_package_dir()), CHECKOUT_FOLDERS[top], rest)
    if os.path.exists(checkout):
        return checkout
    raise UserError(f"{relative} is missing from this bert_ad install (looked for "
                    f"{installed}); reinstall bert_ad")


def words_of(text: str) -> List[str]:
    """Lower-cased words and single punctuation marks, as BERT's basic tokenizer
    splits ASCII text."""
    return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def sample_vocab(data_dir: str) -> List[str]:
    """The special tokens, then every word of the sample's splits, sorted."""
    words = set()
    for split in SAMPLE_SPLITS:
        with open(os.path.join(data_dir, split), encoding="utf-8") as f:
            for line in f:
                words.update(words_of(line.rstrip("\n").split("\t", 1)[-1]))
    return SPECIAL_TOKENS + sorted(words - set(SPECIAL_TOKENS))


def tiny_model(folder: str) -> str:
    """Write the tiny model's config, vocab and sample data into `folder` once.

    Args:
      folder: where to put them (created whole, by a rename; kept if complete).
    Returns:
      `folder`, holding TINY_FILES.
    """
    if all(os.path.exists(os.path.join(folder, name)) for name in TINY_FILES):
        return folder
    data_dir = package_file(SAMPLE_SENTIMENT)
    staging = staging_directory(folder)
    try:
        vocab = sample_vocab(data_dir)
        with open(package_file(TINY_BERT_CONFIG), encoding="utf-8") as f:
            config = json.load(f)
        config["vocab_size"] = len(vocab)
        with open(os.path.join(staging, "bert_config.json"), "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2, sort_keys=True)
            f.write("\n")
        with open(os.path.join(staging, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(token + "\n" for token in vocab))
        os.mkdir(os.path.join(staging, "sample_sentiment"))
        for split in SAMPLE_SPLITS:
            shutil.copyfile(os.path.join(data_dir, split),
                            os.path.join(staging, "sample_sentiment", split))
        if os.path.isdir(folder):  # an incomplete earlier attempt
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except OSError as e:
        shutil.rmtree(staging, ignore_errors=True)
        raise cannot_write(folder, e) from e
    return folder
