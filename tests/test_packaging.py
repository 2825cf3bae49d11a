"""Packaging: TensorFlow as an extra, a wheel that runs without the checkout.

* The built wheel's metadata: each extra's requirements, no hard TensorFlow,
  configs/ and data/ as package data, console scripts (both lanes).
* A fresh virtual environment without TensorFlow (the wheel installed with
  its dependencies, outside the checkout): every command says in one
  `error:` line how to install one, exit 2 (both lanes).
* A TensorFlow that is too old, has no tf.compat.v1, or fails to import
  (fake `tensorflow` packages on PYTHONPATH): refused the same way.
* --version names the package and the lane's TensorFlow.
* With BERT_AD_WHEEL_TESTS=1 (a separate .ci/run step, tf1 lane: it installs a second
  TensorFlow, 1-3 minutes): the wheel installed into a fresh venv that already
  holds tensorflow-cpu; pip adds no `tensorflow` beside it, every command
  answers --help and the tiny-model smoke job trains through the console script.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor

import pytest

import bert_ad
from bert_ad.cli import registry
from bert_ad.data.tokenization import FullTokenizer
from bert_ad.resources import samples
from helpers import run_file_in_process, run_module_in_process

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What setup.py reads to build the wheel.
# benchmarks/, studies/ and measuring.py too: they sit beside bert_ad/ and must stay out
# of the wheel.
SOURCES = ("setup.py", "bert_ad", "configs", "data", "benchmarks", "studies")
# The root launchers, from the command registry (each command declares its own).
ROOT_LAUNCHERS = tuple(d.launcher for d in registry.declarations(plugins=False) if d.launcher)
# `python -m bert_ad.X` commands that need TensorFlow (assets does not).
MODULE_COMMANDS = ("bert_ad.convert", "bert_ad.vocab")
EXTRA_COMMANDS = {
    "tf": 'pip install "bert_ad[tf]"',
    "tf1": 'pip install "bert_ad[tf1]"',
    "tf1-gpu": 'pip install "bert_ad[tf1-gpu]"',
}
# Commands whose --help works without TensorFlow (they import it only to run): every
# task's (bert_ad/cli/flag_groups.py), serve's and making pretraining data.
TASK_SCRIPTS = tuple(d.console_script for d in registry.declarations(plugins=False)
                     if d.kind == "task" and d.console_script)
HELP_WITHOUT_TENSORFLOW = ("bert-ad-create-pretraining-data", "bert-ad",
                           "bert-ad-serve", "bert-ad-predict") + TASK_SCRIPTS
TIMEOUT = 900
IS_TF1_LANE = sys.version_info < (3, 8)


# ---------------------------------------------------------------------------
# Building and installing.


def _run(command: list, cwd: str, env: dict | None = None,
         timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=timeout)


def _check(result: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert result.returncode == 0, (result.args, result.stdout[-3000:], result.stderr[-3000:])
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> str:
    """`pip wheel` of a copy of the sources (the checkout stays free of build/)."""
    root = tmp_path_factory.mktemp("wheel")
    source = str(root / "source")
    os.mkdir(source)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = os.path.join(REPO, name)
        if os.path.isdir(path):
            shutil.copytree(path, os.path.join(source, name), ignore=ignore)
        else:
            shutil.copy(path, source)
    out = str(root / "dist")
    _check(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, source],
                cwd=str(root)))
    (built,) = os.listdir(out)
    return os.path.join(out, built)


class Venv:
    """A fresh virtual environment of this lane's Python, with no site-packages of
    the lane's: pip is the lane's, pointed at it with --python."""

    def __init__(self, path: str):
        base = os.path.join(sys.base_prefix, "bin",
                            "python%d.%d" % sys.version_info[:2])
        _check(_run([base if os.path.exists(base) else sys.executable, "-m", "venv",
                     "--without-pip", path], cwd=os.path.dirname(path)))
        self.path = path
        self.bin = os.path.join(path, "bin")
        self.python = os.path.join(self.bin, "python")
        self.home = os.path.dirname(path)  # cwd for commands: outside the checkout

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        return _check(_run([sys.executable, "-m", "pip", "--python", self.python] + list(args),
                           cwd=self.home))

    def install_first(self, *requirements: str) -> None:
        """What the user had before bert_ad: through uv when .ci/run hands it over
        (BERT_AD_UV: the same packages, a third of pip's time), else pip."""
        uv = os.environ.get("BERT_AD_UV")
        if uv:
            _check(_run([uv, "pip", "install", "-q", "--python", self.python]
                        + list(requirements), cwd=self.home))
        else:
            self.pip("install", "-q", *requirements)

    def distributions(self) -> dict:
        """{normalised name: version} of what is installed."""
        listing = json.loads(self.pip("list", "--format=json").stdout)
        return {d["name"].lower().replace("_", "-"): d["version"] for d in listing}

    def env(self, **extra: str) -> dict:
        env = {key: value for key, value in os.environ.items()
               if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(PATH=self.bin + os.pathsep + env.get("PATH", ""),
                   CUDA_VISIBLE_DEVICES="-1", **extra)
        return env

    def run(self, command: list, **extra_env: str) -> subprocess.CompletedProcess:
        return _run(command, cwd=self.home, env=self.env(**extra_env))


def console_script_targets(wheel_path: str) -> dict:
    """{console script: "module:function"} as the wheel declares them."""
    with zipfile.ZipFile(wheel_path) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        text = z.read(name).decode()
    section = text.split("[console_scripts]", 1)[1].split("\n[", 1)[0]
    pairs = [line.split("=", 1) for line in section.splitlines() if "=" in line]
    return {script.strip(): target.strip() for script, target in pairs}


def console_scripts(wheel_path: str) -> list:
    return sorted(console_script_targets(wheel_path))


def wheel_metadata(wheel_path: str) -> str:
    with zipfile.ZipFile(wheel_path) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        return z.read(name).decode()


def requirements_by_extra(metadata: str) -> dict:
    """{extra or "": set of `requirement[; other markers]`} from Requires-Dist lines."""
    found = {}
    for line in metadata.splitlines():
        if not line.startswith("Requires-Dist: "):
            continue
        requirement, _, marker = line[len("Requires-Dist: "):].partition(";")
        # Setuptools versions differ in spaces, quotes and parentheses only.
        marker = marker.replace("'", '"')
        extra = re.search(r'extra == "([^"]+)"', marker)
        rest = re.sub(r'\s*(and\s+)?extra == "[^"]+"', "", marker).strip()
        rest = re.sub(r"^\((.*)\)$", r"\1", rest)
        requirement = re.sub(r"\s+", "", requirement)
        # Setuptools versions also differ in the name's spelling (prometheus_client
        # or prometheus-client): compare PEP 503's normalized names.
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        requirement = re.sub(r"[-_.]+", "-", name).lower() + requirement[len(name):]
        text = requirement + (f"; {rest}" if rest else "")
        found.setdefault(extra.group(1) if extra else "", set()).add(text)
    return found


def assert_missing_tensorflow_line(result: subprocess.CompletedProcess, start: str) -> None:
    """Exit 2, nothing on stdout, one stderr line: `start`... and the three commands."""
    where = (result.args, result.stdout[-2000:], result.stderr[-3000:])
    assert result.returncode == 2, where
    assert result.stdout == "", where
    lines = result.stderr.splitlines()
    assert len(lines) == 1, where
    assert lines[0].startswith("error: " + start), where
    for command in EXTRA_COMMANDS.values():
        assert command in lines[0], where
    assert "CUDA 10.0 and cuDNN 7.6" in lines[0]


# ---------------------------------------------------------------------------
# The wheel's metadata and files.


def test_wheel_declares_tensorflow_only_as_extras(wheel):
    metadata = wheel_metadata(wheel)
    assert re.search(r"^Version: (.+)$", metadata, re.M).group(1) == bert_ad.__version__
    requires = requirements_by_extra(metadata)
    # Plain `pip install bert_ad` installs no TensorFlow and no protobuf pin.
    assert requires[""] == {"numpy", "absl-py", "sentencepiece"}
    assert requires["tf"] == {"tensorflow>=2.12"}
    assert requires["tf1"] == {"tensorflow==1.15.5", "protobuf<3.21"}
    assert requires["tf1-gpu"] == {"tensorflow-gpu==1.15.5", "protobuf<3.21"}
    assert requires["test"] == {"pytest", "pytest-xdist"}
    assert 'seqeval==1.2.2; python_version >= "3.8"' in requires["reference"]
    # A scoring machine: the server, its metrics and ONNX Runtime; no TensorFlow.
    serve = {"aiohttp>=3.8", "prometheus-client>=0.17",
             'onnxruntime>=1.32; python_version >= "3.8"'}
    assert requires["serve"] == serve
    # An exporting machine: serve's, the converter and what int8's shape inference needs.
    assert requires["onnx"] == serve | {'onnx>=1.15; python_version >= "3.8"',
                                        'tf2onnx>=1.17; python_version >= "3.8"',
                                        'sympy; python_version >= "3.8"',
                                        'ml-dtypes; python_version >= "3.8"'}
    assert set(re.findall(r"^Provides-Extra: (.+)$", metadata, re.M)) == {
        "tf", "tf1", "tf1-gpu", "test", "reference", "plot", "serve", "onnx"}


def test_wheel_carries_configs_and_data_as_package_data(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for folder, packaged in (("configs", "bert_ad/configs"), ("data", "bert_ad/samples")):
            for directory, _, files in os.walk(os.path.join(REPO, folder)):
                for name in files:
                    path = os.path.join(directory, name)
                    inside = packaged + "/" + os.path.relpath(path, os.path.join(REPO, folder))
                    assert inside in names, inside
                    with open(path, "rb") as f:
                        assert z.read(inside) == f.read(), inside
    # The package only: no tests, scripts, benchmarks, studies, their measuring.py or
    # root launchers.
    assert {n.split("/")[0] for n in names if "/" in n} == {
        "bert_ad", os.path.basename(wheel).split("-py")[0] + ".dist-info"}
    assert not [n for n in names if "/" not in n]
    assert "bert_ad/tools/prepare.py" in names     # `bert-ad data prepare`


def test_console_scripts_go_through_the_lazy_entry_points(wheel):
    from bert_ad.cli import entry_points
    targets = console_script_targets(wheel)
    # From the command registry: `bert-ad` and every declared console script,
    # the users' existing ones among them.
    assert sorted(targets) == sorted(line.split("=")[0]
                                     for line in registry.console_scripts())
    assert set(targets) >= {
        "bert-ad", "bert-ad-classifier", "bert-ad-convert", "bert-ad-create-pretraining-data",
        "bert-ad-ner", "bert-ad-pretrain", "bert-ad-rewrite", "bert-ad-vocab"}
    for script, target in targets.items():
        module, function = target.split(":")
        assert module == "bert_ad.cli.entry_points", script
        assert callable(getattr(entry_points, function)), script


# ---------------------------------------------------------------------------
# No TensorFlow at all: a fresh venv with the wheel and its dependencies.


@pytest.fixture(scope="module")
def venv_without_tensorflow(wheel, tmp_path_factory) -> Venv:
    venv = Venv(str(tmp_path_factory.mktemp("no_tf") / "venv"))
    venv.pip("install", "-q", wheel)
    return venv


def test_plain_install_brings_no_tensorflow(venv_without_tensorflow):
    installed = venv_without_tensorflow.distributions()
    assert "bert-ad" in installed
    assert not [name for name in installed if "tensorflow" in name or name == "protobuf"]
    where = venv_without_tensorflow.run(
        ["python", "-c", "import bert_ad; print(bert_ad.__file__)"])
    assert where.stdout.startswith(venv_without_tensorflow.path), where


def test_every_command_says_how_to_install_tensorflow(venv_without_tensorflow, wheel,
                                                      tmp_path):
    venv = venv_without_tensorflow
    corpus, vocab = tmp_path / "corpus.txt", tmp_path / "vocab.txt"
    corpus.write_text("a first sentence .\na second one .\n\nanother document .\n")
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "."]) + "\n")
    data_run = [f"--input_file={corpus}", f"--vocab_file={vocab}",
                f"--output_file={tmp_path / 'out.tfrecord'}"]
    commands, versions = [], []
    for script in console_scripts(wheel):
        path = os.path.join(venv.bin, script)
        versions.append([path, "--version"])
        # A task's --help and flag errors need no TensorFlow, nor does making
        # pretraining data's (a run does, to write records); --version does.
        if script == "bert-ad":
            commands.append([path, "convert", "--help"])
        elif script == "bert-ad-create-pretraining-data":
            commands.append([path] + data_run)
        elif script not in HELP_WITHOUT_TENSORFLOW:
            commands.append([path, "--help"])
    for module in MODULE_COMMANDS:
        commands.append(["python", "-m", module, "--help"])
    # The root launchers of the checkout, run by the venv's Python.
    for launcher in ROOT_LAUNCHERS:
        versions.append(["python", os.path.join(REPO, launcher), "--version"])
    helps = [[os.path.join(venv.bin, script), "--help"] for script in HELP_WITHOUT_TENSORFLOW]
    with ThreadPoolExecutor(4) as pool:   # one pool for all three lists: no waits between
        results = pool.map(venv.run, commands)
        versioned = pool.map(venv.run, versions)
        helped_runs = pool.map(venv.run, helps)
        results, versioned, helped_runs = list(results), list(versioned), list(helped_runs)
    for result in results:
        assert_missing_tensorflow_line(result, "no TensorFlow is installed: ")
    # --version says what this install is: a scoring machine (issue 50).
    version = _check(versioned[0]).stdout
    assert version.startswith(f"bert_ad {bert_ad.__version__}, no TensorFlow: this install "
                              "scores and serves exports only"), version
    for result in versioned:
        assert _check(result).stdout == version
    assert not (tmp_path / "out.tfrecord").exists()

    for script, helped in zip(HELP_WITHOUT_TENSORFLOW, helped_runs):
        helped = _check(helped)
        assert helped.stdout.startswith(f"usage: {script} ")


