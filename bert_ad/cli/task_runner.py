"""Running any registered task from its flags: the one orchestration every task shares.

A task's module says only what is its own (bert_ad/cli/registry.py,
TaskCommand): its flags, an early check of them, and how to build its Task.
Everything else happens here, once, in this order, so every task checks its
inputs the same way before anything is written:

  1. nothing to do?  (none of the task's --do_* flags set)
  2. --predict_from_export, or a model folder (bert_ad/cli/model_folder_flags.py),
     fills the model flags; the export flags' check
  3. the task's own early check, then the shared flags (bert_ad/cli/flag_checks.py)
     and the model's config and vocabulary
  -- everything above runs without TensorFlow (this module imports none); --
     (--predict_from_export goes its own way here: bert_ad/export_predict.py,
     TensorFlow imported only for a SavedModel or frozen graph)
  4. placement: towers, and a cluster's server (its agreed flags)
  5. the encoder (bert_ad/cli/builders.py) and the task
  6. RunSettings, then bert_ad/driver.py runs it

An inference-only command (TaskCommand.run, e.g. extract_features.py) has
the inference flags (bert_ad/cli/flag_groups.py: INFERENCE_GROUPS) and takes
steps 3-5 the same way, then runs itself instead of step 6 (`run_inference`).
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

from absl import flags

from bert_ad import export_predict
from bert_ad.cli import flag_checks, flag_groups
from bert_ad.cli.model_folder_flags import use_model_folder
from bert_ad.cli.registry import TaskCommand
from bert_ad.cli.run_inputs import check_input_models, flag_inputs
from bert_ad.cli.runner import run_launcher
from bert_ad.distributed.cluster_config import resolve_cluster
from bert_ad.errors import fail
from bert_ad.path_overlaps import refuse_outputs_over_inputs
from bert_ad.inference.exported_model import needs_tensorflow
from bert_ad.run_outputs import output_files
from bert_ad.run_settings import RunSettings

log = logging.getLogger("bert_ad")

USAGE = "--flag=value ... [--flagfile=FILE]"


def define_flags(command: TaskCommand, fv: flags.FlagValues) -> None:
    """The shared flags (with the task's defaults) and the task's own."""
    defaults = dict(command.flag_defaults)
    if command.run is not None:
        flag_groups.define_groups(fv, flag_groups.INFERENCE_GROUPS, defaults,
                                  flag_groups.INFERENCE_LEAVES_OUT,
                                  notes={"export_dir": "required with --do_export"})
    elif command.text:
        flag_groups.define_groups(fv, flag_groups.TEXT_TASK_GROUPS, defaults)
    else:
        flag_groups.define_groups(fv, flag_groups.TOKEN_ID_TASK_GROUPS, defaults,
                                  flag_groups.TOKEN_ID_TASK_LEAVES_OUT)
    command.define_flags(fv)


def nothing_to_do_message(actions: Sequence[str]) -> str:
    names = [f"--{action}" for action in actions]
    if len(names) == 2:
        return f"nothing to do: set {names[0]} and/or {names[1]}"
    return "nothing to do: set at least one of " + ", ".join(names)


def main(command: TaskCommand, f: flags.FlagValues) -> int:
    """Check every flag, build the task and run it (exit code)."""
    if command.run is not None:
        return run_inference(command, f)
    if not any(f[action].value for action in command.actions):
        fail(nothing_to_do_message(command.actions))
    if "do_export" in command.actions:
        flag_checks.use_export_model_files(f)
        flag_checks.check_export_flags(f)
    use_model_folder(f)  # the model flags from a model folder (model_folder_flags.py)
    if command.check_flags is not None:
        command.check_flags(f)
    flag_checks.check_training_flags(f, *command.positive_flags)
    check_input_models(f)  # before a teacher's or a starting model's folder is read
    text = flag_checks.model_text_from_flags(f) if command.text else None
    if text is not None and f.predict_from_export:
        return predict_from_export(command, f, text)
    # The flags are sound: from here on TensorFlow is imported.
    from bert_ad import driver
    from bert_ad.cli import builders
    from bert_ad.compat.onednn import quiet_onednn_notices
    from bert_ad.model.precision import compute_dtype
    compute_dtype(f.precision)  # refuses what this lane cannot run, before a server starts
    placement = builders.placement_from_flags(
        f, builders.SHARED_AGREED_FLAGS + command.agreed_flags)
    encoder = (builders.text_encoder_from_flags(f, text) if text is not None
               else builders.encoder_from_flags(f))
    task = command.build(f, encoder)
    refuse_outputs_over_flag_inputs(task, f)
    settings = builders.run_settings_from_flags(f, placement, getattr(task.encoder, "config",
                                                                      None))
    log.info("%s", placement.plan.describe())
    log_precision_path(f, placement.plan.uses_gpu)
    quiet_onednn_notices()
    do_predict = "do_predict" in command.actions and f.do_predict
    export_settings = (builders.export_settings_from_flags(f)
                       if "do_export" in command.actions else None)
    return driver.run(task, settings, placement, f.do_train, f.do_eval, do_predict,
                      export_settings)


def refuse_outputs_over_flag_inputs(task, f: flags.FlagValues) -> None:
    """No result file of the task may be a file the flags name (one error line)."""
    refuse_outputs_over_inputs(output_files(task, f.output_dir), flag_inputs(f),
                               advice="give another --output_dir or move the input")


def predict_from_export(command: TaskCommand, f: flags.FlagValues,
                        text: flag_checks.ModelText) -> int:
    """--do_predict --predict_from_export (nothing else: flag_checks): the task built
    from checked flags, its predict rows scored by the export. TensorFlow is
    imported for a SavedModel or frozen graph only (its session's threads)."""
    if resolve_cluster(f.worker_hosts, f.task_index) is not None:
        fail("--predict_from_export scores on one machine: leave --worker_hosts/--task_index "
             "(and TF_CONFIG) out")
    session_config = None
    encoder = flag_checks.text_encoder(f, text)
    if needs_tensorflow(f.predict_from_export):
        from bert_ad.cli import builders  # TensorFlow from here on
        session_config = builders.placement_from_flags(
            f, builders.SHARED_AGREED_FLAGS + command.agreed_flags).local_session_config()
    task = command.build(f, encoder)
    refuse_outputs_over_flag_inputs(task, f)
    return export_predict.run(task, RunSettings(output_dir=f.output_dir,
                                                predict_from_export=f.predict_from_export,
                                                predict_batch_size=f.predict_batch_size),
                              session_config)


def run_inference(command: TaskCommand, f: flags.FlagValues) -> int:
    """An inference-only command: its check, the shared ones, the towers, the
    encoder and the task, then the command's own run (exit code)."""
    flag_checks.use_export_model_files(f)  # the model flags from --predict_from_export
    use_model_folder(f, task_settings=False)  # its encoder: a head's settings are not ours
    if command.check_flags is not None:
        command.check_flags(f)
    flag_checks.check_inference_flags(f)
    flag_checks.check_export_flags(f)
    check_input_models(f)
    text = flag_checks.model_text_from_flags(f)
    if (f.predict_from_export and not ("do_export" in f and f.do_export)
            and not needs_tensorflow(f.predict_from_export)):
        # ONNX Runtime scores on its own threads: no towers, no TensorFlow.
        return command.run(command.build(f, flag_checks.text_encoder(f, text)), f, None)
    from bert_ad.cli import builders  # TensorFlow from here on
    placement = builders.inference_placement_from_flags(f)
    task = command.build(f, builders.text_encoder_from_flags(f, text))
    log.info("%s", placement.plan.describe())
    log_precision_path(f, placement.plan.uses_gpu)
    return command.run(task, f, placement)


def log_precision_path(f: flags.FlagValues, uses_gpu: bool) -> None:
    """Say how bf16 runs here: a warning where it cannot pay (docs/benchmarks.md)."""
    if "precision" not in f or f.precision != "bf16":
        return
    from bert_ad.model.precision import bf16_path
    fast, line = bf16_path(uses_gpu)
    (log.info if fast else log.warning)("%s", line)


def run_task(command: TaskCommand, argv: Optional[Sequence[str]] = None,
             description: str = "") -> None:
    """Parse argv (argv[0]: the program as typed) and run `command` (exits)."""
    run_launcher(lambda fv: define_flags(command, fv), lambda f: main(command, f),
                 description or command.description or command.summary, USAGE, argv=argv)


def launcher_functions(command: TaskCommand):
    """(define_flags, main, cli) of a task's command module: every flag of the
    command, the run on parsed flags, and the command line. The launcher
    contract tests and callers use in-process (`main(parse_flags(define_flags,
    argv, ...))`)."""
    return (lambda fv: define_flags(command, fv), lambda f: main(command, f),
            lambda argv=None: run_task(command, argv))
