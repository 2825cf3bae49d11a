"""Classification metrics in plain numpy: accuracy, per-class P/R/F1 and macro-F1 of
one label a row; micro/macro F1 and subset accuracy of several labels a row."""

from __future__ import annotations

from typing import List, Sequence

import numpy as np


def classification_metrics(labels: np.ndarray, predictions: np.ndarray,
                           label_names: Sequence[str]) -> dict:
    """{key: value} with eval_accuracy, per-class precision/recall/f1, macro_f1.

    A class never predicted has precision 0 (and never present, recall 0), the
    convention of scikit-learn's zero_division=0.
    """
    labels = np.asarray(labels)
    predictions = np.asarray(predictions)
    results = {"eval_accuracy": float(np.mean(labels == predictions)) if len(labels) else 0.0}
    f1s = []
    for index, name in enumerate(label_names):
        true_positive = float(np.sum((predictions == index) & (labels == index)))
        predicted = float(np.sum(predictions == index))
        actual = float(np.sum(labels == index))
        precision = true_positive / predicted if predicted else 0.0
        recall = true_positive / actual if actual else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        results[f"precision_{name}"] = precision
        results[f"recall_{name}"] = recall
        results[f"f1_{name}"] = f1
        f1s.append(f1)
    results["eval_macro_f1"] = float(np.mean(f1s)) if f1s else 0.0
    return results


def multi_label_metrics(truth: np.ndarray, predicted: np.ndarray,
                        label_names: Sequence[str]) -> dict:
    """Multi-label figures of [rows, labels] 0/1 arrays.

    eval_micro_f1 (true/false positives and false negatives pooled over all
    labels), eval_macro_f1 (the mean of the per-label F1s, f1_<label>),
    eval_subset_accuracy (rows whose every label is right). A label never
    predicted and never present has F1 0 (scikit-learn's zero_division=0).
    """
    truth = np.asarray(truth) > 0.5
    predicted = np.asarray(predicted) > 0.5
    true_positive = np.sum(truth & predicted, axis=0).astype(np.float64)
    false_positive = np.sum(~truth & predicted, axis=0).astype(np.float64)
    false_negative = np.sum(truth & ~predicted, axis=0).astype(np.float64)

    def f1(tp, fp, fn):
        return 2 * tp / (2 * tp + fp + fn) if tp else 0.0

    results = {}
    f1s = []
    for index, name in enumerate(label_names):
        f1s.append(f1(true_positive[index], false_positive[index], false_negative[index]))
        results[f"f1_{name}"] = f1s[-1]
    results["eval_macro_f1"] = float(np.mean(f1s)) if f1s else 0.0
    results["eval_micro_f1"] = f1(true_positive.sum(), false_positive.sum(),
                                  false_negative.sum())
    results["eval_subset_accuracy"] = (float(np.mean(np.all(truth == predicted, axis=1)))
                                       if len(truth) else 0.0)
    return results


def classification_metric_names(label_names: Sequence[str]) -> List[str]:
    """The figures classification_metrics gives for `label_names` (for --best_metric)."""
    return (["eval_accuracy", "eval_macro_f1"]
            + [f"{kind}_{name}" for name in label_names for kind in ("precision", "recall",
                                                                      "f1")])


def multi_label_metric_names(label_names: Sequence[str]) -> List[str]:
    """The figures multi_label_metrics gives for `label_names`."""
    return (["eval_macro_f1", "eval_micro_f1", "eval_subset_accuracy"]
            + [f"f1_{name}" for name in label_names])
