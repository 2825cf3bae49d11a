"""The multi-tower training graph: towers -> averaged gradients -> one apply.

    tower 0 (gpu:0) --grads--\
    tower 1 (gpu:1) --grads---> CPU: average -> [accumulate k micro-batches]
    ...                      /       -> clip by global norm -> finite? -> apply
                                                                 (global_step += 1)

Nothing here knows about classification or pretraining: a task supplies the
per-tower feature placeholders' spec and a `tower_loss_fn(features, i)`.
"""

from __future__ import annotations

from typing import Callable

from bert_ad.compat import tf
from bert_ad.model.precision import DynamicLossScale
from bert_ad.parallel.optimization import (clip_by_global_norm, learning_rate_schedule,
                                           make_optimizer)
from bert_ad.parallel.towers import DevicePlan, average_gradients, build_towers, tower_gradients


class TrainSettings:
    """Everything that shapes the training graph (flags map onto these)."""

    def __init__(self, learning_rate: float = 5e-5, num_train_steps: int = 1,
                 num_warmup_steps: int = 0, optimizer: str = "adamw",
                 weight_decay_rate: float = 0.01, clip_norm: float = 1.0,
                 gradient_accumulation_steps: int = 1, seed: int | None = None,
                 precision: str = "fp32"):
        self.learning_rate = learning_rate
        self.num_train_steps = num_train_steps
        self.num_warmup_steps = num_warmup_steps
        self.optimizer = optimizer
        self.weight_decay_rate = weight_decay_rate
        self.clip_norm = clip_norm
        self.gradient_accumulation_steps = gradient_accumulation_steps
        self.seed = seed
        self.precision = precision


class TrainGraph:
    """Handles to the ops the training loop runs.

    Attributes:
      placeholders: one dict of feature placeholders per tower.
      loss: mean loss over the towers of this micro-batch.
      micro_step: (accumulation only) adds this micro-batch's gradients.
      train_step: accumulates the last micro-batch (if accumulating), clips,
        checks finiteness and applies once; evaluates to `applied` (bool).
      step_after: global_step once train_step's update is done.
      global_step, learning_rate, grad_norm, all_finite: scalars to log.
      loss_scale: fp16's DynamicLossScale, else None.
      examples_seen: variable the loop keeps at the data stream's position.
    """


def feature_placeholders(spec: dict, tower: int) -> dict:
    """Placeholders for one tower from {name: (dtype, shape)}."""
    return {name: tf.placeholder(dtype, shape, name=f"tower_{tower}_{name}")
            for name, (dtype, shape) in spec.items()}


