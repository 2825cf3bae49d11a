"""What every multi-tower entry point shares: training flags, logging, start-up.

`run_classifier_mgpu.py`, `run_pretraining_mgpu.py` and `rewrite_finetune.py`
define their own data flags and call `define_training_flags()` for the rest,
so `--n_gpus`, the optimizer and the checkpoint flags mean the same
everywhere. The cluster flags (`--worker_hosts`, `--task_index` or TF_CONFIG,
see bert_ad/distributed/cluster.py and docs/multi_worker.md) turn any of them into one
worker of a multi-machine run.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Callable

from absl import flags

from bert_ad.cli.help import flag_error_message, print_help, wants_help
from bert_ad.distributed.cluster import IMPLEMENTATIONS, ClusterRuntime, resolve_cluster
from bert_ad.compat import session_config
from bert_ad.errors import fail, run_cli
from bert_ad.parallel.optimization import OPTIMIZERS
from bert_ad.model.precision import PRECISIONS, compute_dtype
from bert_ad.parallel.towers import DevicePlan, plan_from_environment
from bert_ad.parallel.train_graph import TrainGraph, TrainSettings, build_train_graph
from bert_ad.files import write_key_values
from bert_ad.parallel.loop import LoopSettings, TrainResult

log = logging.getLogger("bert_ad")
FLAGS = flags.FLAGS

# This process's part in a multi-worker run (check_training_flags sets it).
_cluster: ClusterRuntime | None = None
# Flags that must be equal on every worker (compared at start, by hash).
_CLUSTER_AGREED_FLAGS = (
    "train_batch_size", "n_gpus", "gradient_accumulation_steps", "learning_rate",
    "lr_scaling", "lr_reference_batch", "optimizer", "weight_decay_rate", "clip_norm",
    "seed", "precision", "collective_implementation", "collective_pack_mb",
    "collective_fp16", "max_seq_length", "num_train_epochs", "warmup_proportion",
    "num_train_steps", "num_warmup_steps", "max_train_examples", "bucket_by_length",
    "padding", "do_lower_case", "task_name", "max_predictions_per_seq", "nsp")


def define_training_flags(default_learning_rate: float = 5e-5) -> None:
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.")
    flags.DEFINE_string("output_dir", None, "Where checkpoints and results go.")
    flags.DEFINE_string("init_checkpoint", None, "Checkpoint prefix (or folder) to start from.")
    flags.DEFINE_bool("do_train", False, "Train.")
    flags.DEFINE_bool("do_eval", False, "Evaluate.")
    flags.DEFINE_integer("train_batch_size", 32, "Batch size PER TOWER.")
    flags.DEFINE_integer("eval_batch_size", 8, "Eval batch size per tower.")
    flags.DEFINE_float("learning_rate", default_learning_rate,
                       "Peak learning rate (before --lr_scaling).")
    flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every N steps.")
    flags.DEFINE_integer("n_gpus", 1, "Towers: one per visible GPU (round-robin if more "
                         "towers than cards), or logical CPU devices without GPUs.")
    flags.DEFINE_integer("gradient_accumulation_steps", 1,
                         "Micro-batches per applied step.")
    flags.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS),
                      "adamw = Google's AdamWeightDecay; lamb for large batches.")
    flags.DEFINE_float("weight_decay_rate", 0.01, "Decoupled weight decay.")
    flags.DEFINE_float("clip_norm", 1.0, "Clip gradients to this global norm (0: off).")
    # docs/accuracy.md: none and sqrt keep the same accuracy at 4-16x the
    # batch, linear made AdamW diverge; none stays the default (Google's and
    # the predecessor's behaviour).
    flags.DEFINE_enum("lr_scaling", "none", ["none", "linear", "sqrt"],
                      "Scale --learning_rate by (global batch / --lr_reference_batch): "
                      "none (default), sqrt, or linear (see docs/accuracy.md).")
    flags.DEFINE_integer("lr_reference_batch", 0,
                         "Batch --learning_rate was tuned for (0: --train_batch_size, "
                         "i.e. one tower without accumulation).")
    flags.DEFINE_integer("seed", 12345, "Seed for data order, init and dropout.")
    flags.DEFINE_integer("keep_checkpoint_max", 5, "Checkpoints kept in output_dir.")
    flags.DEFINE_integer("log_every_n_steps", 10, "Log and summarise every N steps.")
    flags.DEFINE_bool("use_xla", False, "Session-level XLA JIT (off by default on CPU).")
    flags.DEFINE_enum("precision", "fp32", list(PRECISIONS),
                      "Activation precision; weights, slots and checkpoints stay fp32. "
                      "fp16 uses dynamic loss scaling.")
    # Several machines (docs/multi_worker.md); TF_CONFIG works as well.
    flags.DEFINE_string("worker_hosts", None,
                        "Multi-worker: every worker's host:port, comma-separated, the "
                        "chief (worker 0) first; the same list on every worker.")
    flags.DEFINE_integer("task_index", None,
                         "Multi-worker: this worker's position in --worker_hosts.")
    flags.DEFINE_enum("collective_implementation", "auto", list(IMPLEMENTATIONS),
                      "Cross-worker all-reduce: ring (gRPC), nccl (GPUs), auto = nccl "
                      "with GPU towers, else ring.")
    flags.DEFINE_float("collective_pack_mb", 32.0,
                       "Gradients cross the network in buffers of about this many MiB.")
    flags.DEFINE_bool("collective_fp16", False,
                      "Exchange gradients between workers as float16 (half the bytes).")
    flags.DEFINE_float("collective_timeout_s", 300.0,
                       "A step waiting this long for another worker stops the run.")
    flags.DEFINE_float("cluster_start_timeout_s", 600.0,
                       "Every worker must be up and in step within this many seconds.")


def check_training_flags(*positive: str) -> DevicePlan:
    """Validate the shared flags; return this process's device plan."""
    for name in ("output_dir", "bert_config_file"):
        if not getattr(FLAGS, name):
            fail(f"--{name} is required")
    if FLAGS.n_gpus < 1:
        fail(f"--n_gpus={FLAGS.n_gpus}: need at least 1 tower")
    for name in ("train_batch_size", "eval_batch_size", "gradient_accumulation_steps",
                 "save_checkpoints_steps", "keep_checkpoint_max",
                 "log_every_n_steps") + positive:
        if getattr(FLAGS, name) < 1:
            fail(f"--{name}={getattr(FLAGS, name)} must be at least 1")
    compute_dtype(FLAGS.precision)  # refuses what this lane cannot run
    if FLAGS.learning_rate <= 0:
        fail(f"--learning_rate={FLAGS.learning_rate} must be positive")
    if FLAGS.lr_reference_batch < 0:
        fail(f"--lr_reference_batch={FLAGS.lr_reference_batch} must be positive, or 0 for "
             "--train_batch_size")
    if os.path.exists(FLAGS.output_dir) and not os.path.isdir(FLAGS.output_dir):
        fail(f"--output_dir={FLAGS.output_dir} exists and is not a directory")
    plan = plan_from_environment(FLAGS.n_gpus)
    setup_cluster(plan)
    return plan


