"""Optimizers, the learning-rate schedule and gradient clipping.

Everything is plain tf.compat.v1 ops, so one code base runs in TF 1.15 and TF
2.x graph mode. The optimizers keep Google BERT's checkpoint layout: the two
moment estimates of a variable `<var>` are ordinary variables named
`<var>/adam_m` and `<var>/adam_v`, created with `tf.get_variable` at the root
variable scope under the caller's device scope (the trainer calls
`apply_gradients` inside `tf.device("/cpu:0")`, so they live on the CPU), and
a Google checkpoint written by `AdamWeightDecayOptimizer` loads as is.

* `AdamWeightDecay` is Google's `AdamWeightDecayOptimizer`, update for update:
  no bias correction, weight decay added to the update (decoupled, AdamW).
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
* `Adam`, `RAdam` and `Lamb` correct the moment bias, which needs the number
  of updates already made. They count it in their own non-trainable int64
  variable `<optimizer name>/step` (`Adam/step`, `RAdam/step`, `Lamb/step`),
  not in global_step: the counter is saved and restored with the slots it
  describes, so a resumed run continues with the right t, while a fine-tuning
  run that restores global_step or starts from a pretraining checkpoint
  without this variable still starts its fresh slots at t = 1.
"""

from __future__ import annotations

import math
import re
from typing import Iterable, Sequence

from bert_ad.compat import tf
from bert_ad.errors import fail

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
OPTIMIZERS = ("adamw", "adam", "radam", "lamb")
LR_SCALING_MODES = ("none", "linear", "sqrt")


def _variable_name(name: str) -> str:
    """`bert/pooler/dense/kernel:0` -> `bert/pooler/dense/kernel`."""
    m = re.match(r"^(.*):\d+$", name)
    return m.group(1) if m else name


