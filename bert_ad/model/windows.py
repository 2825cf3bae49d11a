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

Here in graph ops (`pool_windows`): training pools a document's windows in
one tower (one segment each), and an export pools the windows of a request.
Scoring scores windows as rows on any tower (or with an ONNX export, without
TensorFlow) and pools them per document on the host afterwards:
bert_ad/answers/windows.py, tested against these ops.
"""

from __future__ import annotations

from bert_ad.choices import WINDOW_POOLINGS  # noqa: F401 (named here too)
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


def pool_request_windows(logits, scores, documents, pooling: str):
    """Each window's document's logits, pooled over the windows fed with it
    (an export's request: `documents` [windows] int32, 0-based within it)."""
    pooled = pool_windows(logits, scores, documents, tf.reduce_max(documents) + 1, pooling)
    return tf.gather(pooled, documents)
