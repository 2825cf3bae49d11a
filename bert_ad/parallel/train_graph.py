"""The multi-tower training graph: towers -> averaged gradients -> one apply.

    tower 0 (gpu:0) --grads--\
    tower 1 (gpu:1) --grads---> CPU: average -> [accumulate k micro-batches]
    ...                      /       -> [cluster mean] -> clip by global norm
                                     -> finite? -> apply (global_step += 1)

That is --variable_update=parameter_server (the default). With replicated,
every tower accumulates its own gradients, the towers all-reduce them, and
each applies the mean to its own copy of the variables
(bert_ad/parallel/replicated.py).

Nothing here knows about classification or pretraining: a task supplies the
per-tower feature placeholders' spec and a `tower_loss_fn(features, i)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, List, Optional

from bert_ad.compat import tf
from bert_ad.model.modeling import recomputed_layers
from bert_ad.model.precision import DynamicLossScale
from bert_ad.errors import fail
from bert_ad.parallel.gradients import clip_by_global_norm
from bert_ad.parallel.learning_rate import learning_rate_schedule
from bert_ad.parallel.optimization import make_optimizer
from bert_ad.parallel.sparse_updates import check_sparse_embedding_updates
from bert_ad.parallel.replicated import (ReplicaVariables, all_reduce_mean,
                                         build_replicated_towers, localize_replicas,
                                         replica_name, sync_replicas)
from bert_ad.run_settings import DEFAULTS as RUN
from bert_ad.parallel.towers import (DevicePlan, average_gradients, build_towers,
                                     tower_gradients)


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """Everything that shapes the training graph: the run's settings of the same names
    (bert_ad/run_settings.py, whose defaults these are: the driver derives it), and
    what the schedule decides (the learning rate after scaling, the step counts).

    `train_batch_size` (per tower) and `num_workers` only count examples: with them
    the graph knows how many examples one applied step consumes.
    """
    learning_rate: float = RUN.learning_rate
    num_train_steps: int = 1
    num_warmup_steps: int = 0
    optimizer: str = RUN.optimizer
    weight_decay_rate: float = RUN.weight_decay_rate
    clip_norm: float = RUN.clip_norm
    gradient_accumulation_steps: int = RUN.gradient_accumulation_steps
    seed: Optional[int] = None
    precision: str = RUN.precision
    train_batch_size: int = RUN.train_batch_size
    num_workers: int = 1
    # ((regular expression, factor), ...): variables that learn at factor x
    # learning_rate (the task's, e.g. a CRF's transitions).
    learning_rate_multipliers: tuple = ()
    # Row-sparse ("lazy") update of IndexedSlices gradients (the word
    # embeddings), --sparse_embedding_updates; dense (Google's) by default.
    sparse_embedding_updates: bool = RUN.sparse_embedding_updates
    # ResourceApplyAdam kernels for adamw / adam (bert_ad.parallel.optimization);
    # False keeps the element-wise ops (benchmarks compare the two).
    fused_optimizer: bool = True
    # Gradient checkpointing per encoder layer (bert_ad.model.modeling.recomputed_layers).
    recompute_activations: bool = RUN.recompute_activations


@dataclasses.dataclass
class TrainGraph:
    """Handles to the ops the training loop runs, and the step's shape.

    Attributes:
      placeholders: one dict of feature placeholders per tower.
      gradient_accumulation_steps: micro-batches fed per applied step.
      examples_per_step: examples one applied step consumes, cluster-wide.
      loss: mean loss over the towers of this micro-batch (this worker's).
      micro_step: (accumulation only) adds this micro-batch's gradients.
      train_step: accumulates the last micro-batch (if accumulating), clips,
        checks finiteness and applies once; evaluates to `applied` (bool).
      step_after: global_step once train_step's update is done.
      global_step, learning_rate, grad_norm, all_finite: scalars to log.
      loss_scale: fp16's DynamicLossScale, else None.
      examples_seen: variable the loop keeps at the data stream's position;
        set it by feeding `examples_seen_value` to `set_examples_seen`.
      weights_finite: whether every trainable variable is finite (checked
        before each save).
      sync_replicas: (replicated) sets every tower's copy to tower 0's; run it
        after initialising or restoring the variables. None otherwise.
    """
    placeholders: List[dict]
    gradient_accumulation_steps: int
    examples_per_step: int
    variables: list
    loss: Any
    micro_step: Any
    train_step: Any
    step_after: Any
    global_step: Any
    learning_rate: Any
    grad_norm: Any
    all_finite: Any
    loss_scale: Optional[DynamicLossScale]
    examples_seen: Any
    examples_seen_value: Any
    set_examples_seen: Any
    weights_finite: Any
    sync_replicas: Any = None


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

    The plan's `variable_update` picks the layout: variables on the CPU and
    one apply there (parameter_server), or a copy per tower, all-reduced
    gradients and one apply per tower (replicated, bert_ad/parallel/replicated.py).
    `cross_worker_reduce` (multi-worker runs, parameter_server only) maps this
    worker's mean gradients to the cluster's mean; it runs once per applied
    step, after accumulation, so the exchange happens once per step whatever k is.
    """
    if settings.seed is not None:
        tf.set_random_seed(settings.seed)
    placeholders = [feature_placeholders(feature_spec, i) for i in range(plan.num_towers)]
    loss_scale = None
    if settings.precision == "fp16":
        with tf.device(plan.variable_device):
            loss_scale = DynamicLossScale()
    if plan.replicated:
        if cross_worker_reduce is not None:
            raise ValueError("replicated towers do not take a cross-worker reduce "
                             "(refused at the flags)")
        if settings.sparse_embedding_updates:
            fail("--sparse_embedding_updates does not work with --variable_update="
                 "replicated (the all-reduced gradient is dense); leave one of them out")
        update = _replicated_update(plan, placeholders, tower_loss_fn, settings, loss_scale)
    else:
        update = _parameter_server_update(plan, placeholders, tower_loss_fn, settings,
                                          loss_scale, cross_worker_reduce)
    with tf.device(plan.variable_device):
        graph = _finish(plan, settings, placeholders, loss_scale, update)
    if plan.replicated:
        graph.sync_replicas = sync_replicas(localize_replicas())
    return graph


@dataclasses.dataclass
class _Update:
    """What a layout built up to the update; `_finish` completes it into a TrainGraph.

    `variables` are the trainable ones checkpoints hold (tower 0's copy when
    replicated); `applied` evaluates to whether the update was applied.
    """
    variables: list
    loss: Any
    micro_step: Any
    applied: Any
    accumulators: list
    global_step: Any
    learning_rate: Any
    grad_norm: Any
    all_finite: Any


def _parameter_server_update(plan: DevicePlan, placeholders: list, tower_loss_fn: Callable,
                             settings: TrainSettings, loss_scale,
                             cross_worker_reduce: Callable[[list], list] | None) -> _Update:
    """Towers -> averaged gradients on the CPU -> [accumulate] -> [cluster mean] -> one apply."""
    def tower(i):
        loss = tower_loss_fn(placeholders[i], i)
        scaled = loss_scale.scaled(loss) if loss_scale is not None else loss
        return loss, tower_gradients(scaled, tf.trainable_variables())

    with recomputed_layers(settings.recompute_activations):
        results = build_towers(plan, tower)
    variables = tf.trainable_variables()
    k = settings.gradient_accumulation_steps
    if settings.sparse_embedding_updates:
        check_sparse_embedding_updates(
            settings.optimizer, k, 2 if cross_worker_reduce is not None else 1)

    with tf.device(plan.variable_device):
        global_step = tf.train.get_or_create_global_step()
        losses = [loss for loss, _ in results]
        loss = tf.add_n(losses) / len(losses)
        grads = average_gradients([g for _, g in results], plan.variable_device)
        # Micro-batches of this step whose loss was not finite (this worker).
        nonfinite_losses = _not_finite(loss)
        learning_rate = _learning_rate(settings, global_step)
        optimizer = _optimizer(settings, learning_rate)

        micro_step, accumulators = None, []
        if k > 1:
            grads, nonfinite_losses, micro_step, accumulators = _accumulate(
                grads, nonfinite_losses, variables, k)

        if loss_scale is not None:
            grads = loss_scale.unscaled(grads)
        if cross_worker_reduce is not None:
            # The non-finite count rides with the gradients, so every worker
            # decides from the same cluster-wide values and applies (or skips)
            # alike: one worker's NaN loss must not split the replicas.
            reduced = cross_worker_reduce(list(grads) + [nonfinite_losses])
            grads, nonfinite_losses = reduced[:-1], reduced[-1]

        present = [(g, v) for g, v in zip(grads, variables) if g is not None]
        clipped, grad_norm = clip_by_global_norm([g for g, _ in present], settings.clip_norm)
        # A non-finite loss or gradient skips the update, so no NaN ever
        # reaches the weights (or a checkpoint). The loop then stops the run,
        # except for fp16 overflow, where the loss scale shrinks instead.
        all_finite = tf.logical_and(tf.equal(nonfinite_losses, 0.0),
                                    tf.is_finite(grad_norm))
        applied = _apply_if(all_finite, optimizer, clipped, [v for _, v in present],
                            global_step)
    return _Update(variables, loss, micro_step, applied, accumulators, global_step,
                   learning_rate, grad_norm, all_finite)


def _replicated_update(plan: DevicePlan, placeholders: list, tower_loss_fn: Callable,
                       settings: TrainSettings, loss_scale) -> _Update:
    """Towers with their own variables -> all-reduced mean -> one apply per tower.

    Each tower accumulates (k > 1) and unscales (fp16) its own gradients, so
    the all-reduce runs once per applied step. The global norm and the
    finiteness verdict come from tower 0's reduced values and are shared:
    the copies must take exactly the same step, or skip it together.
    """
    replicas = ReplicaVariables(plan)

    def tower(i):
        loss = tower_loss_fn(placeholders[i], i)
        scaled = loss_scale.scaled(loss) if loss_scale is not None else loss
        return loss, tower_gradients(scaled, replicas.trainable(i))

    with recomputed_layers(settings.recompute_activations):
        results = build_replicated_towers(plan, replicas, tower)
    variables = replicas.trainable(0)
    k = settings.gradient_accumulation_steps
    with tf.device(plan.variable_device):
        global_step = tf.train.get_or_create_global_step()
        loss = tf.add_n([loss for loss, _ in results]) / len(results)
        learning_rate = _learning_rate(settings, global_step)
    local, micro_steps, accumulators = [], [], []
    for i, (device, (tower_loss, grads)) in enumerate(zip(plan.tower_devices, results)):
        with tf.device(device), tf.name_scope(f"tower_{i}_gradients"):
            nonfinite = _not_finite(tower_loss)
            if k > 1:
                grads, nonfinite, micro_step, tower_accumulators = _accumulate(
                    grads, nonfinite, replicas.trainable(i), k, replica_name(i, ""))
                micro_steps.append(micro_step)
                accumulators.extend(tower_accumulators)
            if loss_scale is not None:
                grads = loss_scale.unscaled(grads)
            local.append(list(grads) + [nonfinite])
    reduced = all_reduce_mean(plan, local)
    with tf.device(plan.tower_devices[0]):
        grads = [g for g in reduced[0][:-1] if g is not None]
        grad_norm = tf.linalg.global_norm(grads)
        all_finite = tf.logical_and(tf.equal(reduced[0][-1], 0.0), tf.is_finite(grad_norm))
    applies = []
    for i, device in enumerate(plan.tower_devices):
        with tf.device(device):
            optimizer = _optimizer(settings, learning_rate)
            optimizer.name = replica_name(i, optimizer.name)
            present = [(g, v) for g, v in zip(reduced[i][:-1], replicas.trainable(i))
                       if g is not None]
            clipped, _ = clip_by_global_norm([g for g, _ in present], settings.clip_norm,
                                             use_norm=grad_norm)
            # global_step moves once, with tower 0's copy.
            applies.append(_apply_if(all_finite, optimizer, clipped,
                                     [v for _, v in present],
                                     global_step if i == 0 else None))
    with tf.device(plan.variable_device), tf.control_dependencies(applies[1:]):
        applied = tf.identity(applies[0])
    micro_step = tf.group(*micro_steps, name="micro_step") if micro_steps else None
    return _Update(variables, loss, micro_step, applied, accumulators, global_step,
                   learning_rate, grad_norm, all_finite)


def _not_finite(loss):
    """1.0 when the loss is not finite, else 0.0."""
    return tf.cast(tf.logical_not(tf.reduce_all(tf.is_finite(loss))), tf.float32)


def _learning_rate(settings: TrainSettings, global_step):
    return learning_rate_schedule(global_step, settings.learning_rate,
                                  settings.num_train_steps, settings.num_warmup_steps)


def _optimizer(settings: TrainSettings, learning_rate):
    return make_optimizer(settings.optimizer, learning_rate,
                          weight_decay_rate=settings.weight_decay_rate,
                          learning_rate_multipliers=settings.learning_rate_multipliers,
                          fused=settings.fused_optimizer,
                          sparse_updates=settings.sparse_embedding_updates)


def _apply_if(all_finite, optimizer, grads: list, variables: list, global_step):
    """The optimizer's update when `all_finite`; evaluates to whether it applied."""
    def apply():
        op = optimizer.apply_gradients(list(zip(grads, variables)), global_step)
        with tf.control_dependencies([op]):
            return tf.constant(True)

    return tf.cond(all_finite, apply, lambda: tf.constant(False))


def _finish(plan: DevicePlan, settings: TrainSettings, placeholders: list, loss_scale,
            update: _Update) -> TrainGraph:
    """What both layouts add after the update: the loss scale, the accumulators'
    reset, the step after, the examples counter; the TrainGraph."""
    applied = update.applied
    if loss_scale is not None:
        with tf.control_dependencies([loss_scale.update(update.all_finite)]):
            applied = tf.identity(applied)
    if update.accumulators:
        with tf.control_dependencies([applied]):
            reset = tf.group(*[a.assign(tf.zeros_like(a)) for a in update.accumulators])
        with tf.control_dependencies([reset]):
            applied = tf.identity(applied)
    # The step as it is after this run's update (a plain fetch of
    # global_step could race with the increment).
    with tf.control_dependencies([applied]):
        step_after = tf.identity(update.global_step.read_value())
    # Examples consumed (applied or skipped steps alike): where a resumed
    # run picks the data stream up. The loop sets it before each save.
    examples_seen = tf.get_variable("examples_seen", [], tf.int64,
                                    tf.zeros_initializer(), trainable=False)
    examples_seen_value = tf.placeholder(tf.int64, [], "examples_seen_value")
    set_examples_seen = examples_seen.assign(examples_seen_value)
    weights_finite = tf.reduce_all(tf.stack(
        [tf.reduce_all(tf.is_finite(v)) for v in update.variables]))
    k = settings.gradient_accumulation_steps
    return TrainGraph(
        placeholders=placeholders, gradient_accumulation_steps=k,
        examples_per_step=(settings.train_batch_size * plan.num_towers * k
                           * settings.num_workers),
        variables=update.variables, loss=update.loss, micro_step=update.micro_step,
        train_step=applied, step_after=step_after, global_step=update.global_step,
        learning_rate=update.learning_rate, grad_norm=update.grad_norm,
        all_finite=update.all_finite, loss_scale=loss_scale, examples_seen=examples_seen,
        examples_seen_value=examples_seen_value, set_examples_seen=set_examples_seen,
        weights_finite=weights_finite)


def _accumulate(grads: list, nonfinite_losses, variables: list, k: int, prefix: str = ""):
    """Gradient accumulation over k micro-batches.

    Returns (mean gradients including the current micro-batch, non-finite
    losses over the k micro-batches, micro_step op, accumulator variables).
    The accumulators are dense variables on the current device
    (`accumulators/...`, not saved in checkpoints: they are always zero
    between applied steps); `prefix` tells a replicated tower's apart.
    """
    def accumulator(name: str, shape):
        return tf.get_variable(f"accumulators/{name}", shape, tf.float32,
                               tf.zeros_initializer(), trainable=False,
                               collections=[tf.GraphKeys.LOCAL_VARIABLES])

    accumulators, adds = [], []
    for grad, var in zip(grads, variables):
        if grad is None:
            adds.append(None)
            continue
        acc = accumulator(var.name.split(":")[0], var.shape)
        accumulators.append(acc)
        adds.append((acc, acc.assign_add(tf.convert_to_tensor(grad))))
    nonfinite = accumulator(prefix + "nonfinite_losses", [])
    accumulators.append(nonfinite)
    nonfinite_add = nonfinite.assign_add(nonfinite_losses)
    micro_step = tf.group(*[add for _, add in filter(None, adds)], nonfinite_add,
                          name="micro_step")
    means = []
    for pair in adds:
        if pair is None:
            means.append(None)
            continue
        acc, add = pair
        with tf.control_dependencies([add]):
            means.append(acc.read_value() / k)
    with tf.control_dependencies([nonfinite_add]):
        total_nonfinite = nonfinite.read_value()
    return means, total_nonfinite, micro_step, accumulators
