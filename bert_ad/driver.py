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
  * exports for serving (--do_export), through bert_ad/serving/ (scoring
    with one, --predict_from_export, is bert_ad/export_predict.py's)

The path of one training step: cli flags -> RunSettings + Placement + a Task
-> `run` -> `train` (schedule, build_train_graph with the task's tower loss)
-> bert_ad/parallel/loop.py -> session.run on every tower.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from typing import Callable, Dict, Iterator, List, Optional

import numpy as np

from bert_ad.compat import tf
from bert_ad.data.batching import prefetch
from bert_ad.data.processors import save_label_list
from bert_ad.errors import MissingFile, UserError, fail
from bert_ad.evaluation import (DuringTrainingEvaluation, ScoringGraphs, check_best_metric,
                                non_finite_warnings, record_dev_choice,
                                recorded_answer_settings, score, scoring_checkpoint)
from bert_ad import run_model_folder
from bert_ad.files import write_key_values
from bert_ad.locks import OutputDirLock
from bert_ad.parallel.checkpoint_files import checkpoint_step
from bert_ad.parallel.learning_rate import scale_learning_rate
from bert_ad.parallel.loop import LoopSettings, TrainResult, train_loop
from bert_ad.parallel.train_graph import TrainGraph, TrainSettings, build_train_graph
# RunSettings and Placement are the driver's vocabulary: callers (bert_ad/cli,
# tests, benchmarks) name them through it.
from bert_ad.placement import Placement  # noqa: F401
from bert_ad.run_settings import RunSettings, derive  # noqa: F401
from bert_ad.serving.export import (ExportSettings, export_dir_for, export_model,
                                    refuse_existing)
from bert_ad.run_outputs import (EVAL_RESULTS_FILE, LABELS_FILE, TRAIN_RESULTS_FILE,
                                 refuse_outputs_over_inputs, remove_leftovers,
                                 resolve_labels, write_predictions)
from bert_ad.tasks.base import SplitData, Task

log = logging.getLogger("bert_ad")



# --- the schedule ---------------------------------------------------------------------

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
          placement: Placement, dev: Optional[SplitData] = None,
          graphs: Optional[ScoringGraphs] = None) -> TrainResult:
    """Train `task` on `data` (every worker); the chief writes train_results.txt.

    With settings.eval_every_steps, `dev` is scored during training (chief).
    """
    evaluation = (DuringTrainingEvaluation(task, dev, settings, placement, graphs)
                  if settings.eval_every_steps and placement.is_chief else None)
    already_stopped = evaluation is not None and evaluation.finished()
    if already_stopped and placement.num_workers == 1:
        return TrainResult(evaluation.best.last_step, 0, None, None, 0, 0)
    cluster = placement.cluster
    with tf.Graph().as_default():
        training = build_training(task, data, settings, placement)
        loop = derive(
            LoopSettings, settings, num_train_steps=training.schedule.num_train_steps,
            init_checkpoint=settings.init_checkpoint if placement.is_chief else "",
            session_config=(cluster.session_config if cluster is not None
                            else placement.local_session_config()),
            cluster=cluster, evaluate=evaluation, already_stopped=already_stopped)
        result = train_loop(training.graph, training.batches, loop)
    log.info("training done: global step %d, %d examples seen%s", result.global_step,
             result.examples_seen, " (stopped early)" if result.stopped_early else "")
    if placement.is_chief:
        if result.steps_run == 0 and os.path.exists(
                os.path.join(settings.output_dir, TRAIN_RESULTS_FILE)):
            # A rerun of a finished run: its figures stay those of the real run.
            log.info("nothing was trained: kept the finished run's %s", TRAIN_RESULTS_FILE)
        else:
            write_train_results(settings.output_dir, result, training.schedule)
    return result


@dataclasses.dataclass(frozen=True)
class Training:
    """What `train` runs: the graph, this worker's micro-batches and the schedule.

    `micro_batches(start_example)` yields one padded batch per tower from
    example `start_example` of the seeded stream; `batches` is the same
    stream built in a background thread, what the loop draws from.
    """
    graph: TrainGraph
    micro_batches: Callable[[int], Iterator[list]]
    schedule: Schedule

    def batches(self, start_example: int) -> Iterator[list]:
        # Built while the session runs the previous step.
        return prefetch(self.micro_batches(start_example))


def build_training(task: Task, data: SplitData, settings: RunSettings,
                   placement: Placement, **train_settings) -> Training:
    """The training graph `train` runs, built into the default graph, and its batches.

    The one place both are made: `train` and the benchmarks (benchmarks/bench_train.py,
    bench_memory.py) time what a user's run trains. `train_settings`: TrainSettings
    fields no flag sets (a benchmark's fused_optimizer=False).
    """
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
    graph_settings = derive(
        TrainSettings, settings, learning_rate=plan_.learning_rate,
        num_train_steps=plan_.num_train_steps, num_warmup_steps=plan_.num_warmup_steps,
        # Each worker draws its own dropout masks; the initial weights still
        # agree: every worker gets the chief's at start.
        seed=settings.seed + placement.worker_index,
        num_workers=placement.num_workers,
        learning_rate_multipliers=tuple(task.learning_rate_multipliers().items()),
        **train_settings)
    if graph_settings.recompute_activations:
        log.info("--recompute_activations: each encoder layer keeps only its input for "
                 "the backward pass and is recomputed there")

    def micro_batches(start_example: int) -> Iterator[list]:
        return batches.training(settings.train_batch_size, plan.num_towers,
                                placement.num_workers, placement.worker_index,
                                settings.seed, start_example)

    def tower_loss(features, tower):
        return task.build_model(features, is_training=True)["loss"]

    cluster = placement.cluster
    if cluster is None:
        graph = build_train_graph(plan, task.feature_spec, tower_loss, graph_settings)
    else:
        graph = build_train_graph(cluster.plan(plan), task.feature_spec, tower_loss,
                                  graph_settings,
                                  cross_worker_reduce=cluster.gradient_reducer())
    return Training(graph, micro_batches, plan_)


def write_train_results(output_dir: str, result: TrainResult, plan: Schedule) -> None:
    """train_results.txt: steps, examples, wall time, rate and learning rate of this run."""
    values = result.summary()
    # %.6f would round a learning rate such as 7.07e-05 to 0.000071.
    values.update(global_batch=plan.global_batch,
                  learning_rate=f"{float(plan.learning_rate):.8g}")
    write_key_values(os.path.join(output_dir, TRAIN_RESULTS_FILE), values)
    log.info("train: %d steps in %.1f s, %.1f examples/sec", result.steps_run,
             result.train_seconds, values["train_examples_per_sec"])


def evaluate(task: Task, data: SplitData, settings: RunSettings,
             placement: Placement, checkpoint: Optional[str] = None,
             outputs: Optional[Dict[str, np.ndarray]] = None,
             graphs: Optional[ScoringGraphs] = None) -> dict:
    """Score the dev rows with `checkpoint` (default: scoring_checkpoint) and write
    eval_results.txt (`key = value`, sorted; global_step names the checkpoint).

    `outputs`: the rows' outputs already scored with the same checkpoint (a
    predict split that is the dev split), used instead of scoring again.
    """
    checkpoint = checkpoint or scoring_checkpoint(settings)
    if outputs is None:
        outputs = score(task, data, settings.eval_batch_size, settings, placement,
                        checkpoint=checkpoint, graphs=graphs)
    metrics = task.metrics(data, outputs)
    metrics["global_step"] = checkpoint_step(checkpoint)
    write_key_values(os.path.join(settings.output_dir, EVAL_RESULTS_FILE), metrics)
    for line in task.describe_metrics(metrics).splitlines():
        log.info("eval: %s", line)
    for line in task.metric_warnings(metrics) + non_finite_warnings(metrics):
        log.warning("warning: eval: %s", line)
    return metrics


def predict(task: Task, data: SplitData, settings: RunSettings, placement: Placement,
            checkpoint: Optional[str] = None,
            outputs: Optional[Dict[str, np.ndarray]] = None,
            graphs: Optional[ScoringGraphs] = None) -> Dict[str, np.ndarray]:
    """Score the predict rows (with `checkpoint`, default scoring_checkpoint) and
    write the task's prediction files (an export predicts through
    bert_ad/export_predict.py).

    `outputs`: the rows already scored with the same checkpoint (a dev split
    that is the predict split, scored first), used instead of scoring again.
    """
    if outputs is None:
        outputs = score(task, data, settings.predict_batch_size, settings, placement,
                        checkpoint, graphs)
    write_predictions(task, data, outputs, settings.output_dir)
    return outputs


# --- the whole run -------------------------------------------------------------------

def export(task: Task, settings: RunSettings, export_settings: ExportSettings,
           checkpoint: Optional[str] = None, dev: Optional[SplitData] = None,
           label_names: Optional[List[str]] = None) -> str:
    """Export `checkpoint` (default: output_dir's newest, else --init_checkpoint)
    for serving; export.json names it (and `label_names`). An int8 export is
    measured on `dev`."""
    return export_model(task, checkpoint or scoring_checkpoint(settings, "export"),
                        export_settings, settings.output_dir, dev, settings.eval_batch_size,
                        label_names or ())


def run(task: Task, settings: RunSettings, placement: Placement, do_train: bool,
        do_eval: bool, do_predict: bool, export_settings: Optional[ExportSettings] = None
        ) -> int:
    """Train -> export -> predict -> eval, as Google's run_classifier.py and the
    predecessor (plus the export, given `export_settings`: --do_export). A task
    that chooses answer settings on the dev set (Task.chooses_on_dev) has the
    dev set scored before the export; otherwise the export, the predictions
    and the figures answer with the settings recorded beside the checkpoint
    (or in the export scored with), unless the task's flags set them.

    Every input is read and checked before anything is written: a bad dev or
    predict file, or an export that cannot be written or read, fails in
    seconds, not after training, and leaves output_dir as it was. In a
    cluster every worker trains; the chief alone exports and scores.
    """
    do_export = export_settings is not None
    # The flags were checked (bert_ad/cli/flag_checks.py); a caller of the driver
    # itself is held to the same.
    assert do_train or do_eval or do_predict or do_export, "nothing to do"
    assert not settings.predict_from_export, "an export predicts in bert_ad/export_predict.py"
    assert do_train or not settings.eval_every_steps, "eval_every_steps needs do_train"
    chief = placement.is_chief
    if not chief and not do_train:
        log.info("worker %d: nothing to train; predict and eval are the chief's "
                 "(worker 0's) job", placement.worker_index)
        return 0
    train_data = task.read("train") if do_train else None
    predict_data = task.read("predict") if do_predict and chief else None
    eval_data = task.read("dev") if do_eval and chief else None
    during_training = None  # the dev set scored while training
    if settings.eval_every_steps and chief:
        during_training = eval_data or _read_dev_for(task, DURING_TRAINING)
    int8_dev = None  # what an int8 export's accuracy is measured on
    if do_export and chief and export_settings.precision == "int8":
        int8_dev = eval_data or during_training or _int8_rows(task, train_data)
    if do_export and chief and export_settings.export_dir:
        refuse_existing(export_settings.export_dir)
    checkpoint = None  # what export, predict and eval use without training: chosen once
    if train_data is None:
        if do_eval or do_export or do_predict:
            checkpoint = scoring_checkpoint(settings, "export" if do_export else "score with")
            if do_export:
                refuse_existing(export_dir_for(export_settings, settings.output_dir,
                                               checkpoint))
    if chief:  # another run's checkpoints are no resume point (run_model_folder.py)
        run_model_folder.refuse_another_run(task, settings, train_data is not None)
    # From here on the task is complete: its label list is part of it.
    task = task.with_labels(resolve_labels(task, train_data, settings))
    checked = []
    for data in (train_data, eval_data, predict_data, during_training, int8_dev):
        if data is not None and not any(data is seen for seen in checked):
            task.check_labels(data)
            checked.append(data)
    if during_training is not None:
        check_best_metric(task, settings)
    refuse_outputs_over_inputs(task, settings.output_dir,
                               [data for data in (train_data, eval_data, predict_data,
                                                  during_training) if data is not None])
    graphs = ScoringGraphs()  # each scoring graph built once in this run
    # The model folder's record (bert_ad/run_model_folder.py): a resume only of this run.
    record = (run_model_folder.prepare(task, settings, train_data is not None,
                                       eval_data or during_training) if chief else None)
    # In a cluster only the chief writes, so only it owns output_dir.
    with OutputDirLock(settings.output_dir) if chief else contextlib.nullcontext():
        if chief:
            remove_leftovers(settings.output_dir)
        if train_data is not None:
            if chief and task.labels is not None:
                save_label_list(os.path.join(settings.output_dir, LABELS_FILE),
                                task.labels)
            if chief:  # before the first checkpoint: the folder is the model
                run_model_folder.write_model_folder(settings.output_dir, task, record)
            trained = train(task, train_data, settings, placement, during_training, graphs)
        elif record is not None:  # --label_names against a trained folder
            run_model_folder.write_record(settings.output_dir, record)
        if not chief:
            if do_eval or do_predict or do_export:
                log.info("worker %d: export, predict and eval are the chief's (worker 0's) "
                         "job", placement.worker_index)
            return 0
        # A task whose dev split is its predict split (the same object, e.g.
        # squad's --predict_file) is scored once, by the same checkpoint.
        same = eval_data is predict_data
        dev_outputs = None
        # Answer settings chosen on the dev set (squad's --null_score_diff_threshold=
        # auto), else on some of the training rows: known before anything answers.
        choice_data = (task.choice_data(eval_data if eval_data is not None
                                        else during_training, train_data)
                       if task.chooses_on_dev else None)
        if choice_data is not None:
            checkpoint = checkpoint or scoring_checkpoint(settings)
            choice_outputs = score(task, choice_data, settings.eval_batch_size, settings,
                                   placement, checkpoint=checkpoint, graphs=graphs)
            if choice_data is eval_data:
                dev_outputs = choice_outputs
            task = task.with_dev_choice(choice_data, choice_outputs)
            record_dev_choice(settings.output_dir, task, checkpoint, choice_data)
        elif task.answer_settings() and (do_export or predict_data is not None
                                         or eval_data is not None):
            # A choice recorded beside the checkpoint answered with.
            checkpoint = checkpoint or scoring_checkpoint(settings)
            task = task.with_answer_settings(*recorded_answer_settings(
                checkpoint, settings.output_dir))
        if do_export:
            export(task, settings, export_settings, checkpoint, int8_dev,
                   record.label_names if record is not None
                   else run_model_folder.recorded_label_names(settings))
        predicted = None
        if predict_data is not None:
            predicted = predict(task, predict_data, settings, placement, checkpoint,
                                dev_outputs if same else None, graphs)
        metrics = None
        if eval_data is not None:
            metrics = evaluate(task, eval_data, settings, placement, checkpoint,
                               dev_outputs if dev_outputs is not None else
                               predicted if same else None, graphs)
        if train_data is not None:
            run_model_folder.finish(settings.output_dir, record, trained.global_step,
                                    metrics)
    return 0


DURING_TRAINING = ("--eval_every_steps and --keep_best_checkpoint score the dev set "
                   "while training")
INT8_EXPORT = ("--export_precision=int8 calibrates the int8 model and measures it against fp32 "
               "on the dev set, else on the training set")


def _int8_rows(task: Task, train_data: Optional[SplitData]) -> SplitData:
    """What an int8 export is calibrated and measured on: the dev rows, else (no dev
    file) the training rows, logged; neither is one line naming the dev file."""
    try:
        return task.read("dev")
    except MissingFile as missing:
        try:
            rows = train_data if train_data is not None else task.read("train")
        except MissingFile:
            raise UserError(f"{missing} ({INT8_EXPORT})") from None
        log.info("int8 export: no dev split (%s): calibrating and measuring on the %d "
                 "training rows (%s)", missing, len(rows), rows.source)
        return rows


def _read_dev_for(task: Task, why: str) -> SplitData:
    """The dev rows a flag needs; its UserError says which flag (`why`)."""
    try:
        return task.read("dev")
    except UserError as e:
        raise UserError(f"{e} ({why})") from None
