"""The inference layer (bert_ad/inference/) never imports TensorFlow, not even
through another module: what a scoring machine without TensorFlow runs.

Two checks that answer the same question differently: the imports read from
the source (every module the package reaches, function-local imports
included) reach none of the training side (compat, model/, parallel/,
distributed/, tasks/, serving/, driver, evaluation); and every module of the
package imports in a fresh interpreter where `import tensorflow` fails, which
then holds no TensorFlow module. The source check is shown to find a
violation hidden two modules away.
"""

from __future__ import annotations

import os
import subprocess
import sys

from test_architecture import PACKAGE, REPO, imports_of, package_modules

# The training side: what a scoring machine does not have (TensorFlow) or need.
FORBIDDEN = ("bert_ad.compat", "bert_ad.model.", "bert_ad.parallel", "bert_ad.distributed",
             "bert_ad.tasks", "bert_ad.serving", "bert_ad.driver", "bert_ad.evaluation",
             "bert_ad.placement")
# BertConfig is plain JSON (bert_ad/bert_config.py), not the graph code in model/.
INFERENCE = "bert_ad.inference"


def reached_from(start: str, modules: dict) -> dict:
    """{module: the module that imported it} of every bert_ad module `start` reaches."""
    reached, queue = {start: None}, [start]
    while queue:
        module = queue.pop()
        for imported in imports_of(modules[module], modules):
            if imported not in reached:
                reached[imported] = module
                queue.append(imported)
    return reached


def forbidden_paths(modules: dict, package: str = INFERENCE) -> list:
    """"a -> b -> forbidden" for every forbidden module the package reaches."""
    found = []
    for start in sorted(m for m in modules if m == package or m.startswith(package + ".")):
        reached = reached_from(start, modules)
        for module in sorted(reached):
            if module.startswith(FORBIDDEN) or module in FORBIDDEN:
                path, step = [module], reached[module]
                while step is not None:
                    path.append(step)
                    step = reached[step]
                found.append(" -> ".join(reversed(path)))
    return found


def test_the_inference_package_reaches_no_training_module():
    modules = package_modules()
    assert [m for m in modules if m.startswith(INFERENCE + ".")], "no inference package?"
    assert forbidden_paths(modules) == []


def test_the_check_finds_a_forbidden_import_two_modules_away(tmp_path):
    root = tmp_path / "bert_ad"
    (root / "inference").mkdir(parents=True)
    (root / "data").mkdir()
    for init in (root / "__init__.py", root / "inference" / "__init__.py",
                 root / "data" / "__init__.py", root / "compat.py"):
        init.write_text("")
    (root / "inference" / "scorer.py").write_text("from bert_ad.data import helper\n")
    (root / "data" / "helper.py").write_text(
        "def f():\n    from bert_ad.compat import tf\n    return tf\n")
    modules = {}
    for directory, _, names in os.walk(root):
        for name in names:
            parts = os.path.relpath(os.path.join(directory, name), tmp_path)[:-3].split(os.sep)
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = \
                os.path.join(directory, name)
    assert forbidden_paths(modules) == [
        "bert_ad.inference.scorer -> bert_ad.data.helper -> bert_ad.compat"]


def test_every_inference_module_imports_where_tensorflow_cannot():
    modules = sorted(m for m in package_modules() if m.startswith(INFERENCE))
    code = (
        "import importlib, sys\n"
        "for name in ('tensorflow', 'tf2onnx', 'keras'):\n"
        "    sys.modules[name] = None\n"
        f"for module in {modules!r}:\n"
        "    importlib.import_module(module)\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('tensorflow', 'bert_ad.compat'))"
        " and sys.modules[m] is not None)\n"
        "print(len(" + repr(modules) + "), loaded)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.path.dirname(PACKAGE)))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == f"{len(modules)} []"
