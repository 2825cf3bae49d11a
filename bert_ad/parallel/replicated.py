"""--variable_update=replicated: a copy of the variables on every tower, gradients all-reduced.

The layout tf_cnn_benchmarks calls `replicated`, for cards whose compute
outruns the trip to the CPU and back (docs/gpu_scaling.md):

* Tower i owns a copy of every variable on its own device. Tower 0's copy
  has Google's names (`bert/encoder/...`): it is what checkpoints hold, what
  a warm start or a resume loads, what evaluation saves. Tower i > 0's copy
  is `replica_i/<Google's name>`, a local variable: never saved, set from
  tower 0's after every initialisation or restore (`sync_replicas`). The
  optimizer's slots and step counters follow the same rule, because the
  optimizer names them after the variable (`replica_1/bert/.../adam_m`).
* Each tower's gradients are all-reduced to the towers' mean with
  TensorFlow's collective ops (NCCL between GPUs, a ring between logical CPU
  devices, so the very same graph runs on this machine's CPUs), packed into
  buffers of about PACK_BYTES, the last layers first so the exchange can
  start while the backward pass is still on the early layers.
* Every tower applies the mean to its own copy: the same numbers in, the
  same update out, so the copies stay identical. The decisions that must
  not differ between towers (the global norm for clipping, whether the step
  is finite) are made once, from tower 0's reduced values, and shared.
"""

from __future__ import annotations

import re
from typing import Callable, List, Sequence

from bert_ad.compat import tf
from bert_ad.parallel.collective import CollectiveKeys, Collectives
from bert_ad.parallel.towers import DevicePlan

# One exchanged buffer; the cross-worker exchange's default (--collective_pack_mb).
PACK_BYTES = 32 * 2 ** 20
_REPLICA = re.compile(r"^replica_\d+/")


def replica_name(tower: int, name: str) -> str:
    """The name of tower `tower`'s copy of variable `name` (tower 0: Google's)."""
    return name if tower == 0 else f"replica_{tower}/{name}"


def google_name(name: str) -> str:
    """`replica_3/bert/pooler/dense/kernel` -> `bert/pooler/dense/kernel` (others as they are).

    Weight-decay exclusions and learning-rate multipliers match this name,
    so every copy of a variable is updated by the same rule.
    """
    return _REPLICA.sub("", name, count=1)


class ReplicaVariables:
    """Each tower's own copy of the model's variables, created as the tower is built.

    `getter(i)` is the custom getter of tower i's variable scope: it creates
    the variable under `replica_name(i, name)` on tower i's device and
    records the trainable ones, in creation order, so `trainable(i)[j]` is
    tower i's copy of `trainable(0)[j]`.
    """

    def __init__(self, plan: DevicePlan):
        self.plan = plan
        self._trainable: List[list] = [[] for _ in range(plan.num_towers)]

    def getter(self, tower: int):
        device = self.plan.tower_devices[tower]

        def on_tower(getter, name, *args, **kwargs):
            with tf.device(device):
                variable = getter(replica_name(tower, name), *args, **kwargs)
            seen = {id(v) for v in self._trainable[tower]}
            if kwargs.get("trainable") is not False and id(variable) not in seen:
                self._trainable[tower].append(variable)
            return variable
        return on_tower

    def trainable(self, tower: int) -> list:
        return list(self._trainable[tower])


def build_replicated_towers(plan: DevicePlan, replicas: ReplicaVariables,
                            tower_fn: Callable[[int], object]) -> list:
    """Call `tower_fn(i)` once per tower, under its device and its own variables.

    Ops are named `tower_i/...` as in the default layout (bert_ad/parallel/towers.py).
    """
    outputs = []
    outer = tf.get_variable_scope()
    for i, device in enumerate(plan.tower_devices):
        with tf.variable_scope(outer, custom_getter=replicas.getter(i)), \
                tf.name_scope(f"tower_{i}"), tf.device(device):
            outputs.append(tower_fn(i))
    return outputs


def all_reduce_mean(plan: DevicePlan, per_tower: Sequence[Sequence]) -> list:
    """The towers' mean of each entry, on every tower: `out[t][j]` on tower t's device.

    `per_tower[t][j]` is tower t's tensor j (a gradient, IndexedSlices made
    dense, or None kept as None; any float32 scalar may ride along). Every
    tower packs its entries the same way, so its collective ops get the same
    instance keys as their twins on the other towers (one CollectiveKeys per
    tower, counting alike). Entries are exchanged last-created first: the
    backward pass produces them in that order.
    """
    n = plan.num_towers
    if n == 1:
        return [[_dense(g) for g in per_tower[0]]]
    device_type = "GPU" if plan.uses_gpu else "CPU"
    reduced = []
    for tower, (device, entries) in enumerate(zip(plan.tower_devices, per_tower)):
        collectives = Collectives(n, device, device_type, CollectiveKeys(),
                                  plan.collective_implementation)
        with tf.name_scope(f"tower_{tower}_all_reduce"):
            backwards = collectives.mean_gradients(list(reversed(entries)), PACK_BYTES)
        reduced.append(list(reversed(backwards)))
    return reduced


def _dense(gradient):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


def localize_replicas(graph=None) -> list:
    """Move every `replica_i/...` variable out of the saved collections.

    The copies of towers 1..n-1 (weights, slots, step counters) become local
    variables: tf.global_variables(), and so every Saver the loop builds,
    keep Google's layout, and the local initializer covers them. Returns the
    moved variables.
    """
    graph = graph or tf.get_default_graph()
    moved = [v for v in graph.get_collection(tf.GraphKeys.GLOBAL_VARIABLES)
             if _REPLICA.match(v.op.name)]
    ids = {id(v) for v in moved}
    for key in (tf.GraphKeys.GLOBAL_VARIABLES, tf.GraphKeys.TRAINABLE_VARIABLES):
        collection = graph.get_collection_ref(key)
        collection[:] = [v for v in collection if id(v) not in ids]
    local = graph.get_collection_ref(tf.GraphKeys.LOCAL_VARIABLES)
    present = {id(v) for v in local}
    local.extend(v for v in moved if id(v) not in present)
    return moved


def sync_replicas(replica_variables: Sequence):
    """An op that sets every replica to tower 0's value of the same variable.

    Run after the variables are initialised, restored or warm-started: the
    checkpoint holds tower 0's copy only, and each replica's initializer drew
    its own random numbers.
    """
    by_name = {v.op.name: v for v in tf.global_variables()}
    assignments = []
    with tf.name_scope("sync_replicas"):
        for replica in replica_variables:
            source = by_name[google_name(replica.op.name)]
            assignments.append(replica.assign(source.read_value(), read_value=False))
    return tf.group(*assignments, name="sync_replicas")
