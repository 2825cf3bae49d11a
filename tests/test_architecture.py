"""The package's shape: no import cycle, no folder importing a layer above it,
modules of at most MAX_LINES lines, data/ standing on its own, no sys.path edits.

Imports are read from the source (function-local ones included: a cycle
hidden in a function is still a cycle), so the test needs no TensorFlow.
"""

from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = os.path.join(REPO, "bert_ad")

# A module holds one idea; past this many lines it holds several.
MAX_LINES = 500
# BertModel and its parts read best as one file, next to Google's modeling.py.
LONG_BY_DESIGN = {"bert_ad/model/modeling.py"}
# Modules allowed over MAX_LINES for a while (none today): the test below fails
# when an entry is no longer needed, so the set only shrinks.
TEMPORARILY_EXEMPT = set()

# Low to high. A module may import its own layer and the layers below it.
LAYERS = [
    {"bert_ad", "bert_ad.errors", "bert_ad.compat", "bert_ad.files", "bert_ad.path_overlaps",
     "bert_ad.folders",
     "bert_ad.seeds", "bert_ad.cpu_features", "bert_ad.choices",
     # BertConfig: bert_config.json read and checked (plain data, no TensorFlow).
     "bert_ad.bert_config",
     # RunSettings: plain data every layer names its defaults from.
     "bert_ad.run_settings",
     # The model folder's record (model_settings.json), read without TensorFlow.
     "bert_ad.model_folder",
     # Assets, packaged samples, safetensors: numpy and the standard library only,
     # used by the data code.
     "bert_ad.resources"},
    # answers: scored rows -> answers (numpy), shared by the tasks and the inference layer.
    {"bert_ad.model", "bert_ad.data", "bert_ad.metrics", "bert_ad.pretraining",
     "bert_ad.answers"},
    # Scoring and serving exports without TensorFlow (tests/test_inference_layer.py):
    # below the tasks, which it never imports.
    {"bert_ad.inference"},
    # Towers, the training graph and loop, the collective ops (one machine).
    {"bert_ad.parallel"},
    # Several machines: the cluster's server, start-up handshake and deadlines,
    # on parallel/'s collective ops (parallel/ never imports it).
    {"bert_ad.distributed"},
    {"bert_ad.tasks"},
    # Exports for serving: a task's graph written out, and scored back.
    {"bert_ad.serving"},
    # The driver, with what a run asks for (run_settings) and how a split is
    # scored (evaluation).
    {"bert_ad.driver", "bert_ad.placement", "bert_ad.evaluation", "bert_ad.run_outputs",
     "bert_ad.export_predict", "bert_ad.run_model_folder"},
    {"bert_ad.cli", "bert_ad.tools", "bert_ad.__main__",
     # `python -m bert_ad.convert / .assets / .vocab`: shims over the tools.
     "bert_ad.convert", "bert_ad.assets", "bert_ad.vocab"},
]


def package_modules() -> dict:
    """{dotted module name: file path} of every module in bert_ad."""
    modules = {}
    for directory, _, files in os.walk(PACKAGE):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(directory, name)
            parts = os.path.relpath(path, REPO)[:-3].split(os.sep)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


