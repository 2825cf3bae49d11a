"""The training loop: set-up, the step, logging, checkpointing, in that order.

Our own session loop (no Estimator). It resumes by itself from the newest
`model.ckpt-N` in output_dir: the global step, the schedule and the optimizer
slots come from the checkpoint, and the data stream is re-positioned at the
first example the interrupted run had not consumed.

In a cluster run (`settings.cluster`, see bert_ad/distributed/cluster.py) the same loop
runs on every worker against its TensorFlow server: only the chief (worker 0)
reads init_checkpoint or resumes from output_dir, and only it writes
checkpoints and summaries; the others receive its weights, step and stream
position at start. Every session call runs under the cluster's deadline, and
the logged loss is the cluster mean.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import Any, Callable, Iterator, Optional

from bert_ad.compat import tf
from bert_ad.errors import Stopped, UserError, fail
from bert_ad.files import cannot_write, fsync_path
from bert_ad.parallel.checkpoints import (WarmStart, latest_checkpoint, require_variables,
                                          set_aside_newer, step_checkpoints)
from bert_ad.parallel.train_graph import TrainGraph
from bert_ad.signals import install as install_signal_handler
from bert_ad.signals import restore as restore_signal_handlers
from bert_ad.signals import signal_name

log = logging.getLogger("bert_ad")


@dataclasses.dataclass(frozen=True)
class LoopSettings:
    """How long to train, and what to log and save where.

    `cluster` is a bert_ad.distributed.cluster.ClusterRuntime in a
    multi-worker run, else None. The step's shape (accumulation, examples per
    step) is the graph's own (TrainGraph), so the loop cannot disagree with it.
    """
    output_dir: str
    num_train_steps: int
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 10
    init_checkpoint: str = ""
    session_config: Any = None
    cluster: Any = None
    # Evaluation during training (chief only): every N applied steps and at the
    # last one, `evaluate(step, save_weights)` -> (figures, stop now?); see
    # bert_ad/parallel/best_checkpoint.py. In a cluster every worker stops
    # with the chief: they vote after each evaluation (every worker sets
    # evaluate_every_steps; only the chief has `evaluate`).
    evaluate_every_steps: int = 0
    evaluate: Optional[Callable] = None
    # Chief of a cluster: early stopping already ended this run (resumed);
    # the workers vote on it before the first step.
    already_stopped: bool = False


@dataclasses.dataclass(frozen=True)
class TrainResult:
    """What one run of the loop did.

    `train_seconds` is the wall time of the step loop (checkpoint saves
    included; start-up, warm start and restore excluded).
    """
    global_step: int
    examples_seen: int
    last_loss: Optional[float]
    checkpoint: Optional[str]
    steps_run: int
    examples_per_step: int
    train_seconds: float = 0.0
    skipped_steps: int = 0
    stopped_early: bool = False

    def summary(self) -> dict:
        """The train_results.txt figures of this run."""
        examples = self.steps_run * self.examples_per_step
        extra = {"early_stopping_step": self.global_step} if self.stopped_early else {}
        return {**extra, "global_step": self.global_step, "steps_run": self.steps_run,
                "examples_seen": self.examples_seen, "train_seconds": self.train_seconds,
                "train_examples_per_sec": examples / self.train_seconds
                if self.train_seconds > 0 else 0.0,
                "skipped_steps": self.skipped_steps,
                "final_loss": self.last_loss if self.last_loss is not None else float("nan")}


# (start_example) -> iterator over micro-batches; each is one feed dict per tower.
BatchSource = Callable[[int], Iterator[list]]

# fp16 overflow skips in a row that mean the loss scale cannot recover.
MAX_CONSECUTIVE_OVERFLOWS = 40


def train_loop(graph: TrainGraph, batches: BatchSource,
               settings: LoopSettings) -> TrainResult:
    """Run (or resume) training until `settings.num_train_steps` applied steps."""
    cluster = settings.cluster
    chief = cluster is None or cluster.is_chief
    if chief:
        os.makedirs(settings.output_dir, exist_ok=True)
    saved_variables = tf.global_variables()
    saver = tf.train.Saver(var_list=saved_variables,
                           max_to_keep=settings.keep_checkpoint_max)
    # Evaluation saves the model alone (no optimizer slots), wherever it is asked.
    weights_saver = (tf.train.Saver(var_list=list(graph.variables) + [graph.global_step],
                                    max_to_keep=None)
                     if settings.evaluate is not None and chief else None)
    # The other workers get the chief's (resumed or warm-started) state at start.
    resume_from = latest_checkpoint(settings.output_dir) if chief else None
    warm_start = None
    if resume_from:
        require_variables(resume_from, saved_variables, "--output_dir holds",
                          "use a new --output_dir or move the old checkpoints away")
    elif settings.init_checkpoint and chief:
        warm_start = WarmStart(settings.init_checkpoint, saved_variables)
        warm_start.log_summary()
    fetches = {"loss": graph.loss, "applied": graph.train_step,
               "global_step": graph.step_after, "learning_rate": graph.learning_rate,
               "grad_norm": graph.grad_norm}
    run = _run_locally
    if cluster is not None:
        fetches["loss"] = cluster.mean_over_workers(graph.loss, after=graph.step_after)
        start_sync = cluster.build_start_sync(
            saved_variables, f"num_train_steps={settings.num_train_steps} "
            f"examples_per_step={graph.examples_per_step} "
            f"gradient_accumulation_steps={graph.gradient_accumulation_steps}")
        run = cluster.run
    stop_vote = None
    if cluster is not None and settings.evaluate_every_steps:
        ops = cluster.build_stop_vote()

        def stop_vote(session, stop: bool, what: str) -> bool:
            return cluster.agree_to_stop(session, ops, stop, what)
    init_local = tf.local_variables_initializer()
    init_global = tf.global_variables_initializer()
    tf.get_default_graph().finalize()

    target = cluster.target if cluster is not None else ""
    summaries = tf.summary.FileWriter(settings.output_dir) if chief else None
    try:
        with tf.Session(target, config=settings.session_config) as session:
            session.run(init_local)
            if resume_from:
                saver.restore(session, resume_from)
                # Newer checkpoints that could not be read are renamed aside, so
                # this run's saves neither overwrite nor rotate them away.
                set_aside_newer(settings.output_dir, resume_from)
                saver.recover_last_checkpoints(step_checkpoints(settings.output_dir))
                log.info("resuming from %s", resume_from)
            else:
                session.run(init_global)
                if warm_start:
                    warm_start.restore(session)
            if graph.sync_replicas is not None:
                # Replicated towers: every copy starts from tower 0's weights
                # and slots, the ones the checkpoint holds.
                session.run(graph.sync_replicas)
            if cluster is not None:
                cluster.synchronize(session, start_sync)
            return _steps(session, graph, batches, settings, saver, summaries, run,
                          fetches, resume_from, chief, weights_saver, stop_vote)
    finally:
        if summaries is not None:
            summaries.close()


def _steps(session, graph: TrainGraph, batches: BatchSource, settings: LoopSettings,
           saver, summaries, run, fetches: dict, resume_from: Optional[str],
           chief: bool, weights_saver=None, stop_vote=None) -> TrainResult:
    """The step loop of a session whose variables are initialised (or restored)."""
    start_step = int(session.run(graph.global_step))
    examples_seen = int(session.run(graph.examples_seen))
    if start_step >= settings.num_train_steps:
        log.info("output_dir already holds step %d of %d: nothing to train",
                 start_step, settings.num_train_steps)
        return TrainResult(start_step, examples_seen, None, resume_from, 0,
                           graph.examples_per_step)
    if stop_vote is not None and stop_vote(session, settings.already_stopped,
                                           "the start-up vote on early stopping"):
        log.info("early stopping ended this run at step %d: nothing to train", start_step)
        return TrainResult(start_step, examples_seen, None, resume_from, 0,
                           graph.examples_per_step, stopped_early=True)
    checkpoints = _Checkpoints(session, graph, saver, settings.output_dir, chief,
                               resume_from, start_step)
    stream = batches(examples_seen)

    def next_batch(step: int):
        try:
            return next(stream)
        except (UserError, OSError) as e:
            # A shard that breaks mid-run: keep the work done so far first.
            saved = checkpoints.save(step, examples_seen)
            raise UserError(f"{e} (training stopped at step {step + 1}; "
                            f"{_resume_note(saved)})") from None

    skipped = consecutive_skips = 0
    stopped_early = False
    step, loss = start_step, None
    started = last_log_time = time.time()
    last_log_step = start_step
    with StopSignals() as stop:
        while step < settings.num_train_steps:
            for _ in range(graph.gradient_accumulation_steps - 1):
                run(session, graph.micro_step, _feed(graph, next_batch(step)),
                    what=f"step {step + 1}")
            values = run(session, fetches, _feed(graph, next_batch(step)),
                         what=f"step {step + 1}")
            examples_seen += graph.examples_per_step
            loss = float(values["loss"])
            if values["applied"]:
                consecutive_skips = 0
            elif graph.loss_scale is not None and math.isfinite(loss):
                # fp16 overflow: the update was skipped and the scale halved.
                skipped += 1
                consecutive_skips += 1
                if consecutive_skips >= MAX_CONSECUTIVE_OVERFLOWS:
                    fail(f"training stopped at step {step + 1}: fp16 gradients overflowed "
                         f"{consecutive_skips} steps in a row even with the loss scale "
                         "at its floor; use --precision=bf16 or fp32")
                continue
            else:
                _stop_not_finite(loss, float(values["grad_norm"]), step, checkpoints.last)
            step = int(values["global_step"])
            now = time.time()
            if step % settings.log_every_n_steps == 0 or step == settings.num_train_steps:
                rate = (step - last_log_step) * graph.examples_per_step / max(
                    now - last_log_time, 1e-9)
                _log_step(step, settings.num_train_steps, loss, values, rate,
                          now - started, start_step)
                if skipped:
                    log.info("  fp16: %d step(s) skipped for overflow so far, loss scale %g",
                             skipped, session.run(graph.loss_scale.scale))
                if summaries is not None:
                    _write_summaries(summaries, step, loss, values, rate)
                last_log_step, last_log_time = step, now
            if step % settings.save_checkpoints_steps == 0 or \
                    step == settings.num_train_steps:
                checkpoints.save(step, examples_seen)
            if (weights_saver is not None or stop_vote is not None) and (
                    step % settings.evaluate_every_steps == 0
                    or step == settings.num_train_steps):
                if weights_saver is not None:
                    stopped_early = _evaluate(session, weights_saver, step, settings,
                                              summaries)
                if stop_vote is not None:
                    stopped_early = stop_vote(session, stopped_early,
                                              f"the vote on early stopping at step {step}")
                if stopped_early:
                    checkpoints.save(step, examples_seen)
                    break
            if stop.signal is not None:
                saved = checkpoints.save(step, examples_seen)
                raise Stopped(f"stopped by {stop.name} at step {step}: "
                              f"{_resume_note(saved)}", 128 + stop.signal)
    return TrainResult(step, examples_seen, loss, checkpoints.last, step - start_step,
                       graph.examples_per_step, time.time() - started, skipped,
                       stopped_early)


def _evaluate(session, weights_saver, step: int, settings: LoopSettings,
              summaries) -> bool:
    """Run the evaluation hook at `step`; summarise its figures; True: stop early."""
    def save_weights(folder: str) -> str:
        prefix = os.path.join(folder, "model.ckpt")
        try:
            return weights_saver.save(session, prefix, global_step=step,
                                      write_meta_graph=False, write_state=False)
        except (tf.errors.OpError, OSError) as e:
            raise cannot_write(f"{prefix}-{step}", e) from None

    figures, stop = settings.evaluate(step, save_weights)
    if summaries is not None:
        summary = tf.Summary(value=[
            tf.Summary.Value(tag=f"eval/{name}", simple_value=float(value))
            for name, value in sorted(figures.items())])
        summaries.add_summary(summary, step)
        summaries.flush()
    return bool(stop)


def _resume_note(saved: Optional[str]) -> str:
    if saved:
        return f"saved {saved}; the same command resumes from there"
    return "no checkpoint was written (only the chief writes them)"


class _Checkpoints:
    """Saving the chief's checkpoints: never a non-finite one, never a torn one."""

    def __init__(self, session, graph: TrainGraph, saver, output_dir: str, chief: bool,
                 last: Optional[str], last_step: int):
        self.session, self.graph, self.saver = session, graph, saver
        self.output_dir, self.chief = output_dir, chief
        self.last, self.last_step = last, last_step

    def save(self, step: int, examples_seen: int) -> Optional[str]:
        """Save at `step` (once per step); return the newest checkpoint (None: not chief)."""
        if not self.chief:
            return None
        if step == self.last_step and self.last:
            return self.last
        # A cheap fused check: a NaN that slipped past the step's guard (an
        # inf learning rate makes the last update itself non-finite) must
        # never reach a checkpoint.
        if not self.session.run(self.graph.weights_finite):
            fail(f"training stopped at step {step}: the weights are no longer finite, "
                 f"so no checkpoint was written (the last good one: "
                 f"{self.last or 'none'}); lower --learning_rate or check the data")
        self.session.run(self.graph.set_examples_seen,
                         {self.graph.examples_seen_value: examples_seen})
        prefix = os.path.join(self.output_dir, "model.ckpt")
        try:
            self.last = self.saver.save(self.session, prefix, global_step=step)
            make_durable(self.last)
        except (tf.errors.OpError, OSError) as e:
            # TensorFlow leaves `*.tempstate*` files of a failed save behind.
            remove_partial_save(self.output_dir)
            raise cannot_write(f"{prefix}-{step}", e) from None
        self.last_step = step
        log.info("saved %s", self.last)
        return self.last


