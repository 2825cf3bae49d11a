"""The flags every launcher shares, and what they become: RunSettings, Placement, TextEncoder.

Each launcher defines its own data flags and calls `define_training_flags`
(and, for fine-tuning, `define_finetuning_flags`), so `--n_gpus`, the
optimizer and the checkpoint flags mean the same everywhere. The cluster
flags (`--worker_hosts`, `--task_index` or TF_CONFIG, see
bert_ad/distributed/cluster.py and docs/multi_worker.md) turn any of them
into one worker of a multi-machine run.

Flags are parsed into a fresh absl FlagValues per run (bert_ad/cli/runner.py),
passed around as `f`; nothing reads a global.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from typing import Mapping, Optional, Sequence

from absl import flags

from bert_ad.data.tokenization import PieceListTokenizer, decide_do_lower_case, make_tokenizer
from bert_ad.data.truncation import TRUNCATION_STRATEGIES, check_max_seq_length
from bert_ad.distributed.cluster import IMPLEMENTATIONS, ClusterRuntime
from bert_ad.distributed.cluster_config import resolve_cluster
from bert_ad.compat import session_config
from bert_ad.errors import fail
from bert_ad.model.modeling import BertConfig
from bert_ad.model.precision import PRECISIONS, compute_dtype
from bert_ad.parallel.checkpoints import (check_fits_config, checkpoint_problem,
                                          resolve_checkpoint, step_checkpoints)
from bert_ad.parallel.learning_rate import LR_SCALING_MODES
from bert_ad.parallel.optimization import OPTIMIZERS
from bert_ad.parallel.towers import (PARAMETER_SERVER, REPLICATED, VARIABLE_UPDATES,
                                     plan_from_environment)
from bert_ad.parallel.train_graph import check_sparse_embedding_updates
from bert_ad.run_settings import Placement, RunSettings
from bert_ad.serving import layout
from bert_ad.serving.export import ExportSettings
from bert_ad.serving.layout import FORMATS
from bert_ad.serving.layout import PRECISIONS as EXPORT_PRECISIONS
from bert_ad.tasks.base import TextEncoder

log = logging.getLogger("bert_ad")

# The shared flags every worker of a cluster must agree on (compared at start,
# by hash); each task adds its own (TaskCommand.agreed_flags).
SHARED_AGREED_FLAGS = (
    "train_batch_size", "n_gpus", "gradient_accumulation_steps", "learning_rate",
    "lr_scaling", "lr_reference_batch", "optimizer", "sparse_embedding_updates",
    "weight_decay_rate", "clip_norm",
    "seed", "precision", "collective_implementation", "collective_pack_mb",
    "collective_fp16", "max_seq_length", "num_train_epochs", "warmup_proportion",
    "num_train_steps", "num_warmup_steps", "max_train_examples", "bucket_by_length",
    "padding", "do_lower_case")

# Each shared flag's default is RunSettings' (bert_ad/run_settings.py): one
# place, whichever way a run is started.
RUN_DEFAULTS = RunSettings(output_dir="")


class _Defaults:
    """A shared flag's default: the task's own (TaskCommand.flag_defaults), else
    RunSettings'."""

    def __init__(self, overrides: Optional[Mapping[str, object]]):
        self.overrides = dict(overrides or {})

    def __call__(self, name: str, fallback=None):
        """`fallback`: the default of a flag RunSettings does not hold."""
        return self.overrides.get(name, getattr(RUN_DEFAULTS, name, fallback))


