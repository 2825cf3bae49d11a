"""The one place where TensorFlow 1.15 and TensorFlow 2.x differ for us.

Everything else in bert_ad imports `tf` from here and writes plain
`tf.compat.v1` graph-mode code, which both lanes understand.
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


def onednn_enabled() -> bool:
    """Whether this process's TensorFlow runs its oneDNN CPU kernels."""
    if IS_TF1:
        from tensorflow.python import pywrap_tensorflow as port
    else:
        from tensorflow.python.util import _pywrap_util_port as port
    return bool(port.IsMklEnabled())


def onednn_state() -> str:
    """oneDNN on or off, and why: for the start-up log and benchmark tables.

    Returns:
      e.g. "on (TF_ENABLE_ONEDNN_OPTS=1, bert_ad's default on x86)",
      "off (TF_ENABLE_ONEDNN_OPTS=0, from the environment)" or, in TF 1.15,
      "off (TensorFlow 1.15.5 is not a oneDNN build; TF_ENABLE_ONEDNN_OPTS has
      no effect)".
    """
    state = "on" if onednn_enabled() else "off"
    if IS_TF1 and state == "off":
        return (f"off (TensorFlow {TF_VERSION} is not a oneDNN build; "
                f"{ONEDNN_VARIABLE} has no effect)")
    value = os.environ.get(ONEDNN_VARIABLE)
    if value is None:
        return f"{state} ({ONEDNN_VARIABLE} unset: TensorFlow's default for this CPU)"
    who = "from the environment" if ONEDNN_SET_BY_USER else "bert_ad's default on x86"
    return f"{state} ({ONEDNN_VARIABLE}={value}, {who})"


# TensorFlow's oneDNN build logs "oneDNN supports DT_INT32 (DT_HALF, DT_BFLOAT16)
# only on platforms with AVX-512. Falling back to the default Eigen-based
# implementation" at ERROR level (which TF_CPP_MIN_LOG_LEVEL=2 lets through)
# the first time a graph holds such an op: NER's CRF, fp16 exports and their
# scoring. It is a note about TensorFlow's own kernel choice, once per process
# (tensorflow/core/util/util.cc, DataTypeUnsupportedWarning: one call_once
# flag), so bert_ad spends it on a tiny graph with fd 2 muted.
_ONEDNN_NOTICE_SPENT = False


def quiet_onednn_notices() -> None:
    """Absorb TensorFlow's once-per-process oneDNN data-type notice, quietly.

    Runs a transpose in int32, float16 and bfloat16 (each dtype in case a
    TensorFlow logs it per dtype) once, with stderr muted; nothing when the
    user asked for TensorFlow's logs (TF_CPP_MIN_LOG_LEVEL), in TF 1.15, or
    with oneDNN off.
    """
    global _ONEDNN_NOTICE_SPENT
    if _ONEDNN_NOTICE_SPENT or TF_LOGS_ASKED_FOR or IS_TF1 or not onednn_enabled():
        return
    _ONEDNN_NOTICE_SPENT = True
    with quiet_stderr():
        graph = tf.Graph()
        with graph.as_default():
            transposed = [tf.transpose(tf.placeholder_with_default(
                tf.zeros([2, 3], dtype), [None, 3])) for dtype in (tf.int32, tf.float16,
                                                                    tf.bfloat16)]
        with tf.Session(graph=graph, config=tf.ConfigProto(device_count={"GPU": 0})) as s:
            s.run(transposed)


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
    return config


def list_gpu_count() -> int:
    """GPUs this TensorFlow build can use (0 on a CPU-only build or machine)."""
    with quiet_stderr():
        if IS_TF1:
            from tensorflow.python.client import device_lib
            return sum(d.device_type == "GPU" for d in device_lib.list_local_devices())
        return len(_tf.config.list_physical_devices("GPU"))


def tensorflow_build() -> str:
    """What this TensorFlow was built for: "CUDA 12.5.1 / cuDNN 9 build" or "CPU build"."""
    if IS_TF1:
        from tensorflow.python.platform import build_info
        info = {"is_cuda_build": getattr(build_info, "is_cuda_build", False),
                "is_rocm_build": getattr(build_info, "is_rocm_build", False),
                "cuda_version": getattr(build_info, "cuda_version_number", None),
                "cudnn_version": getattr(build_info, "cudnn_version_number", None)}
    else:
        info = dict(_tf.sysconfig.get_build_info())
    if info.get("is_cuda_build"):
        versions = [f"{name} {info[key]}" for name, key in (("CUDA", "cuda_version"),
                                                             ("cuDNN", "cudnn_version"))
                    if info.get(key)]
        return (" / ".join(versions) or "CUDA") + " build"
    if info.get("is_rocm_build"):
        return "ROCm build"
    return "CPU build"


def tensorflow_distributions() -> list[str]:
    """The installed distributions that provide the `tensorflow` module.

    More than one (say tensorflow-gpu and tensorflow) means the later install
    overwrote the other's files.
    """
    try:
        from importlib import metadata
        found = []
        for name in TENSORFLOW_DISTRIBUTIONS:
            try:
                metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
            found.append(name)
        return found
    except ImportError:  # Python 3.7: no importlib.metadata
        import pkg_resources
        return [name for name in TENSORFLOW_DISTRIBUTIONS
                if _has_distribution(pkg_resources, name)]


def _has_distribution(pkg_resources, name: str) -> bool:
    try:
        pkg_resources.get_distribution(name)
    except pkg_resources.DistributionNotFound:
        return False
    return True


