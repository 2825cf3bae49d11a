"""The one driver: train, evaluate and predict any task on N towers and N workers.

A task (bert_ad/tasks/base.py) supplies its rows, features, head and loss,
metrics and result files. Everything else is done here, once for every task:

  * the global batch, the step count and the learning-rate scaling (`schedule`),
  * the training graph (towers -> averaged gradients -> one apply) and the loop,
    and train_results.txt,
  * the chief/worker split: in a cluster only the chief (worker 0) reads
    --init_checkpoint, scores and writes results; the others train their share,
  * scoring on all towers with every row exactly once, in input order,
  * evaluation during training (--eval_every_steps): the dev set scored on
    all towers every N steps, the best checkpoint kept in output_dir/best/
    and early stopping (bert_ad/parallel/best_checkpoint.py),
  * labels.txt, eval_results.txt and the task's prediction files, atomically,
  * exports for serving (--do_export) and scoring with one
    (--predict_from_export), through bert_ad/serving/.

The path of one training step: cli flags -> RunSettings + Placement + a Task
-> `run` -> `train` (schedule, build_train_graph with the task's tower loss)
-> bert_ad/parallel/loop.py -> session.run on every tower.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
from typing import Dict, Optional

import numpy as np

from bert_ad.compat import session_config, tf
from bert_ad.data.batching import prefetch
from bert_ad.data.processors import load_label_list, save_label_list
from bert_ad.distributed.cluster import ClusterRuntime
from bert_ad.errors import UserError, fail
from bert_ad.files import (remove_stale_temporaries, staging_directory, write_key_values,
                           write_results)
from bert_ad.locks import OutputDirLock
from bert_ad.parallel.best_checkpoint import BestCheckpoint, best_checkpoint, lower_is_better
from bert_ad.parallel.checkpoints import checkpoint_step, latest_checkpoint, step_checkpoints
from bert_ad.parallel.loop import LoopSettings, TrainResult, remove_partial_save, train_loop
from bert_ad.parallel.learning_rate import scale_learning_rate
from bert_ad.parallel.scoring import Scorer
from bert_ad.parallel.towers import DevicePlan
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.serving.export import (ExportSettings, export_dir_for, export_model,
                                    refuse_existing)
from bert_ad.serving.layout import ExportMetadata, read_metadata
from bert_ad.serving.load import ExportScorer, check_compatible
from bert_ad.tasks.base import SplitData, Task

log = logging.getLogger("bert_ad")

LABELS_FILE = "labels.txt"
TRAIN_RESULTS_FILE = "train_results.txt"


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What a run asks for, from the flags every launcher shares.

    Batch sizes are per tower. `num_train_steps` > 0 fixes the step count
    (pretraining); otherwise it follows from the data and num_train_epochs.
    `num_warmup_steps` None means warmup_proportion of the steps.
    `predict_from_export` (a folder written by --do_export) makes --do_predict
    score with that export instead of a checkpoint.

    Evaluation during training: every `eval_every_steps` applied steps (0:
    never) the dev set is scored; `best_metric` ("" = the task's
    `main_metric`) picks the best evaluation, whose weights
    `keep_best_checkpoint` keeps in output_dir/best/; `early_stopping_patience`
    K > 0 stops after K evaluations in a row without improvement.
    `use_best_checkpoint` makes eval, predict and export use best/.
    """
    output_dir: str
    init_checkpoint: str = ""
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    num_train_epochs: float = 3.0
    num_train_steps: int = 0
    warmup_proportion: float = 0.1
    num_warmup_steps: Optional[int] = None
    learning_rate: float = 5e-5
    lr_scaling: str = "none"
    lr_reference_batch: int = 0
    optimizer: str = "adamw"
    sparse_embedding_updates: bool = False
    weight_decay_rate: float = 0.01
    clip_norm: float = 1.0
    seed: int = 12345
    precision: str = "fp32"
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 10
    predict_from_export: str = ""
    eval_every_steps: int = 0
    keep_best_checkpoint: bool = False
    best_metric: str = ""
    early_stopping_patience: int = 0
    use_best_checkpoint: bool = False


