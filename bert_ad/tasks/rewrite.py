"""rewrite_finetune.py: does a candidate phrase fit the blank of an ad text?

Fine-tunes BERT's pair classifier on N towers (the trainer of
run_classifier_mgpu.py) on rewrite rows (bert_ad/data/rewrite_rows.py,
scripts/prepare_rewrite_data.py):

  label<TAB>segment_index<TAB>candidate<TAB>text_with_slot

The model reads `[CLS] candidate [SEP] text [SEP]` with the slot's [SLOT]
markers replaced by N [MASK] tokens, N = min(slot size, candidate tokens)
(`rewrite_data.encode_row`), and learns label 1 (the candidate is the
blanked segment) against 0. It starts from --init_checkpoint: a released
BERT, or one pretrained with create_pretraining_data.py --mode=rewrite and
run_pretraining_mgpu.py.

Outputs in --output_dir, besides the checkpoints:
  predict.txt       --do_predict: one line per row of --predict_file (default
                    --data_dir/dev.tsv), in input order: the probability that
                    the candidate fits (6 decimals), a tab, then the row's own
                    columns. The file may leave the label column out.
  ranked.txt        --rank (with --do_predict): the rows grouped by slot (same
                    segment_index and text_with_slot), slots in order of first
                    appearance, each slot's rows by falling probability:
                    slot number (from 1), rank in the slot (from 1),
                    probability, then the row's columns.
  eval_results.txt  --do_eval on --data_dir/dev.tsv: accuracy etc. as
                    run_classifier_mgpu.py, plus the ranking of each slot's
                    label-1 candidate among its rows: eval_top1 (share ranked
                    first), eval_mrr (mean reciprocal rank), chance_top1 and
                    chance_mrr (the same for a random order), ranked_slots.
                    A tie counts against the label-1 row.
"""

from __future__ import annotations

import collections
import logging
import os
from typing import List, Sequence

import numpy as np
from absl import flags

from bert_ad.tasks import classification
from bert_ad.data.batching import TokenizedExamples
from bert_ad.cli.flags import is_chief, run_entry_point, worker_index
from bert_ad.errors import fail
from bert_ad.data.features import FeatureSettings, cache_key, cached_features
from bert_ad.files import write_lines
from bert_ad.data.rewrite_rows import LABELS, RewriteRow, encode_row, read_rows

log = logging.getLogger("bert_ad")
FLAGS = flags.FLAGS
FEATURE_FORMAT = "rewrite-1"  # bump when encode_row changes


def define_flags() -> None:
    flags.DEFINE_string("data_dir", None, "Folder with train.tsv and dev.tsv "
                        "(scripts/prepare_rewrite_data.py).")
    classification.define_model_flags()
    flags.DEFINE_bool("rank", False, "With --do_predict: also write ranked.txt, each "
                      "slot's candidates sorted by probability.")


class RewriteJob(classification.ModelJob):
    """A rewrite_finetune.py run: rewrite rows, labels 0 and 1."""

    def __init__(self):
        super().__init__()
        self.labels = list(LABELS)

    def check_data_flags(self) -> None:
        if (FLAGS.do_train or FLAGS.do_eval) and not FLAGS.data_dir:
            fail("--data_dir is required for --do_train and --do_eval (the folder "
                 "with train.tsv and dev.tsv of scripts/prepare_rewrite_data.py)")
        if FLAGS.do_predict and not (FLAGS.predict_file or FLAGS.data_dir):
            fail("--do_predict needs --predict_file (or --data_dir, to score its "
                 "dev.tsv)")
        if FLAGS.rank and not FLAGS.do_predict:
            fail("--rank ranks the predictions: set --do_predict too")

    def features(self, split: str, rows: Sequence[RewriteRow], data_file: str):
        settings = FeatureSettings(FLAGS.max_seq_length, "slot", 0.0, self.labels)
        key = cache_key(data_file, FLAGS.vocab_file or FLAGS.spm_model_file or "",
                        FLAGS.do_lower_case, settings,
                        f"{FEATURE_FORMAT}|{split}|{len(rows)}")
        return cached_features(self.cache_dir, split, key,
                               lambda: convert_rows(rows, self.tokenizer,
                                                    FLAGS.max_seq_length))


def convert_rows(rows: Sequence[RewriteRow], tokenizer,
                 max_seq_length: int) -> TokenizedExamples:
    """Token ids of every row (`encode_row`); label 1 -> 1, else 0."""
    input_ids, segment_ids = [], []
    for row in rows:
        tokens, segments = encode_row(row, tokenizer, max_seq_length)
        input_ids.append(np.array(tokenizer.convert_tokens_to_ids(tokens), np.int32))
        segment_ids.append(np.array(segments, np.int32))
    labels = np.array([1 if row.label == "1" else 0 for row in rows], np.int32)
    return TokenizedExamples({"input_ids": input_ids, "segment_ids": segment_ids}, labels)


def check_candidates(rows: Sequence[RewriteRow], tokenizer) -> None:
    """Refuse, before anything runs, a candidate the vocab gives no token."""
    for row in rows:
        if not tokenizer.tokenize(row.candidate):
            fail(f"{row.source} line {row.line}: the candidate {row.candidate!r} has "
                 "no tokens with this vocab")


# ---------------------------------------------------------------------------
# Ranking


def slot_groups(rows: Sequence[RewriteRow]) -> List[List[int]]:
    """Row indexes per slot (same segment_index and text_with_slot), slots in
    order of first appearance, rows in file order."""
    groups = collections.OrderedDict()  # slot key -> row indexes
    for i, row in enumerate(rows):
        groups.setdefault(row.slot_key, []).append(i)
    return list(groups.values())


