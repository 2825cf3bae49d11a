"""The records a run is made of, built from checked flags: Placement, RunSettings, encoders,
ExportSettings, and a cluster's server.

bert_ad/cli/task_runner.py calls these after bert_ad/cli/flag_checks.py has
refused what the flags alone can tell; this is where TensorFlow is imported
(devices, checkpoints, this lane's kernels), so nothing here runs for
`--helpfull` or a bad flag value.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional, Sequence

from absl import flags

from bert_ad.cli.flag_checks import ModelText, text_encoder
from bert_ad.compat import session_config
from bert_ad.distributed.cluster import ClusterRuntime
from bert_ad.distributed.cluster_config import resolve_cluster
from bert_ad.bert_config import BertConfig
from bert_ad.model.precision import compute_dtype
from bert_ad.parallel.checkpoints import (check_fits_config, checkpoint_problem,
                                          resolve_checkpoint, step_checkpoints)
from bert_ad.parallel.towers import plan_from_environment
from bert_ad.placement import Placement
from bert_ad.run_settings import RunSettings
from bert_ad.serving.export import ExportSettings
from bert_ad.tasks.base import Encoder, TextEncoder

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
    # (flag_checks refused a cluster these flags cannot run in.)
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


def inference_placement_from_flags(f: flags.FlagValues) -> Placement:
    """This process's towers (an inference run is one process: no cluster)."""
    if not f.predict_from_export:
        resolve_checkpoint(f.init_checkpoint)  # a missing or torn checkpoint, now
    # Too many towers is refused naming the batch flag of the inference command
    # (features: --batch_size; it has no accumulation).
    return Placement(plan_from_environment(f.n_gpus, batch_flags="--batch_size"), None,
                     f.use_xla)


def run_settings_from_flags(f: flags.FlagValues, placement: Placement,
                            model_config: Optional[BertConfig] = None) -> RunSettings:
    """RunSettings from the flags of the same names (the task's where it has them).

    `model_config`: the model the task's checkpoints hold, where it is not
    --bert_config_file's (a distilled student: the task's encoder's config)."""
    values = {field.name: f[field.name].value for field in dataclasses.fields(RunSettings)
              if field.name in f}
    # Only the chief reads it; the other workers receive its weights.
    values["init_checkpoint"] = (resolve_checkpoint(f.init_checkpoint)
                                 if f.init_checkpoint and placement.is_chief else "")
    for name in ("best_metric", "predict_from_export"):  # unset string flags are None
        if name in values:
            values[name] = values[name] or ""
    if placement.is_chief:
        check_checkpoints_fit_config(f, values["init_checkpoint"], model_config)
    return RunSettings(**values)


def check_checkpoints_fit_config(f: flags.FlagValues, init_checkpoint: str,
                                 model_config: Optional[BertConfig] = None) -> None:
    """The checkpoint this run reads holds the encoder --bert_config_file describes.

    That is output_dir's newest readable checkpoint (a resume, eval, predict
    or export reads it), else --init_checkpoint. Checked with the other
    inputs, before anything is written: a mismatch found at the warm start
    came after cache/ and labels.txt were written, and a hidden_size mismatch
    read as a vocab_size one.
    """
    config = BertConfig.from_json_file(f.bert_config_file)
    config_flag = f"--bert_config_file={f.bert_config_file}"
    if model_config is not None and model_config.to_dict() != config.to_dict():
        config, config_flag = model_config, "the task's model config (the student's)"
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


def encoder_from_flags(f: flags.FlagValues) -> Encoder:
    """The encoder of a task that reads token ids (no tokenizer): its config and how
    it runs (--precision, --remove_padding)."""
    return Encoder(BertConfig.from_json_file(f.bert_config_file),
                   compute_dtype(f.precision), remove_padding_from_flags(f))


def text_encoder_from_flags(f: flags.FlagValues, text: ModelText) -> TextEncoder:
    """The encoder of a text task (flag_checks.text_encoder) and how it runs
    (--precision, --remove_padding)."""
    return text_encoder(f, text, compute_dtype(f.precision), remove_padding_from_flags(f))


def remove_padding_from_flags(f: flags.FlagValues) -> bool:
    """--remove_padding, except under --use_xla (a compiled program per token count)."""
    if f.use_xla and f.remove_padding:
        log.info("--use_xla: the encoder keeps its padding (--remove_padding off), so "
                 "XLA compiles one program per sequence length, not per token count")
    return f.remove_padding and not f.use_xla


def export_settings_from_flags(f: flags.FlagValues):
    """ExportSettings of --do_export, or None without it (flags checked by
    flag_checks.check_export_flags)."""
    if not f.do_export:
        return None
    return ExportSettings(export_dir=f.export_dir or "", format=f.export_format,
                          precision=f.export_precision)
