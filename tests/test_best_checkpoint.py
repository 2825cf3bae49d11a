"""Evaluation during training: the best checkpoint, early stopping, resume.

The toy regression task of tests/test_driver.py trains through the driver on 2
logical CPU towers. Its dev figure `eval_score` is scripted by global step (a
curve that peaks early), so which evaluation is best and when patience runs
out are known in advance; what is checked is the machinery: which weights
best/ holds (compared with the step's own checkpoint), when the run ends,
what a resumed run remembers, the TensorBoard summaries and the log lines.
"""

from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import pytest

from bert_ad import driver
from bert_ad.compat import tf
from bert_ad.errors import UserError
from bert_ad.files import read_key_values
from bert_ad.parallel.best_checkpoint import BestCheckpoint, best_checkpoint, lower_is_better
from bert_ad.parallel.checkpoint_files import checkpoint_step
from bert_ad.parallel.checkpoints import latest_checkpoint
from bert_ad.parallel.towers import plan_devices

from test_driver import ToyRegressionTask, settings, toy_rows

# 48 rows / (2 towers x 4) = 6 steps an epoch.
STEPS_PER_EPOCH = 6
# eval_score by global step: best at step 4, then worse (and a tie with the
# best at step 10, which is no improvement).
SCRIPT = {2: 0.50, 4: 0.90, 6: 0.70, 8: 0.60, 10: 0.90, 12: 0.40, 14: 0.30, 16: 0.20,
          18: 0.80, 20: 0.95, 22: 0.10, 24: 0.10}


class ScriptedTask(ToyRegressionTask):
    """The toy task whose main dev figure follows SCRIPT (eval_mse stays real)."""

    main_metric = "eval_score"

    def __init__(self, splits, script=SCRIPT):
        super().__init__(splits)
        self.script = script
        self.scored_steps = []

    def build_model(self, features, is_training):
        outputs = super().build_model(features, is_training)
        if not is_training:
            # The scored checkpoint's step, a real output of the restored graph.
            step = tf.cast(tf.train.get_or_create_global_step(), tf.int64)
            outputs["global_step"] = tf.fill(tf.shape(outputs["value"]), step)
        return outputs

    def metrics(self, data, outputs):
        step = int(outputs["global_step"][0])
        self.scored_steps.append(step)
        figures = super().metrics(data, outputs)
        figures["eval_score"] = self.script[step]
        return figures


def make_task(script=SCRIPT) -> ScriptedTask:
    return ScriptedTask({"train": toy_rows(48, seed=1), "dev": toy_rows(13, seed=2),
                         "predict": toy_rows(5, seed=4)}, script)


def train(output_dir: str, task=None, **overrides) -> ScriptedTask:
    task = task or make_task()
    values = dict(eval_every_steps=2, keep_best_checkpoint=True, save_checkpoints_steps=2,
                  keep_checkpoint_max=30, num_train_epochs=4)
    values.update(overrides)
    placement = driver.Placement(plan_devices(2, cuda_visible_devices=""))
    driver.run(task, settings(output_dir, **values), placement, do_train=True,
               do_eval=False, do_predict=False)
    return task


def read_state(output_dir: str) -> dict:
    with open(os.path.join(output_dir, "best", "best.json"), encoding="utf-8") as f:
        return json.load(f)


def checkpoint_weights(prefix: str) -> dict:
    reader = tf.train.load_checkpoint(prefix)
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def eval_summaries(output_dir: str, tag: str) -> dict:
    """{step: value} of the TensorBoard summaries `tag` in output_dir's event files."""
    found = {}
    for name in sorted(os.listdir(output_dir)):
        if name.startswith("events.out.tfevents"):
            for event in tf.train.summary_iterator(os.path.join(output_dir, name)):
                for value in event.summary.value:
                    if value.tag == tag:
                        found[event.step] = value.simple_value
    return found


