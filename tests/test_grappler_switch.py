"""BERT_AD_GRAPPLER: TensorFlow's graph optimiser on for users (the variable unset), off
in every session of a process that sets it to off (the test suite, tests/conftest.py),
and a value that is neither one error line."""

from __future__ import annotations

from helpers import assert_one_error_line, fresh_python_lines, run_module

# Grappler's remapper fuses a MatMul and the BiasAdd after it into one kernel: with it
# on, the graph the session ran holds no BiasAdd; with it off, one. Counted in the
# partition graphs a session reports it ran, for a session opened with bert_ad's
# ConfigProto (training, scoring) and for one opened without any (TensorFlow's default).
PROBE = """
from bert_ad.compat import session_config, tf

def bias_adds_run(config):
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        y = tf.nn.bias_add(tf.matmul(x, tf.ones([3, 2])), tf.constant([1.0, 2.0]))
    metadata = tf.RunMetadata()
    with tf.Session(graph=graph, config=config) as session:
        value = session.run(y, {x: [[1.0, 2.0, 3.0]]}, run_metadata=metadata,
                            options=tf.RunOptions(output_partition_graphs=True))
    assert value.tolist() == [[7.0, 8.0]], value
    return [node.op for part in metadata.partition_graphs for node in part.node].count(
        "BiasAdd")

print(bias_adds_run(session_config(2)))
print(bias_adds_run(None))
"""


def test_grappler_runs_for_users_who_leave_the_variable_unset():
    assert fresh_python_lines(PROBE, 2, "BERT_AD_GRAPPLER") == ["0", "0"]


def test_off_turns_it_off_in_every_session():
    assert fresh_python_lines(PROBE, 2, "BERT_AD_GRAPPLER", BERT_AD_GRAPPLER="off") == [
        "1", "1"]


def test_a_value_that_is_neither_on_nor_off_is_one_error_line():
    run = run_module("bert_ad", ["--version"], BERT_AD_GRAPPLER="maybe")
    assert_one_error_line(run, "BERT_AD_GRAPPLER='maybe'", "neither on nor off")