def test_assets_need_no_tensorflow(venv_without_tensorflow, tmp_path):
    venv = venv_without_tensorflow
    helped = _check(venv.run(["python", "-m", "bert_ad.assets", "--help"]))
    assert helped.stdout.startswith("usage: python -m bert_ad.assets [")
    tiny = _check(venv.run(["python", "-m", "bert_ad.assets", "tiny"],
                           BERT_AD_CACHE=str(tmp_path)))
    assert tiny.stdout == f"tiny\t{tmp_path / 'tiny'}\n"
    assert sorted(os.listdir(str(tmp_path / "tiny"))) == sorted(samples.TINY_FILES)


# ---------------------------------------------------------------------------
# A TensorFlow that cannot run bert_ad (fake packages shadow the lane's).


FAKE_TENSORFLOWS = {
    "too_old": ('__version__ = "1.14.0"\n',
                "TensorFlow 1.14.0 is too old: bert_ad needs 1.15 or 2.x; replace it: "),
    "no_graph_mode": ('__version__ = "3.0.0"\nclass compat:\n    v1 = None\n',
                      "TensorFlow 3.0.0 has no tf.compat.v1 graph mode, "),
    # A native library that does not load (TF 1.14's GPU build without CUDA 10.0,
    # a wheel for another glibc): TF wraps the loader's ImportError in a long one
    # whose first line is "Traceback".
    "native_library_missing": (
        "try:\n"
        "    raise ImportError('libcudart.so.10.0: cannot open shared object file: "
        "No such file or directory')\n"
        "except ImportError:\n"
        "    raise ImportError('Traceback (most recent call last):\\n  ...\\n"
        "Failed to load the native TensorFlow runtime.')\n",
        "TensorFlow is installed but does not import (ImportError: libcudart.so.10.0: "
        "cannot open shared object file: No such file or directory); repair or replace "),
    # What `pip uninstall` of one of two TensorFlow distributions can leave.
    "leftover_folder": ("", "the tensorflow module at {root}/leftover_folder/tensorflow is "
                            "not a complete TensorFlow (no __version__: files left by an "
                            "uninstall?); remove it and install one: "),
    # TF 1.15 under protobuf >= 3.21.
    "new_protobuf": (
        "raise TypeError('Descriptors cannot not be created directly.\\nIf this call came "
        "from a _pb2.py file, your generated code is out of date')\n",
        "TensorFlow is installed but does not import (TypeError: Descriptors cannot not be "
        'created directly.) (TensorFlow 1.15 needs pip install "protobuf<3.21"); '),
}