def make_durable(prefix: str) -> None:
    """The files of the checkpoint at `prefix` (and TensorFlow's `checkpoint` list
    beside them) on the disk before training goes on: TensorFlow does not fsync,
    and a power cut would leave a newest checkpoint of zeros."""
    directory = os.path.dirname(prefix) or "."
    base = os.path.basename(prefix) + "."
    for name in os.listdir(directory):
        if name.startswith(base) or name == "checkpoint":
            fsync_path(os.path.join(directory, name))
    fsync_path(directory)


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP ask the loop to save and stop after the current step.

    A scheduler sends SIGTERM before it kills, a closing terminal or a dropped
    ssh connection SIGHUP: the run loses at most the step it was in. A second
    signal ends the process at once. Signals the process ignores (nohup's
    SIGHUP) stay ignored; outside the main thread (tests running a loop in a
    thread) nothing is installed (bert_ad/signals.py).
    """

    def __init__(self):
        self.signal: Optional[int] = None
        self.previous = {}

    @property
    def name(self) -> str:
        return signal_name(self.signal)

    def _handle(self, signum, frame) -> None:
        if self.signal is not None:
            os._exit(128 + signum)
        self.signal = signum
        log.info("%s: saving a checkpoint after the current step, then stopping "
                 "(again to stop at once)", signal_name(signum))

    def __enter__(self) -> "StopSignals":
        self.previous = install_signal_handler(self._handle)
        return self

    def __exit__(self, *exc) -> None:
        restore_signal_handlers(self.previous)


def _run_locally(session, fetches, feed_dict=None, what: str = ""):
    return session.run(fetches, feed_dict)


def _feed(graph: TrainGraph, micro_batch: list) -> dict:
    feed = {}
    for placeholders, batch in zip(graph.placeholders, micro_batch):
        for name, placeholder in placeholders.items():
            feed[placeholder] = batch[name]
    return feed


def remove_partial_save(output_dir: str) -> list:
    """Remove what a failed or killed Saver.save left behind (`*.tempstate*` files)."""
    names = [n for n in os.listdir(output_dir) if ".tempstate" in n]
    for name in names:
        os.remove(os.path.join(output_dir, name))
    return names


def _stop_not_finite(loss: float, grad_norm: float, step: int,
                     checkpoint: Optional[str]) -> None:
    kept = checkpoint or "none written yet"
    fail(f"training stopped at step {step + 1}: non-finite loss ({loss}) or "
         f"gradient norm ({grad_norm}); the update was not applied and no "
         f"checkpoint holds it (last checkpoint: {kept}); lower --learning_rate "
         "or check the input data")


def _log_step(step: int, total: int, loss: float, values: dict, rate: float,
              elapsed: float, start_step: int) -> None:
    done = step - start_step
    eta = elapsed / done * (total - step) if done else 0.0
    log.info("step %d/%d  loss %.4f  lr %.3g  grad_norm %.3f  %.1f examples/sec  "
             "elapsed %s  eta %s", step, total, loss, values["learning_rate"],
             values["grad_norm"], rate, _hms(elapsed), _hms(eta))


def _write_summaries(writer, step: int, loss: float, values: dict, rate: float) -> None:
    summary = tf.Summary(value=[
        tf.Summary.Value(tag="loss", simple_value=loss),
        tf.Summary.Value(tag="learning_rate", simple_value=float(values["learning_rate"])),
        tf.Summary.Value(tag="gradient_norm", simple_value=float(values["grad_norm"])),
        tf.Summary.Value(tag="examples_per_sec", simple_value=rate),
    ])
    writer.add_summary(summary, step)
    writer.flush()


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