def define_training_flags(fv: flags.FlagValues,
                          defaults: Optional[Mapping[str, object]] = None) -> None:
    """The model, optimizer, checkpoint, tower and cluster flags of every task.

    `defaults`: {flag: default} where a task's differ from RunSettings'.
    """
    d = dict(flag_values=fv)
    default = _Defaults(defaults)
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.", **d)
    flags.DEFINE_string("output_dir", None, "Where checkpoints and results go.", **d)
    flags.DEFINE_string("init_checkpoint", None,
                        "Checkpoint prefix (or folder) to start from.", **d)
    flags.DEFINE_bool("do_train", False, "Train.", **d)
    flags.DEFINE_bool("do_eval", False, "Evaluate.", **d)
    flags.DEFINE_integer("train_batch_size", default("train_batch_size"),
                         "Batch size PER TOWER.", **d)
    flags.DEFINE_integer("eval_batch_size", default("eval_batch_size"),
                         "Eval batch size per tower.", **d)
    flags.DEFINE_float("learning_rate", default("learning_rate"),
                       "Peak learning rate (before --lr_scaling).", **d)
    flags.DEFINE_integer("save_checkpoints_steps", default("save_checkpoints_steps"),
                         "Checkpoint every N steps.", **d)
    flags.DEFINE_integer("n_gpus", 1, "Towers: one per visible GPU (round-robin if more "
                         "towers than cards), or logical CPU devices without GPUs.", **d)
    flags.DEFINE_enum("variable_update", PARAMETER_SERVER, list(VARIABLE_UPDATES),
                      "parameter_server (default): variables on the CPU, tower gradients "
                      "averaged and applied there once. replicated: a copy of the "
                      "variables on every tower, gradients all-reduced between the towers "
                      "(NCCL on GPUs), one apply per tower; one tower per card, one "
                      "machine (docs/gpu_scaling.md).", **d)
    flags.DEFINE_integer("gradient_accumulation_steps", default("gradient_accumulation_steps"),
                         "Micro-batches per applied step.", **d)
    flags.DEFINE_enum("optimizer", default("optimizer"), list(OPTIMIZERS),
                      "adamw = Google's AdamWeightDecay; lamb for large batches.", **d)
    flags.DEFINE_float("weight_decay_rate", default("weight_decay_rate"),
                       "Decoupled weight decay.", **d)
    flags.DEFINE_bool("sparse_embedding_updates", default("sparse_embedding_updates"),
                      "Update only the word-embedding rows the batch uses (lazy Adam): "
                      "rows not in the batch keep their weights and Adam moments (no "
                      "momentum step, no weight decay), unlike Google's dense AdamW, "
                      "which moves every row every step. Faster with large vocabularies; "
                      "not with lamb, gradient accumulation or several workers.", **d)
    flags.DEFINE_float("clip_norm", default("clip_norm"),
                       "Clip gradients to this global norm (0: off).", **d)
    # docs/accuracy.md: none and sqrt keep the same accuracy at 4-16x the
    # batch, linear made AdamW diverge; none stays the default (Google's and
    # the predecessor's behaviour).
    flags.DEFINE_enum("lr_scaling", default("lr_scaling"), list(LR_SCALING_MODES),
                      "Scale --learning_rate by (global batch / --lr_reference_batch): "
                      "none (default), sqrt, or linear (see docs/accuracy.md).", **d)
    flags.DEFINE_integer("lr_reference_batch", default("lr_reference_batch"),
                         "Batch --learning_rate was tuned for (0: --train_batch_size, "
                         "i.e. one tower without accumulation).", **d)
    flags.DEFINE_integer("seed", default("seed"), "Seed for data order, init and dropout.", **d)
    flags.DEFINE_integer("keep_checkpoint_max", default("keep_checkpoint_max"),
                         "Checkpoints kept in output_dir.", **d)
    flags.DEFINE_integer("log_every_n_steps", default("log_every_n_steps"),
                         "Log and summarise every N steps.", **d)
    # Evaluation during training (bert_ad/parallel/best_checkpoint.py).
    flags.DEFINE_integer("eval_every_steps", default("eval_every_steps"),
                         "Score the dev set on all towers every N steps and at the last "
                         "one, with --do_train (0: never).", **d)
    flags.DEFINE_bool("keep_best_checkpoint", default("keep_best_checkpoint"),
                      "With --eval_every_steps: keep the weights of the best evaluation "
                      "in output_dir/best/ (and the record in best/best.json).", **d)
    flags.DEFINE_string("best_metric", None,
                        "The dev figure that decides the best checkpoint (default: the "
                        "task's main one, e.g. eval_accuracy). Lower is better for names "
                        "with loss, mse, error or perplexity; higher otherwise.", **d)
    flags.DEFINE_integer("early_stopping_patience", default("early_stopping_patience"),
                         "With --eval_every_steps: stop after K evaluations in a row "
                         "without improvement (0: never).", **d)
    flags.DEFINE_bool("use_best_checkpoint", default("use_best_checkpoint"),
                      "Eval, predict and export with output_dir/best/ instead of the "
                      "newest checkpoint.", **d)
    flags.DEFINE_bool("use_xla", False, "Session-level XLA JIT (off by default on CPU).", **d)
    flags.DEFINE_bool("remove_padding", True,
                      "Run the encoder's dense layers, GELU, layer norm and dropout on "
                      "the real tokens only (attention still sees the padded batch): the "
                      "same outputs, less work with padded batches. Off under --use_xla.",
                      **d)
    flags.DEFINE_bool("recompute_activations", default("recompute_activations"),
                      "Keep only each encoder layer's input for the backward pass and "
                      "recompute the layer there (gradient checkpointing): a second "
                      "forward pass of every layer for a much smaller activation memory, "
                      "e.g. to fit max_seq_length 512 on a smaller card "
                      "(docs/benchmarks.md, Memory).", **d)
    flags.DEFINE_enum("precision", default("precision"), list(PRECISIONS),
                      "Activation precision; weights, slots and checkpoints stay fp32. "
                      "fp16 uses dynamic loss scaling.", **d)
    # Several machines (docs/multi_worker.md); TF_CONFIG works as well.
    flags.DEFINE_string("worker_hosts", None,
                        "Multi-worker: every worker's host:port, comma-separated, the "
                        "chief (worker 0) first; the same list on every worker.", **d)
    flags.DEFINE_integer("task_index", None,
                         "Multi-worker: this worker's position in --worker_hosts.", **d)
    flags.DEFINE_enum("collective_implementation", "auto", list(IMPLEMENTATIONS),
                      "Cross-worker all-reduce: ring (gRPC), nccl (GPUs), auto = nccl "
                      "with GPU towers, else ring.", **d)
    flags.DEFINE_float("collective_pack_mb", 32.0,
                       "Gradients cross the network in buffers of about this many MiB.", **d)
    flags.DEFINE_bool("collective_fp16", False,
                      "Exchange gradients between workers as float16 (half the bytes).", **d)
    flags.DEFINE_float("collective_timeout_s", 300.0,
                       "A step waiting this long for another worker stops the run.", **d)
    flags.DEFINE_float("cluster_start_timeout_s", 600.0,
                       "Every worker must be up and in step within this many seconds.", **d)


