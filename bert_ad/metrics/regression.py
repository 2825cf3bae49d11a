"""Regression metrics in plain numpy: Pearson and Spearman correlation, mean squared error."""

from __future__ import annotations

import numpy as np


def average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of `values`, ties sharing the mean of their ranks (as
    scipy.stats.rankdata's default)."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    # Runs of equal values: [start, end) in sorted order.
    starts = np.flatnonzero(np.concatenate([[True], sorted_values[1:] != sorted_values[:-1]]))
    ends = np.concatenate([starts[1:], [len(values)]])
    ranks = np.empty(len(values))
    for start, end in zip(starts, ends):
        ranks[order[start:end]] = (start + 1 + end) / 2.0
    return ranks


def pearson(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's r; nan when either side is constant (no correlation is defined)."""
    a = np.asarray(a, np.float64) - np.mean(a)
    b = np.asarray(b, np.float64) - np.mean(b)
    denominator = np.sqrt(np.sum(a * a) * np.sum(b * b))
    return float(np.sum(a * b) / denominator) if denominator > 0 else float("nan")


def spearman(a, b) -> float:
    """Spearman's rank correlation: Pearson's r of the average ranks (nan when
    either side is constant)."""
    return pearson(average_ranks(a), average_ranks(b))


def regression_metrics(targets: np.ndarray, predictions: np.ndarray) -> dict:
    """{eval_pearson, eval_spearman, eval_mse} of `predictions` against `targets` ([n])."""
    targets = np.asarray(targets, np.float64)
    predictions = np.asarray(predictions, np.float64)
    return {"eval_pearson": pearson(targets, predictions),
            "eval_spearman": spearman(targets, predictions),
            "eval_mse": float(np.mean((predictions - targets) ** 2)) if len(targets) else 0.0}


# The figures regression_metrics gives (for --best_metric).
REGRESSION_METRIC_NAMES = ("eval_pearson", "eval_spearman", "eval_mse")
