"""A toy task written against the task seam alone, registered by one line.

Everything a new task writes: its rows, features, head and loss, results
(ToyRegressionTask), its own flag (--toy_threshold), how the flags build it
(build) and the registration line at the end. Nothing else in the package is
edited: `BERT_AD_PLUGINS=toy_task bert-ad toy --do_train ...` trains it on N
towers through the same driver as every task (tests/test_driver.py).

The rows are synthetic: token ids, and as target the share of ids above
--toy_threshold.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
from absl import flags

from bert_ad.cli.registry import register_task
from bert_ad.compat import tf
from bert_ad.data.batching import ExampleBatches, TokenizedExamples
from bert_ad.errors import fail
from bert_ad.model.modeling import BertConfig
from bert_ad.tasks.base import Encoder, SplitData, Task

CONFIG = BertConfig(vocab_size=30, hidden_size=16, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
SPLIT_SEEDS = {"train": 1, "dev": 2}


def toy_rows(count: int, seed: int, threshold: int = 17) -> list:
    """(token ids, target): the target is the share of ids above `threshold`."""
    rng = np.random.RandomState(seed)
    rows = []
    for _ in range(count):
        ids = rng.randint(5, 30, size=rng.randint(3, 12))
        rows.append((ids, float(np.mean(ids > threshold))))
    return rows


class ToyRegressionTask(Task):
    """A regression head on [CLS]: the seam's questions answered in a few lines."""

    name = "toy_regression"
    feature_spec = {"input_ids": (tf.int32, [None, None]),
                    "input_mask": (tf.int32, [None, None]),
                    "segment_ids": (tf.int32, [None, None]),
                    "targets": (tf.float32, [None]),
                    "example_weights": (tf.float32, [None])}

    def __init__(self, splits: dict, encoder: Optional[Encoder] = None):
        self.splits = splits
        # The run's encoder: its config, precision and padding removal.
        self.encoder = encoder or Encoder(CONFIG)

    def read(self, split):
        return SplitData(split, self.splits[split], f"<{split}>")

    def batches(self, data):
        ids = [np.concatenate([[2], ids, [3]]).astype(np.int32) for ids, _ in data.rows]
        examples = TokenizedExamples(
            {"input_ids": ids, "segment_ids": [np.zeros_like(i) for i in ids]},
            row_values={"targets": np.array([t for _, t in data.rows], np.float32)})
        return ExampleBatches(examples, "dynamic", bucket_by_length=False)

    def build_model(self, features, is_training):
        # The task names no precision, padding or recomputation: the encoder does.
        pooled = tf.cast(self.encoder.model(features, is_training).get_pooled_output(),
                         tf.float32)
        kernel = tf.get_variable("regression/kernel", [self.encoder.config.hidden_size, 1])
        value = tf.squeeze(tf.matmul(pooled, kernel), -1)
        weights = features["example_weights"]
        loss = tf.reduce_sum(weights * tf.square(value - features["targets"])) / tf.maximum(
            tf.reduce_sum(weights), 1.0)
        return {"loss": loss, "value": value}

    def metrics(self, data, outputs):
        targets = np.array([t for _, t in data.rows])
        return {"eval_mse": float(np.mean((outputs["value"] - targets) ** 2))}

    def prediction_files(self, data, outputs):
        return {"predict.txt": [f"{v:.6f}" for v in outputs["value"]]}


def define_flags(fv: flags.FlagValues) -> None:
    """The toy's own flags (the training flags are shared)."""
    d = dict(flag_values=fv)
    flags.DEFINE_integer("toy_threshold", 17, "Ids above this count toward the target.", **d)
    flags.DEFINE_integer("toy_rows", 48, "Training rows (the dev set has 13).", **d)


def build(f: flags.FlagValues, encoder) -> ToyRegressionTask:
    """The toy on the run's encoder (the shared flags'; the toy makes its own ids)."""
    if not 5 <= f.toy_threshold < 30:
        fail(f"--toy_threshold={f.toy_threshold} must be between 5 and 29 (the toy's ids)")
    splits = {"train": toy_rows(f.toy_rows, SPLIT_SEEDS["train"], f.toy_threshold),
              "dev": toy_rows(13, SPLIT_SEEDS["dev"], f.toy_threshold)}
    return ToyRegressionTask(splits, encoder)


register_task("toy", "a regression toy (tests/toy_task.py)", define_flags=define_flags,
              build=build, text=False, actions=("do_train", "do_eval"),
              agreed_flags=("toy_threshold", "toy_rows"), positive_flags=("toy_rows",))
