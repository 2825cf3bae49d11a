"""Scoring a split on every tower, and the evaluation the training loop runs.

`score` gives a task's per-row outputs for every row of a split, exactly
once and in input order, from a checkpoint on all towers (an export scores
through bert_ad/export_predict.py); `scoring_checkpoint` says which checkpoint a run scores
with. `DuringTrainingEvaluation` is the loop's hook for --eval_every_steps:
the dev set scored with the current weights, the best kept in best/.
Answer settings chosen on the dev set (squad's --null_score_diff_threshold=auto)
are recorded beside the checkpoint they were chosen for
(`record_dev_choice`), where a later run scoring that checkpoint finds them
(`recorded_answer_settings`).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
from typing import Dict, List, Mapping, Optional

import numpy as np

from bert_ad.errors import fail
from bert_ad.files import atomic_open
from bert_ad.folders import staging_directory
from bert_ad.parallel.best_checkpoint import BestCheckpoint, best_checkpoint, lower_is_better
from bert_ad.parallel.checkpoint_files import checkpoint_step, step_checkpoints
from bert_ad.parallel.checkpoints import checkpoint_problem, latest_checkpoint
from bert_ad.parallel.scoring import Scorer, ScoringGraph
from bert_ad.data.scored_rows import score_rows
from bert_ad.placement import Placement
from bert_ad.run_settings import RunSettings
from bert_ad.tasks.base import SplitData, Task

log = logging.getLogger("bert_ad")

ANSWER_SETTINGS_FILE = "answer_settings.json"


def check_best_metric(task: Task, settings: RunSettings) -> None:
    """--best_metric (default: the task's main metric) is a figure the task gives:
    refused with the other inputs, before anything is written."""
    metric = settings.best_metric or task.main_metric
    if not metric:
        fail(f"the {task.name} task has no main metric: name one with --best_metric")
    names = task.metric_names()
    if names is not None and metric not in names:
        fail(f"--best_metric={metric} is not among the dev figures of the {task.name} "
             f"task: {', '.join(sorted(names))}")


def non_finite_warnings(metrics: Mapping[str, object]) -> List[str]:
    """One warning for the figures that are NaN or infinite (a Pearson correlation of
    constant targets): written as `nan` to eval_results.txt, said here."""
    bad = sorted(name for name, value in metrics.items()
                 if isinstance(value, float) and not math.isfinite(value))
    if not bad:
        return []
    return [f"{', '.join(bad)} {'is' if len(bad) == 1 else 'are'} not a finite number "
            "(undefined on this dev set, e.g. constant targets): no figure to trust"]


def scoring_checkpoint(settings: RunSettings, purpose: str = "score with") -> str:
    """The newest model.ckpt-N of output_dir, else --init_checkpoint; UserError if neither.

    A newest checkpoint that cannot be read is passed over for the newest
    readable one with one warning naming both (eval_results.txt's
    global_step and export.json name it too); when none of output_dir's
    checkpoints can be read, the run is refused: --init_checkpoint is never
    scored in place of a trained model. With settings.use_best_checkpoint:
    output_dir/best/model.ckpt-N, which must exist and be readable.
    """
    if settings.use_best_checkpoint:
        best = best_checkpoint(settings.output_dir)
        if best is None:
            fail(f"--use_best_checkpoint: {os.path.join(settings.output_dir, 'best')} "
                 "holds no checkpoint; train with --eval_every_steps=N "
                 "--keep_best_checkpoint first")
        problem = checkpoint_problem(best)
        if problem:
            fail(f"--use_best_checkpoint: {problem}; train again with --eval_every_steps=N "
                 "--keep_best_checkpoint, or leave --use_best_checkpoint out to use the "
                 "newest checkpoint")
        return best
    saved = step_checkpoints(settings.output_dir)
    found = latest_checkpoint(settings.output_dir, warn=False)
    if saved and found != saved[-1]:
        problem = checkpoint_problem(saved[-1])
        if found is None:
            fail(f"{problem}, and no older checkpoint in --output_dir={settings.output_dir} "
                 f"can be read either: nothing trained to {purpose}; train again, or move "
                 "the broken checkpoints away to start from --init_checkpoint")
        log.warning("warning: %s; using %s (step %d) instead: the newest that can be read",
                    problem, found, checkpoint_step(found))
    if found:
        return found
    if settings.init_checkpoint:
        return settings.init_checkpoint
    fail(f"no checkpoint to {purpose}: --output_dir={settings.output_dir} has no "
         "model.ckpt-N and --init_checkpoint is not set")


class ScoringGraphs:
    """The scoring graphs of one run (bert_ad/driver.py's `run` holds them), each
    built once: the dev set scored every --eval_every_steps while training, then the
    dev choice, predict and eval restore their checkpoint into the graph already built
    instead of building the towers again (seconds each time on a large model; most
    of a tiny model's scoring). Within a run a task changes only its label list
    (with_labels) and its answer settings (with_dev_choice, with_answer_settings),
    which no graph holds: a graph is kept per label list."""

    def __init__(self):
        self._graphs: Dict[tuple, ScoringGraph] = {}

    def get(self, task: Task, placement: Placement, settings: RunSettings) -> ScoringGraph:
        key = (task.name, tuple(task.labels or ()))
        if key not in self._graphs:
            self._graphs[key] = ScoringGraph(placement.plan, task.feature_spec,
                                             _scoring_tower(task), seed=settings.seed)
        return self._graphs[key]


def _scoring_tower(task: Task):
    def tower(features, i):
        outputs = dict(task.build_model(features, is_training=False))
        outputs.pop("loss", None)
        return outputs
    return tower


def score(task: Task, data: SplitData, batch_size: int, settings: RunSettings,
          placement: Placement, checkpoint: Optional[str] = None,
          graphs: Optional[ScoringGraphs] = None) -> Dict[str, np.ndarray]:
    """The task's per-row outputs for every feature row of `data`, in input order,
    scored by `checkpoint` (default: scoring_checkpoint) on every tower. (An
    export scores through bert_ad/export_predict.py.) `graphs`: the run's scoring
    graphs, to build this task's once.

    Rows whose outputs have different shapes from batch to batch (a sequence
    dimension under dynamic padding) come back as an object array of per-row
    arrays, each padded to its batch's length.
    """
    batches = task.batches(data)
    rows = batches.num_examples if batches.num_examples is not None else "the"
    checkpoint = checkpoint or scoring_checkpoint(settings)
    partial = task.scores_released_checkpoints and checkpoint == settings.init_checkpoint
    log.info("%s: scoring %s rows with %s on %d tower(s)", data.split, rows,
             checkpoint, placement.plan.num_towers)
    session_config = placement.local_session_config()
    if graphs is not None and not partial:
        scorer = graphs.get(task, placement, settings).open(checkpoint, session_config)
    else:
        scorer = Scorer(placement.plan, task.feature_spec, _scoring_tower(task), checkpoint,
                        session_config, partial=partial, seed=settings.seed)
    with scorer:
        return score_rows(scorer, batches, batch_size, placement.plan.num_towers)


class DuringTrainingEvaluation:
    """The training loop's evaluation hook: score the dev set with this step's
    weights on every tower, log and keep the best (bert_ad/parallel/loop.py
    calls it every settings.eval_every_steps steps and at the last one)."""

    def __init__(self, task: Task, dev: SplitData, settings: RunSettings,
                 placement: Placement, graphs: Optional[ScoringGraphs] = None):
        self.task, self.dev, self.settings, self.placement = task, dev, settings, placement
        self.graphs = graphs if graphs is not None else ScoringGraphs()
        metric = settings.best_metric or task.main_metric
        if not metric:
            fail(f"the {task.name} task has no main metric: name one with --best_metric")
        self.best = BestCheckpoint(settings.output_dir, metric,
                                   settings.early_stopping_patience,
                                   keep_weights=settings.keep_best_checkpoint)
        log.info("evaluating %s every %d steps on %d dev rows: %s (%s)%s", task.name,
                 settings.eval_every_steps, len(dev), metric,
                 "lower is better" if lower_is_better(metric) else "higher is better",
                 f", early stopping after {settings.early_stopping_patience} without "
                 "improvement" if settings.early_stopping_patience else "")

    def finished(self) -> bool:
        """A resumed run that early stopping already ended at its newest checkpoint."""
        latest = latest_checkpoint(self.settings.output_dir)
        if self.best.should_stop() and latest is not None \
                and checkpoint_step(latest) == self.best.last_step:
            log.info("early stopping ended this run at step %d (%s): nothing to train",
                     self.best.last_step, self.best.describe())
            return True
        return False

    def __call__(self, step: int, save_weights) -> tuple:
        staging = staging_directory(self.best.directory)
        try:
            checkpoint = save_weights(staging)
            outputs = score(self.task, self.dev, self.settings.eval_batch_size,
                            self.settings, self.placement, checkpoint=checkpoint,
                            graphs=self.graphs)
            metrics = self.task.metrics(self.dev, outputs)
            metrics["global_step"] = step
            if self.best.metric not in metrics:
                fail(f"--best_metric={self.best.metric} is not among the dev figures of the "
                     f"{self.task.name} task: {', '.join(sorted(metrics))}")
            value = float(metrics[self.best.metric])
            improved = self.best.record(step, value, staging)
        finally:
            if os.path.isdir(staging):
                shutil.rmtree(staging, ignore_errors=True)
        for line in self.task.describe_metrics(metrics).splitlines():
            log.info("eval at step %d: %s", step, line)
        for line in self.task.metric_warnings(metrics) + non_finite_warnings(metrics):
            log.warning("warning: eval at step %d: %s", step, line)
        if not math.isfinite(value):
            log.warning("warning: eval at step %d: %s is %s: it is never the best and does "
                        "not count toward early stopping", step, self.best.metric, value)
        log.info("eval at step %d: %s%s%s", step, self.best.describe(),
                 "  (new best" + (", kept in best/)" if self.settings.keep_best_checkpoint
                                  else ")") if improved else "",
                 f"  {self.best.evaluations_since_best} evaluation(s) without improvement"
                 if not improved else "")
        stop = self.best.should_stop()
        if stop:
            log.info("early stopping at step %d: %d evaluations without improvement",
                     step, self.best.evaluations_since_best)
        figures = {name: value for name, value in metrics.items()
                   if isinstance(value, (int, float)) and name != "global_step"}
        return figures, stop


# --- answer settings chosen on the dev set ---------------------------------------------

def record_dev_choice(output_dir: str, task: Task, checkpoint: str, dev: SplitData) -> str:
    """output_dir/answer_settings.json: the task's answer settings, the checkpoint
    they were chosen for (relative to output_dir when inside it) and the dev file."""
    relative = os.path.relpath(os.path.abspath(checkpoint), os.path.abspath(output_dir))
    record = {"answer_settings": task.answer_settings(),
              "checkpoint": relative if not relative.startswith("..") else
              os.path.abspath(checkpoint),
              "global_step": checkpoint_step(checkpoint), "chosen_on": dev.source}
    path = os.path.join(output_dir, ANSWER_SETTINGS_FILE)
    with atomic_open(path, encoding="utf-8") as f:
        f.write(json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    log.info("recorded %s for %s in %s", ", ".join(
        f"--{k}={v}" for k, v in record["answer_settings"].items()), checkpoint, path)
    return path


def recorded_answer_settings(checkpoint: str, output_dir: str) -> tuple:
    """(settings, the record's path) chosen on a dev set for `checkpoint`, from the
    answer_settings.json of output_dir or of the checkpoint's folder; ({}, "") if
    neither names it. UserError (one line) for a record that cannot be read."""
    target = os.path.abspath(checkpoint)
    for folder in dict.fromkeys((output_dir, os.path.dirname(target))):
        path = os.path.join(folder, ANSWER_SETTINGS_FILE)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                record = json.load(f)
            named = os.path.abspath(os.path.join(folder, record["checkpoint"]))
            values = dict(record["answer_settings"])
            # (every answer setting recorded is a number: squad's threshold)
            wrong = [k for k, v in values.items() if isinstance(v, bool)
                     or not isinstance(v, (int, float)) or not math.isfinite(v)]
            if wrong:
                raise ValueError(f"{wrong[0]!r} is {values[wrong[0]]!r}, not a finite number")
        except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError) as e:
            fail(f"{path} cannot be read as the answer settings chosen for a checkpoint "
                 f"({type(e).__name__}: {e}); remove it, or choose again (e.g. "
                 "--null_score_diff_threshold=auto with --do_eval)")
        if named == target:
            return values, path
    return {}, ""