def ranking_metrics(rows: Sequence[RewriteRow], scores: np.ndarray) -> dict:
    """How the label-1 row of each slot ranks among the slot's rows.

    Only slots with one label-1 row and at least one other row count. Rank =
    1 + the other rows scoring at least as high (a tie counts against it).

    Returns:
      {eval_top1, eval_mrr, chance_top1, chance_mrr, ranked_slots}; chance_*
      are the expectations for a random order of each slot's rows.
    """
    reciprocal, first, chance_first, chance_reciprocal = [], [], [], []
    for group in slot_groups(rows):
        positives = [i for i in group if rows[i].label == "1"]
        if len(positives) != 1 or len(group) < 2:
            continue
        p = positives[0]
        rank = 1 + sum(1 for i in group if i != p and scores[i] >= scores[p])
        n = len(group)
        reciprocal.append(1.0 / rank)
        first.append(float(rank == 1))
        chance_first.append(1.0 / n)
        chance_reciprocal.append(sum(1.0 / k for k in range(1, n + 1)) / n)

    def mean(values):
        return float(np.mean(values)) if values else float("nan")

    return {"eval_top1": mean(first), "eval_mrr": mean(reciprocal),
            "chance_top1": mean(chance_first), "chance_mrr": mean(chance_reciprocal),
            "ranked_slots": len(reciprocal)}


def ranked_lines(rows: Sequence[RewriteRow], scores: np.ndarray) -> List[str]:
    """ranked.txt's lines (see the module doc)."""
    lines = []
    for slot, group in enumerate(slot_groups(rows), start=1):
        ordered = sorted(group, key=lambda i: -scores[i])  # stable: file order on ties
        for rank, i in enumerate(ordered, start=1):
            lines.append(f"{slot}\t{rank}\t{scores[i]:.6f}\t" + "\t".join(rows[i].columns))
    return lines


# ---------------------------------------------------------------------------
# The run


def data_file(split: str) -> str:
    return os.path.join(FLAGS.data_dir or "", f"{split}.tsv")


def read_labelled(split: str, limit: int | None) -> List[RewriteRow]:
    rows = read_rows(data_file(split), f"{split} file", labelled=True)
    return rows[:limit] if limit is not None else rows


def do_predict(job: RewriteJob, rows: Sequence[RewriteRow]) -> None:
    path = rows[0].source
    results = classification.score(job, "predict", rows, path, FLAGS.predict_batch_size)
    scores = results["probabilities"][:, 1]
    write_lines(os.path.join(job.output_dir, "predict.txt"),
                (f"{p:.6f}\t" + "\t".join(row.columns) for p, row in zip(scores, rows)))
    log.info("predict: wrote %d rows to %s", len(rows),
             os.path.join(job.output_dir, "predict.txt"))
    if FLAGS.rank:
        write_lines(os.path.join(job.output_dir, "ranked.txt"), ranked_lines(rows, scores))
        log.info("rank: %d slots in %s", len(slot_groups(rows)),
                 os.path.join(job.output_dir, "ranked.txt"))
        if all(row.label is not None for row in rows):
            log_ranking("predict", ranking_metrics(rows, scores))


def do_eval(job: RewriteJob, rows: Sequence[RewriteRow]) -> dict:
    metrics, results = classification.evaluate(job, rows)
    metrics.update(ranking_metrics(rows, results["probabilities"][:, 1]))
    classification.write_eval_results(job.output_dir, metrics)
    log.info("eval: accuracy %.4f  loss %.4f  (%d rows, step %d)",
             metrics["eval_accuracy"], metrics["eval_loss"], len(rows),
             metrics["global_step"])
    log_ranking("eval", metrics)
    return metrics


def log_ranking(what: str, metrics: dict) -> None:
    log.info("%s: original segment ranked first in %.1f%% of %d slots (chance %.1f%%), "
             "MRR %.4f (chance %.4f)", what, 100 * metrics["eval_top1"],
             metrics["ranked_slots"], 100 * metrics["chance_top1"], metrics["eval_mrr"],
             metrics["chance_mrr"])


def main() -> int:
    job = RewriteJob()
    log.info("%s", job.plan.describe())
    # Every input is read and checked before anything is written.
    train_rows = predict_rows = eval_rows = None
    if FLAGS.do_train:
        train_rows = read_labelled("train", FLAGS.max_train_examples)
        present = {row.label for row in train_rows}
        if present != set(LABELS):
            fail(f"{data_file('train')} has only label {present.pop()} rows; training "
                 "needs both the original segments (1) and negatives (0)")
    if FLAGS.do_predict:
        predict_rows = read_rows(FLAGS.predict_file or data_file("dev"), "predict file",
                                 labelled=None)
    if FLAGS.do_eval:
        eval_rows = read_labelled("dev", FLAGS.max_eval_examples)
    for rows in (train_rows, predict_rows, eval_rows):
        if rows is not None:
            check_candidates(rows, job.tokenizer)
    if train_rows is None:
        classification.scoring_checkpoint(job)
    else:
        classification.do_train(job, train_rows)
    if not is_chief():  # in a cluster, worker 0 alone scores and writes results
        log.info("worker %d: predict and eval are the chief's (worker 0's) job",
                 worker_index())
        return 0
    if predict_rows is not None:
        do_predict(job, predict_rows)
    if eval_rows is not None:
        do_eval(job, eval_rows)
    return 0


def cli(argv=None) -> None:
    """Console entry point: parse absl flags (incl. --flagfile), then run."""
    run_entry_point(define_flags, main, argv)
