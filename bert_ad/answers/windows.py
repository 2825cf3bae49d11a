"""A long document's outputs from its scored windows, on the host, in numpy.

Scoring (from a checkpoint on any tower, or from an ONNX export with no
TensorFlow in the process) deals a document's windows to any batch, so its
logits are only all in one place once every batch is back; they are pooled
here then, in float64 as the figures are computed further on. The same
poolings in graph ops, which training and exports run, are
bert_ad/model/windows.py's `pool_windows`; tests/test_windows.py holds both
to a loop written in the test.
"""

from __future__ import annotations

import numpy as np

from bert_ad.choices import WINDOW_POOLINGS



def pool_scored_windows(logits: np.ndarray, scores: np.ndarray, documents: np.ndarray,
                        num_documents: int, pooling: str) -> np.ndarray:
    """Each document's logits from its windows', scored as independent rows.

    Args:
      logits: [windows, outputs], the logits of each window alone.
      scores: [windows] attention scores (read by "attention" only).
      documents: [windows] int, the document of each window, in [0, num_documents);
        every document has at least one window.
      num_documents: documents in the split.
      pooling: one of WINDOW_POOLINGS.
    Returns:
      [num_documents, outputs] float64.
    """
    logits = np.asarray(logits, np.float64)
    scores = np.asarray(scores, np.float64)
    documents = np.asarray(documents, np.int64)
    counts = np.bincount(documents, minlength=num_documents)
    if np.any(counts == 0):
        raise ValueError(f"document {int(np.argmin(counts))} has no window")
    if pooling == "max":
        pooled = np.full((num_documents, logits.shape[1]), -np.inf)
        np.maximum.at(pooled, documents, logits)
        return pooled
    if pooling == "mean":
        weights = np.ones_like(scores)
    elif pooling == "attention":
        # A softmax within each document (shifted by its largest score).
        largest = np.full(num_documents, -np.inf)
        np.maximum.at(largest, documents, scores)
        weights = np.exp(scores - largest[documents])
    else:
        raise ValueError(f"window pooling must be one of {WINDOW_POOLINGS}, got {pooling!r}")
    totals = np.bincount(documents, weights, minlength=num_documents)         # [documents]
    weighted = np.zeros((num_documents, logits.shape[1]))
    np.add.at(weighted, documents, logits * weights[:, None])
    return weighted / totals[:, None]


def activate(logits: np.ndarray, objective: str) -> np.ndarray:
    """A pooled document's outputs as the head's own (heads.objective_loss):
    softmax or sigmoid probabilities, or the value itself (mse), [docs, outputs]."""
    logits = np.asarray(logits, np.float64)
    if objective == "softmax":
        shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)
    if objective == "sigmoid":
        return 1.0 / (1.0 + np.exp(-logits))
    return logits


def objective_losses(logits: np.ndarray, objective: str, truth: np.ndarray) -> np.ndarray:
    """heads.objective_loss's per-row loss in numpy, [docs].

    Args:
      logits: [docs, outputs] pooled logits.
      truth: label ids [docs] (softmax), multi-hot [docs, labels] (sigmoid) or
        targets [docs] (mse).
    """
    logits = np.asarray(logits, np.float64)
    if objective == "softmax":
        largest = logits.max(axis=-1, keepdims=True)
        log_norm = largest[:, 0] + np.log(np.exp(logits - largest).sum(axis=-1))
        return log_norm - logits[np.arange(len(logits)), np.asarray(truth, np.int64)]
    if objective == "sigmoid":
        truth = np.asarray(truth, np.float64)
        # max(x, 0) - x z + log(1 + exp(-|x|)): TensorFlow's stable form.
        losses = np.maximum(logits, 0) - logits * truth + np.log1p(np.exp(-np.abs(logits)))
        return losses.mean(axis=-1)
    return (logits[:, 0] - np.asarray(truth, np.float64)) ** 2