def _matches_any(name: str, patterns: Iterable[str] | None) -> bool:
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
        return bool(self.weight_decay_rate) and not _matches_any(
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
        slices = _deduplicate(grad)
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


class AdamWeightDecay(Optimizer):
    """Google BERT's AdamWeightDecayOptimizer (optimization.py), exactly.

    m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2  (no bias correction)
    update = m / (sqrt(v) + eps) + wd * param  (wd only for non-excluded names)
    param -= lr * update
    """

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Sequence[str] | None = (
                     DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY),
                 name: str = "AdamWeightDecay", fused: bool = True,
                 sparse_updates: bool = False):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay_rate,
                         exclude_from_weight_decay, name, fused, sparse_updates)

    def _direction(self, param, param_name, next_m, next_v, t):
        update = next_m / (tf.sqrt(next_v) + self.epsilon)
        return self._decayed(update, param, param_name)

    def _fused_inputs(self, t):
        # No bias correction: beta powers 0 make ResourceApplyAdam's lr_t = lr.
        zero = tf.constant(0.0)
        return 1.0, zero, zero, tf.constant(self.epsilon)


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction and no weight decay.

    update = m_hat / (sqrt(v_hat) + eps), m_hat = m / (1 - b1^t),
    v_hat = v / (1 - b2^t). eps is added to sqrt(v_hat) as in the paper and
    PyTorch (tf.train.AdamOptimizer adds it to sqrt(v) instead).
    """

    uses_step = True

    def __init__(self, learning_rate, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, name: str = "Adam", fused: bool = True,
                 sparse_updates: bool = False):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, 0.0, None, name, fused,
                         sparse_updates)

    def _direction(self, param, param_name, next_m, next_v, t):
        m_hat, v_hat = self._corrected(next_m, next_v, t)
        return m_hat / (tf.sqrt(v_hat) + self.epsilon)

    def _fused_inputs(self, t):
        # m_hat / (sqrt(v_hat) + eps) = sqrt(1 - b2^t) / (1 - b1^t)
        #   * m / (sqrt(v) + eps * sqrt(1 - b2^t)): ResourceApplyAdam's lr_t
        # with eps moved inside the root (tf.train.AdamOptimizer's form).
        beta2_power = tf.pow(self.beta_2, t)
        return (1.0, tf.pow(self.beta_1, t), beta2_power,
                self.epsilon * tf.sqrt(1.0 - beta2_power))


class RAdam(Optimizer):
    """Rectified Adam (Liu et al. 2019) with decoupled weight decay (as AdamW).

    rho_inf = 2 / (1 - b2) - 1,  rho_t = rho_inf - 2 t b2^t / (1 - b2^t).
    While rho_t <= rho_threshold the variance of the adaptive rate is not
    tractable and the step is plain momentum, m_hat; above it the step is
    r_t * m_hat / (sqrt(v_hat) + eps) with
    r_t = sqrt((rho_t - 4)(rho_t - 2) rho_inf / ((rho_inf - 4)(rho_inf - 2) rho_t)).
    Either way wd * param is added (non-excluded names) and param -= lr * update.

    The threshold is 4, the paper's (r_t is defined for rho_t > 4); the
    authors' code and TF Addons use 5, which `rho_threshold=5` reproduces.
    rho_1 = 1 for every b2, so the first steps are always momentum steps.
    """

    uses_step = True

    def __init__(self, learning_rate, beta_1: float = 0.9, beta_2: float = 0.999,
                 epsilon: float = 1e-6, weight_decay_rate: float = 0.01,
                 exclude_from_weight_decay: Sequence[str] | None = (
                     DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY),
                 rho_threshold: float = 4.0, name: str = "RAdam",
                 sparse_updates: bool = False):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay_rate,
                         exclude_from_weight_decay, name, sparse_updates=sparse_updates)
        if not rho_threshold >= 4.0:
            fail(f"RAdam: rho_threshold must be >= 4 (r_t is undefined below), "
                 f"got {rho_threshold}")
        self.rho_threshold = float(rho_threshold)
        self.rho_inf = 2.0 / (1.0 - self.beta_2) - 1.0

    def rho(self, t):
        """rho_t, the length of the approximated simple moving average."""
        beta_2_t = tf.pow(self.beta_2, t)
        return self.rho_inf - 2.0 * t * beta_2_t / (1.0 - beta_2_t)

    def _direction(self, param, param_name, next_m, next_v, t):
        m_hat, v_hat = self._corrected(next_m, next_v, t)
        rho_t = self.rho(t)
        rho_inf = self.rho_inf
        # Clamped at 0 so that the branch not taken stays finite.
        r_t = tf.sqrt(tf.maximum(
            (rho_t - 4.0) * (rho_t - 2.0) * rho_inf
            / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t), 0.0))
        adaptive = r_t * m_hat / (tf.sqrt(v_hat) + self.epsilon)
        update = tf.where(rho_t > self.rho_threshold, adaptive, m_hat)
        return self._decayed(update, param, param_name)


class Lamb(Optimizer):
    """LAMB (You et al. 2019), as in NVIDIA's BERT and Google's ALBERT.

    update = m_hat / (sqrt(v_hat) + eps) + wd * param  (bias-corrected, as
    NVIDIA's; wd only for non-excluded names)
    ratio = ||param|| / ||update||, 1 when either norm is 0 and for names
    matching `exclude_from_layer_adaptation`
    param -= lr * ratio * update

    exclude_from_layer_adaptation=None means "the same as
    exclude_from_weight_decay" (ALBERT's and TF Addons' rule); pass () to
    adapt every variable.
    """

    uses_step = True

    def __init__(self, learning_rate, weight_decay_rate: float = 0.01,
                 beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6,
                 exclude_from_weight_decay: Sequence[str] | None = (
                     DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY),
                 exclude_from_layer_adaptation: Sequence[str] | None = None,
                 name: str = "Lamb"):
        super().__init__(learning_rate, beta_1, beta_2, epsilon, weight_decay_rate,
                         exclude_from_weight_decay, name)
        if exclude_from_layer_adaptation is None:
            exclude_from_layer_adaptation = self.exclude_from_weight_decay
        self.exclude_from_layer_adaptation = tuple(exclude_from_layer_adaptation)

    def use_layer_adaptation(self, param_name: str) -> bool:
        return not _matches_any(param_name, self.exclude_from_layer_adaptation)

    def _direction(self, param, param_name, next_m, next_v, t):
        m_hat, v_hat = self._corrected(next_m, next_v, t)
        update = self._decayed(m_hat / (tf.sqrt(v_hat) + self.epsilon), param, param_name)
        if not self.use_layer_adaptation(param_name):
            return update
        w_norm = tf.norm(param, ord=2)
        u_norm = tf.norm(update, ord=2)
        # where() picks 1 for a zero norm; the division is made safe too, so
        # that no inf/NaN is computed even in the branch not taken.
        safe = tf.logical_and(w_norm > 0.0, u_norm > 0.0)
        ratio = tf.where(safe, w_norm / tf.where(safe, u_norm, 1.0), 1.0)
        return ratio * update


_CLASSES = {"adamw": AdamWeightDecay, "adam": Adam, "radam": RAdam, "lamb": Lamb}


def make_optimizer(name: str, learning_rate, weight_decay_rate: float = 0.01,
                   learning_rate_multipliers: Sequence = (), fused: bool = True,
                   sparse_updates: bool = False, **kwargs) -> Optimizer:
    """The optimizer named by --optimizer.

    Args:
      name: "adamw" (Google's AdamWeightDecay, the default), "adam", "radam"
        or "lamb" (case-insensitive).
      learning_rate: float or scalar tensor.
      weight_decay_rate: for adamw, radam and lamb; plain Adam has no weight
        decay and ignores it.
      learning_rate_multipliers: ((regular expression, factor), ...), see
        Optimizer.learning_rate_multipliers.
      fused: ResourceApplyAdam kernels for adamw and adam (radam and lamb
        have no fused form and ignore it).
      sparse_updates: row-sparse update of IndexedSlices gradients
        (--sparse_embedding_updates); not with lamb.
      **kwargs: passed to the class (beta_1, beta_2, epsilon,
        exclude_from_weight_decay, ...).

    Returns:
      An Optimizer.
    """
    key = (name or "").strip().lower()
    if key not in _CLASSES:
        fail(f"--optimizer={name!r} is not one of {', '.join(OPTIMIZERS)}")
    cls = _CLASSES[key]
    if cls is not Adam:
        kwargs["weight_decay_rate"] = weight_decay_rate
    if cls in (AdamWeightDecay, Adam):
        kwargs["fused"] = fused
    if sparse_updates:
        check_sparse_updates(key)
        kwargs["sparse_updates"] = True
    optimizer = cls(learning_rate, **kwargs)
    optimizer.learning_rate_multipliers = tuple(learning_rate_multipliers)
    return optimizer


def check_sparse_updates(name: str) -> None:
    """Refuse row-sparse updates for an optimizer without a row-wise step.

    Raises:
      UserError: name is "lamb" (its trust ratio is a norm over the whole
        variable).
    """
    if (name or "").strip().lower() == "lamb":
        fail("--sparse_embedding_updates does not work with --optimizer=lamb: LAMB "
             "scales each variable's step by the norm of the whole variable; use "
             "adamw, adam or radam, or leave --sparse_embedding_updates out")


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


def _deduplicate(slices):
    """IndexedSlices with each row index once, duplicate rows summed."""
    unique, position = tf.unique(slices.indices)
    values = tf.math.unsorted_segment_sum(slices.values, position, tf.shape(unique)[0])
    return tf.IndexedSlices(values, unique, slices.dense_shape)


def clip_by_global_norm(grads: Sequence, clip_norm: float | None):
    """Scale all gradients by min(1, clip_norm / global_norm), Google-style.

    IndexedSlices are first deduplicated (rows with the same index summed)
    so that the norm is the norm of the real gradient: tf.global_norm of raw
    slices sums the squares of duplicate rows separately, and gather
    gradients (padding, [CLS], rows concatenated across towers) are full of
    duplicates. None entries stay None. A non-finite norm makes every
    gradient NaN (tf.clip_by_global_norm), which the trainer can detect.

    Args:
      grads: list of tensors, IndexedSlices or None.
      clip_norm: the maximum global norm; None or <= 0 returns the gradients
        unclipped (the norm is still computed, for logging).

    Returns:
      (clipped gradients in the same order, global norm as a scalar tensor)
    """
    with tf.name_scope("clip_by_global_norm"):
        grads = [_deduplicate(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        if clip_norm is None or clip_norm <= 0:
            return grads, tf.linalg.global_norm(grads)
        return tf.clip_by_global_norm(grads, clip_norm)