def define_finetuning_flags(fv: flags.FlagValues,
                            defaults: Optional[Mapping[str, object]] = None) -> None:
    """The flags of a fine-tuning task on top of the training ones:
    tokenizer, lengths, epochs, prediction, padding and export."""
    d = dict(flag_values=fv)
    default = _Defaults(defaults)
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt of the model.", **d)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case (uncased models). With a piece "
                      "list, unset means: as the list is cased.", **d)
    flags.DEFINE_integer("max_seq_length", default("max_seq_length", 128),
                         "Longest sequence after WordPiece.", **d)
    flags.DEFINE_bool("do_predict", False, "Score --predict_file (default: the test file).",
                      **d)
    flags.DEFINE_integer("predict_batch_size", default("predict_batch_size"),
                         "Predict batch size per tower.", **d)
    flags.DEFINE_float("num_train_epochs", default("num_train_epochs"),
                       "Epochs over the training file.", **d)
    flags.DEFINE_float("warmup_proportion", default("warmup_proportion"),
                       "Share of steps with linear warmup.", **d)
    define_training_flags(fv, defaults)
    flags.DEFINE_string("predict_file", None, "File to score with --do_predict.", **d)
    flags.DEFINE_integer("max_train_examples", None, "Use only the first N training rows.",
                         **d)
    flags.DEFINE_integer("max_eval_examples", None, "Use only the first N dev rows.", **d)
    flags.DEFINE_enum("padding", "dynamic", ["dynamic", "max_length"],
                      "Pad each batch to its longest row (dynamic) or to max_seq_length.",
                      **d)
    flags.DEFINE_bool("bucket_by_length", False,
                      "Train on batches of similar lengths (less padding); eval and "
                      "predict always group by length and restore the input order.", **d)
    flags.DEFINE_string("spm_model_file", None,
                        "SentencePiece model instead of --vocab_file.", **d)
    flags.DEFINE_string("cache_dir", None, "Feature cache (default: output_dir/cache).", **d)
    define_export_flags(fv)


