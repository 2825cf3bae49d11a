"""The one place where TensorFlow 1.15 and TensorFlow 2.x differ for us.

Everything else in bert_ad imports `tf` from here and writes plain
`tf.compat.v1` graph-mode code, which both lanes understand.
"""

from __future__ import annotations

import os
import sys

# TensorFlow's C++ start-up chatter hides our own log lines; users can still
# raise it with TF_CPP_MIN_LOG_LEVEL=0.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")



def _import_tensorflow_quietly():
    """Import TensorFlow with file descriptor 2 muted.

    TF 2.x's C++ start-up writes absl/oneDNN notices straight to fd 2 at
    import, whatever TF_CPP_MIN_LOG_LEVEL says; muting them keeps a bad-input
    error a single line on stderr. Python exceptions still propagate.
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (AttributeError, OSError, ValueError):
        import tensorflow
        return tensorflow
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        import tensorflow
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return tensorflow


_tf = _import_tensorflow_quietly()

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


def session_config(num_cpu_devices: int = 1, allow_soft_placement: bool = False,
                   use_xla: bool = False) -> "tf.ConfigProto":
    """A ConfigProto with `num_cpu_devices` logical CPU devices.

    Several logical CPU devices let the multi-tower graph run for real on a
    machine without GPUs: tower i is pinned to /cpu:i exactly as it would be
    pinned to /gpu:i.
    """
    config = tf.ConfigProto(allow_soft_placement=allow_soft_placement,
                            device_count={"CPU": max(1, num_cpu_devices)})
    if use_xla:
        config.graph_options.optimizer_options.global_jit_level = (
            tf.OptimizerOptions.ON_1)
    return config


def list_gpu_count() -> int:
    """GPUs this TensorFlow build can use (0 on a CPU-only build or machine)."""
    if IS_TF1:
        from tensorflow.python.client import device_lib
        return sum(d.device_type == "GPU" for d in device_lib.list_local_devices())
    return len(_tf.config.list_physical_devices("GPU"))


def list_checkpoint_variables(path: str) -> list[tuple[str, list[int]]]:
    """[(name, shape)] of a checkpoint prefix, identical in both lanes."""
    return [(name, list(shape)) for name, shape in tf.train.list_variables(path)]


def load_checkpoint_tensor(path: str, name: str):
    return tf.train.load_variable(path, name)
