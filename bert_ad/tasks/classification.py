"""Sentence (pair) classification: Google's run_classifier.py task on the driver.

Rows are `bert_ad.data.processors.InputExample`s of a task spec (tasks as
data: file names, columns, labels; bert_ad/data/task_specs.py). The head is
Google's `create_model` (bert_ad/model/heads.py) with one of three targets
(`TARGETS`):

  single_label  one label a row, softmax (the default)
  multi_label   any labels of the list a row, joined by a separator in the
                label column ("sports|travel"); a sigmoid per label, binary
                cross-entropy; a label is predicted at probability >= the
                threshold (--multi_label_threshold)
  regression    one number a row (STS-B, ratings); one output, squared error

A long text is truncated (head, tail, head+tail) or, with windows (--long_text=windows),
cut into overlapping windows whose logits are pooled per document (bert_ad/model/windows.py;
training: a document's windows in one tower and one step; scoring: windows dealt as rows to
every tower, pooled afterwards on the host, bert_ad/answers/windows.py). Results in
output_dir, one line per input row, in input order:

  predict.txt       single_label: the predicted label's index in labels.txt;
                    multi_label: the indices of the predicted labels joined by
                    the separator (an empty line when none reaches the
                    threshold); regression: the value (6 decimals)
  test_results.tsv  the probabilities of each row, one column per label
                    (single_label and multi_label)
  eval_results.txt  single_label: eval_accuracy, per-class precision/recall/F1, eval_macro_f1;
                    multi_label: eval_micro_f1, eval_macro_f1, eval_subset_accuracy,
                    f1_<label>; regression: eval_pearson, eval_spearman, eval_mse; and
                    eval_loss, eval_examples, global_step
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_ad.data import processors
from bert_ad.data.batching import WindowBatches
from bert_ad.data.features import (TARGETS, WindowSettings, convert_examples, encode_target)
from bert_ad.data.classification_labels import LabelRules
from bert_ad.data.task_specs import TaskSpec
from bert_ad.errors import fail
from bert_ad.metrics.classification import (classification_metric_names,
                                            classification_metrics, multi_label_metric_names,
                                            multi_label_metrics)
from bert_ad.metrics.regression import REGRESSION_METRIC_NAMES, regression_metrics
from bert_ad.model.feature_specs import FEATURE_SPEC, TARGET_FEATURES, WINDOW_FEATURES
from bert_ad.answers.classification import (OBJECTIVE, ClassifierOutputs,  # noqa: F401
                                            classifier_answers, prediction_lines)
from bert_ad.answers.windows import objective_losses
from bert_ad.tasks.base import (SERVING_INPUTS, Batches, SplitData, Task, TextEncoder,
                                 check_head_learning_rate_multiplier, head_learning_rates,
                                 serving_features)

log = logging.getLogger("bert_ad")

# The eval figure that picks the best checkpoint (the head's objective: OBJECTIVE).
# The variables the task adds to the encoder (bert_ad/model/heads.py classifier,
# bert_ad/model/windows.py), as a regular expression.
HEAD_VARIABLES = "^(output_weights|output_bias|window_attention/.*)$"
MAIN_METRIC = {"single_label": "eval_accuracy", "multi_label": "eval_micro_f1",
               "regression": "eval_pearson"}


@dataclasses.dataclass(eq=False)
class ClassificationTask(Task):
    """One task spec of bert_ad.data.processors, classified from [CLS].

    Attributes:
      encoder: the model and tokenizer.
      spec: the task spec (processors.get_task).
      data_dir: --data_dir.
      predict_file: the file --do_predict scores (default: the test file).
      truncation, head_fraction: which tokens survive a too-long text.
      max_train_examples, max_eval_examples: use only the first N rows.
      target: one of TARGETS (see the module docstring).
      label_separator: joins a row's labels (multi_label).
      threshold: a label is predicted at this probability or more (multi_label).
      windows: cut long texts into windows (None: truncate).
      window_pooling: how windows' logits become a document's
        (bert_ad.model.windows.WINDOW_POOLINGS).
      pooling: how a row becomes one vector (bert_ad.model.modeling.POOLINGS).
      head_learning_rate_multiplier: the task's own fresh variables (HEAD_VARIABLES)
        learn this many times faster than the encoder.
    """

    # (A field of its own: Task's class-level `encoder = None` is no default here.)
    encoder: TextEncoder = dataclasses.field()
    spec: TaskSpec
    data_dir: str
    predict_file: Optional[str] = None
    truncation: str = "head"
    head_fraction: float = 0.25
    max_train_examples: Optional[int] = None
    max_eval_examples: Optional[int] = None
    target: str = "single_label"
    label_separator: str = "|"
    threshold: float = 0.5
    windows: Optional[WindowSettings] = None
    window_pooling: str = "mean"
    pooling: str = "cls"
    head_learning_rate_multiplier: float = 1.0
    labels: Optional[List[str]] = None  # the driver completes the task with them
    # Refuse a first row that looks like a header (the files' layout says none).
    detect_header: bool = True

    name = "classifier"

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")
        if self.windows is None:
            self.window_pooling = ""
        check_head_learning_rate_multiplier(self.head_learning_rate_multiplier)

    @property
    def limits(self) -> Dict[str, Optional[int]]:
        return {"train": self.max_train_examples, "dev": self.max_eval_examples}

    @property
    def objective(self) -> str:
        return OBJECTIVE[self.target]

    @property
    def main_metric(self) -> str:
        return MAIN_METRIC[self.target]

    @property
    def feature_spec(self) -> dict:
        spec = dict(FEATURE_SPEC, **TARGET_FEATURES[self.objective])
        if self.objective == "sigmoid":  # static: serving fills it with a stand-in
            spec["multi_hot_labels"] = ("float32", [None, len(self.labels)])
        if self.windows is not None:
            spec.update(WINDOW_FEATURES)
        return spec

    @property
    def num_outputs(self) -> int:
        return 1 if self.target == "regression" else len(self.labels)

    # --- inputs -----------------------------------------------------------------

    def read(self, split: str) -> SplitData:
        file_split = "test" if split == "predict" else split
        path = self.predict_file if split == "predict" else None
        # Labels are checked by check_labels once the run's list is known (a
        # multi-label cell "a|b" label by label; a header row as a header).
        spec = dataclasses.replace(self.spec, labels=None)
        # A multi-label row may carry none of the labels (an ad that breaks
        # no rule): its label cell is empty.
        rows = processors.read_examples(spec, self.data_dir, file_split, path,
                                        keep_blank_lines=split == "predict",
                                        empty_label_ok=self.target == "multi_label")
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
                       saved: Optional[List[str]]) -> Optional[List[str]]:
        if self.target == "regression":
            return None
        if train is not None and self.target == "multi_label" and self.spec.labels is None:
            return self.label_rules.multi_label_list(train)
        if train is not None:
            return processors.label_list(self.spec, train.rows)
        if self.spec.labels is not None:
            return list(self.spec.labels)
        if saved is None:
            fail("no label list: train into this --output_dir first (it keeps "
                 "labels.txt) or set --labels")
        return saved

    @property
    def label_rules(self) -> LabelRules:
        return LabelRules(self.target, self.label_separator, self.spec.labels,
                          self.detect_header)

    def check_labels(self, data: SplitData) -> None:
        """Every label of every split fits the task (file, line), before anything runs
        (bert_ad/data/classification_labels.py)."""
        self.label_rules.check(data, self.labels)

    def feature_settings(self):
        return self.encoder.feature_settings(
            self.truncation, self.head_fraction, self.labels or (), target=self.target,
            label_separator=self.label_separator, windows=self.windows)

    def batches(self, data: SplitData) -> Batches:
        settings = self.feature_settings()
        features = self.encoder.cached(
            data, {"features": settings, "task": repr(self.spec)},
            lambda: convert_examples(data.rows, self.encoder.tokenizer, settings))
        if self.windows is None:
            return self.encoder.batches(features)
        batches = WindowBatches(features, self.encoder.padding, self.encoder.bucket_by_length)
        log.info("%s: %d rows as %d windows of up to %d tokens (stride %d, at most %s a "
                 "row, the longest row has %d)", data.split, batches.num_examples,
                 batches.num_windows, self.encoder.max_seq_length, self.windows.stride,
                 self.windows.max_windows or "all", int(batches.window_counts.max()))
        return batches

    # --- model ------------------------------------------------------------------

    def head(self, features, is_training):
        """(the head's outputs, the BERT under it): build_model's and distillation's."""
        from bert_ad.model.heads import classifier  # graph code: tasks/base.py
        model = self.encoder.model(features, is_training, self.pooling)
        return classifier(model, features, self.num_outputs, is_training, self.objective,
                          self.window_pooling), model

    def build_model(self, features, is_training):
        out, _ = self.head(features, is_training)
        outputs = {"loss": out.loss, "per_example_loss": out.per_example_loss}
        if self.windows is not None:
            # Scoring: one window a row; the task pools them per document.
            outputs.update(window_logits=out.logits, window_scores=out.window_scores,
                           window_documents=features["document_index"])
        elif self.target == "regression":
            outputs["value"] = out.logits[:, 0]
        else:
            outputs["probabilities"] = out.probabilities
            if self.target == "single_label":
                outputs["label_ids"] = features["label_ids"]
        return outputs

    def learning_rate_multipliers(self) -> Dict[str, float]:
        return head_learning_rates(HEAD_VARIABLES, self.head_learning_rate_multiplier)

    @property
    def serving_inputs(self):
        # Windows: each row is a window, and `document_index` says whose.
        return SERVING_INPUTS + (("document_index",) if self.windows is not None else ())

    def serving_settings(self) -> Dict[str, object]:
        """How text became rows and what the outputs mean (the target), in export.json;
        read back by FeatureSettings.from_export_settings and
        ClassifierOutputs.from_export (bert_ad/inference/predictions.py)."""
        settings = self.feature_settings().export_settings()
        # The vector the head reads: a model trained on one is wrong with the other.
        settings["pooling"] = self.pooling
        if self.windows is not None:
            settings["window_pooling"] = self.window_pooling
        return settings

    @property
    def outputs_meaning(self) -> ClassifierOutputs:
        """What this head's outputs mean: the answers are decided there."""
        return ClassifierOutputs(self.target, self.labels, self.threshold, self.window_pooling)

    def serving_outputs(self, features):
        """single_label: `probabilities` [batch, num_labels] float32 and `label_ids`
        [batch] int32, the index in labels.txt of the most probable label;
        multi_label: `probabilities` [batch, num_labels] (sigmoid); regression:
        `value` [batch]. Windows: see `_window_serving_outputs`."""
        from bert_ad.model.heads import classifier
        complete = serving_features(features, self.feature_spec)
        if self.windows is not None:
            return self._window_serving_outputs(complete)
        out = classifier(self.encoder.model(complete, False, self.pooling), complete,
                         self.num_outputs, False, self.objective)
        return self._served_predictions(out.logits, out.probabilities)

    def _served_predictions(self, logits, probabilities) -> Dict[str, object]:
        """The head's answer from its logits and probabilities [rows, outputs]."""
        from bert_ad.compat import tf
        if self.target == "regression":
            return {"value": logits[:, 0]}
        if self.target == "multi_label":
            return {"probabilities": probabilities}
        return {"probabilities": probabilities,
                "label_ids": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}

    def _window_serving_outputs(self, features):
        """A windows model's export: each row is one window, `document_index`
        [windows] the document it belongs to (0-based within the request).

        Serves, per window, its document's answer (`probabilities` /
        `label_ids` / `value`, pooled over the document's windows in the same
        request, so send every window of a document together), and the
        window's own `window_logits`, `window_scores` and `window_documents`
        (the document_index fed), which --predict_from_export pools across
        batches on the host as checkpoint scoring does.
        """
        from bert_ad.compat import tf
        from bert_ad.model.heads import classifier, objective_loss
        from bert_ad.model.windows import pool_request_windows
        rows = tf.shape(features["input_ids"])[0]
        features["window_document"] = tf.range(rows)    # each window its own segment
        out = classifier(self.encoder.model(features, False, self.pooling), features,
                         self.num_outputs, False, self.objective, self.window_pooling)
        documents = features["document_index"]
        logits = pool_request_windows(out.logits, out.window_scores, documents,
                                      self.window_pooling)
        _, probabilities = objective_loss(logits, features, self.objective)
        served = self._served_predictions(logits, probabilities)
        served.update(window_logits=out.logits, window_scores=out.window_scores,
                      window_documents=tf.identity(documents))
        return served

    # --- results ----------------------------------------------------------------

    def truth(self, data: SplitData) -> np.ndarray:
        """The rows' labels as the head sees them: label ids [n], multi-hot
        [n, labels] or targets [n]."""
        settings = self.feature_settings()
        index = {label: i for i, label in enumerate(self.labels or ())}
        encoded = [encode_target(row, settings, index) for row in data.rows]
        if self.target == "single_label":
            return np.array([label for label, _ in encoded], np.int64)
        name = "multi_hot_labels" if self.target == "multi_label" else "targets"
        return np.stack([values[name] for _, values in encoded])

    def row_outputs(self, data: SplitData, outputs: Dict[str, np.ndarray],
                    with_losses: bool = False) -> dict:
        """{"predictions": per input row: probabilities [n, labels] or values [n],
        "losses": per-row loss [n] (with_losses; rows must be labelled)}; windows
        are pooled into their rows here."""
        meaning = self.outputs_meaning
        predictions = meaning.predictions(outputs, len(data))
        if self.windows is None:
            return {"predictions": predictions, "losses": outputs.get("per_example_loss")}
        losses = (objective_losses(meaning.pooled_logits(outputs, len(data)), self.objective,
                                   self.truth(data)) if with_losses else None)
        return {"predictions": predictions, "losses": losses}

    def metrics(self, data: SplitData, outputs: Dict[str, np.ndarray]) -> dict:
        rows = self.row_outputs(data, outputs, with_losses=True)
        answers = classifier_answers(rows["predictions"], self.target, self.threshold)
        if self.target == "regression":
            metrics = regression_metrics(self.truth(data), answers.values)
        elif self.target == "multi_label":
            metrics = multi_label_metrics(self.truth(data), answers.chosen, self.labels)
        else:
            predicted = answers.label_ids
            metrics = classification_metrics(self.truth(data), predicted, self.labels)
            metrics["eval_predicted_labels"] = len(np.unique(predicted))
        if rows["losses"] is not None:  # (an export serves no loss)
            metrics["eval_loss"] = float(np.mean(rows["losses"]))
        metrics["eval_examples"] = len(data)
        return metrics

    def prediction_file_names(self) -> Sequence[str]:
        return ("predict.txt", "test_results.tsv")

    def prediction_files(self, data: SplitData, outputs: Dict[str, np.ndarray]):
        answers = classifier_answers(self.row_outputs(data, outputs)["predictions"],
                                     self.target, self.threshold)
        return prediction_lines(answers, self.label_separator)

    def metric_names(self) -> List[str]:
        if self.target == "regression":
            names = list(REGRESSION_METRIC_NAMES)
        elif self.target == "multi_label":
            names = multi_label_metric_names(self.labels or ())
        else:
            names = classification_metric_names(self.labels or ()) + ["eval_predicted_labels"]
        return names + ["eval_loss", "eval_examples"]

    def describe_metrics(self, metrics) -> str:
        rows = f"({metrics['eval_examples']} rows, step {metrics['global_step']})"
        if self.target == "regression":
            return (f"Pearson {metrics['eval_pearson']:.4f}  Spearman "
                    f"{metrics['eval_spearman']:.4f}  MSE {metrics['eval_mse']:.4f}  {rows}")
        if self.target == "multi_label":
            return (f"micro-F1 {metrics['eval_micro_f1']:.4f}  macro-F1 "
                    f"{metrics['eval_macro_f1']:.4f}  subset accuracy "
                    f"{metrics['eval_subset_accuracy']:.4f}  loss {metrics['eval_loss']:.4f}"
                    f"  {rows}")
        return (f"accuracy {metrics['eval_accuracy']:.4f}  macro-F1 "
                f"{metrics['eval_macro_f1']:.4f}  loss {metrics['eval_loss']:.4f}  {rows}")

    def metric_warnings(self, metrics) -> List[str]:
        # A fine-tune that never left chance answers one label for every row; its
        # accuracy (the majority share) can look plausible, so say it outright.
        if (metrics.get("eval_predicted_labels") == 1 and metrics["eval_accuracy"] < 1.0
                and metrics["eval_examples"] > 1):
            return [f"every one of the {metrics['eval_examples']} dev rows got the same "
                    "label: the model collapsed to one class. On small data try "
                    "--optimizer=adam (bias-corrected), a lower --learning_rate or more "
                    "epochs (README, Optimizers)"]
        return []
