"""Optimizers vs independent numpy references, slots, schedule, scaling, clipping."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from bert_ad.parallel import optimization as opt
from bert_ad.parallel.gradients import clip_by_global_norm
from bert_ad.parallel.learning_rate import learning_rate_schedule, scale_learning_rate
from bert_ad.compat import list_checkpoint_variables, tf
from bert_ad.errors import UserError

STEPS = 5
LR = 0.05
WD = 0.3  # large, so that a decay wrongly applied or skipped shows
EPS = 1e-6
# Names the references exclude from weight decay (and LAMB's adaptation):
# spelled out, not matched with the module's regular expressions.
EXCLUDED = {"layer/bias", "layer/LayerNorm/gamma"}
SHAPES = {
    "layer/kernel": (3, 4),
    "layer/bias": (4,),
    "layer/LayerNorm/gamma": (4,),
    "emb/word_embeddings": (6, 3),
    "head/kernel": (4, 2),  # starts at 0: LAMB's zero-norm case
}
IDS = [0, 2, 2, 5, 0]  # duplicates; rows 1, 3, 4 get no gradient


# ---------------------------------------------------------------- references
# Each takes float64 arrays (param, grad, m, v), the 1-based step t and the
# learning rate, and returns the new (param, m, v).
#
# The fused kernel (ResourceApplyAdam) computes 1 - beta in float32 from the
# float32 beta: with 0.999 that is 0.00099998713, 1.3e-5 off 0.001, which the
# unfused ops compute from the Python float. Its exact reference therefore
# uses the betas as float32 holds them (a change of 1.3e-8 in beta_2).
KERNEL_B1 = float(np.float32(0.9))
KERNEL_B2 = float(np.float32(0.999))

def ref_adamw(name, p, g, m, v, t, lr, b1=0.9, b2=0.999, wd=WD):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    update = m / (np.sqrt(v) + EPS)
    if name not in EXCLUDED:
        update = update + wd * p
    return p - lr * update, m, v


def ref_adamw_kernel(*args, **kwargs):
    """ref_adamw with the betas the fused kernel uses (float32)."""
    return ref_adamw(*args, b1=KERNEL_B1, b2=KERNEL_B2, **kwargs)


def ref_adam(name, p, g, m, v, t, lr, b1=0.9, b2=0.99):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat = m / (1 - b1 ** t)
    v_hat = v / (1 - b2 ** t)
    return p - lr * m_hat / (np.sqrt(v_hat) + EPS), m, v


def radam_rho(t, b2):
    rho_inf = 2 / (1 - b2) - 1
    return rho_inf - 2 * t * b2 ** t / (1 - b2 ** t), rho_inf


def ref_radam(name, p, g, m, v, t, lr, b1=0.9, b2=0.9, threshold=4.0, wd=WD):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat = m / (1 - b1 ** t)
    v_hat = v / (1 - b2 ** t)
    rho_t, rho_inf = radam_rho(t, b2)
    if rho_t > threshold:
        r_t = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf
                        / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        update = r_t * m_hat / (np.sqrt(v_hat) + EPS)
    else:
        update = m_hat
    if name not in EXCLUDED:
        update = update + wd * p
    return p - lr * update, m, v


def ref_lamb(name, p, g, m, v, t, lr, b1=0.9, b2=0.999, wd=WD, adapt_excluded=False):
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    m_hat = m / (1 - b1 ** t)
    v_hat = v / (1 - b2 ** t)
    update = m_hat / (np.sqrt(v_hat) + EPS)
    if name not in EXCLUDED:
        update = update + wd * p
    ratio = 1.0
    if name not in EXCLUDED or adapt_excluded:
        w_norm = np.sqrt(np.sum(p * p))
        u_norm = np.sqrt(np.sum(update * update))
        if w_norm > 0 and u_norm > 0:
            ratio = w_norm / u_norm
    return p - lr * ratio * update, m, v


# ------------------------------------------------------------------- harness

def initial_values():
    rng = np.random.RandomState(0)
    values = {n: rng.uniform(-1, 1, s).astype(np.float32) for n, s in SHAPES.items()}
    values["layer/LayerNorm/gamma"] += 1.0
    values["head/kernel"][:] = 0.0
    return values


def step_data(steps):
    rng = np.random.RandomState(1)
    return [(rng.normal(size=(2, 3)).astype(np.float32),
             rng.normal(size=(2, 2)).astype(np.float32)) for _ in range(steps)]


class Model:
    """A tiny graph whose loss touches every variable; the embedding by gather."""

    def __init__(self, make_optimizer, device="/cpu:0", lr_schedule=None, in_cond=False,
                 clip_norm=None):
        self.graph = tf.Graph()
        with self.graph.as_default(), tf.device(device):
            init = initial_values()
            self.vars = {n: tf.get_variable(n, initializer=init[n]) for n in SHAPES}
            self.global_step = tf.train.get_or_create_global_step()
            self.x = tf.placeholder(tf.float32, [2, 3])
            self.y = tf.placeholder(tf.float32, [2, 2])
            c = tf.constant(np.linspace(-1, 1, 15).reshape(5, 3), tf.float32)
            h = tf.tanh(tf.matmul(self.x, self.vars["layer/kernel"])
                        + self.vars["layer/bias"]) * self.vars["layer/LayerNorm/gamma"]
            out = tf.matmul(h, self.vars["head/kernel"])
            e = tf.gather(self.vars["emb/word_embeddings"], IDS)
            loss = (tf.reduce_sum(tf.square(out - self.y)) + 0.5 * tf.reduce_sum(tf.square(h))
                    + tf.reduce_sum(tf.tanh(e) * c))
            names = list(SHAPES)
            grads = tf.gradients(loss, [self.vars[n] for n in names])
            if clip_norm is not None:  # as the trainer does; the references see the result
                grads, _ = clip_by_global_norm(grads, clip_norm)
            self.grads = dict(zip(names, grads))
            assert isinstance(self.grads["emb/word_embeddings"], tf.IndexedSlices)
            lr = LR if lr_schedule is None else lr_schedule(self.global_step)
            self.optimizer = make_optimizer(lr)
            pairs = [(self.grads[n], self.vars[n]) for n in names]
            self.apply = tf.placeholder_with_default(True, [])
            if in_cond:
                # As the trainer does: a non-finite step is skipped by a cond.
                def apply():
                    with tf.control_dependencies(
                            [self.optimizer.apply_gradients(pairs, self.global_step)]):
                        return tf.constant(True)
                self.train_op = tf.cond(self.apply, apply, lambda: tf.constant(False))
            else:
                self.train_op = self.optimizer.apply_gradients(pairs, self.global_step)
            self.saver = tf.train.Saver()
            self.init = tf.global_variables_initializer()
            self.lr = self.optimizer.learning_rate
        self.sess = tf.Session(graph=self.graph)

    def slot(self, name, which):
        """The variable `<name>/adam_<which>`, found by its name in the graph."""
        found = [v for v in self.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
                 if v.name == f"{name}/adam_{which}:0"]
        assert len(found) == 1, (name, which)
        return found[0]

    def run_steps(self, data, start_step=0, reference=None, state=None):
        """Train on `data`; compare every step with `reference` when given."""
        for i, (x, y) in enumerate(data):
            feed = {self.x: x, self.y: y}
            grads, lr = self.sess.run([self.grads, self.lr], feed)
            self.sess.run(self.train_op, feed)
            got = self.sess.run({n: (v, self.slot(n, "m"), self.slot(n, "v"))
                                 for n, v in self.vars.items()})
            if reference is None:
                continue
            t = start_step + i + 1
            for name in SHAPES:
                g = grads[name]
                if hasattr(g, "indices"):  # IndexedSlicesValue
                    dense = np.zeros(SHAPES[name], np.float64)
                    np.add.at(dense, g.indices, g.values)  # duplicates add up
                    g = dense
                state[name] = reference(name, *state[name][:1], g.astype(np.float64),
                                        *state[name][1:], t=t, lr=float(lr))
                # atol: float32 round-off of `param - lr * update` (~1e-7)
                # is large relative to a parameter that crosses zero; every
                # step moves parameters by ~lr = 5e-2, so 1e-6 hides no bug.
                for want, have, what, atol in zip(state[name], got[name], ("param", "m", "v"),
                                                  (1e-6, 1e-9, 1e-9)):
                    np.testing.assert_allclose(
                        have, want, rtol=1e-5, atol=atol,
                        err_msg=f"{name} {what} after step {t}")
        return state


def fresh_state():
    return {n: (v.astype(np.float64), np.zeros(v.shape), np.zeros(v.shape))
            for n, v in initial_values().items()}


def check_against(reference, make_optimizer, steps=STEPS, **model_kwargs):
    model = Model(make_optimizer, **model_kwargs)
    with model.sess:
        model.sess.run(model.init)
        model.run_steps(step_data(steps), reference=reference, state=fresh_state())
        step = model.optimizer.step_variable
        counters = model.sess.run([model.global_step] + ([step] if step is not None else []))
    assert counters == [steps] * len(counters)
    return model


# --------------------------------------------------------------- optimizers

def test_adamw_matches_googles_update():
    model = check_against(ref_adamw, lambda lr: opt.AdamWeightDecay(
        lr, weight_decay_rate=WD, fused=False))
    assert model.optimizer.step_variable is None  # no bias correction, no counter


def test_adam_is_bias_corrected_and_ignores_weight_decay():
    check_against(ref_adam, lambda lr: opt.make_optimizer("adam", lr, weight_decay_rate=WD,
                                                          beta_2=0.99, fused=False))


@pytest.mark.parametrize("threshold, first_rectified", [(4.0, 5), (5.0, 6)])
def test_radam_switches_to_rectified_steps_at_the_threshold(threshold, first_rectified):
    b2 = 0.9
    rectified = [radam_rho(t, b2)[0] > threshold for t in range(1, 8)]
    assert rectified.index(True) + 1 == first_rectified and all(rectified[first_rectified - 1:])

    def ref(*args, **kwargs):
        return ref_radam(*args, threshold=threshold, **kwargs)

    make = lambda lr: opt.make_optimizer("radam", lr, weight_decay_rate=WD, beta_2=b2,  # noqa: E731
                                         rho_threshold=threshold)
    check_against(ref, make, steps=first_rectified + 1)

    # The switch is real: a reference that never rectifies agrees up to the
    # step before the threshold and not on it.
    never = lambda *a, **k: ref_radam(*a, threshold=1e9, **k)  # noqa: E731
    model = Model(make)
    with model.sess:
        model.sess.run(model.init)
        data = step_data(first_rectified)
        state = model.run_steps(data[:-1], reference=never, state=fresh_state())
        with pytest.raises(AssertionError, match="after step %d" % first_rectified):
            model.run_steps(data[-1:], start_step=first_rectified - 1, reference=never,
                            state=state)
        rho = model.sess.run(model.optimizer.rho(tf.constant(float(first_rectified))))
    assert rho == pytest.approx(radam_rho(first_rectified, b2)[0], rel=1e-5)


def test_radam_first_step_is_momentum_plus_weight_decay():
    model = Model(lambda lr: opt.RAdam(lr, weight_decay_rate=WD))
    with model.sess:
        model.sess.run(model.init)
        x, y = step_data(1)[0]
        feed = {model.x: x, model.y: y}
        g, before = model.sess.run([model.grads["layer/kernel"], model.vars["layer/kernel"]],
                                   feed)
        model.sess.run(model.train_op, feed)
        after = model.sess.run(model.vars["layer/kernel"])
    # t = 1: m_hat = g exactly, rho_1 = 1, so no adaptive rate.
    np.testing.assert_allclose(after, before - LR * (g + WD * before), rtol=1e-5)


def test_lamb_default_excludes_adaptation_like_weight_decay():
    check_against(ref_lamb, lambda lr: opt.make_optimizer("lamb", lr, weight_decay_rate=WD))


def test_lamb_can_adapt_every_variable():
    ref = lambda *a, **k: ref_lamb(*a, adapt_excluded=True, **k)  # noqa: E731
    check_against(ref, lambda lr: opt.Lamb(lr, weight_decay_rate=WD,
                                           exclude_from_layer_adaptation=()))


def test_scheduled_learning_rate_is_read_before_global_step_moves():
    # Step s (0-based) must use lr(s): 0 at step 0, then warmup and decay.
    schedule = lambda step: learning_rate_schedule(step, LR, 6, 2)  # noqa: E731
    check_against(ref_adamw_kernel, lambda lr: opt.AdamWeightDecay(lr, weight_decay_rate=WD),
                  lr_schedule=schedule)


def test_resumed_run_continues_the_step_count(tmp_path):
    def make(lr):  # fused: t enters the kernel's beta powers and epsilon
        return opt.Adam(lr, beta_2=0.99)

    def ref_adam(*args, **kwargs):  # the betas as float32 holds them (KERNEL_B1)
        return globals()["ref_adam"](*args, b1=KERNEL_B1, b2=float(np.float32(0.99)),
                                     **kwargs)

    prefix = os.path.join(str(tmp_path), "model.ckpt")
    data = step_data(STEPS)
    first = Model(make)
    with first.sess:
        first.sess.run(first.init)
        state = first.run_steps(data[:3], reference=ref_adam, state=fresh_state())
        first.saver.save(first.sess, prefix)
    saved = dict(list_checkpoint_variables(prefix))
    assert saved["Adam/step"] == [] and saved["layer/kernel/adam_m"] == [3, 4]

    second = Model(make)
    with second.sess:
        second.saver.restore(second.sess, prefix)
        second.run_steps(data[3:], start_step=3, reference=ref_adam, state=state)
        assert second.sess.run([second.global_step, second.optimizer.step_variable]) == [5, 5]


@pytest.mark.parametrize("name, reference", [("adamw", ref_adamw_kernel),
                                             ("lamb", ref_lamb)])
def test_apply_inside_a_cond_updates_or_skips_everything(name, reference):
    model = Model(lambda lr: opt.make_optimizer(name, lr, weight_decay_rate=WD), in_cond=True)
    with model.sess:
        model.sess.run(model.init)
        state = model.run_steps(step_data(2), reference=reference, state=fresh_state())
        everything = model.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
        before = model.sess.run(everything)
        x, y = step_data(3)[2]
        assert not model.sess.run(model.train_op, {model.x: x, model.y: y, model.apply: False})
        for old, new in zip(before, model.sess.run(everything)):
            np.testing.assert_array_equal(old, new)  # slots, counters and weights
        model.run_steps(step_data(3)[2:], start_step=2, reference=reference, state=state)
        assert model.sess.run(model.global_step) == 3
    for v in model.optimizer.variables():
        assert v.device.upper().endswith("CPU:0"), (v.name, v.device)


# -------------------------------------------------------- slots and counters

@pytest.mark.parametrize("name, step_name", [("adamw", None), ("adam", "Adam/step"),
                                             ("radam", "RAdam/step"), ("lamb", "Lamb/step")])
def test_slot_names_and_placement(name, step_name):
    model = Model(lambda lr: opt.make_optimizer(name, lr))
    names = {v.name for v in model.graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)}
    want = {f"{n}:0" for n in SHAPES} | {"global_step:0"}
    want |= {f"{n}/adam_{w}:0" for n in SHAPES for w in "mv"}
    if step_name:
        want.add(step_name + ":0")
    assert names == want
    created = model.optimizer.variables()
    assert [v.name for v in model.optimizer.slot_variables()] == [
        f"{n}/adam_{w}:0" for n in SHAPES for w in "mv"]
    assert len(created) == 2 * len(SHAPES) + (1 if step_name else 0)
    trainable = {v.name for v in model.graph.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES)}
    assert trainable == {f"{n}:0" for n in SHAPES}
    for v in created:
        assert v.device.upper().endswith("CPU:0"), (v.name, v.device)
    model.sess.close()


def test_slots_follow_the_callers_device_scope_and_ignore_its_variable_scope():
    graph = tf.Graph()
    with graph.as_default():
        w = tf.get_variable("w", initializer=np.ones([2], np.float32))
        b = tf.get_variable("unused/bias", initializer=np.ones([2], np.float32))
        with tf.variable_scope("tower_1", reuse=True):
            adam = opt.Adam(0.1)
            adam.apply_gradients([(tf.ones([2]), w), (None, b)])  # no global step
    assert [v.name for v in adam.variables()] == ["w/adam_m:0", "w/adam_v:0", "Adam/step:0"]
    assert all(v.device == "" for v in adam.variables())  # no device forced
    assert not [v for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
                if v.name.startswith("unused/bias/")]


def test_learning_rate_tensor():
    with tf.Graph().as_default():
        lr = opt.AdamWeightDecay(2e-5).learning_rate
        assert lr.dtype == tf.float32
        with tf.Session() as sess:
            assert sess.run(lr) == pytest.approx(2e-5)


# ------------------------------------------------------------------ factory

def test_make_optimizer_classes_and_arguments():
    with tf.Graph().as_default():
        adamw = opt.make_optimizer("adamw", 1e-3, weight_decay_rate=0.02, epsilon=1e-8)
        assert type(adamw) is opt.AdamWeightDecay
        assert (adamw.weight_decay_rate, adamw.epsilon) == (0.02, 1e-8)
        assert adamw.use_weight_decay("bert/encoder/layer_0/output/dense/kernel")
        assert not adamw.use_weight_decay("bert/encoder/layer_0/output/LayerNorm/gamma")
        assert not adamw.use_weight_decay("bert/pooler/dense/bias")
        assert type(opt.make_optimizer("Adam", 1e-3)) is opt.Adam
        assert opt.make_optimizer("adam", 1e-3).weight_decay_rate == 0.0
        assert type(opt.make_optimizer("radam", 1e-3)) is opt.RAdam
        lamb = opt.make_optimizer("lamb", 1e-3)
        assert type(lamb) is opt.Lamb
        assert lamb.exclude_from_layer_adaptation == opt.DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY


def test_bad_optimizer_arguments_are_user_errors():
    with pytest.raises(UserError,
                       match=r"--optimizer='sgd' is not one of adamw, adam, radam, lamb"):
        opt.make_optimizer("sgd", 1e-3)
    with pytest.raises(UserError, match=r"--learning_rate"):
        opt.make_optimizer("adamw", 0.0)
    with pytest.raises(UserError, match=r"beta_2 must be in \[0, 1\), got 1.0"):
        opt.Adam(1e-3, beta_2=1.0)
    with pytest.raises(UserError, match=r"rho_threshold must be >= 4"):
        opt.RAdam(1e-3, rho_threshold=3.0)


# ----------------------------------------------------------------- schedule

def google_lr(step, base, total, warmup):
    if step < warmup:
        return base * step / warmup
    return base * (1 - min(step, total) / total)


@pytest.mark.parametrize("warmup", [10, 0])
def test_schedule_warmup_then_linear_decay(warmup):
    base, total = 1e-3, 100
    steps = [0, 1, 5, 9, 10, 11, 50, 99, 100, 150]
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        lr = learning_rate_schedule(step, base, total, warmup)
        with tf.Session() as sess:
            got = [sess.run(lr, {step: s}) for s in steps]
    want = [google_lr(s, base, total, warmup) for s in steps]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=base * 1e-6)
    if warmup:
        assert got[0] == 0.0 and got[3] == pytest.approx(0.9e-3)
        # Google's peak: the decay ran during warmup, so 0.9 * base, not base.
        assert got[4] == pytest.approx(0.9e-3) and got[5] < got[4]
    else:
        assert got[0] == pytest.approx(base)
    assert got[-2] == 0.0 and got[-1] == 0.0


def test_schedule_rejects_empty_runs():
    with tf.Graph().as_default():
        with pytest.raises(UserError, match="at least 1 training step, got 0"):
            learning_rate_schedule(tf.constant(0), 1e-3, 0, 0)


# ------------------------------------------------------------------ scaling

def test_scale_learning_rate():
    assert scale_learning_rate(2e-5, 256, 32, "none") == 2e-5
    assert scale_learning_rate(2e-5, 256, 32, "linear") == pytest.approx(1.6e-4)
    assert scale_learning_rate(2e-5, 256, 32, "sqrt") == pytest.approx(2e-5 * math.sqrt(8))
    assert scale_learning_rate(1e-4, 16, 64, "sqrt") == pytest.approx(5e-5)
    with pytest.raises(UserError, match=r"--lr_scaling='cubic' is not one of none, linear, sqrt"):
        scale_learning_rate(2e-5, 256, 32, "cubic")
    with pytest.raises(UserError, match=r"--lr_scaling=linear: batch sizes must be positive"):
        scale_learning_rate(2e-5, 256, 0, "linear")


# ----------------------------------------------------------------- clipping

def test_clip_by_global_norm_uses_the_dense_gradient_norm():
    dense = np.array([[1.0, -2.0], [0.5, 0.0]], np.float32)
    values = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32)
    indices = [0, 2, 2]  # duplicate rows add up in the real gradient
    as_dense = np.zeros([4, 2], np.float32)
    np.add.at(as_dense, indices, values)
    norm = math.sqrt(np.sum(dense ** 2) + np.sum(as_dense ** 2))
    with tf.Graph().as_default():
        grads = [tf.constant(dense), tf.IndexedSlices(tf.constant(values), tf.constant(indices),
                                                      tf.constant([4, 2])), None]
        clipped, global_norm = clip_by_global_norm(grads, 1.0)
        unclipped, same_norm = clip_by_global_norm(grads, None)
        assert clipped[2] is None and unclipped[2] is None
        assert isinstance(clipped[1], tf.IndexedSlices)
        with tf.Session() as sess:
            got = sess.run({"norm": global_norm, "norm2": same_norm, "dense": clipped[0],
                            "sparse": tf.convert_to_tensor(clipped[1]),
                            "raw": tf.convert_to_tensor(unclipped[1])})
    assert got["norm"] == pytest.approx(norm, rel=1e-6)
    assert got["norm2"] == pytest.approx(norm, rel=1e-6)
    np.testing.assert_allclose(got["dense"], dense / norm, rtol=1e-6)
    np.testing.assert_allclose(got["sparse"], as_dense / norm, rtol=1e-6)
    np.testing.assert_allclose(got["raw"], as_dense, rtol=1e-6)
