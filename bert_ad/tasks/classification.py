"""Sentence (pair) classification: Google's run_classifier.py task on the driver.

Rows are `bert_ad.data.processors.InputExample`s of a task spec (tasks as
data: file names, columns, labels). The head is Google's `create_model`
(bert_ad/model/heads.py). Results in output_dir:

  predict.txt       one predicted label index per input row, in input order
  test_results.tsv  the class probabilities of each row (6 decimals)
  eval_results.txt  eval_accuracy, eval_loss, per-class precision/recall/F1,
                    eval_macro_f1, eval_examples, global_step
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from bert_ad.compat import tf
from bert_ad.data import processors
from bert_ad.data.features import convert_examples
from bert_ad.errors import fail
from bert_ad.metrics.classification import classification_metrics
from bert_ad.model.heads import FEATURE_SPEC, classifier
from bert_ad.tasks.base import Batches, SplitData, Task, TextEncoder, serving_features


class ClassificationTask(Task):
    """One task spec of bert_ad.data.processors, classified from [CLS].

    Args:
      encoder: the model and tokenizer.
      spec: the task spec (processors.get_task).
      data_dir: --data_dir.
      predict_file: the file --do_predict scores (default: the test file).
      truncation, head_fraction: which tokens survive a too-long text.
      max_train_examples, max_eval_examples: use only the first N rows.
    """

    name = "classifier"
    main_metric = "eval_accuracy"
    feature_spec = FEATURE_SPEC

    def __init__(self, encoder: TextEncoder, spec: processors.TaskSpec, data_dir: str,
                 predict_file: Optional[str] = None, truncation: str = "head",
                 head_fraction: float = 0.25, max_train_examples: Optional[int] = None,
                 max_eval_examples: Optional[int] = None):
        self.encoder = encoder
        self.spec = spec
        self.data_dir = data_dir
        self.predict_file = predict_file
        self.truncation = truncation
        self.head_fraction = head_fraction
        self.limits = {"train": max_train_examples, "dev": max_eval_examples}

    # --- inputs -----------------------------------------------------------------

    def read(self, split: str) -> SplitData:
        file_split = "test" if split == "predict" else split
        path = self.predict_file if split == "predict" else None
        rows = processors.read_examples(self.spec, self.data_dir, file_split, path,
                                        keep_blank_lines=split == "predict")
        limit = self.limits.get(split)
        if limit is not None:
            rows = rows[:limit]
        if split == "dev":
            unlabelled = [e for e in rows if e.label is None]
            if unlabelled:
                fail(f"{unlabelled[0].source} line {unlabelled[0].line}: the dev file "
                     "has no labels; --do_eval needs a labelled file")
        return SplitData(split, rows, rows[0].source)

    def resolve_labels(self, train: Optional[SplitData],
                       saved: Optional[List[str]]) -> List[str]:
        if train is not None:
            return processors.label_list(self.spec, train.rows)
        if self.spec.labels is not None:
            return list(self.spec.labels)
        if saved is None:
            fail("no label list: train into this --output_dir first (it keeps "
                 "labels.txt) or set --labels")
        return saved

    def check_labels(self, data: SplitData) -> None:
        if data.split != "predict":  # predictions ignore the test file's labels
            processors.check_labels(data.rows, self.labels)

    def batches(self, data: SplitData) -> Batches:
        settings = self.encoder.feature_settings(self.truncation, self.head_fraction,
                                                 self.labels)
        features = self.encoder.cached(
            data, settings, repr(self.spec),
            lambda: convert_examples(data.rows, self.encoder.tokenizer, settings))
        return self.encoder.batches(features)

    # --- model ------------------------------------------------------------------

    def build_model(self, features, is_training):
        out = classifier(self.encoder.config, features, len(self.labels), is_training,
                         self.encoder.compute_dtype)
        return {"loss": out.loss, "probabilities": out.probabilities,
                "per_example_loss": out.per_example_loss,
                "label_ids": features["label_ids"]}

    def serving_outputs(self, features):
        """`probabilities` [batch, num_labels] float32 and `label_ids` [batch]
        int32, the index in labels.txt of the most probable label."""
        out = classifier(self.encoder.config, serving_features(features, self.feature_spec),
                         len(self.labels), False, self.encoder.compute_dtype)
        return {"probabilities": out.probabilities,
                "label_ids": tf.argmax(out.probabilities, axis=-1, output_type=tf.int32)}

    # --- results ----------------------------------------------------------------

    def metrics(self, data: SplitData, outputs: Dict[str, np.ndarray]) -> dict:
        predicted = np.argmax(outputs["probabilities"], axis=-1)
        metrics = classification_metrics(outputs["label_ids"], predicted, self.labels)
        metrics["eval_loss"] = float(np.mean(outputs["per_example_loss"]))
        metrics["eval_examples"] = len(data)
        return metrics

    def prediction_files(self, data: SplitData, outputs: Dict[str, np.ndarray]):
        probabilities = outputs["probabilities"]
        predicted = np.argmax(probabilities, axis=-1)
        return {"predict.txt": [str(int(p)) for p in predicted],
                "test_results.tsv": ["\t".join(f"{p:.6f}" for p in row)
                                     for row in probabilities]}

    def describe_metrics(self, metrics) -> str:
        return (f"accuracy {metrics['eval_accuracy']:.4f}  macro-F1 "
                f"{metrics['eval_macro_f1']:.4f}  loss {metrics['eval_loss']:.4f}  "
                f"({metrics['eval_examples']} rows, step {metrics['global_step']})")
