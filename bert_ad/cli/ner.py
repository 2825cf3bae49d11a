"""run_ner_mgpu.py: token classification (NER, word segmentation, tagging) on N towers.

CoNLL files in --data_dir (train.txt, dev.txt, test.txt; one token a line
with its tag, a blank line between sentences; --train_file etc. rename them),
tags in BIO, BIOES, BMES or IO (read from the tags unless --tag_scheme).
Every word is tagged from its first WordPiece, or with a unigram piece list
(pieces.tsv) from the piece of the whole sentence's segmentation that covers
its first character (several words may share one); a sentence longer than
--max_seq_length is split into overlapping windows (--doc_stride) and each
word takes its tag from the window where it has the most context. The head is
a softmax over the tags, or with --use_crf a linear-chain CRF (Viterbi).

The classifier's model and training flags (--n_gpus, accumulation,
precision, resume, multi-worker, ...). Order: train -> predict -> eval.
Outputs in --output_dir: model.ckpt-N, labels.txt, predict.txt (the input
file line for line, each token with its predicted tag),
predict_entities.jsonl (one JSON object per sentence: its entities),
eval_results.txt (entity precision/recall/F1 micro, macro and per type,
token accuracy, loss), train_results.txt.
"""

from __future__ import annotations

import logging

from typing import Optional

from absl import flags

from bert_ad.cli.registry import register_task
from bert_ad.data.conll import TOKEN_SPLITS
from bert_ad.cli import flag_groups, task_runner
from bert_ad.data.tag_schemes import SCHEMES
from bert_ad.errors import fail

log = logging.getLogger("bert_ad")


# NER's flags every worker of a cluster must agree on.
AGREED_FLAGS = ("doc_stride", "use_crf", "head_learning_rate_multiplier", "tag_scheme",
                "labels", "token_column", "label_column")
# The fresh head at 100x the rate: docs/ner.md (the demo reaches 0.40 F1 at 1x).
FLAG_DEFAULTS = (("head_learning_rate_multiplier", 100.0),)


def define_task_flags(fv: flags.FlagValues) -> None:
    """Token classification's own flags (the training and fine-tuning ones are shared)."""
    d = dict(flag_values=fv)
    flags.DEFINE_string("data_dir", None, "Folder of the CoNLL train/dev/test files.", **d)
    flags.DEFINE_string("train_file", "train.txt", "Training file (in --data_dir).", **d)
    flags.DEFINE_string("dev_file", "dev.txt", "File --do_eval scores (in --data_dir).", **d)
    flags.DEFINE_string("test_file", "test.txt",
                        "File --do_predict scores unless --predict_file (in --data_dir).", **d)
    flags.DEFINE_integer("label_column", -1, "Column of the tag (0 first, -1 last).", **d)
    flags.DEFINE_list("labels", None,
                      "The tags, comma-separated (default: the training file's).", **d)
    define_tagging_flags(fv)
    flag_groups.define(fv, ("head_learning_rate_multiplier",), dict(FLAG_DEFAULTS),
                       notes={"head_learning_rate_multiplier": "see docs/ner.md"})


def define_tagging_flags(fv: flags.FlagValues) -> None:
    """How CoNLL tokens are read and tagged (bert-ad distill defines them too, beside
    the classifier's file flags)."""
    d = dict(flag_values=fv)
    flags.DEFINE_integer("token_column", 0, "Column of the token (0 first, -1 last).", **d)
    flags.DEFINE_string("tag_scheme", None,
                        f"Tagging scheme: {', '.join(SCHEMES)} (default: read from the "
                        "tags).", **d)
    flags.DEFINE_integer("doc_stride", 0,
                         "Pieces between the starts of a long sentence's windows "
                         "(0: half of --max_seq_length - 2).", **d)
    flags.DEFINE_enum("token_split", None, list(TOKEN_SPLITS),
                      "How a served text becomes words: words (whitespace, punctuation "
                      "and CJK characters alone) or characters (every character, for "
                      "models trained one character a line). Default: read from the "
                      "training tokens, recorded with the model.", **d)
    flags.DEFINE_bool("use_crf", False,
                      "A linear-chain CRF over each window's words instead of a softmax.",
                      **d)


def check_flags(f: flags.FlagValues) -> None:
    if f.doc_stride < 0:
        fail(f"--doc_stride={f.doc_stride} must be positive (or 0 for half a window)")


def build(f: flags.FlagValues, encoder, labels_from_flags: bool = True,
          use_crf: Optional[bool] = None):
    """The TokenClassificationTask the flags describe (bert-ad distill's token
    student too: its labels come from the teacher, `labels_from_flags=False`, and
    its CRF from the teacher unless --use_crf is given)."""
    from bert_ad.tasks.token_classification import (  # TensorFlow: once run
        ConllFormat, TokenClassificationTask)
    files = ConllFormat(data_dir=f.data_dir or "", train_file=f.train_file or "train.txt",
                        dev_file=f.dev_file or "dev.txt", test_file=f.test_file or "test.txt",
                        predict_file=f.predict_file, token_column=f.token_column,
                        label_column=-1 if f.label_column is None else f.label_column)
    return TokenClassificationTask(
        encoder=encoder, files=files, tag_scheme=f.tag_scheme,
        labels=f.labels if labels_from_flags else None, doc_stride=f.doc_stride or None,
        use_crf=f.use_crf if use_crf is None else use_crf,
        token_split=f.token_split if "token_split" in f else None,
        head_learning_rate_multiplier=f.head_learning_rate_multiplier,
        max_train_examples=f.max_train_examples, max_eval_examples=f.max_eval_examples)


COMMAND = register_task(
    "ner", "token classification: NER, word segmentation, tagging (CoNLL files)",
    define_flags=define_task_flags, build=build, check_flags=check_flags,
    agreed_flags=AGREED_FLAGS, flag_defaults=FLAG_DEFAULTS,
    positive_flags=("predict_batch_size",), description=__doc__,
    aliases=("token_classification",), launcher="run_ner_mgpu.py",
    console_script="bert-ad-ner")


# The launcher's contract (run_classifier_mgpu.py-style callers and tests).
define_flags, main, cli = task_runner.launcher_functions(COMMAND)