def tensorflow_description() -> str:
    """'TensorFlow 2.21.0 (tensorflow-cpu, CPU build)': for --version."""
    names = tensorflow_distributions()
    source = " + ".join(names) if names else "no pip distribution"
    return f"TensorFlow {TF_VERSION} ({source}, {tensorflow_build()})"


def list_checkpoint_variables(path: str) -> list[tuple[str, list[int]]]:
    """[(name, shape)] of a checkpoint prefix, identical in both lanes."""
    return [(name, list(shape)) for name, shape in tf.train.list_variables(path)]


def load_checkpoint_tensor(path: str, name: str):
    return tf.train.load_variable(path, name)


# --- Graphs written for serving (bert_ad/serving/export.py) ---------------------------
#
# A graph TF 2.x writes names attributes TF 1.15's op registry does not know
# (MatMul's grad_a/grad_b, VarHandleOp's debug_name), and TF 1.15 refuses a
# whole graph for one unknown attribute. The new ones at their default value
# mean nothing, and debug_name is a label for error messages: without them
# the same graph loads in both lanes.

DEBUG_ONLY_ATTRIBUTES = {"VarHandleOp": ("debug_name",)}


def portable_graph_def(graph_def) -> "tf.GraphDef":
    """`graph_def` without default-valued and debugging-only attributes (a copy).

    Args:
      graph_def: a GraphDef of this process's TensorFlow.
    Returns:
      A GraphDef that computes the same, readable by TF 1.15 and TF 2.x.
    """
    stripped = tf.train.export_meta_graph(graph_def=graph_def, collection_list=[],
                                          strip_default_attrs=True).graph_def
    drop_debug_attributes(stripped)
    return stripped


def drop_debug_attributes(graph_def) -> None:
    """Remove DEBUG_ONLY_ATTRIBUTES from `graph_def`'s nodes, in place."""
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    for node in nodes:
        for name in DEBUG_ONLY_ATTRIBUTES.get(node.op, ()):
            if name in node.attr:
                del node.attr[name]


def make_saved_model_portable(export_dir: str) -> None:
    """Rewrite export_dir/saved_model.pb without debugging-only attributes.

    (tf.saved_model.Builder's strip_default_attrs=True has already removed
    the default-valued ones.)
    """
    from tensorflow.core.protobuf import saved_model_pb2
    path = os.path.join(export_dir, "saved_model.pb")
    saved_model = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        drop_debug_attributes(meta_graph.graph_def)
    with open(path, "wb") as f:
        f.write(saved_model.SerializeToString())


# --- Several workers: TensorFlow's gRPC server and collective ops ---------------------
#
# Both lanes have the v1 collective ops (`collective_ops.all_reduce` and
# friends) in graph mode. TF 2.x takes the implementation as
# `communication_hint` (and has a per-op timeout we leave off: the cluster
# runtime puts one deadline on the whole session call, the same in both
# lanes); TF 1.15 picks NCCL through the session's
# `experimental.collective_nccl`, only sums ("Add") or multiplies, wants the
# op's input placed, and its CPU ring has no float16.

def _collective_ops():
    from tensorflow.python.ops import collective_ops
    return collective_ops


def _hint(implementation: str) -> dict:
    return {} if IS_TF1 else {"communication_hint": implementation}


def collective_all_reduce(tensor, group_size: int, group_key: int, instance_key: int,
                          final_op: str = "Id", implementation: str = "ring"):
    """Sum over the group (then `final_op`: "Id" or "Div" by the group size)."""
    return _collective_ops().all_reduce(tensor, group_size, group_key, instance_key,
                                        "Add", final_op, **_hint(implementation))


def collective_all_gather(tensor, group_size: int, group_key: int, instance_key: int,
                          implementation: str = "ring"):
    return _collective_ops().all_gather(tensor, group_size, group_key, instance_key,
                                        **_hint(implementation))


def collective_broadcast_send(tensor, group_size: int, group_key: int, instance_key: int,
                              implementation: str = "ring"):
    return _collective_ops().broadcast_send(tensor, tensor.shape, tensor.dtype, group_size,
                                            group_key, instance_key, **_hint(implementation))


def collective_broadcast_recv(shape, dtype, group_size: int, group_key: int,
                              instance_key: int, implementation: str = "ring"):
    return _collective_ops().broadcast_recv(shape, dtype, group_size, group_key,
                                            instance_key, **_hint(implementation))


def collective_fp16_problem(implementation: str) -> str | None:
    """Why float16 exchange cannot run here, or None when it can."""
    if IS_TF1 and implementation == "ring":
        return ("TensorFlow 1.15's CPU ring all-reduce has no float16 "
                "(CollectiveImplementation does not support datatype 19)")
    return None


def configure_collectives(config, group_leader: str, task_filter: str,
                          implementation: str) -> None:
    """Set a worker's ConfigProto up for between-graph collectives.

    Args:
      config: the ConfigProto (changed in place).
      group_leader: "/job:worker/replica:0/task:0", who resolves groups.
      task_filter: "/job:worker/task:i": this worker's session sees only its
        own devices (no cross-worker placement, no waiting for every worker
        at session creation).
      implementation: "ring" or "nccl".
    """
    config.experimental.collective_group_leader = group_leader
    del config.device_filters[:]
    config.device_filters.append(task_filter)
    if IS_TF1 and implementation == "nccl":
        config.experimental.collective_nccl = True


def start_server(hosts: list, task_index: int, config):
    """Start this worker's gRPC server (tf.distribute.Server in TF 2.x)."""
    cluster = tf.train.ClusterSpec({"worker": list(hosts)})
    return tf.train.Server(cluster, job_name="worker", task_index=task_index,
                           config=config, start=True)
