"""Multi-tower scoring (eval and predict) from a checkpoint.

Every tower scores its share of each global batch, so batch scoring scales
with the cards like training does. Rows are grouped by length (little
padding), the last batch is completed with filler rows that are dropped
afterwards, and results come back in input order: every example exactly once.
"""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from bert_ad.batching import TokenizedExamples, inference_batches, make_batch
from bert_ad.checkpoint import require_variables
from bert_ad.compat import tf
from bert_ad.towers import DevicePlan, build_towers
from bert_ad.training import feature_placeholders

log = logging.getLogger("bert_ad")


def run_inference(plan: DevicePlan, feature_spec: dict,
                  tower_fn: Callable[[dict, int], dict], checkpoint: str,
                  examples: TokenizedExamples, batch_size: int, padding,
                  session_config=None) -> dict:
    """Score `examples` with the weights in `checkpoint`.

    Args:
      tower_fn: (feature placeholders, tower index) -> {name: [batch, ...] tensor}.
      checkpoint: prefix holding every variable the towers use.
      padding: "dynamic" or a fixed sequence length.
    Returns:
      {name: array with one row per example, in input order}.
    """
    graph = tf.Graph()
    with graph.as_default():
        placeholders = [feature_placeholders(feature_spec, i)
                        for i in range(plan.num_towers)]
        outputs = build_towers(plan, lambda i: tower_fn(placeholders[i], i))
        variables = tf.global_variables()
        require_variables(checkpoint, variables)
        saver = tf.train.Saver(var_list=variables)
        graph.finalize()
    results = {}
    with tf.Session(graph=graph, config=session_config) as session:
        saver.restore(session, checkpoint)
        for tower_indices, rows in inference_batches(examples, batch_size,
                                                     plan.num_towers):
            feed = {}
            for indices, tower_placeholders in zip(tower_indices, placeholders):
                batch = make_batch(examples, indices, padding, batch_size=rows)
                for name, placeholder in tower_placeholders.items():
                    feed[placeholder] = batch[name]
            values = session.run(outputs, feed)
            for indices, tower_values in zip(tower_indices, values):
                for name, value in tower_values.items():
                    if name not in results:
                        results[name] = np.zeros((len(examples),) + value.shape[1:],
                                                 value.dtype)
                    results[name][indices] = value[:len(indices)]
    return results
