"""The learning rate: Google's warmup-then-decay schedule and the batch-size scaling rule.

`learning_rate_schedule` is the graph's rate at each step (Google BERT's
create_optimizer); `scale_learning_rate` is --lr_scaling, the rate for a
global batch other than the one the rate was tuned at.
"""

from __future__ import annotations

import math

from bert_ad.choices import LR_SCALING_MODES
from bert_ad.compat import tf
from bert_ad.errors import fail



def learning_rate_schedule(global_step, base_learning_rate: float, num_train_steps: int,
                           num_warmup_steps: int):
    """Google BERT's schedule: linear warmup, then linear decay to 0.

    Exactly `create_optimizer` of Google's optimization.py: the decay is
    polynomial_decay(power=1, end=0) computed from step 0,
        decayed = base * (1 - min(step, num_train_steps) / num_train_steps),
    and for step < num_warmup_steps the warmup value base * step / warmup
    replaces it. So step 0 trains with lr 0, and the first step after warmup
    uses base * (1 - warmup / num_train_steps), not base.

    Args:
      global_step: integer scalar tensor (the step about to be taken).
      base_learning_rate: the peak rate before decay.
      num_train_steps: steps of the whole run (>= 1); lr is 0 from there on.
      num_warmup_steps: warmup steps (0: no warmup).

    Returns:
      A scalar float32 tensor.
    """
    if num_train_steps < 1:
        fail(f"the learning-rate schedule needs at least 1 training step, got "
             f"{num_train_steps}; train on more examples or for more epochs")
    if num_warmup_steps < 0:
        fail(f"the number of warmup steps must be >= 0, got {num_warmup_steps}")
    with tf.name_scope("learning_rate"):
        step = tf.cast(global_step, tf.float32)
        done = tf.minimum(step, float(num_train_steps)) / float(num_train_steps)
        lr = base_learning_rate * (1.0 - done)
        if num_warmup_steps:
            step_int = tf.cast(global_step, tf.int64)
            warmup_lr = base_learning_rate * (step / float(num_warmup_steps))
            is_warmup = tf.cast(step_int < num_warmup_steps, tf.float32)
            lr = (1.0 - is_warmup) * lr + is_warmup * warmup_lr
        return tf.identity(lr, name="value")


def scale_learning_rate(base_lr: float, global_batch: int, reference_batch: int,
                        mode: str) -> float:
    """The learning rate for `global_batch`, tuned at `reference_batch`.

    Args:
      mode: "none" (base_lr), "linear" (base_lr * global / reference) or
        "sqrt" (base_lr * sqrt(global / reference)), from --lr_scaling.

    Returns:
      The scaled learning rate.
    """
    if mode not in LR_SCALING_MODES:
        fail(f"--lr_scaling={mode!r} is not one of {', '.join(LR_SCALING_MODES)}")
    if mode == "none":
        return float(base_lr)
    if global_batch < 1 or reference_batch < 1:
        fail(f"--lr_scaling={mode}: batch sizes must be positive, got global "
             f"batch {global_batch} and reference batch {reference_batch}")
    ratio = global_batch / reference_batch
    return float(base_lr) * (ratio if mode == "linear" else math.sqrt(ratio))
