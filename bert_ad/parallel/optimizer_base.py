"""The Adam-family machinery every optimizer of bert_ad.parallel.optimization shares.

`Optimizer` keeps Google BERT's checkpoint layout: the two moment estimates
of a variable `<var>` are ordinary variables named `<var>/adam_m` and
`<var>/adam_v`, created with `tf.get_variable` at the root variable scope
under the caller's device scope (the trainer calls `apply_gradients` inside
`tf.device("/cpu:0")`, so they live on the CPU), and a Google checkpoint
written by `AdamWeightDecayOptimizer` loads as is. Subclasses only say how
the updated moments become the step direction. Everything is plain
tf.compat.v1 ops, so one code base runs in TF 1.15 and TF 2.x graph mode.

* Fused kernels (`fused=True`, the default of AdamWeightDecay and Adam): the
  moments and the weight move in one pass of TensorFlow's ResourceApplyAdam per
  variable, plus one ResourceApplyGradientDescent pass for the weight decay,
  instead of a dozen element-wise ops that each read and write the whole
  variable. Same update to float round-off (tests/test_optimization.py checks
  1e-6 over several steps), same slots, same checkpoints. RAdam's first
  (momentum-only) steps and LAMB's trust ratio, which needs the norm of the
  whole update before the weight moves, have no fused kernel: they stay
  unfused.
* Sparse ("lazy") updates (`sparse_updates=True`, --sparse_embedding_updates):
  a gradient that arrives as tf.IndexedSlices (the word embeddings' gather)
  updates only the rows it names: their moments, their weight decay and
  their step. The other rows keep their weights and moments untouched,
  while the default dense update (Google's) still decays their moments,
  moves them by m / (sqrt(v) + eps) and applies weight decay to them.
* Bias-corrected optimizers (`uses_step`) count the updates already made in
  their own non-trainable int64 variable `<optimizer name>/step` (`Adam/step`,
  `RAdam/step`, `Lamb/step`), not in global_step: the counter is saved and
  restored with the slots it describes, so a resumed run continues with the
  right t, while a fine-tuning run that restores global_step or starts from a
  pretraining checkpoint without this variable still starts its fresh slots
  at t = 1.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from bert_ad.compat import tf
from bert_ad.errors import fail
from bert_ad.parallel.gradients import deduplicate_rows
from bert_ad.parallel.replicated import google_name


def _variable_name(name: str) -> str:
    """`bert/pooler/dense/kernel:0` -> `bert/pooler/dense/kernel`."""
    m = re.match(r"^(.*):\d+$", name)
    return m.group(1) if m else name


def matches_any(name: str, patterns: Iterable[str] | None) -> bool:
    """True if any regular expression in `patterns` is found in `name`."""
    return any(re.search(p, name) is not None for p in (patterns or ()))


class Optimizer:
    """Adam-family optimizer with Google BERT's slot names.

    Subclasses only say how the two updated moments become the step
    direction (`_direction`); the moments, the slots, the learning rate, the
    step counter and the global step are handled here.

    Args:
      learning_rate: a float or a scalar float32 tensor (the schedule).
      beta_1, beta_2: decay rates of the first and second moment, in [0, 1).
      epsilon: added to the root of the second moment, > 0.
      weight_decay_rate: decoupled weight decay (0 disables it).
      exclude_from_weight_decay: regular expressions; a variable whose name
        matches one gets no weight decay.
      name: names the ops and, for bias-corrected optimizers, the step counter.
      fused: apply with ResourceApplyAdam where the subclass can (`_fused_inputs`).
      sparse_updates: update only the rows of an IndexedSlices gradient (see
        the module docstring); dense gradients are unaffected.
    """

    # Whether the update needs t, the 1-based number of this update.
    uses_step = False
    # ((regular expression, factor), ...): a variable whose name matches one
    # learns at factor x the learning rate (the first match counts), e.g. a
    # CRF's transitions, which start near 0 and have few, large entries.
    learning_rate_multipliers: tuple = ()

    def __init__(self, learning_rate, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, weight_decay_rate: float = 0.0,
                 exclude_from_weight_decay: Sequence[str] | None = None,
                 name: str = "Optimizer", fused: bool = False,
                 sparse_updates: bool = False):
        if isinstance(learning_rate, (int, float)) and not learning_rate > 0:
            fail(f"learning rate must be positive, got {learning_rate} (--learning_rate)")
        for key, value in (("beta_1", beta_1), ("beta_2", beta_2)):
            if not 0.0 <= value < 1.0:
                fail(f"{name}: {key} must be in [0, 1), got {value}")
        if not epsilon > 0:
            fail(f"{name}: epsilon must be positive, got {epsilon}")
        if not weight_decay_rate >= 0:
            fail(f"{name}: weight decay rate must be >= 0, got {weight_decay_rate} "
                 "(--weight_decay_rate)")
        self._learning_rate = learning_rate
        self.beta_1 = float(beta_1)
        self.beta_2 = float(beta_2)
        self.epsilon = float(epsilon)
        self.weight_decay_rate = float(weight_decay_rate)
        self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
        self.name = name
        self.fused = bool(fused)
        self.sparse_updates = bool(sparse_updates)
        self._slots: list = []
        self._step = None

    @property
    def learning_rate(self):
        """The learning rate as a scalar float32 tensor (in the current graph)."""
        return tf.convert_to_tensor(self._learning_rate, dtype=tf.float32)

    @property
    def step_variable(self):
        """The int64 update counter `<name>/step`, or None (no bias correction)."""
        return self._step

    def slot_variables(self) -> list:
        """[m, v, m, v, ...] of every variable updated so far, in apply order."""
        return list(self._slots)

    def variables(self) -> list:
        """Every variable this optimizer created: the slots and the step counter."""
        return self.slot_variables() + ([self._step] if self._step is not None else [])

    def use_weight_decay(self, param_name: str) -> bool:
        """Google's rule: decay unless the rate is 0 or the name is excluded."""
        return bool(self.weight_decay_rate) and not matches_any(
            param_name, self.exclude_from_weight_decay)

    def apply_gradients(self, grads_and_vars, global_step=None, name: str | None = None):
        """One update of every variable, then global_step += 1.

        Args:
          grads_and_vars: [(gradient, variable)]; the gradient is a dense
            tensor, tf.IndexedSlices or None (the pair is skipped).
          global_step: an integer variable incremented once, after all the
            updates, or None.
          name: name of the returned op.

        Returns:
          The op that runs the whole step.
        """
        pairs = [(g, v) for g, v in grads_and_vars if g is not None and v is not None]
        # The root variable scope, whatever scope the caller is in (a tower
        # scope with reuse=True would fail, any scope would rename the slots):
        # the slot names must be exactly Google's. The device scope is kept.
        with tf.variable_scope(tf.VariableScope(reuse=False)), \
                tf.name_scope(None, self.name):
            lr = self.learning_rate
            t = None
            if self.uses_step:
                if self._step is None:
                    self._step = tf.get_variable(
                        name=self.name + "/step", shape=[], dtype=tf.int64,
                        trainable=False, initializer=tf.zeros_initializer())
                # t is 1-based: the counter holds the updates already made.
                t = tf.cast(self._step.read_value() + 1, tf.float32, name="t")
            updates = []
            for grad, param in pairs:
                updates.extend(self._apply_one(grad, param, lr, t))
            finish = []
            with tf.control_dependencies(updates):
                if self._step is not None:
                    finish.append(self._step.assign_add(1, read_value=False))
                if global_step is not None:
                    finish.append(tf.assign_add(global_step, 1))
            return tf.group(*(updates + finish), name=name)

    def _apply_one(self, grad, param, lr, t) -> list:
        param_name = _variable_name(param.name)
        shape = param.shape.as_list()
        m = tf.get_variable(name=param_name + "/adam_m", shape=shape, dtype=tf.float32,
                            trainable=False, initializer=tf.zeros_initializer())
        v = tf.get_variable(name=param_name + "/adam_v", shape=shape, dtype=tf.float32,
                            trainable=False, initializer=tf.zeros_initializer())
        self._slots.extend([m, v])
        # The rules (weight decay, learning-rate multipliers, LAMB's
        # exclusions) read Google's name, whichever tower's copy this is.
        param_name = google_name(param_name)
        lr = self._learning_rate_of(param_name, lr)
        if isinstance(grad, tf.IndexedSlices):
            if self.sparse_updates:
                return self._apply_rows(grad, param, param_name, m, v, lr, t)
            # Adam is not sparse: rows without a gradient this step still see
            # their moments decay and still move by m/(sqrt(v)+eps). Updating
            # only the touched rows is LazyAdam (sparse_updates), a different
            # optimizer (and not Google's); densifying also sums duplicate indices.
            grad = tf.convert_to_tensor(grad)
        if self.fused and self._fused_inputs(t) is not None:
            return self._apply_fused(grad, param, param_name, m, v, lr, t)
        next_m = self.beta_1 * m + (1.0 - self.beta_1) * grad
        next_v = self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad)
        update = self._direction(param, param_name, next_m, next_v, t)
        next_param = param - lr * update
        return [param.assign(next_param, read_value=False),
                m.assign(next_m, read_value=False),
                v.assign(next_v, read_value=False)]

    def _fused_inputs(self, t):
        """(lr factor, beta1_power, beta2_power, epsilon) that make
        ResourceApplyAdam compute this optimizer's step, or None (no fused form).

        ResourceApplyAdam computes, with the new moments m and v,
            param -= lr * f * sqrt(1 - beta2_power) / (1 - beta1_power)
                     * m / (sqrt(v) + epsilon)
        (f is this factor; the weight decay is a separate pass).
        """
        return None

    def _apply_fused(self, grad, param, param_name: str, m, v, lr, t) -> list:
        """One ResourceApplyAdam pass (moments and weight), after the weight decay.

        Google's step is param - lr * (adam + wd * param) with the param of
        before the step, so the decay pass, param -= lr * wd * param, runs
        first, once the gradient exists (it may have been computed from
        param), and the Adam pass after it.
        """
        factor, beta1_power, beta2_power, epsilon = self._fused_inputs(t)
        raw = tf.raw_ops
        # Every input is made before the control blocks: an op created inside
        # one does not get the control edge itself when one of its inputs was
        # also made there (TensorFlow leaves it to the input), and in a cond
        # branch (TF 2.x) that edge on a constant input is lost, which let
        # the decay and the Adam pass race on the same buffer.
        adam_inputs = dict(beta1_power=beta1_power, beta2_power=beta2_power,
                           lr=lr * factor, beta1=tf.constant(self.beta_1),
                           beta2=tf.constant(self.beta_2), epsilon=epsilon)
        decay = []
        if self.use_weight_decay(param_name):
            alpha = lr * self.weight_decay_rate
            # The decay reads no gradient, so it waits for this one explicitly:
            # until the gradient exists, the towers may still be reading param.
            # (An identity made here, not the tensor itself: inside a cond
            # branch, TF 2.x drops a control edge to a tensor from outside.)
            with tf.control_dependencies([tf.identity(grad)]):
                before = param.read_value()
            decay.append(raw.ResourceApplyGradientDescent(var=param.handle, alpha=alpha,
                                                          delta=before))
        with tf.control_dependencies(decay):
            step = raw.ResourceApplyAdam(var=param.handle, m=m.handle, v=v.handle,
                                         grad=grad, **adam_inputs)
        return decay + [step]

    def _apply_rows(self, grad, param, param_name: str, m, v, lr, t) -> list:
        """The update of the rows an IndexedSlices gradient names, only.

        Duplicate indices are summed first (the row's real gradient); each
        named row then moves exactly as the dense update moves it when its
        moments hold the same values (rows seen at every step).
        """
        slices = deduplicate_rows(grad)
        rows = slices.indices
        next_m = (self.beta_1 * tf.gather(m, rows)
                  + (1.0 - self.beta_1) * slices.values)
        next_v = (self.beta_2 * tf.gather(v, rows)
                  + (1.0 - self.beta_2) * tf.square(slices.values))
        update = self._direction(tf.gather(param, rows), param_name, next_m, next_v, t)
        raw = tf.raw_ops
        # Each scatter's input was gathered from the same variable, so every
        # row is read before it is written.
        return [raw.ResourceScatterSub(resource=param.handle, indices=rows,
                                       updates=lr * update),
                raw.ResourceScatterUpdate(resource=m.handle, indices=rows, updates=next_m),
                raw.ResourceScatterUpdate(resource=v.handle, indices=rows, updates=next_v)]

    def _learning_rate_of(self, param_name: str, lr):
        for pattern, factor in self.learning_rate_multipliers:
            if re.search(pattern, param_name):
                return lr * float(factor)
        return lr

    def _direction(self, param, param_name: str, next_m, next_v, t):
        """What is multiplied by the learning rate and subtracted from param."""
        raise NotImplementedError

    def _decayed(self, update, param, param_name: str):
        """`update + wd * param` unless weight decay is off for this variable."""
        if self.use_weight_decay(param_name):
            return update + self.weight_decay_rate * param
        return update

    def _corrected(self, next_m, next_v, t):
        """Bias-corrected moments (m_hat, v_hat) at 1-based step t."""
        m_hat = next_m / (1.0 - tf.pow(self.beta_1, t))
        v_hat = next_v / (1.0 - tf.pow(self.beta_2, t))
        return m_hat, v_hat
