"""Running any registered task from its flags: the one orchestration every task shares.

A task's module says only what is its own (bert_ad/cli/registry.py,
TaskCommand): its flags, an early check of them, and how to build its Task.
Everything else happens here, once, in this order, so every task checks its
inputs the same way before anything is written:

  1. nothing to do?  (none of the task's --do_* flags set)
  2. --predict_from_export fills the model flags; --do_export's settings
  3. the task's own early check, then the shared flags (bert_ad/cli/flags.py)
  4. placement: towers, and a cluster's server (its agreed flags)
  5. the TextEncoder (model config + tokenizer) and the task
  6. RunSettings, then bert_ad/driver.py runs it

An inference-only command (TaskCommand.run, e.g. extract_features.py) has
the inference flags (bert_ad/cli/inference_flags.py) and takes steps 3-5
the same way, then runs itself instead of step 6 (`run_inference`).
"""

from __future__ import annotations

import logging
from typing import Optional, Sequence

from absl import flags

from bert_ad import driver
from bert_ad.cli.flags import (SHARED_AGREED_FLAGS, check_training_flags,
                               define_finetuning_flags, define_training_flags,
                               export_settings_from_flags, placement_from_flags,
                               run_settings_from_flags, text_encoder_from_flags,
                               use_export_model_files)
from bert_ad.cli.inference_flags import (check_inference_flags, define_inference_flags,
                                         inference_placement_from_flags)
from bert_ad.cli.registry import TaskCommand
from bert_ad.cli.runner import run_launcher
from bert_ad.compat import quiet_onednn_notices
from bert_ad.errors import fail
from bert_ad.model.precision import bf16_path

log = logging.getLogger("bert_ad")

USAGE = "--flag=value ... [--flagfile=FILE]"


def define_flags(command: TaskCommand, fv: flags.FlagValues) -> None:
    """The shared flags (with the task's defaults) and the task's own."""
    defaults = dict(command.flag_defaults)
    if command.run is not None:
        define_inference_flags(fv, defaults)
    elif command.text:
        define_finetuning_flags(fv, defaults)
    else:
        define_training_flags(fv, defaults)
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
    export_settings = None
    if "do_export" in command.actions:
        use_export_model_files(f)
        export_settings = export_settings_from_flags(f)
    if command.check_flags is not None:
        command.check_flags(f)
    check_training_flags(f, *command.positive_flags)
    placement = placement_from_flags(f, SHARED_AGREED_FLAGS + command.agreed_flags)
    encoder = text_encoder_from_flags(f) if command.text else None
    task = command.build(f, encoder)
    settings = run_settings_from_flags(f, placement)
    log.info("%s", placement.plan.describe())
    log_precision_path(f, placement.plan.uses_gpu)
    quiet_onednn_notices()
    do_predict = "do_predict" in command.actions and f.do_predict
    return driver.run(task, settings, placement, f.do_train, f.do_eval, do_predict,
                      export_settings)


def run_inference(command: TaskCommand, f: flags.FlagValues) -> int:
    """An inference-only command: its check, the shared ones, the towers, the
    encoder and the task, then the command's own run (exit code)."""
    use_export_model_files(f)  # --predict_from_export: the model flags from the export
    if command.check_flags is not None:
        command.check_flags(f)
    check_inference_flags(f)
    placement = inference_placement_from_flags(f)
    task = command.build(f, text_encoder_from_flags(f))
    log.info("%s", placement.plan.describe())
    log_precision_path(f, placement.plan.uses_gpu)
    return command.run(task, f, placement)


def log_precision_path(f: flags.FlagValues, uses_gpu: bool) -> None:
    """Say how bf16 runs here: a warning where it cannot pay (docs/benchmarks.md)."""
    if "precision" not in f or f.precision != "bf16":
        return
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
