"""The classifier's training as bert_ad builds it, for the benchmarks that time it.

`bert_ad.driver.build_training` is the one place the training graph and its
batch source are made: `driver.train` runs them, and so do bench_train and
bench_memory's workers. This module only supplies what a run's flags would
hand it: the sentiment task on a Google checkpoint (or on rows already cut
into full windows), the run's settings and this machine's towers.

Imports TensorFlow: the workers import it, never a benchmark's driver process.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional, Tuple

import numpy as np

from bert_ad.data import processors
from bert_ad.data.batching import Batches, TokenizedExamples
from bert_ad.data.tokenization import make_tokenizer
from bert_ad.driver import Placement, RunSettings, Training, build_training
from bert_ad.model.modeling import BertConfig
from bert_ad.model.precision import compute_dtype
from bert_ad.parallel.towers import plan_from_environment
from bert_ad.tasks.base import SplitData, Task, TextEncoder
from bert_ad.tasks.classification import ClassificationTask

# The seed of FullWindowsTask's random labels.
LABEL_SEED = 12345


def encoder(model_dir: str, max_seq_length: int, padding="dynamic",
            bucket_by_length: bool = False, precision: str = "fp32",
            remove_padding: bool = True, vocab_file: Optional[str] = None,
            do_lower_case: bool = True) -> TextEncoder:
    """The model of `model_dir` (bert_config.json, vocab.txt) as the flags would give it
    (--padding=max_length: `padding` = max_seq_length); no feature cache."""
    vocab_file = vocab_file or os.path.join(model_dir, "vocab.txt")
    return TextEncoder(
        config=BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json")),
        tokenizer=make_tokenizer(vocab_file, do_lower_case), vocab_file=vocab_file,
        do_lower_case=do_lower_case, max_seq_length=max_seq_length, padding=padding,
        bucket_by_length=bucket_by_length, compute_dtype=compute_dtype(precision),
        remove_padding=remove_padding)


def sentiment_task(text_encoder: TextEncoder, data_dir: str) -> Tuple[Task, SplitData]:
    """run_classifier_mgpu.py --task_name=sentiment: the task, complete with its labels,
    and its training rows (data_dir/train.tsv)."""
    task = ClassificationTask(text_encoder, processors.get_task("sentiment"), data_dir)
    train = task.read("train")
    return task.with_labels(task.resolve_labels(train, None)), train


@dataclasses.dataclass(eq=False)
class FullWindowsTask(ClassificationTask):
    """The classifier on rows already cut into full windows of token ids (no padding:
    every position is a token the step has to hold), with seeded random labels."""

    window_ids: Any = None    # [rows, max_seq_length] int32

    def read(self, split: str) -> SplitData:
        return SplitData(split, list(range(len(self.window_ids))), "full windows")

    def batches(self, data: SplitData) -> Batches:
        ids = self.window_ids
        labels = np.random.RandomState(LABEL_SEED).randint(0, len(self.labels), len(ids))
        return self.encoder.batches(TokenizedExamples(
            {"input_ids": list(ids), "segment_ids": [np.zeros_like(row) for row in ids]},
            labels))


def full_windows_task(text_encoder: TextEncoder, window_ids) -> Tuple[Task, SplitData]:
    """A two-label classifier on `window_ids`, and its rows."""
    task = FullWindowsTask(text_encoder, processors.get_task("sentiment"), "",
                           window_ids=window_ids).with_labels(["0", "1"])
    return task, task.read("train")


def training(task: Task, data: SplitData, towers: int, batch: int, steps: int,
             use_xla: bool = False, **flags) -> Tuple[Training, Placement]:
    """The training graph (into the default graph) and batches `driver.train` would run
    for `task` with --n_gpus=`towers` --train_batch_size=`batch` --num_train_steps=`steps`
    and the shared flags at their defaults (AdamW, learning rate 5e-5, clip 1.0, 10%
    warmup) but `flags`: RunSettings fields (precision, recompute_activations,
    sparse_embedding_updates, ...) or fused_optimizer (no flag: False for the element-wise
    AdamW ops)."""
    fused = flags.pop("fused_optimizer", True)
    settings = RunSettings(output_dir="", train_batch_size=batch, num_train_steps=steps,
                           **flags)
    placement = Placement(plan_from_environment(towers), use_xla=use_xla)
    return (build_training(task, data, settings, placement, fused_optimizer=fused),
            placement)
