"""The one place where TensorFlow 1.15 and TensorFlow 2.x differ for us.

Everything else in bert_ad imports `tf` from here and writes plain
`tf.compat.v1` graph-mode code, which both lanes understand. This module
imports TensorFlow (quietly, in graph mode, oneDNN on for x86) and holds
what every graph needs; the rest is split by what it is for:

  compat/onednn.py       oneDNN on or off, and its once-a-process notice
  compat/installed.py    which TensorFlow is installed (distributions, build, GPUs)
  compat/graphs.py       graphs written for serving that load in both lanes
  compat/collectives.py  several workers: gRPC server and collective ops
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import sys

from bert_ad.errors import UserError

# TensorFlow's C++ start-up chatter hides our own log lines; users can still
# raise it with TF_CPP_MIN_LOG_LEVEL=0 (and then see everything, see below).
TF_LOGS_ASKED_FOR = "TF_CPP_MIN_LOG_LEVEL" in os.environ
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# oneDNN kernels (matmul, softmax, layer norm, ...) on every x86 CPU: TensorFlow
# 2.x turns them on by itself only on CPUs with AVX-512 VNNI, BF16 or AMX and
# leaves AVX2-only CPUs on its slower Eigen kernels (docs/benchmarks.md). The
# variable is read when TensorFlow is imported, so it is set here, before the
# import below; a user's own TF_ENABLE_ONEDNN_OPTS (0 or 1) is left alone.
# TensorFlow 1.15's pip wheels contain no oneDNN and ignore the variable.
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
ONEDNN_SET_BY_USER = ONEDNN_VARIABLE in os.environ
X86_MACHINES = ("x86_64", "amd64", "i386", "i686", "x86")
if not ONEDNN_SET_BY_USER and platform.machine().lower() in X86_MACHINES:
    os.environ[ONEDNN_VARIABLE] = "1"

# bert_ad installs no TensorFlow of its own unless asked (a GPU or vendor build
# the user installed first must not be replaced): these are the ways to get one.
INSTALL_COMMANDS = (
    'pip install "bert_ad[tf]" (TensorFlow 2.x; CPU, or NVIDIA GPUs with '
    'tensorflow[and-cuda]) | pip install "bert_ad[tf1]" (TensorFlow 1.15.5 CPU build, '
    'Python 3.7) | pip install "bert_ad[tf1-gpu]" (TensorFlow 1.15.5 GPU build: '
    'CUDA 10.0 and cuDNN 7.6, Python 3.7)')
MINIMUM_VERSION = (1, 15)
# Distribution names that install the `tensorflow` module (pip treats each as
# a different package, so two of them overwrite each other's files).
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel",
    "intel-tensorflow", "tensorflow-rocm", "tensorflow-macos", "tf-nightly",
    "tf-nightly-cpu", "tf-nightly-gpu")


class TensorFlowUnavailable(UserError):
    """No usable TensorFlow: none importable, too old, or without tf.compat.v1 graph mode."""


@contextlib.contextmanager
def quiet_stderr():
    """File descriptor 2 muted for a block (unless the user asked for TF's logs).

    TensorFlow's C++ writes absl/oneDNN notices at import and a "failed call
    to cuInit" line at the first device query on a machine without a GPU
    straight to fd 2, whatever TF_CPP_MIN_LOG_LEVEL says; muting them keeps
    a bad-input error a single line on stderr. Python exceptions propagate.
    """
    if TF_LOGS_ASKED_FOR:
        yield
        return
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


# TensorFlow 2.16+ imports Keras at `import tensorflow` (to register its optimizers),
# and Keras scikit-learn when installed: 2-3 s of a 6 s import in every bert_ad
# process, for code bert_ad never runs. TensorFlow skips it when TF_USE_LEGACY_KERAS
# asks for tf_keras and tf_keras is not installed; tf.keras is resolved at its first
# use from the variable as it is then, so it is set for the import only (a user's
# tf.keras in the same process is the usual Keras 3).
LEGACY_KERAS_VARIABLE = "TF_USE_LEGACY_KERAS"


@contextlib.contextmanager
def _without_eager_keras():
    import importlib.util
    if LEGACY_KERAS_VARIABLE in os.environ or importlib.util.find_spec("tf_keras"):
        yield    # the user's choice, or tf_keras would be imported instead
        return
    os.environ[LEGACY_KERAS_VARIABLE] = "1"
    try:
        yield
    finally:
        del os.environ[LEGACY_KERAS_VARIABLE]


def _import_tensorflow_quietly():
    with quiet_stderr(), _without_eager_keras():
        import tensorflow
    # (the tf_keras folder TensorFlow put first on its path does not exist)
    path = getattr(tensorflow, "__path__", None)
    if isinstance(path, list) and None in path:
        path.remove(None)
    return tensorflow


# sentencepiece must be loaded before TensorFlow 1.15: the other way round,
# their protobuf copies clash and SentencePiece training segfaults.
try:
    import sentencepiece  # noqa: F401
except ImportError:  # only SentencePiece vocabularies need it
    pass


def _version_numbers(version: str) -> tuple:
    """(major, minor) of a version string such as "1.15.5" or "2.21.0rc1"."""
    numbers = re.findall(r"\d+", version)[:2]
    return tuple(int(n) for n in numbers) if len(numbers) == 2 else (0, 0)


def _root_cause(error: BaseException) -> str:
    """`Type: first line` of the innermost exception behind `error`.

    TensorFlow wraps a native library that fails to load in a long
    ImportError whose first line is "Traceback ..."; the exception it wraps
    names the library.
    """
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = error.__cause__ or error.__context__
        if inner is None:
            break
        error = inner
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else 'no message'}"


def import_tensorflow():
    """Import TensorFlow and check it can run bert_ad.

    Returns:
      The `tensorflow` module (1.15 or 2.x with tf.compat.v1 graph mode).
    Raises:
      TensorFlowUnavailable: none is importable, the one installed fails to
        import, or it is too old / has no graph mode; the message is one line
        with the three ways to install one.
    """
    try:
        module = _import_tensorflow_quietly()
    except ImportError as e:
        if getattr(e, "name", None) == "tensorflow":
            raise TensorFlowUnavailable(
                "no TensorFlow is installed: bert_ad runs on TensorFlow 1.15 or 2.x and "
                f"installs none by itself; install one: {INSTALL_COMMANDS}") from None
        raise _broken_install(e) from None
    except Exception as e:  # e.g. TF 1.15 under protobuf >= 3.21: a TypeError
        raise _broken_install(e) from None
    version = getattr(module, "__version__", None)
    if version is None:  # e.g. the folder one distribution's uninstall left behind
        where = ", ".join(getattr(module, "__path__", None) or ["?"])
        raise TensorFlowUnavailable(
            f"the tensorflow module at {where} is not a complete TensorFlow (no __version__: "
            f"files left by an uninstall?); remove it and install one: {INSTALL_COMMANDS}")
    version = str(version)
    if _version_numbers(version) < MINIMUM_VERSION:
        raise TensorFlowUnavailable(
            f"TensorFlow {version} is too old: bert_ad needs 1.15 or 2.x; replace it: "
            f"{INSTALL_COMMANDS}")
    v1 = getattr(getattr(module, "compat", None), "v1", None)
    if not all(hasattr(v1, name) for name in ("disable_eager_execution", "Session",
                                              "placeholder")):
        raise TensorFlowUnavailable(
            f"TensorFlow {version} has no tf.compat.v1 graph mode, which bert_ad runs on; "
            f"install a TensorFlow that has it: {INSTALL_COMMANDS}")
    return module


def _broken_install(error: BaseException) -> TensorFlowUnavailable:
    cause = _root_cause(error)
    hint = ""
    if "Descriptors cannot" in cause:
        hint = ' (TensorFlow 1.15 needs pip install "protobuf<3.21")'
    return TensorFlowUnavailable(
        f"TensorFlow is installed but does not import ({cause}){hint}; repair or replace "
        f"it: {INSTALL_COMMANDS}")


_tf = import_tensorflow()

tf = _tf.compat.v1
TF_VERSION = _tf.__version__
IS_TF1 = TF_VERSION.startswith("1.")

# Graph mode everywhere, with resource variables in both lanes so that
# placement, gradients (IndexedSlices for the embedding) and saved
# checkpoints look the same whatever the TensorFlow version.
tf.disable_eager_execution()
tf.enable_resource_variables()
if IS_TF1:
    tf.logging.set_verbosity(tf.logging.ERROR)
else:
    _tf.get_logger().setLevel("ERROR")

erf = _tf.math.erf
gfile = _tf.io.gfile

# Grappler, TensorFlow's graph optimiser, rewrites a graph at a session's first run of
# each new set of fetches (fusions, constant folding, pruning): worth it for the
# thousands of steps of a real run, not for a graph built to run a few times. The test
# suite's tiny models are such graphs: a tiny classifier's train, eval and predict took
# 7.6 s with it and 4.4 s without, a third of the suite's time. BERT_AD_GRAPPLER=off
# (tests/conftest.py sets it; the tests of what Grappler changes set it back on) turns
# it off in every session this process opens: those opened without a ConfigProto here,
# those with one through with_grappler_setting (session_config and bert_ad's own
# ConfigProtos call it); users leave it unset.
GRAPPLER_VARIABLE = "BERT_AD_GRAPPLER"


def _grappler_is_off() -> bool:
    value = os.environ.get(GRAPPLER_VARIABLE, "on").strip().lower()
    if value not in ("on", "off"):
        raise UserError(f"{GRAPPLER_VARIABLE}={os.environ[GRAPPLER_VARIABLE]!r} is neither "
                        f"on nor off: unset it (TensorFlow's graph optimiser on) or set it "
                        f"to off")
    return value == "off"


GRAPPLER_OFF = _grappler_is_off()
if GRAPPLER_OFF:  # the sessions opened without a ConfigProto of their own
    _tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": True})


def with_grappler_setting(config: "tf.ConfigProto") -> "tf.ConfigProto":
    """`config` with Grappler off when BERT_AD_GRAPPLER says so (changed in place)."""
    if GRAPPLER_OFF:
        config.graph_options.rewrite_options.disable_meta_optimizer = True
    return config


def session_config(num_cpu_devices: int = 1, allow_soft_placement: bool = False,
                   use_xla: bool = False, collective_nccl: bool = False) -> "tf.ConfigProto":
    """A ConfigProto with `num_cpu_devices` logical CPU devices.

    Several logical CPU devices let the multi-tower graph run for real on a
    machine without GPUs: tower i is pinned to /cpu:i exactly as it would be
    pinned to /gpu:i. `collective_nccl`: collective ops between this process's
    GPUs use NCCL (TF 1.15 picks it here; TF 2.x per op).
    """
    config = tf.ConfigProto(allow_soft_placement=allow_soft_placement,
                            device_count={"CPU": max(1, num_cpu_devices)})
    if IS_TF1 and collective_nccl:
        config.experimental.collective_nccl = True
    if use_xla:
        config.graph_options.optimizer_options.global_jit_level = (
            tf.OptimizerOptions.ON_1)
    return with_grappler_setting(config)


def list_checkpoint_variables(path: str) -> list[tuple[str, list[int]]]:
    """[(name, shape)] of a checkpoint prefix, identical in both lanes."""
    return [(name, list(shape)) for name, shape in tf.train.list_variables(path)]


def load_checkpoint_tensor(path: str, name: str):
    return tf.train.load_variable(path, name)
