"""Masked-LM (+ next-sentence) pretraining: Google's run_pretraining.py task on the driver.

Data are TFRecord shards of create_pretraining_data.py (Google's seven
features, bert_ad/pretraining/records.py), streamed: a training "split" is
the list of shard files, read from an index so a resumed run starts at once
whatever its step. The heads are Google's (`cls/predictions/...` with the
output embedding tied to the input one, `cls/seq_relationship/...`,
bert_ad/model/heads.py). From scratch, or continued from a released
checkpoint: what that checkpoint lacks (the MLM/NSP heads, optimizer slots)
starts fresh and is listed in the log, and evaluating the released
checkpoint itself measures where pretraining starts.

Eval runs on held-out shards only and writes masked_lm_accuracy,
masked_lm_loss, next_sentence_accuracy and next_sentence_loss (with NSP),
eval_examples and global_step to eval_results.txt.
"""

from __future__ import annotations

import os
from typing import List, Sequence

import numpy as np

from bert_ad.compat import tf
from bert_ad.errors import fail
from bert_ad.model.heads import masked_lm_head, next_sentence_head
from bert_ad.model.losses import weighted_mean
from bert_ad.model.modeling import BertModel
from bert_ad.pretraining.records import RecordBatches, inspect_records
from bert_ad.tasks.base import Batches, Encoder, SplitData, Task

# Per-tower inputs. Sequences are trimmed to the batch's longest real row.
FEATURE_SPEC = {
    "input_ids": (tf.int32, [None, None]),
    "input_mask": (tf.int32, [None, None]),
    "segment_ids": (tf.int32, [None, None]),
    "masked_lm_positions": (tf.int32, [None, None]),
    "masked_lm_ids": (tf.int32, [None, None]),
    "masked_lm_weights": (tf.float32, [None, None]),
    "next_sentence_labels": (tf.int32, [None]),
    "example_weights": (tf.float32, [None]),
}


def pretraining_tower(model: BertModel, features: dict, use_nsp: bool) -> dict:
    """Losses and per-position outputs of one tower, on `model`: the encoder built
    over `features` (the task's `encoder.model(...)`).

    Returns {loss, masked_lm_loss [B, P], masked_lm_predictions [B, P],
    masked_lm_weights [B, P], next_sentence_loss [B], next_sentence_predictions [B]}.
    """
    config = model.config
    positions = features["masked_lm_positions"]
    # The heads and losses run in float32 whatever the encoder's precision.
    log_probs = masked_lm_head(config, tf.cast(model.get_sequence_output(), tf.float32),
                               model.get_embedding_table(), positions)
    shape = tf.shape(positions)
    label_ids = tf.reshape(features["masked_lm_ids"], [-1])
    mlm_loss = -tf.reduce_sum(log_probs * tf.one_hot(label_ids, config.vocab_size), axis=-1)
    weights = tf.reshape(features["masked_lm_weights"], [-1])
    # Weighted mean over the real predictions (Google's formula).
    loss = weighted_mean(mlm_loss, weights, epsilon=1e-5)
    outputs = {
        "masked_lm_loss": tf.reshape(mlm_loss, shape),
        "masked_lm_predictions": tf.reshape(tf.argmax(log_probs, -1, output_type=tf.int32),
                                            shape),
        "masked_lm_weights": features["masked_lm_weights"],
    }
    if use_nsp:
        nsp_log_probs = next_sentence_head(config,
                                           tf.cast(model.get_pooled_output(), tf.float32))
        labels = features["next_sentence_labels"]
        nsp_loss = -tf.reduce_sum(nsp_log_probs * tf.one_hot(labels, 2), axis=-1)
        example_weights = features["example_weights"]
        loss += weighted_mean(nsp_loss, example_weights)
        outputs["next_sentence_loss"] = nsp_loss
        outputs["next_sentence_predictions"] = tf.argmax(nsp_log_probs, -1,
                                                         output_type=tf.int32)
    outputs["loss"] = loss
    return outputs


class PretrainingTask(Task):
    """Masked LM (+ NSP) on record shards.

    Args:
      encoder: the BERT encoder and how it runs (--precision, --remove_padding).
      train_files, eval_files: shard files (eval: held out, never a training file).
      max_seq_length, max_predictions_per_seq: as the data was made with
        (checked against the first record).
      nsp: "auto" (on unless the data is MLM-only), "true" or "false".
      max_eval_steps: eval batches (global) at most.
    """

    name = "pretraining"
    trained_by = "pretraining"
    main_metric = "masked_lm_accuracy"
    feature_spec = FEATURE_SPEC
    scores_released_checkpoints = True

    def __init__(self, encoder: Encoder, train_files: Sequence[str],
                 eval_files: Sequence[str], max_seq_length: int,
                 max_predictions_per_seq: int, nsp: str = "auto", max_eval_steps: int = 100):
        self.encoder = encoder
        config = encoder.config
        self.files = {"train": list(train_files), "dev": list(eval_files)}
        overlap = set(map(os.path.realpath, eval_files)) & set(
            map(os.path.realpath, train_files))
        if overlap:
            fail(f"--eval_input_file shares {sorted(overlap)[0]} with --input_file; "
                 "evaluate on held-out shards")
        self.max_seq_length = max_seq_length
        self.max_eval_steps = max_eval_steps
        has_nsp = False
        for files, flag in ((train_files, "--input_file"), (eval_files, "--eval_input_file")):
            if files:
                has_nsp = inspect_records(files, config.vocab_size, max_seq_length,
                                          max_predictions_per_seq, flag) or has_nsp
        self.use_nsp = nsp == "true" or (nsp == "auto" and has_nsp)

    def describe(self) -> str:
        return "masked LM" + (" + next sentence" if self.use_nsp else " only")

    def read(self, split: str) -> SplitData:
        if split == "predict":
            fail("pretraining has no --do_predict; use --do_eval on held-out shards")
        files = self.files[split]
        return SplitData(split, files, ", ".join(files))

    def batches(self, data: SplitData) -> Batches:
        return RecordBatches(data.rows, self.max_seq_length,
                             max_scoring_batches=self.max_eval_steps)

    def build_model(self, features, is_training):
        outputs = pretraining_tower(self.encoder.model(features, is_training), features,
                                    self.use_nsp)
        if not is_training:
            for name in ("masked_lm_ids", "next_sentence_labels"):
                outputs[name] = features[name]
        return outputs

    def metric_names(self) -> List[str]:
        names = ["masked_lm_accuracy", "masked_lm_loss", "eval_examples"]
        if self.use_nsp:
            names += ["next_sentence_accuracy", "next_sentence_loss"]
        return names

    def metrics(self, data: SplitData, outputs) -> dict:
        if "masked_lm_weights" not in outputs:
            fail(f"--eval_input_file {data.source} holds no records")
        weights = outputs["masked_lm_weights"]
        total = max(float(np.sum(weights)), 1e-9)
        correct = (outputs["masked_lm_predictions"] == outputs["masked_lm_ids"]) * weights
        metrics = {
            "masked_lm_accuracy": float(np.sum(correct)) / total,
            "masked_lm_loss": float(np.sum(outputs["masked_lm_loss"] * weights)) / total,
            "eval_examples": len(weights),
        }
        if self.use_nsp:
            metrics["next_sentence_accuracy"] = float(np.mean(
                outputs["next_sentence_predictions"] == outputs["next_sentence_labels"]))
            metrics["next_sentence_loss"] = float(np.mean(outputs["next_sentence_loss"]))
        return metrics
