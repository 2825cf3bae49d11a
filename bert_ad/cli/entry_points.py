"""Every way a user starts bert_ad: `bert-ad`, console scripts, root launchers, `python -m`.

All of them go through `run_command(name, argv)`: the command's declaration
is read from the registry (bert_ad/cli/registry.py) without importing
anything, and its module is imported inside `errors.run_cli`. A launcher
module imports TensorFlow (through bert_ad.compat) as it is imported, and
pip's console-script wrapper imports its target before any of our code runs;
so a missing, broken or too old TensorFlow is one `error:` line with the
install commands (exit 2), not a traceback, and `bert-ad --help` needs no
TensorFlow at all.

The console scripts of setup.py come from the registry too: `bert-ad-NAME`
calls this module's attribute NAME (`__getattr__` below makes one for every
declared command).

`--version` anywhere on the command line prints the package version and the
TensorFlow found (version, distribution, CUDA or CPU build), then exits 0.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, List, Optional, Sequence

from bert_ad.cli import registry
from bert_ad.cli.help import HELP_ARGS, print_text
from bert_ad.errors import fail, run_cli

VERSION_FLAG = "--version"
MAIN_PROGRAM = "bert-ad"


def version_text() -> str:
    """'bert_ad 0.1.0, TensorFlow 2.21.0 (tensorflow-cpu, CPU build)'.

    Without TensorFlow at all it says what the install can do (score and serve
    exports).

    Raises:
      TensorFlowUnavailable: a TensorFlow that cannot be used (run_cli shows it).
    """
    from bert_ad import __version__
    from bert_ad.inference.layout import importable
    if not importable("tensorflow"):
        # A scoring machine: bert_ad[serve] brings ONNX Runtime, not TensorFlow.
        return (f"bert_ad {__version__}, no TensorFlow: this install scores and serves "
                "exports only (bert-ad serve, bert-ad predict and --predict_from_export "
                "with ONNX exports); training and exporting need TensorFlow: "
                'pip install "bert_ad[tf]"')
    from bert_ad.compat.installed import tensorflow_description
    return f"bert_ad {__version__}, {tensorflow_description()}"


def _run(declaration: registry.Declaration, argv: Sequence[str]) -> int:
    """Import the command's module and run it on argv (argv[0]: the program)."""
    command = registry.command(declaration)
    if isinstance(command, registry.ToolCommand):
        command.cli(list(argv))
        return 0
    from bert_ad.cli.task_runner import run_task
    run_task(command, list(argv))
    return 0


def run_command(name: str, argv: Sequence[str]) -> None:
    """Run the registered command `name` (or an alias) on argv; exits.

    Args:
      name: a command's name or alias.
      argv: the command line, argv[0] the program as the user typed it
        (`bert-ad classifier`, `run_classifier_mgpu.py`, `bert-ad-convert`).
    """
    def main() -> int:
        if VERSION_FLAG in argv[1:]:
            print(version_text())
            return 0
        declaration = registry.find(name)
        if declaration is None:
            fail(f"no command {name!r} is registered")
        return _run(declaration, argv)

    run_cli(main)


def main(argv: Optional[Sequence[str]] = None) -> None:
    """`bert-ad COMMAND [flags]` (and `python -m bert_ad`)."""
    argv = list(sys.argv if argv is None else argv)

    def dispatch() -> int:
        if len(argv) < 2:
            fail(f"name a command: {MAIN_PROGRAM} COMMAND [flags]; `{MAIN_PROGRAM} "
                 "--help` lists them")
        first = argv[1]
        if first in HELP_ARGS or first == "help":
            print_text(main_help(registry.declarations()))
        if first == VERSION_FLAG:
            print(version_text())
            return 0
        known = registry.declarations()
        declaration = registry.find(first, known)
        if declaration is None:
            fail(f"unknown command {first!r}; the commands are "
                 f"{', '.join(d.name for d in known)} (`{MAIN_PROGRAM} --help`)")
        rest = argv[2:]
        if VERSION_FLAG in rest:
            print(version_text())
            return 0
        return _run(declaration, [f"{MAIN_PROGRAM} {declaration.name}"] + rest)

    run_cli(dispatch)


def main_help(declarations: Sequence[registry.Declaration]) -> str:
    """`bert-ad --help`: every registered task and tool with its one-line summary."""
    width = max(len(d.name) for d in declarations)
    lines = [f"usage: {MAIN_PROGRAM} COMMAND [--flag=value ...]", "",
             "Multi-GPU BERT fine-tuning, pretraining and tools (TensorFlow graph mode).", ""]
    for kind, title in (("task", "tasks"), ("tool", "tools")):
        lines.append(f"{title}:")
        for d in declarations:
            if d.kind == kind:
                also = [a for a in d.aliases] + ([d.launcher] if d.launcher else [])
                note = f"  (also: {', '.join(also)})" if also else ""
                lines.append(f"  {d.name.ljust(width)}  {d.summary}{note}")
        lines.append("")
    lines += [f"`{MAIN_PROGRAM} COMMAND --helpfull` lists a command's flags; "
              f"`{MAIN_PROGRAM} --version` the package and its TensorFlow."]
    return "\n".join(lines)


def console_script(name: str) -> Callable[[], None]:
    """The function a `bert-ad-NAME` console script (or root launcher) calls."""
    def start() -> None:
        run_command(name, [os.path.basename(sys.argv[0])] + sys.argv[1:])
    start.__name__ = name.replace("-", "_")
    return start


def __getattr__(attribute: str) -> Callable[[], None]:
    """`bert_ad.cli.entry_points:classifier` etc. for setup.py's console scripts."""
    for declaration in registry.declarations(plugins=False):
        if declaration.entry_point_function == attribute:
            return console_script(declaration.name)
    raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")


def launcher(launcher_file: str) -> None:
    """A root launcher (run_classifier_mgpu.py, ...): the command declared with
    launcher=its file name; exits."""
    name = os.path.basename(launcher_file)
    for declaration in registry.declarations(plugins=False):
        if declaration.launcher == name:
            run_command(declaration.name, [name] + sys.argv[1:])
    raise AssertionError(f"no command declares the launcher {name}")


def module_command(name: str, program: str, argv: Optional[List[str]] = None) -> None:
    """`python -m bert_ad.convert` etc.: the command `name`, shown as `program`; exits."""
    run_command(name, [program] + list(sys.argv[1:] if argv is None else argv))
