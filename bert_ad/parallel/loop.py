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
from bert_ad.parallel.checkpoint_files import remove_partial_save
from bert_ad.parallel.checkpoints import (WarmStart, latest_checkpoint, require_variables,
                                          set_aside_newer, step_checkpoints)
from bert_ad.parallel.train_graph import TrainGraph
from bert_ad.run_settings import DEFAULTS as RUN
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
    save_checkpoints_steps: int = RUN.save_checkpoints_steps
    keep_checkpoint_max: int = RUN.keep_checkpoint_max
    log_every_n_steps: int = RUN.log_every_n_steps
    init_checkpoint: str = ""
    session_config: Any = None
    cluster: Any = None
    # Evaluation during training (chief only): every N applied steps and at the
    # last one, `evaluate(step, save_weights)` -> (figures, stop now?); see
    # bert_ad/parallel/best_checkpoint.py. In a cluster every worker stops
    # with the chief: they vote after each evaluation (every worker sets
    # eval_every_steps; only the chief has `evaluate`).
    eval_every_steps: int = RUN.eval_every_steps
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
    return TrainingLoop(graph, batches, settings).run()


class TrainingLoop:
    """One run of the loop; its state is its fields.

    `run` reads top to bottom: the ops the loop adds to the graph (savers,
    fetches, a cluster's start-up and vote ops), the session (resume, warm
    start or initialise), then the steps. Each step moves `step`,
    `examples_seen` and `loss`; what is due after it (log, save, evaluate,
    stop) reads them.
    """

    def __init__(self, graph: TrainGraph, batches: BatchSource, settings: LoopSettings):
        self.graph, self.batches, self.settings = graph, batches, settings
        self.cluster = settings.cluster
        # Only the chief (worker 0) reads init_checkpoint, resumes and writes.
        self.chief = self.cluster is None or self.cluster.is_chief
        # The graph's side (_add_ops).
        self.saver = self.weights_saver = self.fetches = None
        self.start_sync = self.stop_vote_ops = None
        self.resume_from: Optional[str] = None
        self.warm_start: Optional[WarmStart] = None
        # The session's side (run, _train).
        self.session = self.summaries = None
        self.checkpoints: Optional[_Checkpoints] = None
        self.stream: Optional[Iterator[list]] = None
        # Progress.
        self.start_step = self.step = self.examples_seen = 0
        self.loss: Optional[float] = None
        self.skipped = self.consecutive_skips = 0
        self.stopped_early = False
        self.started = self.last_log_time = 0.0
        self.last_log_step = 0

    def run(self) -> TrainResult:
        settings = self.settings
        if self.chief:
            os.makedirs(settings.output_dir, exist_ok=True)
        self._add_ops()
        init_local = tf.local_variables_initializer()
        init_global = tf.global_variables_initializer()
        tf.get_default_graph().finalize()
        target = self.cluster.target if self.cluster is not None else ""
        self.summaries = tf.summary.FileWriter(settings.output_dir) if self.chief else None
        try:
            with tf.Session(target, config=settings.session_config) as self.session:
                self.session.run(init_local)
                if self.resume_from:
                    self._resume()
                else:
                    self.session.run(init_global)
                    if self.warm_start:
                        self.warm_start.restore(self.session)
                if self.graph.sync_replicas is not None:
                    # Replicated towers: every copy starts from tower 0's weights
                    # and slots, the ones the checkpoint holds.
                    self.session.run(self.graph.sync_replicas)
                if self.cluster is not None:
                    self.cluster.synchronize(self.session, self.start_sync)
                return self._train()
        finally:
            if self.summaries is not None:
                self.summaries.close()

    def _add_ops(self) -> None:
        """Savers, the step's fetches and a cluster's ops; where the run starts from."""
        graph, settings, cluster = self.graph, self.settings, self.cluster
        saved_variables = tf.global_variables()
        self.saver = tf.train.Saver(var_list=saved_variables,
                                    max_to_keep=settings.keep_checkpoint_max)
        if settings.evaluate is not None and self.chief:
            # Evaluation saves the model alone (no optimizer slots), wherever it is asked.
            self.weights_saver = tf.train.Saver(
                var_list=list(graph.variables) + [graph.global_step], max_to_keep=None)
        # The other workers get the chief's (resumed or warm-started) state at start.
        self.resume_from = latest_checkpoint(settings.output_dir) if self.chief else None
        if self.resume_from:
            require_variables(self.resume_from, saved_variables, "--output_dir holds",
                              "use a new --output_dir or move the old checkpoints away")
        elif settings.init_checkpoint and self.chief:
            self.warm_start = WarmStart(settings.init_checkpoint, saved_variables)
            self.warm_start.log_summary()
        self.fetches = {"loss": graph.loss, "applied": graph.train_step,
                        "global_step": graph.step_after,
                        "learning_rate": graph.learning_rate, "grad_norm": graph.grad_norm}
        if cluster is not None:
            self.fetches["loss"] = cluster.mean_over_workers(graph.loss, after=graph.step_after)
            self.start_sync = cluster.build_start_sync(
                saved_variables, f"num_train_steps={settings.num_train_steps} "
                f"examples_per_step={graph.examples_per_step} "
                f"gradient_accumulation_steps={graph.gradient_accumulation_steps}")
            if settings.eval_every_steps:
                self.stop_vote_ops = cluster.build_stop_vote()

    def _resume(self) -> None:
        output_dir = self.settings.output_dir
        self.saver.restore(self.session, self.resume_from)
        # Newer checkpoints that could not be read are renamed aside, so this
        # run's saves neither overwrite nor rotate them away.
        set_aside_newer(output_dir, self.resume_from)
        self.saver.recover_last_checkpoints(step_checkpoints(output_dir))
        log.info("resuming from %s", self.resume_from)

    # --- the steps ----------------------------------------------------------------------

    def _train(self) -> TrainResult:
        """The step loop of a session whose variables are initialised (or restored)."""
        settings, graph = self.settings, self.graph
        self.start_step = self.step = int(self.session.run(graph.global_step))
        self.examples_seen = int(self.session.run(graph.examples_seen))
        if self.start_step >= settings.num_train_steps:
            log.info("output_dir already holds step %d of %d: nothing to train",
                     self.start_step, settings.num_train_steps)
            return self._nothing_trained()
        if self._vote_to_stop(settings.already_stopped, "the start-up vote on early stopping"):
            log.info("early stopping ended this run at step %d: nothing to train",
                     self.start_step)
            return self._nothing_trained(stopped_early=True)
        self.checkpoints = _Checkpoints(self.session, graph, self.saver, settings.output_dir,
                                        self.chief, self.resume_from, self.start_step)
        self.stream = self.batches(self.examples_seen)
        self.started = self.last_log_time = time.time()
        self.last_log_step = self.start_step
        with StopSignals() as stop:
            while self.step < settings.num_train_steps:
                values = self._step()
                if values is None:
                    continue  # fp16 overflow: skipped, the loss scale shrank
                if self._due(settings.log_every_n_steps):
                    self._log(values)
                if self._due(settings.save_checkpoints_steps):
                    self.checkpoints.save(self.step, self.examples_seen)
                if (self.weights_saver is not None or self.stop_vote_ops is not None) \
                        and self._due(settings.eval_every_steps) and self._evaluate():
                    self.checkpoints.save(self.step, self.examples_seen)
                    break
                if stop.signal is not None:
                    saved = self.checkpoints.save(self.step, self.examples_seen)
                    raise Stopped(f"stopped by {stop.name} at step {self.step}: "
                                  f"{_resume_note(saved)}", 128 + stop.signal)
        return TrainResult(self.step, self.examples_seen, self.loss, self.checkpoints.last,
                           self.step - self.start_step, graph.examples_per_step,
                           time.time() - self.started, self.skipped, self.stopped_early)

    def _step(self) -> Optional[dict]:
        """One applied step (k - 1 micro-steps, then the update); its fetched values,
        or None when fp16 overflow skipped it."""
        graph, what = self.graph, f"step {self.step + 1}"
        for _ in range(graph.gradient_accumulation_steps - 1):
            self._session_run(graph.micro_step, self._next_feed(), what)
        values = self._session_run(self.fetches, self._next_feed(), what)
        self.examples_seen += graph.examples_per_step
        self.loss = float(values["loss"])
        if values["applied"]:
            self.consecutive_skips = 0
        elif graph.loss_scale is not None and math.isfinite(self.loss):
            # fp16 overflow: the update was skipped and the scale halved.
            self.skipped += 1
            self.consecutive_skips += 1
            if self.consecutive_skips >= MAX_CONSECUTIVE_OVERFLOWS:
                fail(f"training stopped at step {self.step + 1}: fp16 gradients overflowed "
                     f"{self.consecutive_skips} steps in a row even with the loss scale "
                     "at its floor; use --precision=bf16 or fp32")
            return None
        else:
            _stop_not_finite(self.loss, float(values["grad_norm"]), self.step,
                             self.checkpoints.last)
        self.step = int(values["global_step"])
        return values

    def _session_run(self, fetches, feed: dict, what: str):
        """session.run; in a cluster under its deadline (a lost peer: one line)."""
        if self.cluster is None:
            return self.session.run(fetches, feed)
        return self.cluster.run(self.session, fetches, feed, what=what)

    def _next_feed(self) -> dict:
        try:
            micro_batch = next(self.stream)
        except (UserError, OSError) as e:
            # A shard that breaks mid-run: keep the work done so far first.
            saved = self.checkpoints.save(self.step, self.examples_seen)
            raise UserError(f"{e} (training stopped at step {self.step + 1}; "
                            f"{_resume_note(saved)})") from None
        feed = {}
        for placeholders, batch in zip(self.graph.placeholders, micro_batch):
            for name, placeholder in placeholders.items():
                feed[placeholder] = batch[name]
        return feed

    def _due(self, every: int) -> bool:
        """Every `every` steps, and at the last one."""
        return self.step % every == 0 or self.step == self.settings.num_train_steps

    def _nothing_trained(self, stopped_early: bool = False) -> TrainResult:
        return TrainResult(self.start_step, self.examples_seen, None, self.resume_from, 0,
                           self.graph.examples_per_step, stopped_early=stopped_early)

    # --- what is due after a step -------------------------------------------------------

    def _log(self, values: dict) -> None:
        now = time.time()
        rate = (self.step - self.last_log_step) * self.graph.examples_per_step / max(
            now - self.last_log_time, 1e-9)
        _log_step(self.step, self.settings.num_train_steps, self.loss, values, rate,
                  now - self.started, self.start_step)
        if self.skipped:
            log.info("  fp16: %d step(s) skipped for overflow so far, loss scale %g",
                     self.skipped, self.session.run(self.graph.loss_scale.scale))
        if self.summaries is not None:
            _write_summaries(self.summaries, self.step, self.loss, values, rate)
        self.last_log_step, self.last_log_time = self.step, now

    def _evaluate(self) -> bool:
        """The chief's evaluation hook at this step, then (cluster) every worker's
        vote; True: stop early."""
        if self.weights_saver is not None:
            self.stopped_early = self._run_evaluation()
        self.stopped_early = self._vote_to_stop(
            self.stopped_early, f"the vote on early stopping at step {self.step}")
        return self.stopped_early

    def _vote_to_stop(self, stop: bool, what: str) -> bool:
        """In a cluster with evaluation, whether the workers stop together; else `stop`."""
        if self.stop_vote_ops is None:
            return stop
        return self.cluster.agree_to_stop(self.session, self.stop_vote_ops, stop, what)

    def _run_evaluation(self) -> bool:
        step, session = self.step, self.session

        def save_weights(folder: str) -> str:
            prefix = os.path.join(folder, "model.ckpt")
            try:
                return self.weights_saver.save(session, prefix, global_step=step,
                                               write_meta_graph=False, write_state=False)
            except (tf.errors.OpError, OSError) as e:
                raise cannot_write(f"{prefix}-{step}", e) from None

        figures, stop = self.settings.evaluate(step, save_weights)
        if self.summaries is not None:
            summary = tf.Summary(value=[
                tf.Summary.Value(tag=f"eval/{name}", simple_value=float(value))
                for name, value in sorted(figures.items())])
            self.summaries.add_summary(summary, step)
            self.summaries.flush()
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