def build_train_graph(plan: DevicePlan, feature_spec: dict,
                      tower_loss_fn: Callable[[dict, int], object],
                      settings: TrainSettings,
                      cross_worker_reduce: Callable[[list], list] | None = None
                      ) -> TrainGraph:
    """Build the training graph in the default graph and return its handles.

    `cross_worker_reduce` (multi-worker runs) maps this worker's mean
    gradients to the cluster's mean; it runs once per applied step, after
    accumulation, so the exchange happens once per step whatever k is.
    """
    if settings.seed is not None:
        tf.set_random_seed(settings.seed)
    graph = TrainGraph()
    graph.placeholders = [feature_placeholders(feature_spec, i)
                          for i in range(plan.num_towers)]
    graph.loss_scale = None
    if settings.precision == "fp16":
        with tf.device(plan.variable_device):
            graph.loss_scale = DynamicLossScale()

    def tower(i):
        loss = tower_loss_fn(graph.placeholders[i], i)
        if graph.loss_scale is not None:
            scaled = graph.loss_scale.scaled(loss)
        else:
            scaled = loss
        variables = tf.trainable_variables()
        return loss, tower_gradients(scaled, variables)

    results = build_towers(plan, tower)
    variables = tf.trainable_variables()
    graph.variables = variables
    tower_losses = [loss for loss, _ in results]

    with tf.device(plan.variable_device):
        graph.global_step = tf.train.get_or_create_global_step()
        graph.loss = tf.add_n(tower_losses) / len(tower_losses)
        grads = average_gradients([g for _, g in results], plan.variable_device)
        graph.learning_rate = learning_rate_schedule(
            graph.global_step, settings.learning_rate, settings.num_train_steps,
            settings.num_warmup_steps)
        optimizer = make_optimizer(settings.optimizer, graph.learning_rate,
                                   weight_decay_rate=settings.weight_decay_rate)
        graph.optimizer = optimizer

        k = settings.gradient_accumulation_steps
        if k > 1:
            grads, graph.micro_step, graph.accumulators = _accumulate(grads, variables, k)
        else:
            graph.micro_step = None

        if graph.loss_scale is not None:
            grads = graph.loss_scale.unscaled(grads)
        if cross_worker_reduce is not None:
            grads = cross_worker_reduce(grads)

        present = [(g, v) for g, v in zip(grads, variables) if g is not None]
        clipped, graph.grad_norm = clip_by_global_norm(
            [g for g, _ in present], settings.clip_norm)
        # A non-finite loss or gradient skips the update, so no NaN ever
        # reaches the weights (or a checkpoint). The loop then stops the run,
        # except for fp16 overflow, where the loss scale shrinks instead.
        graph.all_finite = tf.logical_and(tf.reduce_all(tf.is_finite(graph.loss)),
                                          tf.is_finite(graph.grad_norm))

        def apply():
            op = optimizer.apply_gradients(
                list(zip(clipped, [v for _, v in present])), graph.global_step)
            with tf.control_dependencies([op]):
                return tf.constant(True)

        applied = tf.cond(graph.all_finite, apply, lambda: tf.constant(False))
        if graph.loss_scale is not None:
            with tf.control_dependencies([graph.loss_scale.update(graph.all_finite)]):
                applied = tf.identity(applied)
        if k > 1:
            with tf.control_dependencies([applied]):
                reset = tf.group(*[a.assign(tf.zeros_like(a)) for a in graph.accumulators])
            with tf.control_dependencies([reset]):
                applied = tf.identity(applied)
        graph.train_step = applied
        # The step as it is after this run's update (a plain fetch of
        # global_step could race with the increment).
        with tf.control_dependencies([applied]):
            graph.step_after = tf.identity(graph.global_step.read_value())
        # Examples consumed (applied or skipped steps alike): where a resumed
        # run picks the data stream up. The loop sets it before each save.
        graph.examples_seen = tf.get_variable("examples_seen", [], tf.int64,
                                              tf.zeros_initializer(), trainable=False)
        graph.examples_seen_value = tf.placeholder(tf.int64, [], "examples_seen_value")
        graph.set_examples_seen = graph.examples_seen.assign(graph.examples_seen_value)
    return graph


def _accumulate(grads: list, variables: list, k: int):
    """Gradient accumulation over k micro-batches.

    Returns (mean gradients including the current micro-batch, micro_step op,
    accumulator variables).
    The accumulators are dense CPU variables (`accumulators/...`, not saved in
    checkpoints: they are always zero between applied steps).
    """
    accumulators, adds, means = [], [], []
    for grad, var in zip(grads, variables):
        if grad is None:
            accumulators.append(None)
            adds.append(None)
            continue
        name = var.name.split(":")[0]
        acc = tf.get_variable(f"accumulators/{name}", var.shape, tf.float32,
                              tf.zeros_initializer(), trainable=False,
                              collections=[tf.GraphKeys.LOCAL_VARIABLES])
        accumulators.append(acc)
        adds.append(acc.assign_add(tf.convert_to_tensor(grad)))
    micro_step = tf.group(*[a for a in adds if a is not None], name="micro_step")
    for acc, add in zip(accumulators, adds):
        if acc is None:
            means.append(None)
            continue
        with tf.control_dependencies([add]):
            means.append(acc.read_value() / k)
    return means, micro_step, [a for a in accumulators if a is not None]