def define_export_flags(fv: flags.FlagValues) -> None:
    """--do_export and --predict_from_export (docs/serving.md)."""
    d = dict(flag_values=fv)
    flags.DEFINE_bool("do_export", False,
                      "Export the model for serving (after training, or alone: "
                      "output_dir's newest checkpoint, else --init_checkpoint).", **d)
    flags.DEFINE_string("export_dir", None, "Where the export goes (default: "
                        "output_dir/export/<global step>); never written over.", **d)
    flags.DEFINE_enum("export_format", "saved_model", list(FORMATS),
                      "saved_model (TensorFlow Serving), frozen_graph (one .pb, "
                      "weights as constants) or onnx (model.onnx for ONNX Runtime; "
                      "bert_ad[onnx]).", **d)
    flags.DEFINE_enum("export_precision", "fp32", list(EXPORT_PRECISIONS),
                      "fp16: float16 encoder weights and compute (saved_model, "
                      "frozen_graph); int8: int8 encoder matrices (onnx), measured "
                      "against fp32 on the dev split. Outputs stay float32.", **d)
    flags.DEFINE_string("predict_from_export", None,
                        "With --do_predict: score with this export (a folder written "
                        "by --do_export; ONNX ones in ONNX Runtime) instead of a "
                        "checkpoint; its vocab, config, casing and max_seq_length are "
                        "used unless given.", **d)


def define_truncation_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_enum("truncation", "head", list(TRUNCATION_STRATEGIES),
                      "Which tokens survive when a text is too long.", **d)
    flags.DEFINE_float("truncation_head_fraction", 0.25,
                       "head+tail: share of the budget kept from the start.", **d)


def check_training_flags(f: flags.FlagValues, *positive: str) -> None:
    """Refuse a bad shared flag (one line naming it) before any work."""
    for name in ("output_dir", "bert_config_file"):
        if not f[name].value:
            fail(f"--{name} is required")
    if f.n_gpus < 1:
        fail(f"--n_gpus={f.n_gpus}: need at least 1 tower")
    for name in ("train_batch_size", "eval_batch_size", "gradient_accumulation_steps",
                 "save_checkpoints_steps", "keep_checkpoint_max",
                 "log_every_n_steps") + positive:
        if f[name].value < 1:
            fail(f"--{name}={f[name].value} must be at least 1")
    _check_evaluation_flags(f)
    compute_dtype(f.precision)  # refuses what this lane cannot run
    _check_number(f, "learning_rate", low=0.0, low_open=True)
    _check_number(f, "weight_decay_rate", low=0.0)
    _check_number(f, "clip_norm", low=0.0, note="0 turns clipping off")
    if "num_train_epochs" in f:
        _check_number(f, "num_train_epochs", low=0.0, low_open=True, high=1e6)
    if "warmup_proportion" in f:
        _check_number(f, "warmup_proportion", low=0.0, high=1.0)
    for name in ("max_train_examples", "max_eval_examples"):
        if name in f and f[name].value is not None and f[name].value < 1:
            fail(f"--{name}={f[name].value} must be at least 1 (leave it out to use "
                 "every row)")
    if "predict_file" in f and f.predict_file and not f.do_predict:
        fail(f"--predict_file={f.predict_file} is only read with --do_predict; add "
             "--do_predict, or leave --predict_file out")
    if f.sparse_embedding_updates:
        check_sparse_embedding_updates(f.optimizer, f.gradient_accumulation_steps, 1)
        if f.variable_update == REPLICATED:
            fail("--sparse_embedding_updates does not work with --variable_update="
                 "replicated (the all-reduced gradient is dense); leave one of them out")
    if f.lr_reference_batch < 0:
        fail(f"--lr_reference_batch={f.lr_reference_batch} must be positive, or 0 for "
             "--train_batch_size")
    if os.path.exists(f.output_dir) and not os.path.isdir(f.output_dir):
        fail(f"--output_dir={f.output_dir} exists and is not a directory")


def _check_evaluation_flags(f: flags.FlagValues) -> None:
    """--eval_every_steps and the flags that need it."""
    for name in ("eval_every_steps", "early_stopping_patience"):
        if f[name].value < 0:
            fail(f"--{name}={f[name].value} must be at least 0 (0: off)")
    if f.eval_every_steps:
        if not f.do_train:
            fail(f"--eval_every_steps={f.eval_every_steps} evaluates while training: set "
                 "--do_train too")
        return
    for name in ("keep_best_checkpoint", "early_stopping_patience", "best_metric"):
        if f[name].value:
            fail(f"--{name} works on the evaluations during training: set "
                 "--eval_every_steps=N (and give a dev set)")


