"""Mixed precision: compute dtype per --precision, and fp16's dynamic loss scaling.

Variables (the master weights), optimizer slots and checkpoints stay float32
in every mode; only activations and matmuls run in float16/bfloat16. fp16's
narrow range needs the loss scaled up before the backward pass (so small
gradients do not flush to zero) and the gradients scaled back down; when a
step overflows anyway, the update is skipped, the global step (and so the
learning-rate schedule) does not move, and the scale halves. After
`growth_interval` clean steps it doubles again.
"""

from __future__ import annotations

from bert_ad.choices import PRECISIONS
from bert_ad.compat import IS_TF1, tf
from bert_ad.cpu_features import cpu_flags
from bert_ad.errors import fail



def compute_dtype(precision: str):
    """The activation dtype of a --precision value (UserError where unsupported)."""
    if precision not in PRECISIONS:
        fail(f"--precision={precision} is not one of {', '.join(PRECISIONS)}")
    if precision == "bf16" and IS_TF1:
        # Checked: TF 1.15 lacks a bfloat16 BatchMatMul kernel (attention scores).
        fail("--precision=bf16 needs TensorFlow 2.x (TF 1.15 has no bfloat16 batch "
             "matmul kernel for attention); use --precision=fp16 or fp32 on this lane")
    return {"fp32": tf.float32, "fp16": tf.float16, "bf16": tf.bfloat16}[precision]


def bf16_path(uses_gpu: bool, cpuinfo: str = "/proc/cpuinfo") -> tuple:
    """(is it fast, one line for the start-up log): how --precision=bf16's matmuls run.

    bfloat16 pays only where the hardware multiplies it: GPUs from Ampere on, and
    CPUs with AMX or AVX512_BF16, where TensorFlow's oneDNN kernels use it. Elsewhere
    TensorFlow falls back to Eigen's generic kernels, which convert every element and
    run no faster than float32 (measured: 1.05x slower on an AVX2-only EPYC).
    """
    if uses_gpu:
        return True, ("precision bf16: matmuls in bfloat16 on the GPUs (native on compute "
                      "capability 8.0 and newer: A100, H100, RTX 30xx on)")
    cpu = cpu_flags(cpuinfo) or set()
    if "amx_bf16" in cpu or "amx_tile" in cpu:
        return True, "precision bf16: matmuls in bfloat16 on this CPU's AMX tiles (native)"
    if "avx512_bf16" in cpu:
        return True, "precision bf16: matmuls in bfloat16 with this CPU's AVX512_BF16 (native)"
    return False, ("precision bf16: this CPU has neither AMX nor AVX512_BF16, so bfloat16 runs "
                   "on generic kernels no faster than fp32 here (and less exact): "
                   "--precision=fp32 is the better choice on this machine")


class DynamicLossScale:
    """Loss scale state: `loss_scale` and `loss_scale/good_steps`, on the current device."""

    def __init__(self, initial_scale: float = 2.0 ** 15, growth_interval: int = 2000):
        self.growth_interval = growth_interval
        self.scale = tf.get_variable("loss_scale", [], tf.float32,
                                     tf.constant_initializer(initial_scale),
                                     trainable=False)
        self.good_steps = tf.get_variable("loss_scale/good_steps", [], tf.int64,
                                          tf.zeros_initializer(), trainable=False)

    def scaled(self, loss):
        return loss * tf.stop_gradient(self.scale.read_value())

    def unscaled(self, grads: list) -> list:
        inverse = 1.0 / self.scale.read_value()
        out = []
        for grad in grads:
            if grad is None:
                out.append(None)
            elif isinstance(grad, tf.IndexedSlices):
                out.append(tf.IndexedSlices(grad.values * inverse, grad.indices,
                                            grad.dense_shape))
            else:
                out.append(grad * inverse)
        return out

    def update(self, all_finite):
        """Grow after `growth_interval` finite steps in a row; halve (>= 1) on overflow."""
        def grown():
            good = self.good_steps + 1
            grow = good >= self.growth_interval
            new_scale = tf.where(grow, self.scale * 2.0, self.scale.read_value())
            new_good = tf.where(grow, tf.zeros([], tf.int64), good)
            return tf.group(self.scale.assign(new_scale), self.good_steps.assign(new_good))

        def shrunk():
            return tf.group(self.scale.assign(tf.maximum(self.scale / 2.0, 1.0)),
                            self.good_steps.assign(tf.zeros([], tf.int64)))

        return tf.cond(all_finite, grown, shrunk)