def imports_of(path: str, modules: dict) -> set:
    """The bert_ad modules `path` imports, wherever in the file."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from bert_ad.x import y`: y is a module of its own, or a name in x.
            names = [f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules
                     else node.module for alias in node.names]
        found.update(n for n in names if n in modules)
    return found


def layer_of(module: str) -> int:
    best = None
    for index, layer in enumerate(LAYERS):
        for prefix in layer:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > len(best[1]):
                    best = (index, prefix)
    assert best is not None, f"{module} is in no layer of tests/test_architecture.py"
    return best[0]


def upward_imports(modules: dict) -> list:
    """"module -> imported" for every import of a higher layer, sorted."""
    upward = []
    for module, path in modules.items():
        for imported in imports_of(path, modules):
            if layer_of(imported) > layer_of(module):
                upward.append(f"{module} -> {imported}")
    return sorted(upward)


def test_every_module_sits_in_a_layer_and_imports_no_layer_above_it():
    modules = package_modules()
    upward = upward_imports(modules)
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)


def test_distributed_stands_on_parallel_and_parallel_knows_nothing_of_it(tmp_path):
    modules = package_modules()
    assert layer_of("bert_ad.distributed.cluster") > layer_of("bert_ad.parallel.towers")
    # Not vacuous: the cluster really builds on parallel/'s collective ops.
    assert "bert_ad.parallel.collective" in imports_of(
        modules["bert_ad.distributed.cluster"], modules)
    # The checker itself: parallel/ importing distributed/ (even inside a
    # function) is an upward import.
    replicated = tmp_path / "replicated.py"
    replicated.write_text("def f():\n    from bert_ad.distributed import cluster\n",
                          encoding="utf-8")
    fake = {"bert_ad.parallel.replicated": str(replicated),
            "bert_ad.distributed.cluster": modules["bert_ad.distributed.cluster"]}
    assert upward_imports(fake) == [
        "bert_ad.parallel.replicated -> bert_ad.distributed.cluster"]


def find_cycles(graph: dict) -> list:
    """Every cycle a depth-first walk of {module: [imported modules]} closes."""
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in graph[node]:
            if node.startswith(nxt + "."):
                continue  # a module "imports" its parent package (its docstring only)
            if state.get(nxt) == "open":
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


def test_the_import_graph_has_no_cycle():
    modules = package_modules()
    graph = {m: sorted(imports_of(p, modules) - {m}) for m, p in modules.items()}
    cycles = find_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)
    # Not vacuous: the reader saw the package's real edges.
    assert "bert_ad.parallel.train_graph" in graph["bert_ad.driver"]
    assert "bert_ad.tasks.base" in graph["bert_ad.tasks.classification"]


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function(tmp_path):
    """The checker itself: a function-local import that closes a loop is found."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("import bert_ad.b\n", encoding="utf-8")
    b.write_text("def f():\n    from bert_ad import a\n", encoding="utf-8")
    modules = {"bert_ad.a": str(a), "bert_ad.b": str(b)}
    graph = {m: sorted(imports_of(p, modules)) for m, p in modules.items()}
    assert graph == {"bert_ad.a": ["bert_ad.b"], "bert_ad.b": ["bert_ad.a"]}
    assert find_cycles(graph) == ["bert_ad.a -> bert_ad.b -> bert_ad.a"]


# --- module size ---------------------------------------------------------------------

def line_count(path: str) -> int:
    with open(path, encoding="utf-8") as f:
        return len(f.read().splitlines())


def test_no_module_is_longer_than_max_lines():
    modules = package_modules()
    sizes = {os.path.relpath(path, REPO).replace(os.sep, "/"): line_count(path)
             for path in modules.values()}
    too_long = sorted(f"{name}: {lines} lines" for name, lines in sizes.items()
                      if lines > MAX_LINES and name not in LONG_BY_DESIGN | TEMPORARILY_EXEMPT)
    assert not too_long, (f"modules over {MAX_LINES} lines (split them along their "
                          "ideas):\n" + "\n".join(too_long))
    healed = sorted(name for name in TEMPORARILY_EXEMPT if sizes.get(name, 0) <= MAX_LINES)
    assert not healed, ("no longer over the limit: remove from TEMPORARILY_EXEMPT in "
                        "tests/test_architecture.py:\n" + "\n".join(healed))


# --- data/ stands on its own ---------------------------------------------------------

def test_data_imports_neither_pretraining_nor_tools():
    modules = package_modules()
    found = []
    for module, path in modules.items():
        if module != "bert_ad.data" and not module.startswith("bert_ad.data."):
            continue
        for imported in imports_of(path, modules):
            if imported.startswith(("bert_ad.pretraining", "bert_ad.tools")):
                found.append(f"{module} -> {imported}")
    assert not found, "data/ imports pretraining/ or tools/:\n" + "\n".join(sorted(found))


# --- sys.path ------------------------------------------------------------------------

# Methods that change a list in place.
_LIST_EDITS = {"insert", "append", "extend", "remove", "pop", "clear", "reverse", "sort",
               "__setitem__", "__delitem__", "__iadd__"}


def sys_path_edits(source: str, filename: str = "<source>") -> list:
    """Line numbers where `source` changes sys.path (however `sys` is imported)."""
    tree = ast.parse(source, filename)
    sys_names = {"sys"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            sys_names.update(alias.asname or alias.name for alias in node.names
                             if alias.name == "sys")
    lines = []

    def is_sys_path(node) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "path"
                and isinstance(node.value, ast.Name) and node.value.id in sys_names)

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "sys" and any(
                alias.name == "path" for alias in node.names):
            lines.append(node.lineno)  # `from sys import path`: made to be edited
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in _LIST_EDITS and is_sys_path(node.func.value):
            lines.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) \
                else [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript):
                    target = target.value
                if is_sys_path(target):
                    lines.append(node.lineno)
    return sorted(lines)