def _check_number(f: flags.FlagValues, name: str, low: float, high: float = math.inf,
                  low_open: bool = False, note: str = "") -> None:
    """Refuse nan, inf and values outside [low, high] (or (low, high])."""
    value = f[name].value
    too_low = value <= low if low_open else value < low
    if not math.isfinite(value) or too_low or value > high:
        bounds = (f"{'above' if low_open else 'at least'} {low:g}" if high == math.inf
                  else f"between {low:g} and {high:g}")
        fail(f"--{name}={value} must be a finite number {bounds}"
             + (f" ({note})" if note else ""))


def placement_from_flags(f: flags.FlagValues,
                         agreed_flags: Sequence[str] = SHARED_AGREED_FLAGS) -> Placement:
    """This process's towers and, with a cluster (flags or TF_CONFIG), its place.

    Nothing happens without a cluster. A training worker's server starts
    here, before any data is read, so a port in use is reported at once;
    `agreed_flags` are compared with every other worker's.
    """
    plan = plan_from_environment(f.n_gpus, f.variable_update)
    placement = Placement(plan, None, f.use_xla)
    spec = resolve_cluster(f.worker_hosts, f.task_index)
    if spec is None:
        return placement
    if plan.replicated:
        # Replicas on each worker plus a cross-worker exchange would need a
        # hierarchical all-reduce; out of scope (docs/gpu_scaling.md).
        fail("--variable_update=replicated works on one machine; a cluster (--worker_hosts "
             "or TF_CONFIG) averages on each worker's CPU: leave --variable_update out")
    if f.sparse_embedding_updates:
        check_sparse_embedding_updates(f.optimizer, f.gradient_accumulation_steps,
                                       spec.num_workers)
    agreed = " ".join(f"{name}={f[name].value!r}" for name in agreed_flags if name in f)
    runtime = ClusterRuntime(spec, session_config(plan.num_cpu_devices, use_xla=f.use_xla),
                             plan.uses_gpu, f.collective_implementation,
                             f.collective_pack_mb, f.collective_fp16,
                             f.collective_timeout_s, f.cluster_start_timeout_s, agreed)
    for handler in log.handlers:
        handler.setFormatter(logging.Formatter(
            f"%(asctime)s [worker {spec.task_index}] %(message)s", "%H:%M:%S"))
    log.info("%s", runtime.describe())
    if f.do_train:
        runtime.start()
    placement.cluster = runtime
    return placement


def run_settings_from_flags(f: flags.FlagValues, placement: Placement) -> RunSettings:
    """RunSettings from the flags of the same names (the task's where it has them)."""
    values = {field.name: f[field.name].value for field in dataclasses.fields(RunSettings)
              if field.name in f}
    # Only the chief reads it; the other workers receive its weights.
    values["init_checkpoint"] = (resolve_checkpoint(f.init_checkpoint)
                                 if f.init_checkpoint and placement.is_chief else "")
    for name in ("best_metric", "predict_from_export"):  # unset string flags are None
        if name in values:
            values[name] = values[name] or ""
    if placement.is_chief:
        check_checkpoints_fit_config(f, values["init_checkpoint"])
    return RunSettings(**values)


def check_checkpoints_fit_config(f: flags.FlagValues, init_checkpoint: str) -> None:
    """The checkpoint this run reads holds the encoder --bert_config_file describes.

    That is output_dir's newest readable checkpoint (a resume, eval, predict
    or export reads it), else --init_checkpoint. Checked with the other
    inputs, before anything is written: a mismatch found at the warm start
    came after cache/ and labels.txt were written, and a hidden_size mismatch
    read as a vocab_size one.
    """
    config = BertConfig.from_json_file(f.bert_config_file)
    config_flag = f"--bert_config_file={f.bert_config_file}"
    actions = [f[name].value for name in ("do_train", "do_eval", "do_export") if name in f]
    export_only = "predict_from_export" in f and f.predict_from_export and not any(actions)
    for prefix in [] if export_only else reversed(step_checkpoints(f.output_dir)):
        if checkpoint_problem(prefix) is None:
            check_fits_config(prefix, config, f"{prefix} (the newest checkpoint in "
                              "--output_dir)", config_flag, "give the --bert_config_file "
                              "it was trained with, or use a new --output_dir")
            return
    if init_checkpoint:
        check_fits_config(init_checkpoint, config, f"--init_checkpoint={f.init_checkpoint}",
                          config_flag, "give the bert_config.json the checkpoint was "
                          "trained with, or the checkpoint of this config")