@dataclasses.dataclass
class Placement:
    """Where this process computes: its towers and, in a cluster, its place."""
    plan: DevicePlan
    cluster: Optional[ClusterRuntime] = None
    use_xla: bool = False

    @property
    def num_workers(self) -> int:
        return 1 if self.cluster is None else self.cluster.num_workers

    @property
    def worker_index(self) -> int:
        return 0 if self.cluster is None else self.cluster.task_index

    @property
    def is_chief(self) -> bool:
        """True on a single machine and on worker 0: who reads checkpoints and writes."""
        return self.cluster is None or self.cluster.is_chief

    def local_session_config(self):
        """For scoring: this machine's towers only."""
        return session_config(self.plan.num_cpu_devices, use_xla=self.use_xla)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How long and how fast to train, decided once for the whole cluster."""
    global_batch: int        # examples per applied step, all workers and towers
    num_train_steps: int
    num_warmup_steps: int
    learning_rate: float     # after --lr_scaling


def schedule(settings: RunSettings, placement: Placement,
             num_examples: Optional[int]) -> Schedule:
    """The global batch, step counts and the (scaled) learning rate."""
    per_tower = settings.train_batch_size
    global_batch = (per_tower * placement.plan.num_towers
                    * settings.gradient_accumulation_steps * placement.num_workers)
    if settings.num_train_steps > 0:
        steps = settings.num_train_steps
    else:
        if num_examples is None:
            raise ValueError("a stream of examples needs a fixed num_train_steps")
        steps = max(1, int(num_examples / global_batch * settings.num_train_epochs))
        if steps >= 2 ** 31:
            fail(f"--num_train_epochs={settings.num_train_epochs:g} makes {steps} steps of "
                 f"{global_batch} examples: more than TensorFlow's step counter holds; "
                 "give a realistic number of epochs")
    warmup = (settings.num_warmup_steps if settings.num_warmup_steps is not None
              else int(steps * settings.warmup_proportion))
    if warmup > steps:
        fail(f"{warmup} warmup steps exceed the {steps} training steps; lower "
             "--num_warmup_steps (or --warmup_proportion)")
    learning_rate = scale_learning_rate(settings.learning_rate, global_batch,
                                        settings.lr_reference_batch or per_tower,
                                        settings.lr_scaling)
    return Schedule(global_batch, steps, warmup, learning_rate)


# --- training ------------------------------------------------------------------------

def train(task: Task, data: SplitData, settings: RunSettings,
          placement: Placement, dev: Optional[SplitData] = None) -> TrainResult:
    """Train `task` on `data` (every worker); the chief writes train_results.txt.

    With settings.eval_every_steps, `dev` is scored during training (chief).
    """
    evaluation = (DuringTrainingEvaluation(task, dev, settings, placement)
                  if settings.eval_every_steps and placement.is_chief else None)
    already_stopped = evaluation is not None and evaluation.finished()
    if already_stopped and placement.num_workers == 1:
        return TrainResult(evaluation.best.last_step, 0, None, None, 0, 0)
    batches = task.batches(data)
    plan = placement.plan
    plan_ = schedule(settings, placement, batches.num_examples)
    log.info("training %s: %s examples, %d tower(s) x batch %d x %d accumulation%s = "
             "global batch %d, %d steps (%d warmup), learning rate %g", task.name,
             batches.num_examples if batches.num_examples is not None else "a stream of",
             plan.num_towers, settings.train_batch_size,
             settings.gradient_accumulation_steps,
             f" x {placement.num_workers} workers" if placement.num_workers > 1 else "",
             plan_.global_batch, plan_.num_train_steps, plan_.num_warmup_steps,
             plan_.learning_rate)
    if placement.num_workers > 1:
        share = settings.train_batch_size * plan.num_towers
        log.info("cluster: %d workers x %d tower(s) each; worker %d trains on %d of every "
                 "%d examples", placement.num_workers, plan.num_towers,
                 placement.worker_index, share, share * placement.num_workers)
    graph_settings = TrainSettings(
        learning_rate=plan_.learning_rate, num_train_steps=plan_.num_train_steps,
        num_warmup_steps=plan_.num_warmup_steps, optimizer=settings.optimizer,
        weight_decay_rate=settings.weight_decay_rate, clip_norm=settings.clip_norm,
        gradient_accumulation_steps=settings.gradient_accumulation_steps,
        # Each worker draws its own dropout masks; the initial weights still
        # agree: every worker gets the chief's at start.
        seed=settings.seed + placement.worker_index, precision=settings.precision,
        batch_size_per_tower=settings.train_batch_size,
        num_workers=placement.num_workers,
        learning_rate_multipliers=tuple(task.learning_rate_multipliers().items()),
        sparse_embedding_updates=settings.sparse_embedding_updates)
    cluster = placement.cluster

    def micro_batches(start_example: int):
        # Built in a background thread while the session runs the previous step.
        return prefetch(batches.training(settings.train_batch_size, plan.num_towers,
                                placement.num_workers, placement.worker_index,
                                settings.seed, start_example))

    def tower_loss(features, tower):
        return task.build_model(features, is_training=True)["loss"]

    with tf.Graph().as_default():
        if cluster is None:
            graph = build_train_graph(plan, task.feature_spec, tower_loss, graph_settings)
        else:
            graph = build_train_graph(cluster.plan(plan), task.feature_spec, tower_loss,
                                      graph_settings,
                                      cross_worker_reduce=cluster.gradient_reducer())
        loop = LoopSettings(
            output_dir=settings.output_dir, num_train_steps=plan_.num_train_steps,
            save_checkpoints_steps=settings.save_checkpoints_steps,
            keep_checkpoint_max=settings.keep_checkpoint_max,
            log_every_n_steps=settings.log_every_n_steps,
            init_checkpoint=settings.init_checkpoint if placement.is_chief else "",
            session_config=(cluster.session_config if cluster is not None
                            else placement.local_session_config()),
            cluster=cluster, evaluate_every_steps=settings.eval_every_steps,
            evaluate=evaluation, already_stopped=already_stopped)
        result = train_loop(graph, micro_batches, loop)
    log.info("training done: global step %d, %d examples seen%s", result.global_step,
             result.examples_seen, " (stopped early)" if result.stopped_early else "")
    if placement.is_chief:
        if result.steps_run == 0 and os.path.exists(
                os.path.join(settings.output_dir, TRAIN_RESULTS_FILE)):
            # A rerun of a finished run: its figures stay those of the real run.
            log.info("nothing was trained: kept the finished run's %s", TRAIN_RESULTS_FILE)
        else:
            write_train_results(settings.output_dir, result, plan_)
    return result


def write_train_results(output_dir: str, result: TrainResult, plan: Schedule) -> None:
    """train_results.txt: steps, examples, wall time, rate and learning rate of this run."""
    values = result.summary()
    # %.6f would round a learning rate such as 7.07e-05 to 0.000071.
    values.update(global_batch=plan.global_batch,
                  learning_rate=f"{float(plan.learning_rate):.8g}")
    write_key_values(os.path.join(output_dir, TRAIN_RESULTS_FILE), values)
    log.info("train: %d steps in %.1f s, %.1f examples/sec", result.steps_run,
             result.train_seconds, values["train_examples_per_sec"])


# --- scoring -------------------------------------------------------------------------

def scoring_checkpoint(settings: RunSettings, purpose: str = "score with") -> str:
    """The newest model.ckpt-N of output_dir, else --init_checkpoint; UserError if neither.

    With settings.use_best_checkpoint: output_dir/best/model.ckpt-N, which
    must exist.
    """
    if settings.use_best_checkpoint:
        best = best_checkpoint(settings.output_dir)
        if best is None:
            fail(f"--use_best_checkpoint: {os.path.join(settings.output_dir, 'best')} "
                 "holds no checkpoint; train with --eval_every_steps=N "
                 "--keep_best_checkpoint first")
        return best
    found = latest_checkpoint(settings.output_dir)
    if found:
        return found
    if settings.init_checkpoint:
        return settings.init_checkpoint
    fail(f"no checkpoint to {purpose}: --output_dir={settings.output_dir} has no "
         "model.ckpt-N and --init_checkpoint is not set")


def score(task: Task, data: SplitData, batch_size: int, settings: RunSettings,
          placement: Placement, export: Optional[ExportMetadata] = None,
          checkpoint: Optional[str] = None) -> Dict[str, np.ndarray]:
    """The task's per-row outputs for every feature row of `data`, in input order.

    With `export` (settings.predict_from_export's metadata) the rows are
    scored by that export, batch by batch, and the outputs are its
    signature's; otherwise by `checkpoint` (default: scoring_checkpoint) on
    every tower.

    Rows whose outputs have different shapes from batch to batch (a sequence
    dimension under dynamic padding) come back as an object array of per-row
    arrays, each padded to its batch's length.
    """
    batches = task.batches(data)
    rows = batches.num_examples if batches.num_examples is not None else "the"
    if export is not None:
        checkpoint = export.checkpoint
        log.info("%s: scoring %s rows with the export %s (%s %s, step %d)", data.split,
                 rows, settings.predict_from_export, export.format, export.precision,
                 export.global_step)
        scorer = ExportScorer(settings.predict_from_export, export,
                              placement.local_session_config())
    else:
        checkpoint = checkpoint or scoring_checkpoint(settings)
        partial = task.scores_released_checkpoints and checkpoint == settings.init_checkpoint
        log.info("%s: scoring %s rows with %s on %d tower(s)", data.split, rows,
                 checkpoint, placement.plan.num_towers)

        def tower(features, i):
            outputs = dict(task.build_model(features, is_training=False))
            outputs.pop("loss", None)
            return outputs

        scorer = Scorer(placement.plan, task.feature_spec, tower, checkpoint,
                        placement.local_session_config(), partial=partial,
                        seed=settings.seed)

    per_row: Dict[int, Dict[str, np.ndarray]] = {}
    with scorer:
        for tower_indices, tower_batches in batches.scoring(batch_size,
                                                            placement.plan.num_towers):
            for indices, values in zip(tower_indices, scorer.run(tower_batches)):
                for row, index in enumerate(indices):
                    per_row[int(index)] = {name: value[row] for name, value in values.items()}
    outputs = _stack_rows(per_row)
    outputs["_checkpoint"] = checkpoint
    return outputs


def _stack_rows(per_row: Dict[int, Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
    if not per_row:
        return {}
    count = max(per_row) + 1
    if len(per_row) != count:
        raise AssertionError(f"scoring covered {len(per_row)} of {count} rows")
    stacked = {}
    for name in per_row[0]:
        values = [per_row[i][name] for i in range(count)]
        if len({np.shape(v) for v in values}) == 1:
            stacked[name] = np.stack(values)
        else:
            column = np.empty(count, dtype=object)
            column[:] = values
            stacked[name] = column
    return stacked


class DuringTrainingEvaluation:
    """The training loop's evaluation hook: score the dev set with this step's
    weights on every tower, log and keep the best (bert_ad/parallel/loop.py
    calls it every settings.eval_every_steps steps and at the last one)."""

    def __init__(self, task: Task, dev: SplitData, settings: RunSettings,
                 placement: Placement):
        self.task, self.dev, self.settings, self.placement = task, dev, settings, placement
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
                            self.settings, self.placement, checkpoint=checkpoint)
            metrics = self.task.metrics(self.dev, outputs)
            metrics["global_step"] = step
            if self.best.metric not in metrics:
                fail(f"--best_metric={self.best.metric} is not among the dev figures of the "
                     f"{self.task.name} task: {', '.join(sorted(metrics))}")
            improved = self.best.record(step, float(metrics[self.best.metric]), staging)
        finally:
            if os.path.isdir(staging):
                shutil.rmtree(staging, ignore_errors=True)
        for line in self.task.describe_metrics(metrics).splitlines():
            log.info("eval at step %d: %s", step, line)
        for line in self.task.metric_warnings(metrics):
            log.warning("warning: eval at step %d: %s", step, line)
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


def evaluate(task: Task, data: SplitData, settings: RunSettings,
             placement: Placement) -> dict:
    """Score the dev rows and write eval_results.txt (`key = value`, sorted)."""
    outputs = score(task, data, settings.eval_batch_size, settings, placement)
    metrics = task.metrics(data, outputs)
    metrics["global_step"] = checkpoint_step(outputs["_checkpoint"])
    write_key_values(os.path.join(settings.output_dir, "eval_results.txt"), metrics)
    for line in task.describe_metrics(metrics).splitlines():
        log.info("eval: %s", line)
    for line in task.metric_warnings(metrics):
        log.warning("warning: eval: %s", line)
    return metrics


def predict(task: Task, data: SplitData, settings: RunSettings, placement: Placement,
            export: Optional[ExportMetadata] = None) -> Dict[str, np.ndarray]:
    """Score the predict rows (with `export`, if given) and write the task's
    prediction files."""
    outputs = score(task, data, settings.predict_batch_size, settings, placement, export)
    files = task.prediction_files(data, outputs)
    # One set: a failure leaves every earlier result file as it was.
    write_results(settings.output_dir, files)
    log.info("predict: wrote %d rows to %s in %s", len(data), ", ".join(files),
             settings.output_dir)
    return outputs


# --- the whole run -------------------------------------------------------------------

def resolve_labels(task: Task, train: Optional[SplitData], settings: RunSettings,
                   export: Optional[ExportMetadata] = None) -> None:
    """Set task.labels: the training data's (or the task's), else labels.txt's,
    else those of the export predictions are made with (`export`).

    The label list of an output_dir that holds a checkpoint is fixed: the
    head's rows follow it, so another list (other names, or the same names in
    another order) is refused before anything is written; so is a list other
    than the export's.
    """
    path = os.path.join(settings.output_dir, LABELS_FILE)
    saved = load_label_list(path) if os.path.isfile(path) else None
    labels = task.resolve_labels(train, saved if saved is not None or export is None
                                 else export.labels)
    if labels is not None and saved is not None and labels != saved \
            and step_checkpoints(settings.output_dir):
        fail(f"{path} lists the labels {', '.join(saved)} but this run's are "
             f"{', '.join(labels)}: the checkpoints in --output_dir were trained with "
             "the saved list, in that order; use a new --output_dir for other labels")
    if export is not None and labels != export.labels:
        fail(f"--predict_from_export={settings.predict_from_export} predicts the labels "
             f"{', '.join(export.labels or ['(none)'])} but this run's are "
             f"{', '.join(labels or ['(none)'])}; score it from a fresh --output_dir")
    task.labels = labels


def export(task: Task, settings: RunSettings, export_settings: ExportSettings) -> str:
    """Export output_dir's newest checkpoint (else --init_checkpoint) for serving."""
    return export_model(task, scoring_checkpoint(settings, "export"), export_settings,
                        settings.output_dir)


