"""The driver and the task seam (bert_ad/driver.py, bert_ad/tasks/base.py).

A toy task, a regression head written in a few lines against the seam alone
(no edit to the driver, the loop or the towers), trains on 2 logical CPU
towers, predicts every row once and in order, and evaluates; the schedule
(global batch, steps, learning-rate scaling) is decided once, in the driver.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from bert_ad import driver
from bert_ad.compat import tf
from bert_ad.errors import UserError
from bert_ad.files import read_key_values
from bert_ad.parallel.towers import plan_devices
from bert_ad.tasks.base import Task
from toy_task import ToyRegressionTask, toy_rows


def settings(output_dir: str, **overrides) -> driver.RunSettings:
    values = dict(output_dir=output_dir, train_batch_size=4, eval_batch_size=3,
                  predict_batch_size=5, num_train_epochs=4, learning_rate=3e-3,
                  warmup_proportion=0.0, seed=3, save_checkpoints_steps=1000,
                  log_every_n_steps=1000)
    values.update(overrides)
    return driver.RunSettings(**values)


def test_a_toy_task_trains_on_two_towers_through_the_seam_alone(tmp_path):
    train, dev = toy_rows(48, seed=1), toy_rows(13, seed=2)   # 13: no multiple of 2 x 3
    task = ToyRegressionTask({"train": train, "dev": dev, "predict": dev})
    placement = driver.Placement(plan_devices(2, cuda_visible_devices=""))
    output_dir = str(tmp_path / "out")
    run = settings(output_dir)

    before = driver.evaluate(task, task.read("dev"), settings(
        output_dir, init_checkpoint=_initial_checkpoint(task, tmp_path)), placement)
    assert driver.run(task, run, placement, do_train=True, do_eval=True, do_predict=True) == 0

    trained = read_key_values(os.path.join(output_dir, "train_results.txt"))
    # 48 rows / (2 towers x 4) x 4 epochs = 24 applied steps of 8 examples.
    assert int(trained["global_step"]) == 24
    assert int(trained["global_batch"]) == 8
    assert int(trained["examples_seen"]) == 24 * 8
    assert float(trained["learning_rate"]) == pytest.approx(3e-3)
    after = read_key_values(os.path.join(output_dir, "eval_results.txt"))
    assert int(after["global_step"]) == 24
    # It learnt: the dev error fell well below the untrained model's.
    assert float(after["eval_mse"]) < 0.5 * before["eval_mse"]
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        predicted = [float(line) for line in f]
    assert len(predicted) == len(dev)
    # One line per row, in input order: the file's values are the dev error.
    mse = np.mean((np.array(predicted) - np.array([t for _, t in dev])) ** 2)
    assert mse == pytest.approx(float(after["eval_mse"]), abs=1e-5)
    # A task without labels keeps no labels.txt.
    assert not os.path.exists(os.path.join(output_dir, "labels.txt"))


def _initial_checkpoint(task: Task, tmp_path) -> str:
    """The untrained model, saved: what the toy task's error is before training."""
    from bert_ad.parallel.train_graph import feature_placeholders
    path = str(tmp_path / "init" / "model.ckpt")
    with tf.Graph().as_default():
        tf.set_random_seed(3)
        task.build_model(feature_placeholders(task.feature_spec, 0), is_training=False)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, path)
    return path


@pytest.mark.parametrize("mode, towers, accumulation, workers, expected", [
    ("none", 2, 1, 1, 1e-4),
    ("sqrt", 2, 2, 1, 1e-4 * 2),           # global batch 4x one tower's: x sqrt(4)
    ("linear", 2, 1, 2, 1e-4 * 4),         # two workers of two towers: x 4
    ("sqrt", 1, 1, 1, 1e-4),
])
def test_schedule_scales_the_rate_once_for_the_whole_cluster(mode, towers, accumulation,
                                                             workers, expected):
    class Workers:  # the two numbers the schedule reads of a cluster
        num_workers, task_index, is_chief = workers, 0, True

    placement = driver.Placement(plan_devices(towers, cuda_visible_devices=""),
                                 Workers() if workers > 1 else None)
    plan = driver.schedule(settings("unused", learning_rate=1e-4, lr_scaling=mode,
                                    train_batch_size=8,
                                    gradient_accumulation_steps=accumulation,
                                    num_train_epochs=2.0, warmup_proportion=0.25),
                           placement, num_examples=1000)
    global_batch = 8 * towers * accumulation * workers
    assert plan.global_batch == global_batch
    assert plan.num_train_steps == int(1000 / global_batch * 2)
    assert plan.num_warmup_steps == int(plan.num_train_steps * 0.25)
    assert plan.learning_rate == pytest.approx(expected)
    # A fixed step count (pretraining) wins over epochs; its warmup is its own.
    fixed = driver.schedule(settings("unused", num_train_steps=7, num_warmup_steps=2),
                            placement, num_examples=None)
    assert (fixed.num_train_steps, fixed.num_warmup_steps) == (7, 2)


def test_an_output_dir_with_a_checkpoint_keeps_its_label_list(tmp_path):
    """Relabelled data (the same names in another order) must not resume the old head."""
    class Labelled(ToyRegressionTask):
        def __init__(self, labels):
            self.new_labels = labels

        def resolve_labels(self, train, saved):
            return self.new_labels

    output_dir = tmp_path / "out"
    output_dir.mkdir()
    (output_dir / "labels.txt").write_text("neg\npos\n", encoding="utf-8")
    run = settings(str(output_dir))
    driver.resolve_labels(Labelled(["pos", "neg"]), None, run)  # no checkpoint yet: free
    (output_dir / "model.ckpt-5.index").write_bytes(b"")
    with pytest.raises(UserError, match=r"labels.txt lists the labels neg, pos but this "
                                        r"run's are pos, neg"):
        driver.resolve_labels(Labelled(["pos", "neg"]), None, run)
    task = Labelled(["neg", "pos"])
    assert driver.resolve_labels(task, None, run) == ["neg", "pos"]
    # The driver builds the complete task from the list; it never writes into one.
    assert task.with_labels(["neg", "pos"]).labels == ["neg", "pos"]
    assert task.labels is None
    assert (output_dir / "labels.txt").read_text(encoding="utf-8") == "neg\npos\n"


def test_nothing_to_score_with_is_one_error_before_any_work(tmp_path):
    task = ToyRegressionTask({"dev": toy_rows(3, 0)})
    placement = driver.Placement(plan_devices(1, cuda_visible_devices=""))
    with pytest.raises(UserError, match="no checkpoint to score with"):
        driver.run(task, settings(str(tmp_path)), placement, do_train=False, do_eval=True,
                   do_predict=False)
