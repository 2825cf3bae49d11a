"""The optimizers of --optimizer: AdamW (Google's), Adam, RAdam and LAMB.

Each is an `Optimizer` (bert_ad/parallel/optimizer_base.py: Google's slot
names, fused kernels, row-sparse updates, the step counter) that only says
how the updated moments become the step.

* `AdamWeightDecay` is Google's `AdamWeightDecayOptimizer`, update for update:
  no bias correction, weight decay added to the update (decoupled, AdamW).
* `Adam`, `RAdam` and `Lamb` correct the moment bias, which needs the number
  of updates already made (their own `<name>/step` counter).

The learning rate's schedule and scaling rule are bert_ad/parallel/learning_rate.py;
gradient clipping is bert_ad/parallel/gradients.py.
"""

from __future__ import annotations

from typing import Sequence

from bert_ad.choices import OPTIMIZERS
from bert_ad.compat import tf
from bert_ad.errors import fail
from bert_ad.parallel.sparse_updates import check_sparse_updates
from bert_ad.parallel.optimizer_base import Optimizer, matches_any

DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")


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
        return not matches_any(param_name, self.exclude_from_layer_adaptation)

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
