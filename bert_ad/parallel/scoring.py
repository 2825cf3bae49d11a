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

from bert_ad.data.batching import TokenizedExamples, inference_batches, make_batch
from bert_ad.parallel.checkpoints import WarmStart, require_variables
from bert_ad.compat import tf
from bert_ad.parallel.towers import DevicePlan, build_towers
from bert_ad.parallel.train_graph import feature_placeholders

log = logging.getLogger("bert_ad")


def _towers(plan: DevicePlan, feature_spec: dict, tower_fn: Callable[[dict, int], dict],
            seed: int) -> tuple:
    """(per-tower placeholders, per-tower outputs) of the scoring towers, in the
    default graph, with its random seed set."""
    tf.set_random_seed(seed)
    placeholders = [feature_placeholders(feature_spec, i) for i in range(plan.num_towers)]
    return placeholders, build_towers(plan, lambda i: tower_fn(placeholders[i], i))


class ScoringGraph:
    """A multi-tower scoring graph with a Saver for every variable, built once:
    `open(checkpoint)` gives a Scorer with that checkpoint's weights in a session
    of its own, without building the towers again (seconds on a large model)."""

    def __init__(self, plan: DevicePlan, feature_spec: dict,
                 tower_fn: Callable[[dict, int], dict], seed: int = 12345):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.placeholders, self.outputs = _towers(plan, feature_spec, tower_fn, seed)
            self.variables = tf.global_variables()
            self.saver = tf.train.Saver(var_list=self.variables)
            self.graph.finalize()

    def open(self, checkpoint: str, session_config=None) -> "Scorer":
        """A Scorer of `checkpoint`, which must hold every variable (UserError if not)."""
        require_variables(checkpoint, self.variables)
        session = tf.Session(graph=self.graph, config=session_config)
        try:
            self.saver.restore(session, checkpoint)
        except BaseException:
            session.close()
            raise
        return Scorer.of(self.placeholders, self.outputs, session)


class Scorer:
    """A multi-tower scoring graph with `checkpoint`'s weights, in its own session
    (a graph of its own; ScoringGraph.open shares one graph between checkpoints).

    Use as a context manager; `run(per_tower_batches)` feeds one batch dict
    per tower and returns one {name: array} per tower.
    """

    def __init__(self, plan: DevicePlan, feature_spec: dict,
                 tower_fn: Callable[[dict, int], dict], checkpoint: str,
                 session_config=None, partial: bool = False, seed: int = 12345):
        """`partial`: the checkpoint may lack some variables (a released model
        without the task's head); those start from a seeded random init and
        are listed in the log, as when training warm-starts."""
        if not partial:
            opened = ScoringGraph(plan, feature_spec, tower_fn, seed).open(checkpoint,
                                                                           session_config)
            self.placeholders, self.outputs = opened.placeholders, opened.outputs
            self.session = opened.session
            return
        graph = tf.Graph()
        with graph.as_default():
            self.placeholders, self.outputs = _towers(plan, feature_spec, tower_fn, seed)
            variables = tf.global_variables()
            restorer = WarmStart(checkpoint, variables)
            restorer.log_summary()
            init = tf.variables_initializer(variables)
            graph.finalize()
        self.session = tf.Session(graph=graph, config=session_config)
        self.session.run(init)
        restorer.restore(self.session)

    @classmethod
    def of(cls, placeholders: list, outputs: list, session) -> "Scorer":
        """A Scorer of a graph built elsewhere (ScoringGraph.open)."""
        scorer = cls.__new__(cls)
        scorer.placeholders, scorer.outputs, scorer.session = placeholders, outputs, session
        return scorer

    def run(self, per_tower_batches: list) -> list:
        feed = {}
        for batch, placeholders in zip(per_tower_batches, self.placeholders):
            for name, placeholder in placeholders.items():
                feed[placeholder] = batch[name]
        return self.session.run(self.outputs, feed)

    def __enter__(self) -> "Scorer":
        return self

    def __exit__(self, *exc) -> None:
        self.session.close()


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
    results = {}
    with Scorer(plan, feature_spec, tower_fn, checkpoint, session_config) as scorer:
        for tower_indices, rows in inference_batches(examples, batch_size,
                                                     plan.num_towers):
            batches = [make_batch(examples, indices, padding, batch_size=rows)
                       for indices in tower_indices]
            for indices, tower_values in zip(tower_indices, scorer.run(batches)):
                for name, value in tower_values.items():
                    if name not in results:
                        results[name] = np.zeros((len(examples),) + value.shape[1:],
                                                 value.dtype)
                    results[name][indices] = value[:len(indices)]
    return results