@pytest.fixture(scope="module")
def fake_tensorflow_runs(tmp_path_factory) -> dict:
    """{"root": folder of the fakes, "runs": {(case, command): result}}."""
    root = tmp_path_factory.mktemp("fake_tf")
    commands = {}
    for case, (source, _) in FAKE_TENSORFLOWS.items():
        package = root / case / "tensorflow"
        package.mkdir(parents=True)
        (package / "__init__.py").write_text(source)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root / case), REPO]))
        commands[(case, "classifier")] = ([sys.executable, "run_classifier_mgpu.py",
                                           "--version"], env)
        commands[(case, "data")] = ([sys.executable, "create_pretraining_data.py",
                                     "--version"], env)
        commands[(case, "convert")] = ([sys.executable, "-m", "bert_ad.convert", "--version"],
                                       env)
    with ThreadPoolExecutor(4) as pool:
        futures = {key: pool.submit(_run, command, REPO, env, 300)
                   for key, (command, env) in commands.items()}
        runs = {key: future.result() for key, future in futures.items()}
    return {"root": str(root), "runs": runs}


@pytest.mark.parametrize("case", sorted(FAKE_TENSORFLOWS))
def test_unusable_tensorflow_is_refused_in_one_line(fake_tensorflow_runs, case):
    runs = {key: run for key, run in fake_tensorflow_runs["runs"].items() if key[0] == case}
    assert len(runs) == 3
    expected = FAKE_TENSORFLOWS[case][1].replace("{root}", fake_tensorflow_runs["root"])
    for run in runs.values():
        assert_missing_tensorflow_line(run, expected)


