"""The training loop (bert_ad/parallel/loop.py) on a one-variable graph.

The summary writer is closed on every way out (the normal end, the early
return of a finished run, a stopping error), and the step's shape comes from
the graph: the loop feeds as many micro-batches as the graph accumulates.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from bert_ad.compat import tf
from bert_ad.errors import UserError
from bert_ad.parallel import loop
from bert_ad.parallel.loop import LoopSettings, train_loop
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph

SPEC = {"x": (tf.float32, [None])}


def build(accumulation: int = 1, per_tower: int = 3):
    def tower_loss(features, i):
        w = tf.get_variable("w", [], initializer=tf.constant_initializer(2.0))
        return tf.reduce_mean(tf.square(w * features["x"] - 1.0))
    return build_train_graph(plan_devices(1, cuda_visible_devices=""), SPEC, tower_loss,
                             TrainSettings(learning_rate=0.1, num_train_steps=100,
                                           gradient_accumulation_steps=accumulation,
                                           train_batch_size=per_tower, seed=1))


def batches_of(values):
    def batches(start_example):
        while True:
            yield [{"x": np.asarray(values, np.float32)}]
    return batches


@pytest.fixture
def writers(monkeypatch):
    """Every summary writer the loop opens, and whether it was closed."""
    opened = []

    class RecordingWriter(tf.summary.FileWriter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.was_closed = False
            opened.append(self)

        def close(self):
            self.was_closed = True
            super().close()

    monkeypatch.setattr(loop.tf.summary, "FileWriter", RecordingWriter)
    return opened


def test_the_summary_writer_is_closed_on_every_way_out(tmp_path, writers):
    output_dir = str(tmp_path)
    with tf.Graph().as_default():
        result = train_loop(build(), batches_of([0.5, 1.0, 1.5]),
                            LoopSettings(output_dir, num_train_steps=3))
    assert result.global_step == 3 and result.examples_per_step == 3
    # Nothing left to train: the early return.
    with tf.Graph().as_default():
        again = train_loop(build(), batches_of([0.5]), LoopSettings(output_dir, 3))
    assert again.steps_run == 0
    # A stopping error: a NaN loss.
    with tf.Graph().as_default(), pytest.raises(UserError, match="non-finite loss"):
        train_loop(build(), batches_of([np.nan]),
                   LoopSettings(str(tmp_path / "nan"), num_train_steps=3))
    assert len(writers) == 3
    assert all(w.was_closed for w in writers)


def test_the_loop_feeds_what_the_graph_accumulates(tmp_path):
    fed = []

    def batches(start_example):
        while True:
            fed.append(start_example)
            yield [{"x": np.ones(2, np.float32)}]

    with tf.Graph().as_default():
        graph = build(accumulation=3, per_tower=2)
        result = train_loop(graph, batches, LoopSettings(str(tmp_path), num_train_steps=4))
    assert graph.examples_per_step == 2 * 3
    assert len(fed) == 4 * 3                 # micro-batches: steps x accumulation
    assert result.examples_seen == 4 * 6
    assert result.summary()["steps_run"] == 4


def test_no_checkpoint_with_non_finite_weights_is_ever_written(tmp_path):
    """A rate that is finite in Python but not in float32 makes the last update
    itself non-finite (the step's own guard saw a finite loss): the save refuses."""
    with tf.Graph().as_default():
        graph = build_train_graph(
            plan_devices(1, cuda_visible_devices=""), SPEC,
            lambda f, i: tf.reduce_mean(tf.square(
                tf.get_variable("w", [], initializer=tf.constant_initializer(2.0))
                * f["x"] - 1.0)),
            TrainSettings(learning_rate=1e39, num_train_steps=5, seed=1))
        with pytest.raises(UserError, match=r"training stopped at step 1: the weights are "
                                            r"no longer finite, so no checkpoint was written"):
            train_loop(graph, batches_of([0.5, 1.0]),
                       LoopSettings(str(tmp_path), num_train_steps=5, save_checkpoints_steps=1))
    assert not [n for n in os.listdir(str(tmp_path)) if n.startswith("model.ckpt")]


def test_a_data_error_mid_run_saves_the_work_first(tmp_path):
    def breaking(start_example):
        for _ in range(2):
            yield [{"x": np.ones(3, np.float32)}]
        raise UserError("shard-7.tfrecord: record 12 is cut short")

    with tf.Graph().as_default():
        with pytest.raises(UserError) as error:
            train_loop(build(), breaking, LoopSettings(str(tmp_path), num_train_steps=10,
                                                       save_checkpoints_steps=100))
    message = str(error.value)
    assert message.startswith("shard-7.tfrecord: record 12 is cut short (training stopped "
                              "at step 3; saved ")
    assert message.endswith("model.ckpt-2; the same command resumes from there)")
    assert os.path.exists(os.path.join(str(tmp_path), "model.ckpt-2.index"))


def test_the_save_on_the_way_out_remakes_an_output_folder_removed_meanwhile(tmp_path):
    """The folder removed while the run went on (by hand, to start again): the save a
    stop asks for still keeps the work (TensorFlow's save op makes the folder again;
    its Saver raises a bare ValueError, "Parent directory of ... doesn't exist", only
    when that op fails and the folder is missing)."""
    output_dir = str(tmp_path / "out")

    def removing(start_example):
        for _ in range(2):
            yield [{"x": np.ones(3, np.float32)}]
        for name in os.listdir(output_dir):
            os.remove(os.path.join(output_dir, name))
        os.rmdir(output_dir)
        raise UserError("stopped by SIGTERM")

    with tf.Graph().as_default():
        with pytest.raises(UserError) as error:
            train_loop(build(), removing, LoopSettings(output_dir, num_train_steps=10,
                                                       save_checkpoints_steps=100))
    assert str(error.value) == (f"stopped by SIGTERM (training stopped at step 3; saved "
                                f"{output_dir}/model.ckpt-2; the same command resumes from "
                                "there)")
    assert os.path.exists(os.path.join(output_dir, "model.ckpt-2.index"))
