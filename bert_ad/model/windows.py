"""A long document's prediction from its windows' logits (--long_text=windows).

A document longer than max_seq_length is cut into overlapping windows
(bert_ad/data/features.py); every window goes through BERT and the output
layer like a row of its own, and the document's logits pool its windows':

  mean       the mean of the windows' logits
  max        the largest logit of each output over the windows
  attention  a softmax-weighted mean: window i weighs exp(s_i) / sum_j exp(s_j),
             s_i = v . pooled_i + b (`window_attention/kernel` [hidden],
             `window_attention/bias`), learnt end to end with the head. The
             output layer is linear, so this equals classifying the
             attention-weighted mean of the windows' pooled outputs.

The pooling is written once, in graph ops (`pool_windows`): training pools
a document's windows in one tower (one segment each); scoring scores windows
as rows on any tower and pools them per document on the host afterwards by
running the same ops (`pool_scored_windows`). `activate` and
`objective_losses` then give the pooled documents the head's outputs and loss.
"""

from __future__ import annotations

import numpy as np

from bert_ad.choices import WINDOW_POOLINGS
from bert_ad.compat import tf
from bert_ad.model.modeling import create_initializer



def window_attention_scores(pooled, hidden_size: int):
    """s = pooled . v + b: one attention score per window.

    Args:
      pooled: [windows, hidden] float32, the pooled output of each window.
    Returns:
      [windows] float32.
    """
    kernel = tf.get_variable("window_attention/kernel", [hidden_size], tf.float32,
                             create_initializer(0.02))
    bias = tf.get_variable("window_attention/bias", [], tf.float32, tf.zeros_initializer())
    return tf.reduce_sum(pooled * kernel, axis=-1) + bias


def pool_windows(logits, scores, segments, num_segments, pooling: str):
    """Each segment's (document's) logits from its windows', in graph ops.

    Args:
      logits: [windows, outputs] float32.
      scores: [windows] float32 attention scores (read by "attention" only).
      segments: [windows] int32, the segment of each window, in [0, num_segments).
        Every segment has at least one window.
      num_segments: scalar int32.
      pooling: one of WINDOW_POOLINGS.
    Returns:
      [num_segments, outputs] float32.
    """
    if pooling == "max":
        return tf.math.unsorted_segment_max(logits, segments, num_segments)
    if pooling == "mean":
        weights = tf.ones_like(scores)
    elif pooling == "attention":
        # A softmax within each segment (shifted by the segment's largest score).
        shift = tf.gather(tf.math.unsorted_segment_max(scores, segments, num_segments),
                          segments)
        weights = tf.exp(scores - shift)
    else:
        raise ValueError(f"window pooling must be one of {WINDOW_POOLINGS}, got {pooling!r}")
    totals = tf.math.unsorted_segment_sum(weights, segments, num_segments)   # [segments]
    weighted = tf.math.unsorted_segment_sum(logits * weights[:, None], segments,
                                            num_segments)
    return weighted / totals[:, None]


def pool_scored_windows(logits: np.ndarray, scores: np.ndarray, documents: np.ndarray,
                        num_documents: int, pooling: str) -> np.ndarray:
    """`pool_windows` over windows scored as independent rows, on the host.

    Scoring deals a document's windows to any tower and batch, so its logits
    are only all in one place once every batch is back. They are pooled then by
    the very graph ops training uses (`pool_windows`), in a small graph and
    CPU session of their own, in float64 as the figures are computed further on.

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
    with tf.Graph().as_default() as graph:
        fed = (tf.placeholder(tf.float64, [None, logits.shape[1]]),
               tf.placeholder(tf.float64, [None]), tf.placeholder(tf.int32, [None]))
        pooled = pool_windows(*fed, num_documents, pooling)
        # No GPU: a few numbers per window, and the training run may hold the cards.
        config = tf.ConfigProto(device_count={"GPU": 0})
        with tf.Session(graph=graph, config=config) as session:
            return session.run(pooled, dict(zip(fed, (logits, scores, documents))))


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