# ---------------------------------------------------------------------------
# --version in this lane, and the tiny model.


def _lane_tensorflow() -> tuple:
    """(distribution name, version) of the lane's TensorFlow, from pip."""
    listing = json.loads(_check(_run([sys.executable, "-m", "pip", "list", "--format=json"],
                                     cwd=REPO)).stdout)
    found = [(d["name"].lower(), d["version"]) for d in listing
             if d["name"].lower().startswith("tensorflow")
             and d["name"].lower() not in ("tensorflow-estimator", "tensorflow-io-gcs-filesystem")]
    assert len(found) == 1, found
    return found[0]


def test_version_names_package_and_lane_tensorflow():
    name, version = _lane_tensorflow()
    # TF 1.15's `tensorflow` wheel is the CPU build; TF 2.x's on Linux x86_64 the CUDA one.
    build = r"CPU build" if version.startswith("1.") else r"CUDA [\d.]+ / cuDNN \d+ build"
    expected = re.compile(rf"bert_ad {re.escape(bert_ad.__version__)}, TensorFlow "
                          rf"{re.escape(version)} \({re.escape(name)}, {build}\)\n")
    # A python -m command, and a root launcher with --version among other flags: each
    # run as __main__ in this process (runpy; the lane's TensorFlow is already imported,
    # which --version reports the same), output captured as a process's would be.
    for result in (run_module_in_process("bert_ad.vocab", ["--version"]),
                   run_file_in_process("rewrite_finetune.py", ["--output_dir=x", "--version"])):
        assert result.returncode == 0, result.stderr
        assert expected.fullmatch(result.stdout), result.stdout
        assert "Traceback" not in result.stderr