def text_encoder_from_flags(f: flags.FlagValues) -> TextEncoder:
    """The model config and tokenizer of a fine-tuning run, checked against each other."""
    config = BertConfig.from_json_file(f.bert_config_file)
    check_max_seq_length(f.max_seq_length, config.max_position_embeddings)
    do_lower_case = decide_do_lower_case(f.vocab_file or "", f.spm_model_file or "",
                                         f.do_lower_case, f["do_lower_case"].present)
    tokenizer = make_tokenizer(f.vocab_file or "", do_lower_case, f.spm_model_file or "")
    # A vocab of another model maps tokens to the wrong rows silently, so
    # any difference is refused (released models have exactly vocab_size),
    # except unused rows past an XLM-R piece list (multilingual-e5 has 250,037
    # rows for 250,002 pieces).
    padded = (isinstance(tokenizer, PieceListTokenizer)
              and tokenizer.vocab_size < config.vocab_size)
    if tokenizer.vocab_size != config.vocab_size and not padded:
        vocab_flag = "--spm_model_file" if f.spm_model_file else "--vocab_file"
        fail(f"{vocab_flag} has {tokenizer.vocab_size} tokens but --bert_config_file "
             f"says vocab_size={config.vocab_size}; use the vocab the model was trained with")
    # An inference-only command (bert_ad/cli/inference_flags.py) has no
    # output_dir, feature cache, padding or bucketing flags: it streams its
    # rows with dynamic padding.
    cache_dir = ""
    if "output_dir" in f:
        cache_dir = f.cache_dir or os.path.join(f.output_dir, "cache")
        if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
            fail(f"--cache_dir={cache_dir} is not a directory (a file is in the way); "
                 "give a folder for the feature cache")
    fixed_padding = "padding" in f and f.padding != "dynamic"
    return TextEncoder(
        config=config, tokenizer=tokenizer, vocab_file=f.vocab_file or f.spm_model_file or "",
        do_lower_case=do_lower_case, max_seq_length=f.max_seq_length,
        padding=f.max_seq_length if fixed_padding else "dynamic",
        bucket_by_length="bucket_by_length" in f and f.bucket_by_length,
        cache_dir=cache_dir,
        compute_dtype=compute_dtype(f.precision),
        remove_padding=remove_padding_from_flags(f))


def remove_padding_from_flags(f: flags.FlagValues) -> bool:
    """--remove_padding, except under --use_xla (a compiled program per token count)."""
    if f.use_xla and f.remove_padding:
        log.info("--use_xla: the encoder keeps its padding (--remove_padding off), so "
                 "XLA compiles one program per sequence length, not per token count")
    return f.remove_padding and not f.use_xla


def export_settings_from_flags(f: flags.FlagValues):
    """ExportSettings of --do_export, or None without it."""
    if not f.do_export:
        for name in ("export_dir", "export_format", "export_precision"):
            if f[name].present:
                fail(f"--{name} is for --do_export: set --do_export too")
        return None
    return ExportSettings(export_dir=f.export_dir or "", format=f.export_format,
                          precision=f.export_precision)


def use_export_model_files(f: flags.FlagValues) -> None:
    """With --predict_from_export, the model flags not given come from the export.

    --bert_config_file, --vocab_file (or --spm_model_file), --do_lower_case
    and --max_seq_length default to what the export was made with, so
    scoring with an export needs no other model file. Flags given anyway are
    checked against the export when the run starts (bert_ad/serving/load.py).
    """
    if not f.predict_from_export:
        return
    export_dir = f.predict_from_export
    metadata = layout.read_metadata(export_dir)
    vocab_flag = "spm_model_file" if metadata.tokenizer == "sentencepiece" else "vocab_file"
    defaults = {"bert_config_file": layout.bert_config_path(export_dir),
                vocab_flag: layout.asset_path(export_dir, metadata.vocab_file),
                "do_lower_case": metadata.do_lower_case,
                "max_seq_length": metadata.max_seq_length}
    given = [name for name in ("vocab_file", "spm_model_file") if f[name].present]
    for name, value in defaults.items():
        if name in ("vocab_file", "spm_model_file") and given:
            continue
        if not f[name].present:
            f[name].value = value