class Records(logging.Handler):
    """The messages logged to it."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    """(output_dir, task, log messages) of one 12-step run, best at step 4: read by the
    tests below, copied (shutil.copytree) by those that go on from it."""
    output_dir = str(tmp_path_factory.mktemp("two_epochs") / "out")
    logger = logging.getLogger("bert_ad")
    records, level = Records(), logger.level
    logger.addHandler(records)
    logger.setLevel(logging.INFO)
    try:
        task = train(output_dir, num_train_epochs=2)      # 12 steps
    finally:
        logger.removeHandler(records)
        logger.setLevel(level)
    return output_dir, task, records.messages


def copy_of(two_epochs, tmp_path) -> str:
    """A copy of the 12-step run's output_dir to go on from."""
    return shutil.copytree(two_epochs[0], str(tmp_path / "out"))


def test_best_holds_the_step_where_the_dev_figure_peaked(two_epochs):
    output_dir, task, messages = two_epochs
    assert task.scored_steps == [2, 4, 6, 8, 10, 12]
    trained = read_key_values(os.path.join(output_dir, "train_results.txt"))
    assert int(trained["global_step"]) == 12
    assert "early_stopping_step" not in trained
    best = best_checkpoint(output_dir)
    assert os.path.basename(best) == "model.ckpt-4"
    # best/ holds exactly the model weights of step 4 (no optimizer slots).
    kept, at_step_4 = checkpoint_weights(best), checkpoint_weights(
        os.path.join(output_dir, "model.ckpt-4"))
    assert set(kept) == {n for n in at_step_4 if "adam" not in n.lower()
                         and n != "examples_seen"}
    for name, value in kept.items():
        np.testing.assert_array_equal(value, at_step_4[name], err_msg=name)
    # ...and not those of the last step.
    last = checkpoint_weights(os.path.join(output_dir, "model.ckpt-12"))
    assert not np.array_equal(kept["regression/kernel"], last["regression/kernel"])
    state = read_state(output_dir)
    assert state["metric"] == "eval_score" and state["higher_is_better"] is True
    assert (state["best_step"], state["best_value"]) == (4, 0.9)
    assert state["evaluations"] == [[s, SCRIPT[s]] for s in (2, 4, 6, 8, 10, 12)]
    # No staging folder is left beside best/.
    assert sorted(n for n in os.listdir(output_dir) if "best" in n) == ["best"]
    # A summary and a log line per evaluation.
    assert eval_summaries(output_dir, "eval/eval_score") == pytest.approx(
        {s: SCRIPT[s] for s in (2, 4, 6, 8, 10, 12)})
    assert set(eval_summaries(output_dir, "eval/eval_mse")) == {2, 4, 6, 8, 10, 12}
    lines = [m for m in messages if m.startswith("eval at step")]
    assert any(line.startswith("eval at step 4: best eval_score 0.9000 at step 4 "
                               "(higher is better)  (new best, kept in best/)")
               for line in lines), lines
    assert any("eval at step 10: best eval_score 0.9000 at step 4" in line
               and "3 evaluation(s) without improvement" in line for line in lines), lines


def test_early_stopping_ends_the_run_at_the_expected_evaluation(tmp_path):
    output_dir = str(tmp_path / "out")
    # Best at step 4; 6, 8 and 10 (a tie) do not improve: patience 3 ends at 10.
    task = train(output_dir, early_stopping_patience=3)
    assert task.scored_steps == [2, 4, 6, 8, 10]
    trained = read_key_values(os.path.join(output_dir, "train_results.txt"))
    assert int(trained["global_step"]) == 10
    assert int(trained["early_stopping_step"]) == 10
    assert os.path.basename(latest_checkpoint(output_dir)) == "model.ckpt-10"
    assert os.path.basename(best_checkpoint(output_dir)) == "model.ckpt-4"
    # Running the same command again trains nothing: the run had ended.
    again = train(output_dir, early_stopping_patience=3)
    assert again.scored_steps == []
    assert os.path.basename(latest_checkpoint(output_dir)) == "model.ckpt-10"