def setup_cluster(plan: DevicePlan) -> None:
    """Read the cluster (flags or TF_CONFIG); start this worker's server if training.

    Nothing happens without a cluster. The server starts here, before any
    data is read, so a port in use is reported at once.
    """
    global _cluster
    _cluster = None
    spec = resolve_cluster(FLAGS.worker_hosts, FLAGS.task_index)
    if spec is None:
        return
    agreed = " ".join(f"{name}={getattr(FLAGS, name)!r}" for name in _CLUSTER_AGREED_FLAGS
                      if name in FLAGS)
    runtime = ClusterRuntime(spec, make_session_config(plan), plan.uses_gpu,
                             FLAGS.collective_implementation, FLAGS.collective_pack_mb,
                             FLAGS.collective_fp16, FLAGS.collective_timeout_s,
                             FLAGS.cluster_start_timeout_s, agreed)
    for handler in log.handlers:
        handler.setFormatter(logging.Formatter(
            f"%(asctime)s [worker {spec.task_index}] %(message)s", "%H:%M:%S"))
    log.info("%s", runtime.describe())
    if FLAGS.do_train:
        runtime.start()
    _cluster = runtime


def current_cluster() -> ClusterRuntime | None:
    """This worker's ClusterRuntime, or None on a single machine."""
    return _cluster