def test_tiny_model_covers_the_sample_words(tmp_path):
    folder = samples.tiny_model(str(tmp_path / "tiny"))
    with open(os.path.join(folder, "vocab.txt"), encoding="utf-8") as f:
        vocab = f.read().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert vocab[5:] == sorted(set(vocab[5:]))
    with open(os.path.join(REPO, "configs", "tiny_bert_config.json")) as f:
        expected_config = dict(json.load(f), vocab_size=len(vocab))
    with open(os.path.join(folder, "bert_config.json")) as f:
        assert json.load(f) == expected_config
    # Every word of every sample row is a whole token: no [UNK], no '##' pieces.
    tokenizer = FullTokenizer(os.path.join(folder, "vocab.txt"), do_lower_case=True)
    for split in samples.SAMPLE_SPLITS:
        with open(os.path.join(REPO, "data", "sample_sentiment", split), encoding="utf-8") as f:
            sample = f.read()
        with open(os.path.join(folder, "sample_sentiment", split), encoding="utf-8") as f:
            assert f.read() == sample
        for line in sample.splitlines():
            tokens = tokenizer.tokenize(line.split("\t", 1)[1])
            assert tokens and not [t for t in tokens if t == "[UNK]" or t.startswith("##")]
    # A second call keeps the complete folder as it is.
    os.utime(os.path.join(folder, "vocab.txt"), (1, 1))
    assert samples.tiny_model(folder) == folder
    assert os.stat(os.path.join(folder, "vocab.txt")).st_mtime == 1