def test_a_resumed_run_remembers_the_best_and_the_count(two_epochs, tmp_path):
    output_dir = copy_of(two_epochs, tmp_path)            # steps 1-12, best at 4
    # Longer now: resumes at 12. Patience 5 counts the 4 evaluations after
    # step 4 of the first run (6, 8, 10, 12), so step 14 is the fifth.
    task = train(output_dir, num_train_epochs=4, early_stopping_patience=5)
    assert task.scored_steps == [14]
    state = read_state(output_dir)
    assert state["best_step"] == 4
    assert [s for s, _ in state["evaluations"]] == [2, 4, 6, 8, 10, 12, 14]
    assert os.path.basename(best_checkpoint(output_dir)) == "model.ckpt-4"
    # Without patience it goes on; step 20 beats the remembered best.
    task = train(output_dir, num_train_epochs=4)
    assert task.scored_steps == [16, 18, 20, 22, 24]
    assert os.path.basename(best_checkpoint(output_dir)) == "model.ckpt-20"
    assert read_state(output_dir)["best_value"] == 0.95
    assert sorted(n for n in os.listdir(os.path.join(output_dir, "best"))) == [
        "best.json", "model.ckpt-20.data-00000-of-00001", "model.ckpt-20.index"]


def test_predict_with_the_best_checkpoint(two_epochs, tmp_path):
    output_dir, task = copy_of(two_epochs, tmp_path), make_task()
    placement = driver.Placement(plan_devices(1, cuda_visible_devices=""))
    outputs = driver.predict(task, task.read("predict"),
                             settings(output_dir, use_best_checkpoint=True), placement)
    assert set(outputs["global_step"]) == {checkpoint_step(best_checkpoint(output_dir))}
    newest = driver.predict(task, task.read("predict"), settings(output_dir), placement)
    assert set(newest["global_step"]) == {12}
    assert not np.allclose(outputs["value"], newest["value"])
    with pytest.raises(UserError, match="--use_best_checkpoint: .* holds no checkpoint"):
        driver.scoring_checkpoint(settings(str(tmp_path / "empty"), use_best_checkpoint=True))


def test_which_way_is_better():
    assert lower_is_better("eval_loss") and lower_is_better("eval_mse")
    assert not lower_is_better("eval_accuracy") and not lower_is_better("eval_pearson")


def test_a_record_of_another_metric_is_refused(tmp_path):
    output_dir = str(tmp_path)
    record = BestCheckpoint(output_dir, "eval_accuracy", keep_weights=False)
    record.record(5, 0.5)
    assert not record.record(6, float("nan"))       # NaN is never an improvement
    assert BestCheckpoint(output_dir, "eval_accuracy").best_step == 5
    with pytest.raises(UserError, match=r"keeps the best eval_accuracy, but this run asks "
                                        r"for --best_metric=eval_loss"):
        BestCheckpoint(output_dir, "eval_loss")


def test_one_scoring_graph_serves_every_evaluation_of_a_run(tmp_path, monkeypatch):
    """The dev set scored every 2nd step, then predict and eval at the end: the scoring
    graph is built once a run (bert_ad/evaluation.py ScoringGraphs) and each pass
    restores its own checkpoint into it (the step each scored is a graph output)."""
    from bert_ad import evaluation
    built = []

    class CountedGraph(evaluation.ScoringGraph):
        def __init__(self, *args, **kwargs):
            built.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(evaluation, "ScoringGraph", CountedGraph)
    task = make_task()
    output_dir = str(tmp_path / "out")
    placement = driver.Placement(plan_devices(2, cuda_visible_devices=""))
    driver.run(task, settings(output_dir, eval_every_steps=2, save_checkpoints_steps=2,
                              keep_checkpoint_max=30, num_train_epochs=2),
               placement, do_train=True, do_eval=True, do_predict=True)
    assert len(built) == 1
    # Six evaluations while training (2 epochs of 6 steps), then eval of the last step.
    assert task.scored_steps == [2, 4, 6, 8, 10, 12, 12]
    assert read_key_values(os.path.join(output_dir, "eval_results.txt"))["global_step"] == "12"
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 5