def num_workers() -> int:
    return 1 if _cluster is None else _cluster.num_workers


def worker_index() -> int:
    return 0 if _cluster is None else _cluster.task_index


def is_chief() -> bool:
    """True on a single machine and on worker 0: who reads checkpoints and writes outputs."""
    return _cluster is None or _cluster.is_chief


def build_training_graph(plan: DevicePlan, feature_spec: dict,
                         tower_loss_fn: Callable[[dict, int], object],
                         settings: TrainSettings) -> TrainGraph:
    """build_train_graph, on this worker's task with the cross-worker all-reduce
    when a cluster is configured."""
    if _cluster is None:
        return build_train_graph(plan, feature_spec, tower_loss_fn, settings)
    return build_train_graph(_cluster.plan(plan), feature_spec, tower_loss_fn, settings,
                             cross_worker_reduce=_cluster.gradient_reducer())


def train_settings(learning_rate: float, num_train_steps: int,
                   num_warmup_steps: int) -> TrainSettings:
    # Each worker draws its own dropout masks (its graph seed differs); the
    # initial weights still agree: every worker gets the chief's at start.
    return TrainSettings(learning_rate, num_train_steps, num_warmup_steps, FLAGS.optimizer,
                         FLAGS.weight_decay_rate, FLAGS.clip_norm,
                         FLAGS.gradient_accumulation_steps, FLAGS.seed + worker_index(),
                         FLAGS.precision)


def loop_settings(plan: DevicePlan, num_train_steps: int, global_batch: int,
                  init_checkpoint: str) -> LoopSettings:
    """`global_batch`: examples per applied step over the whole cluster."""
    config = make_session_config(plan) if _cluster is None else _cluster.session_config
    return LoopSettings(FLAGS.output_dir, num_train_steps, global_batch,
                        FLAGS.gradient_accumulation_steps, FLAGS.save_checkpoints_steps,
                        FLAGS.keep_checkpoint_max, FLAGS.log_every_n_steps, init_checkpoint,
                        config, _cluster)


def write_train_results(output_dir: str, result: TrainResult, global_batch: int,
                        learning_rate: float) -> None:
    """train_results.txt: steps, examples, wall time and rate of this run's loop."""
    values = result.summary(global_batch)
    # %.6f would round a learning rate such as 7.07e-05 to 0.000071.
    values.update(global_batch=global_batch, learning_rate=f"{float(learning_rate):.8g}")
    write_key_values(os.path.join(output_dir, "train_results.txt"), values)
    log.info("train: %d steps in %.1f s, %.1f examples/sec", result.steps_run,
             result.train_seconds, values["train_examples_per_sec"])


def make_session_config(plan: DevicePlan):
    return session_config(plan.num_cpu_devices, use_xla=FLAGS.use_xla)


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def run_entry_point(define_flags: Callable[[], None], main: Callable[[], int],
                    argv=None) -> None:
    """Define flags, parse argv (absl, --flagfile included), run main as a CLI."""
    define_flags()
    argv = sys.argv if argv is None else argv
    if wants_help(argv):
        print_help(f"{os.path.basename(argv[0])} --flag=value ... [--flagfile=FILE]",
                   sys.modules[main.__module__].__doc__ or "", FLAGS)
    try:
        FLAGS(argv)
    except flags.Error as e:
        print(f"error: {flag_error_message(e)}", file=sys.stderr)
        sys.exit(2)

    def logged_main() -> int:
        configure_logging()
        return main()

    run_cli(logged_main)
