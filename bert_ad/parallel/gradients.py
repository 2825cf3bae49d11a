"""Gradient arithmetic before an update: duplicate rows summed, global-norm clipping.

A gather's gradient (the word embeddings) arrives as tf.IndexedSlices whose
row indices repeat (padding, [CLS], rows concatenated across towers). Both the
row-sparse optimizer update and the global norm need each row's real gradient,
so the duplicates are summed first (`deduplicate_rows`).
"""

from __future__ import annotations

from typing import Sequence

from bert_ad.compat import tf


def deduplicate_rows(slices):
    """IndexedSlices with each row index once, duplicate rows summed."""
    unique, position = tf.unique(slices.indices)
    values = tf.math.unsorted_segment_sum(slices.values, position, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, slices.dense_shape)


def clip_by_global_norm(grads: Sequence, clip_norm: float | None, use_norm=None):
    """Scale all gradients by min(1, clip_norm / global_norm), Google-style.

    IndexedSlices are first deduplicated (rows with the same index summed)
    so that the norm is the norm of the real gradient: tf.global_norm of raw
    slices sums the squares of duplicate rows separately, and gather
    gradients (padding, [CLS], rows concatenated across towers) are full of
    duplicates. None entries stay None. A non-finite norm makes every
    gradient NaN (tf.clip_by_global_norm), which the trainer can detect.

    Args:
      grads: list of tensors, IndexedSlices or None.
      clip_norm: the maximum global norm; None or <= 0 returns the gradients
        unclipped (the norm is still computed, for logging).
      use_norm: the global norm, computed elsewhere (replicated towers clip
        their copies by tower 0's norm, so every copy gets the same scale);
        None computes it from `grads`.

    Returns:
      (clipped gradients in the same order, global norm as a scalar tensor)
    """
    with tf.name_scope("clip_by_global_norm"):
        grads = [deduplicate_rows(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if clip_norm is None or clip_norm <= 0:
            return grads, tf.linalg.global_norm(grads) if use_norm is None else use_norm
        return tf.clip_by_global_norm(grads, clip_norm, use_norm=use_norm)
