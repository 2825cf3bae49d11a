"""The registry of commands: every task and tool `bert-ad` runs, declared where it is defined.

A task's module ends with one line that registers it (after tensorflow/models'
`register_task_cls`; bert_ad/cli/classifier.py, tests/toy_task.py):

    register_task("classifier", "fine-tune, predict and evaluate a text classifier",
                  define_flags=define_flags, build=build, agreed_flags=AGREED_FLAGS,
                  aliases=("run_classifier",), launcher="run_classifier_mgpu.py",
                  console_script="bert-ad-classifier")

and a tool's module the same with `register_tool(name, summary, cli=cli)`.

Everything that lists commands reads this registry: `bert-ad --help`, the
console scripts of setup.py, the root launchers, the tests. It is read in two
ways, from the same lines:

  * statically (`declarations`): the registration calls are found in the
    source with `ast`, so `bert-ad --help`, `bert-ad NAME` (which imports only
    NAME's module) and setup.py (which has no TensorFlow, nor even absl, when
    pip builds the wheel) need import nothing. The name, summary, aliases,
    launcher and console script must therefore be literals.
  * at run time (`command`): importing the declaring module runs its
    registration, which records the flags and the builder.

Modules outside the package (a user's own task) join through the
BERT_AD_PLUGINS environment variable: a comma list of importable module names.

This module imports nothing but the standard library: setup.py loads it by
path.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.util
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

PLUGINS_VARIABLE = "BERT_AD_PLUGINS"
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The console script that runs every command.
MAIN_SCRIPT = "bert-ad"
ENTRY_POINTS_MODULE = "bert_ad.cli.entry_points"


@dataclasses.dataclass(frozen=True)
class Declaration:
    """What a registration line says, read without importing its module."""
    kind: str                      # "task" or "tool"
    name: str                      # `bert-ad NAME`
    summary: str                   # one line for `bert-ad --help`
    module: str                    # the module that registers it
    aliases: Tuple[str, ...] = ()  # other names users type (Google's task names)
    launcher: str = ""             # root launcher file, e.g. run_classifier_mgpu.py
    console_script: str = ""       # e.g. bert-ad-classifier

    @property
    def entry_point_function(self) -> str:
        """The function of bert_ad/cli/entry_points.py its console script calls."""
        return self.name.replace("-", "_")


@dataclasses.dataclass(frozen=True)
class TaskCommand:
    """A task as the command line sees it (bert_ad/cli/task_runner.py runs it).

    Attributes:
      name, summary: as declared.
      define_flags: defines the task's own absl flags on a FlagValues.
      build: (parsed flags, TextEncoder or None) -> the task's Task, checking
        the task's own flags (one `error:` line) before anything is written.
      agreed_flags: the task's flags every worker of a multi-worker run must
        agree on (the shared ones: bert_ad/cli/builders.py).
      text: the task reads text through a tokenizer: it gets the fine-tuning
        flags (vocab, lengths, predict, export) and a TextEncoder.
      actions: the --do_* flags it honours; a run must set one of them.
      check_flags: optional early check of the task's own flags, run before
        the shared flags are checked and anything starts.
      positive_flags: the task's integer flags that must be at least 1.
      flag_defaults: defaults of shared flags that differ for this task
        (pretraining's learning rate).
      description: the --help text (default: the module's docstring).
      run: optional; makes the command inference-only (extract_features.py):
        it gets the inference flags (bert_ad/cli/flag_groups.py: model
        files, towers, precision, export) instead of the training ones, and
        after the shared steps (its check_flags, placement, TextEncoder,
        build) `run(task, flags, placement) -> exit code` replaces
        driver.run. `actions` and the training checks do not apply.
    """
    name: str
    summary: str
    define_flags: Callable
    build: Callable
    agreed_flags: Tuple[str, ...] = ()
    text: bool = True
    actions: Tuple[str, ...] = ("do_train", "do_eval", "do_predict", "do_export")
    check_flags: Optional[Callable] = None
    positive_flags: Tuple[str, ...] = ()
    flag_defaults: Tuple[Tuple[str, object], ...] = ()
    description: str = ""
    run: Optional[Callable] = None


@dataclasses.dataclass(frozen=True)
class ToolCommand:
    """A tool: `cli(argv)` parses argv (argv[0]: the program as the user typed
    it) and exits, as every command line does (bert_ad.errors.run_cli)."""
    name: str
    summary: str
    cli: Callable[[Sequence[str]], None]


_REGISTERED: Dict[str, object] = {}


def register_task(name: str, summary: str, *, define_flags: Callable, build: Callable,
                  aliases: Sequence[str] = (), launcher: str = "", console_script: str = "",
                  **options) -> TaskCommand:
    """Register a task (one line at the end of its module); see TaskCommand."""
    del aliases, launcher, console_script  # read statically (declarations)
    command = TaskCommand(name, summary, define_flags, build, **options)
    _REGISTERED[name] = command
    return command


def register_tool(name: str, summary: str, *, cli: Callable, aliases: Sequence[str] = (),
                  launcher: str = "", console_script: str = "") -> ToolCommand:
    """Register a tool (one line at the end of its module); see ToolCommand."""
    del aliases, launcher, console_script  # read statically (declarations)
    command = ToolCommand(name, summary, cli)
    _REGISTERED[name] = command
    return command


# --- reading the declarations ------------------------------------------------------------

_REGISTRATIONS = {"register_task": "task", "register_tool": "tool"}


def _literal(node: ast.AST, what: str, path: str):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise ValueError(f"{path}:{node.lineno}: the {what} of a registration must be a "
                         "literal (the registry is read without importing)") from None


# Each file is parsed once a process for as long as it is unchanged: a process that
# runs several commands (the studies' runners, the tests) would otherwise parse
# every module again for each (75 ms a command).
_PARSED: Dict[Tuple[str, str, int, int], List[Declaration]] = {}


def declarations_in(path: str, module: str) -> List[Declaration]:
    """The registration calls of one source file."""
    status = os.stat(path)
    key = (path, module, status.st_mtime_ns, status.st_size)
    if key not in _PARSED:
        _PARSED[key] = _parse_declarations(path, module)
    return list(_PARSED[key])


def _parse_declarations(path: str, module: str) -> List[Declaration]:
    with open(path, encoding="utf-8") as f:
        source = f.read()
    if not any(call in source for call in _REGISTRATIONS):
        return []
    found = []
    for node in ast.walk(ast.parse(source, path)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in _REGISTRATIONS and len(node.args) >= 2):
            continue
        keywords = {k.arg: k.value for k in node.keywords}
        values = {key: _literal(keywords[key], key, path)
                  for key in ("aliases", "launcher", "console_script") if key in keywords}
        found.append(Declaration(_REGISTRATIONS[node.func.id],
                                 _literal(node.args[0], "name", path),
                                 _literal(node.args[1], "summary", path), module,
                                 aliases=tuple(values.get("aliases", ())),
                                 launcher=values.get("launcher", ""),
                                 console_script=values.get("console_script", "")))
    return found


def _package_sources(package_dir: str) -> List[Tuple[str, str]]:
    """(path, dotted module name) of every module of the bert_ad package."""
    root = os.path.dirname(package_dir)
    sources = []
    for directory, subdirectories, files in os.walk(package_dir):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                sources.append((path, ".".join(parts)))
    return sources


def plugin_modules() -> List[str]:
    return [name.strip() for name in os.environ.get(PLUGINS_VARIABLE, "").split(",")
            if name.strip()]


def declarations(package_dir: str = PACKAGE_DIR, plugins: bool = True
                 ) -> List[Declaration]:
    """Every command declared in the package (and in BERT_AD_PLUGINS' modules),
    sorted by name.

    Raises:
      ValueError: two commands claim one name or alias, or a plugin module
        cannot be found.
    """
    sources = _package_sources(package_dir)
    for module in plugin_modules() if plugins else ():
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.origin or not spec.origin.endswith(".py"):
            raise ValueError(f"{PLUGINS_VARIABLE}: no Python module {module!r} on the "
                             "path (set PYTHONPATH to its folder)")
        sources.append((spec.origin, module))
    found: List[Declaration] = []
    for path, module in sources:
        found.extend(declarations_in(path, module))
    names: Dict[str, Declaration] = {}
    for declaration in found:
        for name in (declaration.name,) + declaration.aliases:
            if name in names:
                raise ValueError(f"the command name {name!r} is registered twice: in "
                                 f"{names[name].module} and {declaration.module}")
            names[name] = declaration
    return sorted(found, key=lambda d: d.name)


def find(name: str, known: Optional[Sequence[Declaration]] = None
         ) -> Optional[Declaration]:
    """The declaration answering to `name` (its name, an alias, or its launcher's
    file name, which `bert-ad --help` lists with the aliases), else None."""
    for declaration in known if known is not None else declarations():
        if name and name in (declaration.name, declaration.launcher) + declaration.aliases:
            return declaration
    return None


def command(declaration: Declaration):
    """The TaskCommand or ToolCommand of `declaration`: its module imported."""
    importlib.import_module(declaration.module)
    return _REGISTERED[declaration.name]


def console_scripts(package_dir: str = PACKAGE_DIR) -> List[str]:
    """setup.py's console_scripts: `bert-ad` and every declared console script."""
    scripts = [f"{MAIN_SCRIPT}={ENTRY_POINTS_MODULE}:main"]
    for declaration in declarations(package_dir, plugins=False):
        if declaration.console_script:
            scripts.append(f"{declaration.console_script}={ENTRY_POINTS_MODULE}:"
                           f"{declaration.entry_point_function}")
    return scripts
