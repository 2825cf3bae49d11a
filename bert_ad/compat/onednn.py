"""oneDNN: whether this process's TensorFlow runs its oneDNN CPU kernels, why, and
its once-a-process data-type notice (bert_ad/compat/__init__.py turns oneDNN on
for x86 before TensorFlow is imported)."""

from __future__ import annotations

import os

from bert_ad.compat import (IS_TF1, ONEDNN_SET_BY_USER, ONEDNN_VARIABLE, TF_LOGS_ASKED_FOR,
                            TF_VERSION, quiet_stderr, tf, with_grappler_setting)


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
        config = with_grappler_setting(tf.ConfigProto(device_count={"GPU": 0}))
        with tf.Session(graph=graph, config=config) as s:
            s.run(transposed)
