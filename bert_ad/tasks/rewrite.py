"""Text rewrite: does a candidate phrase fit the blank of an ad text?

The predecessor's ad-copy rewrite flow as a task on the driver. Rows are
rewrite rows (bert_ad/data/rewrite_format.py, `bert-ad data prepare rewrite`):

  label<TAB>segment_index<TAB>candidate<TAB>text_with_slot

The model reads `[CLS] candidate [SEP] text [SEP]` with the slot's [SLOT]
markers replaced by N [MASK] tokens, N = min(slot size, candidate tokens)
(`rewrite_format.encode_row`), and learns label 1 (the candidate is the
blanked segment) against 0, with the classifier's head. It starts from
--init_checkpoint: a released BERT, or one pretrained with
create_pretraining_data.py --mode=rewrite and run_pretraining_mgpu.py.

Results in output_dir:
  predict.txt       one line per row of the predict file, in input order: the
                    probability that the candidate fits (6 decimals), a tab,
                    then the row's own columns. The file may leave the label
                    column out.
  ranked.txt        (rank=True) the rows grouped by slot (same segment_index
                    and text_with_slot), slots in order of first appearance,
                    each slot's rows by falling probability: slot number
                    (from 1), rank in the slot (from 1), probability, then the
                    row's columns.
  eval_results.txt  the classifier's figures plus the ranking of each slot's
                    label-1 candidate among its rows: eval_top1 (share ranked
                    first), eval_mrr (mean reciprocal rank), chance_top1 and
                    chance_mrr (the same for a random order), ranked_slots.
                    A tie counts against the label-1 row.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
from typing import List, Optional, Sequence

import numpy as np

from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.rewrite_format import LABELS, RewriteRow, encode_row, read_rows
from bert_ad.errors import fail
from bert_ad.metrics.classification import classification_metric_names, classification_metrics
from bert_ad.model.feature_specs import FEATURE_SPEC
from bert_ad.tasks.base import Batches, SplitData, Task, TextEncoder, serving_features

log = logging.getLogger("bert_ad")
FEATURE_FORMAT = "rewrite-1"  # bump when encode_row changes


@dataclasses.dataclass(eq=False)
class RewriteTask(Task):
    """Rewrite rows scored by a pair classifier (labels 0 and 1).

    Attributes:
      encoder: the model and tokenizer.
      data_dir: the folder with train.tsv and dev.tsv.
      predict_file: the file --do_predict scores (default: data_dir/dev.tsv).
      rank: also write ranked.txt with the predictions.
      max_train_examples, max_eval_examples: use only the first N rows.
    """

    name = "rewrite"
    main_metric = "eval_accuracy"
    feature_spec = FEATURE_SPEC

    # (A field of its own: Task's class-level `encoder = None` is no default here.)
    encoder: TextEncoder = dataclasses.field()
    data_dir: str = ""
    predict_file: Optional[str] = None
    rank: bool = False
    max_train_examples: Optional[int] = None
    max_eval_examples: Optional[int] = None
    labels: Optional[List[str]] = None  # the driver completes the task with them

    def __post_init__(self):
        self.data_dir = self.data_dir or ""

    @property
    def limits(self) -> dict:
        return {"train": self.max_train_examples, "dev": self.max_eval_examples}

    def data_file(self, split: str) -> str:
        return os.path.join(self.data_dir, f"{split}.tsv")

    # --- inputs -----------------------------------------------------------------

    def read(self, split: str) -> SplitData:
        if split == "predict":
            path = self.predict_file or self.data_file("dev")
            rows = read_rows(path, "predict file", labelled=None, skip_blank_lines=False)
        else:
            path = self.data_file(split)
            rows = read_rows(path, f"{split} file", labelled=True)
            limit = self.limits.get(split)
            rows = rows[:limit] if limit is not None else rows
        if split == "train":
            present = {row.label for row in rows}
            if present != set(LABELS):
                fail(f"{path} has only label {present.pop()} rows; training needs both "
                     "the original segments (1) and negatives (0)")
        for row in rows:  # refused before anything runs
            if not self.encoder.tokenizer.tokenize(row.candidate):
                fail(f"{row.source} line {row.line}: the candidate {row.candidate!r} has "
                     "no tokens with this vocab")
        return SplitData(split, rows, path)

    def resolve_labels(self, train, saved) -> List[str]:
        return list(LABELS)

    def batches(self, data: SplitData) -> Batches:
        features = self.encoder.cached(
            data, {"task": FEATURE_FORMAT, "labels": self.labels},
            lambda: convert_rows(data.rows, self.encoder.tokenizer,
                                 self.encoder.max_seq_length))
        return self.encoder.batches(features)

    # --- model ------------------------------------------------------------------

    def build_model(self, features, is_training):
        from bert_ad.model.heads import classifier  # graph code: tasks/base.py
        out = classifier(self.encoder.model(features, is_training), features, len(LABELS),
                         is_training)
        return {"loss": out.loss, "probabilities": out.probabilities,
                "score": out.probabilities[:, 1],
                "per_example_loss": out.per_example_loss,
                "label_ids": features["label_ids"]}

    def serving_outputs(self, features):
        """`score` [batch] float32: the probability that the candidate fits (label 1)."""
        return {"score": self.build_model(serving_features(features, self.feature_spec),
                                          is_training=False)["score"]}

    # --- results ----------------------------------------------------------------

    def metric_names(self) -> List[str]:
        return classification_metric_names(self.labels or LABELS) + [
            "eval_loss", "eval_examples", "eval_top1", "eval_mrr", "chance_top1",
            "chance_mrr", "ranked_slots"]

    def metrics(self, data: SplitData, outputs) -> dict:
        # An export serves `score` alone: the probability of label 1.
        probabilities = outputs.get("probabilities")
        if probabilities is None:
            probabilities = np.stack([1.0 - outputs["score"], outputs["score"]], axis=-1)
        truth = [LABELS.index(row.label) for row in data.rows]
        metrics = classification_metrics(np.asarray(truth), np.argmax(probabilities, axis=-1),
                                         self.labels)
        if "per_example_loss" in outputs:
            metrics["eval_loss"] = float(np.mean(outputs["per_example_loss"]))
        metrics["eval_examples"] = len(data)
        metrics.update(ranking_metrics(data.rows, probabilities[:, 1]))
        return metrics

    def prediction_file_names(self) -> Sequence[str]:
        return ("predict.txt", "ranked.txt")

    def prediction_files(self, data: SplitData, outputs):
        scores = outputs["score"]
        files = {"predict.txt": [f"{p:.6f}\t" + "\t".join(row.columns)
                                 for p, row in zip(scores, data.rows)]}
        if self.rank:
            files["ranked.txt"] = ranked_lines(data.rows, scores)
            log.info("rank: %d slots", len(slot_groups(data.rows)))
            if all(row.label is not None for row in data.rows):
                log.info("predict: %s", describe_ranking(ranking_metrics(data.rows, scores)))
        return files

    def describe_metrics(self, metrics) -> str:
        return (f"accuracy {metrics['eval_accuracy']:.4f}  loss {metrics['eval_loss']:.4f}  "
                f"({metrics['eval_examples']} rows, step {metrics['global_step']})\n"
                + describe_ranking(metrics))


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


# --- ranking -----------------------------------------------------------------------

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


def describe_ranking(metrics: dict) -> str:
    return (f"original segment ranked first in {100 * metrics['eval_top1']:.1f}% of "
            f"{metrics['ranked_slots']} slots (chance {100 * metrics['chance_top1']:.1f}%), "
            f"MRR {metrics['eval_mrr']:.4f} (chance {metrics['chance_mrr']:.4f})")
