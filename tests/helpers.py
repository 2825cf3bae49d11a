"""What several test files share: running launchers in-process; one training step."""

from __future__ import annotations

from typing import Callable, List, NamedTuple, Sequence

import numpy as np

from bert_ad.cli import create_pretraining_data as create_pretraining_data_cli
from bert_ad.cli.runner import parse_flags
from bert_ad.compat import session_config, tf


def create_pretraining_data(argv: Sequence[str]) -> int:
    """create_pretraining_data.py's main on `argv` (argv[0] the program), in this
    process: a UserError propagates instead of exiting."""
    cli = create_pretraining_data_cli
    return cli.main(parse_flags(cli.define_flags, argv, cli.USAGE, cli.__doc__))


# ---------------------------------------------------------------------------
# One applied training step, for the N towers = 1 tower x N*B equivalence.


class StepResult(NamedTuple):
    """What one applied step gave: loss, gradient norm, {variable: value}, global_step."""
    loss: float
    grad_norm: float
    weights: dict
    global_step: int


def slice_rows(data: dict, start: int, stop: int) -> dict:
    return {k: v[start:stop] for k, v in data.items()}


def save_initial_weights(build_graph: Callable[[], tuple], path: str) -> str:
    """Build the graph (`build_graph()` -> (plan, TrainGraph)), initialise it and
    save every variable to `path`: one start for every graph compared."""
    with tf.Graph().as_default():
        build_graph()
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, path)
    return path


def train_one_step(build_graph: Callable[[], tuple], checkpoint: str,
                   micro_batches: List[List[dict]]) -> StepResult:
    """Run one applied step from `checkpoint`'s weights.

    Args:
      build_graph: builds the training graph in the default graph and returns
        (plan, TrainGraph), with len(micro_batches) accumulation steps.
      checkpoint: the starting weights (save_initial_weights).
      micro_batches: for each micro-batch, one feed dict per tower.
    """
    with tf.Graph().as_default():
        plan, graph = build_graph()
        with tf.Session(config=session_config(plan.num_cpu_devices)) as session:
            session.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            tf.train.Saver(var_list=graph.variables).restore(session, checkpoint)

            def feed(tower_batches):
                assert len(tower_batches) == len(graph.placeholders)
                out = {}
                for batch, placeholders in zip(tower_batches, graph.placeholders):
                    out.update({placeholders[k]: batch[k] for k in placeholders})
                return out

            for tower_batches in micro_batches[:-1]:
                session.run(graph.micro_step, feed(tower_batches))
            loss, norm, applied, step = session.run(
                [graph.loss, graph.grad_norm, graph.train_step, graph.step_after],
                feed(micro_batches[-1]))
            assert applied
            weights = {v.name: session.run(v) for v in graph.variables}
    return StepResult(float(loss), float(norm), weights, int(step))


def assert_same_weights(a: dict, b: dict, rtol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for name in a:
        # Zero-initialised biases have no scale of their own after one step:
        # measure them against the initializer range (0.02) instead.
        scale = max(np.max(np.abs(b[name])), 0.02)
        difference = np.max(np.abs(a[name] - b[name])) / scale
        assert difference <= rtol, f"{name}: relative difference {difference:.2e}"


def assert_weights_moved(initial_checkpoint: str, weights: dict,
                         kernel: str = "bert/encoder/layer_1/output/dense/kernel:0") -> None:
    """Guard against a vacuous comparison: the step must change the weights."""
    before = tf.train.load_variable(initial_checkpoint, kernel.split(":")[0])
    assert np.max(np.abs(weights[kernel] - before)) > 1e-5