def test_nothing_in_the_package_edits_sys_path():
    edits = []
    for path in package_modules().values():
        with open(path, encoding="utf-8") as f:
            edits += [f"{os.path.relpath(path, REPO)}:{line}"
                      for line in sys_path_edits(f.read(), path)]
    assert not edits, ("sys.path edited (import bert_ad as a package instead):\n"
                       + "\n".join(edits))


def test_the_sys_path_check_finds_every_kind_of_edit():
    """The checker itself: each way of editing sys.path is found, reading it is not."""
    source = "\n".join([
        "import sys",
        "import sys as system",
        "sys.path.insert(0, 'x')",
        "system.path.append('x')",
        "sys.path[0:0] = ['x']",
        "sys.path += ['x']",
        "sys.path = ['x']",
        "from sys import path",
        "print(sys.path, len(sys.path))",
    ])
    assert sys_path_edits(source) == [3, 4, 5, 6, 7, 8]


# --- the task seam carries the encoder ------------------------------------------------------

# How the encoder runs: the encoder record's fields (bert_ad/tasks/base.py), which
# `encoder.model(...)` hands to BertModel so no task names them.
_ENCODER_SETTINGS = {"compute_dtype", "remove_padding"}
# Calls that change the encoder record itself (an export's dtype), not bypass it.
_ENCODER_CHANGES = {"with_encoder", "replace"}


def encoder_bypasses(source: str, filename: str = "<source>") -> list:
    """(line, what) where `source` builds BertModel itself or names how the encoder
    runs (a compute_dtype= / remove_padding= argument, or reading those fields)."""
    tree = ast.parse(source, filename)
    model_names = {"BertModel"}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            model_names.update(alias.asname for alias in node.names
                               if alias.name == "BertModel" and alias.asname)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else \
                func.attr if isinstance(func, ast.Attribute) else ""
            if name in model_names:
                found.append((node.lineno, f"{name}("))
            if name not in _ENCODER_CHANGES:
                found += [(node.lineno, f"{k.arg}=") for k in node.keywords
                          if k.arg in _ENCODER_SETTINGS]
        elif isinstance(node, ast.Attribute) and node.attr in _ENCODER_SETTINGS:
            found.append((node.lineno, f".{node.attr}"))
    return sorted(found)


def test_no_task_builds_bert_or_names_how_the_encoder_runs():
    """Every task gets BERT from `self.encoder.model(...)` and hands it to its head:
    a task that built BertModel, or passed the precision or padding removal on by
    hand, could drop --precision or --remove_padding without an error."""
    tasks = os.path.join(PACKAGE, "tasks")
    found = []
    for name in sorted(os.listdir(tasks)):
        if not name.endswith(".py") or name == "base.py":  # base.py: the encoder itself
            continue
        path = os.path.join(tasks, name)
        with open(path, encoding="utf-8") as f:
            found += [f"bert_ad/tasks/{name}:{line}: {what}"
                      for line, what in encoder_bypasses(f.read(), path)]
    assert not found, ("a task builds BERT or names how the encoder runs; ask "
                       "self.encoder.model(features, is_training) instead:\n"
                       + "\n".join(found))


def test_the_encoder_check_finds_every_bypass():
    """The checker itself: each way around the encoder is found, asking it is not."""
    source = "\n".join([
        "from bert_ad.model.modeling import BertModel as Bert",
        "from bert_ad.model import modeling",
        "model = Bert(config, True, ids)",
        "model = modeling.BertModel(config, True, ids)",
        "out = classifier(model, features, 2, True, compute_dtype=tf.float16)",
        "out = span_head(model, features, remove_padding=False)",
        "dtype = self.encoder.compute_dtype",
        "model = self.encoder.model(features, is_training)",
        "task = self.with_encoder(compute_dtype=tf.float16, remove_padding=False)",
        "encoder = dataclasses.replace(encoder, compute_dtype=tf.float16)",
    ])
    assert encoder_bypasses(source) == [(3, "Bert("), (4, "BertModel("),
                                        (5, "compute_dtype="), (6, "remove_padding="),
                                        (7, ".compute_dtype")]