# ---------------------------------------------------------------------------
# Beside a TensorFlow of another distribution name (BERT_AD_WHEEL_TESTS=1).


def _other_tensorflow() -> list:
    """What a user may have installed first: tensorflow-cpu, not `tensorflow`."""
    _, version = _lane_tensorflow()
    if IS_TF1_LANE:
        # tensorflow-cpu exists as 1.15.0 only; TF 1.15 needs protobuf < 3.21.
        return ["tensorflow-cpu==1.15.0", "protobuf<3.21"]
    return [f"tensorflow-cpu=={version}"]


@pytest.mark.skipif(os.environ.get("BERT_AD_WHEEL_TESTS") != "1",
                    reason="installs tensorflow-cpu into a fresh venv (1-3 minutes); "
                           "set BERT_AD_WHEEL_TESTS=1 (.ci/run does, as its own step)")
def test_wheel_beside_another_tensorflow_distribution(wheel, tmp_path):
    venv = Venv(str(tmp_path / "venv"))
    other = _other_tensorflow()
    venv.install_first(*other)
    before = venv.distributions()
    assert "tensorflow-cpu" in before and "tensorflow" not in before

    venv.pip("install", "-q", wheel)
    after = venv.distributions()
    # pip added bert_ad and its own needs, never the `tensorflow` distribution.
    assert "tensorflow" not in after
    assert after["tensorflow-cpu"] == before["tensorflow-cpu"]
    assert {name: v for name, v in before.items() if after.get(name) != v} == {}
    assert set(after) - set(before) <= {"bert-ad", "sentencepiece", "absl-py", "numpy"}
    assert "bert-ad" in after

    version = venv.run(["bert-ad-classifier", "--version"])
    assert _check(version).stdout == (
        f"bert_ad {bert_ad.__version__}, TensorFlow {after['tensorflow-cpu']} "
        f"(tensorflow-cpu, CPU build)\n")

    commands = [[script, "--help"] for script in console_scripts(wheel)]
    commands += [["python", "-m", module, "--help"]
                 for module in MODULE_COMMANDS + ("bert_ad.assets",)]
    with ThreadPoolExecutor(2) as pool:
        helps = list(pool.map(venv.run, commands))
    for command, result in zip(commands, helps):
        assert _check(result).stdout.startswith("usage: "), command
        assert "Traceback" not in result.stderr, command

    # The smoke job: the packaged tiny config and sample data, through the console script.
    tiny = _check(venv.run(["python", "-m", "bert_ad.assets", "tiny"],
                           BERT_AD_CACHE=str(tmp_path / "cache"))).stdout.split("\t")[1].strip()
    assert tiny.startswith(str(tmp_path / "cache"))
    output_dir = str(tmp_path / "smoke")
    smoke = venv.run([
        "bert-ad-classifier", "--task_name=sentiment",
        f"--data_dir={tiny}/sample_sentiment", f"--vocab_file={tiny}/vocab.txt",
        f"--bert_config_file={tiny}/bert_config.json", "--max_seq_length=32",
        "--train_batch_size=8", "--predict_batch_size=8", "--num_train_epochs=1",
        "--n_gpus=1", "--do_train=true", "--do_predict=true", f"--output_dir={output_dir}"])
    _check(smoke)
    # 40 training rows / batch 8 = 5 steps; one prediction per test row.
    with open(os.path.join(output_dir, "train_results.txt")) as f:
        assert re.search(r"^global_step = 5$", f.read(), re.M)
    with open(os.path.join(output_dir, "predict.txt")) as f:
        assert len(f.read().splitlines()) == 16
    assert os.path.exists(os.path.join(output_dir, "model.ckpt-5.index"))