def run(task: Task, settings: RunSettings, placement: Placement, do_train: bool,
        do_eval: bool, do_predict: bool, export_settings: Optional[ExportSettings] = None
        ) -> int:
    """Train -> export -> predict -> eval, as Google's run_classifier.py and the
    predecessor (plus the export, given `export_settings`: --do_export).

    Every input is read and checked before anything is written: a bad dev or
    predict file, or an export that cannot be written or read, fails in
    seconds, not after training, and leaves output_dir as it was. In a
    cluster every worker trains; the chief alone exports and scores.
    """
    do_export = export_settings is not None
    if not (do_train or do_eval or do_predict or do_export):
        fail("nothing to do: set at least one of --do_train, --do_eval, --do_predict, "
             "--do_export")
    if settings.predict_from_export and not do_predict:
        fail("--predict_from_export scores the --do_predict file: set --do_predict too")
    chief = placement.is_chief
    if not chief and not do_train:
        log.info("worker %d: nothing to train; predict and eval are the chief's "
                 "(worker 0's) job", placement.worker_index)
        return 0
    train_data = task.read("train") if do_train else None
    predict_data = task.read("predict") if do_predict and chief else None
    eval_data = task.read("dev") if do_eval and chief else None
    if settings.eval_every_steps and not do_train:
        fail(f"--eval_every_steps={settings.eval_every_steps} evaluates while training: "
             "set --do_train too")
    during_training = None  # the dev set scored while training
    if settings.eval_every_steps and chief:
        during_training = eval_data or _read_dev_for_training(task)
    serving = None  # the export --do_predict scores with
    if predict_data is not None and settings.predict_from_export:
        serving = read_metadata(settings.predict_from_export)
        check_compatible(settings.predict_from_export, serving, task)
    if do_export and chief and export_settings.export_dir:
        refuse_existing(export_settings.export_dir)
    if train_data is None:
        if do_eval or do_export or (do_predict and serving is None):
            checkpoint = scoring_checkpoint(settings, "export" if do_export else "score with")
            if do_export:
                refuse_existing(export_dir_for(export_settings, settings.output_dir,
                                               checkpoint))
    resolve_labels(task, train_data, settings, serving)
    for data in (train_data, eval_data, predict_data,
                 None if during_training is eval_data else during_training):
        if data is not None:
            task.check_labels(data)
    # In a cluster only the chief writes, so only it owns output_dir.
    with OutputDirLock(settings.output_dir) if chief else contextlib.nullcontext():
        if chief:
            remove_leftovers(settings.output_dir)
        if train_data is not None:
            if chief and task.labels is not None:
                save_label_list(os.path.join(settings.output_dir, LABELS_FILE),
                                task.labels)
            train(task, train_data, settings, placement, during_training)
        if not chief:
            if do_eval or do_predict or do_export:
                log.info("worker %d: export, predict and eval are the chief's (worker 0's) "
                         "job", placement.worker_index)
            return 0
        if do_export:
            export(task, settings, export_settings)
        if predict_data is not None:
            predict(task, predict_data, settings, placement, serving)
        if eval_data is not None:
            evaluate(task, eval_data, settings, placement)
    return 0


def _read_dev_for_training(task: Task) -> SplitData:
    """The dev rows --eval_every_steps scores; its UserError says which flag needs them."""
    try:
        return task.read("dev")
    except UserError as e:
        raise UserError(f"{e} (--eval_every_steps and --keep_best_checkpoint score the dev "
                        "set while training)"
                        ) from None


def remove_leftovers(output_dir: str) -> None:
    """Temporary files a killed run left in output_dir (ours, and TensorFlow's
    `*.tempstate*` of a torn checkpoint save): the lock says no one writes them."""
    for name in remove_stale_temporaries(output_dir):
        log.info("removed %s, left by an earlier run that was stopped while writing", name)
    for name in remove_partial_save(output_dir):
        log.info("removed %s, left by a checkpoint save that did not finish", name)
