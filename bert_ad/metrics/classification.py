"""Classification metrics in plain numpy (accuracy, per-class P/R/F1, macro-F1)."""

from __future__ import annotations

from typing import Sequence

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
