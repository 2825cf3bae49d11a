"""A tower's loss as the weighted mean of its rows' losses: the one formula every head uses.

Rows (or masked positions) carry a weight: 1 for a real one, 0 for a filler
that completes the last batch or pads the predictions. The loss is the mean
over the real ones, so filler never moves a gradient, and a mean (not a sum)
is what makes N towers x B rows train like 1 tower x N*B rows once the towers'
gradients are averaged.
"""

from __future__ import annotations

from typing import Optional

from bert_ad.compat import tf


def weighted_mean(values, weights, epsilon: Optional[float] = None):
    """sum(weights * values) / max(sum(weights), 1), a scalar float32 tensor.

    The floor of 1 makes a tower that holds only filler (every weight 0) give
    0 instead of 0/0. With `epsilon` the divisor is sum(weights) + epsilon
    instead: Google's masked-LM loss (run_pretraining.py uses 1e-5), kept
    as Google wrote it.

    Args:
      values: per-row (or per-position) losses, float32.
      weights: the same shape, float32.
      epsilon: None, or the small number Google's formula adds to the divisor.
    """
    total = tf.reduce_sum(values * weights)
    if epsilon is not None:
        return total / (tf.reduce_sum(weights) + epsilon)
    return total / tf.maximum(tf.reduce_sum(weights), 1.0)
