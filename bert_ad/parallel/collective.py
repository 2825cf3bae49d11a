"""Collective ops in graph mode: all-reduce, gather, broadcast over a group of devices.

One primitive for two groups: the towers of one machine
(--variable_update=replicated, bert_ad/parallel/replicated.py) and the workers
of a cluster (bert_ad/distributed/cluster.py, which builds on it). It lives
here, below both, so distributed/ stands on parallel/ and never the reverse.

Every member of the group builds the same graph (between-graph replication
across workers; one twin per tower), so every collective op it creates must
carry the same (group key, instance key) as its twins. `CollectiveKeys`
hands them out in one place: fixed keys for the few start-up exchanges of a
cluster that must match even when two workers were (wrongly) given different
models, then one key per op in creation order, identical on every member
that builds the same model.

Gradients cross the wire packed: the member's gradients are flattened and
concatenated into a few buffers of about `pack_bytes` (fewer, larger
messages), each buffer is all-reduced to the group's mean (optionally in
float16), and the buffers are cut back into gradients. The reductions run
one after the other (control dependencies), so every member launches them in
the same order, which NCCL needs and which keeps the ring deterministic.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

from bert_ad.compat import collectives
from bert_ad.compat import tf

# Start-up exchanges get fixed instance keys: they must line up across
# workers before anything else is known to agree.
SIGNATURE_INSTANCE_KEY = 1
CHECKSUM_INSTANCE_KEY = 2
LOSS_INSTANCE_KEY = 3
STOP_INSTANCE_KEY = 4
FIRST_FREE_INSTANCE_KEY = 100
# One group per device type: every worker's CPU:0, or every worker's GPU:0.
GROUP_KEYS = {"CPU": 1, "GPU": 2}


class CollectiveKeys:
    """Group and instance keys of one training graph, the same on every worker."""

    def __init__(self):
        self._next_instance = FIRST_FREE_INSTANCE_KEY

    @staticmethod
    def group_key(device_type: str) -> int:
        return GROUP_KEYS[device_type.upper()]

    def next_instance_key(self) -> int:
        key = self._next_instance
        self._next_instance += 1
        return key


def pack_plan(sizes: Sequence[int], pack_bytes: int) -> list:
    """Consecutive groups of indices whose byte sizes add up to <= `pack_bytes`.

    A tensor larger than `pack_bytes` forms a group of its own; order is kept,
    so unpacking is a plain split. Example: sizes [4, 4, 9, 1], limit 8 ->
    [[0, 1], [2], [3]].
    """
    groups, current, used = [], [], 0
    for i, size in enumerate(sizes):
        if current and used + size > pack_bytes:
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += size
    if current:
        groups.append(current)
    return groups


class Collectives:
    """Collective ops of one member of a group (a worker, or a replicated tower).

    Args:
      num_workers: the group size (one device per member takes part: each
        worker's, or each tower's).
      device: this member's device for the ops, e.g.
        "/job:worker/replica:0/task:1/device:CPU:0".
      device_type: "CPU" or "GPU" (picks the group key).
      keys: the graph's CollectiveKeys.
      implementation: "ring" or "nccl".

    The ops wait for the other members as long as it takes; a cluster puts
    a deadline on the session call (bert_ad/distributed/cluster.py).
    """

    def __init__(self, num_workers: int, device: str, device_type: str,
                 keys: CollectiveKeys, implementation: str = "ring"):
        self.num_workers = num_workers
        self.device = device
        self.group_key = keys.group_key(device_type)
        self.keys = keys
        self.implementation = implementation

    def _instance(self, instance_key: int | None) -> int:
        return self.keys.next_instance_key() if instance_key is None else instance_key

    def _here(self, tensor):
        """`tensor` produced on this device (TF 1.15 wants the input placed too)."""
        if tensor.device == self.device:
            return tensor
        with tf.device(self.device):
            return tf.identity(tensor)

    def all_reduce(self, tensor, mean: bool = True, instance_key: int | None = None):
        """Sum (or mean) of `tensor` over the workers; same shape and dtype."""
        tensor = self._here(tensor)
        with tf.device(self.device):
            return collectives.collective_all_reduce(
                tensor, self.num_workers, self.group_key, self._instance(instance_key),
                final_op="Div" if mean else "Id", implementation=self.implementation)

    def all_gather(self, tensor, instance_key: int | None = None):
        """[n, ...] per worker -> [workers * n, ...], worker 0's rows first."""
        tensor = self._here(tensor)
        with tf.device(self.device):
            return collectives.collective_all_gather(
                tensor, self.num_workers, self.group_key, self._instance(instance_key),
                implementation=self.implementation)

    def broadcast(self, tensor, is_source: bool, instance_key: int | None = None):
        """The source worker's `tensor` on every worker (static shape needed)."""
        key = self._instance(instance_key)
        if is_source:
            tensor = self._here(tensor)
        with tf.device(self.device):
            if is_source:
                return collectives.collective_broadcast_send(
                    tensor, self.num_workers, self.group_key, key,
                    implementation=self.implementation)
            return collectives.collective_broadcast_recv(
                tensor.shape, tensor.dtype, self.num_workers, self.group_key, key,
                implementation=self.implementation)

    def mean_gradients(self, grads: list, pack_bytes: int, fp16: bool = False) -> list:
        """The cluster mean of this worker's gradients, packed into few buffers.

        Args:
          grads: one entry per variable: a tensor, tf.IndexedSlices (made
            dense: the exchange sums whole tensors) or None (kept as None).
          pack_bytes: target size of one exchanged buffer.
          fp16: exchange float16 (half the bytes); each worker divides by the
            worker count before the cast, so the sum cannot overflow sooner
            than the mean would.

        Returns:
          The list in the same order, dense tensors (or None), float32.
        """
        with tf.name_scope("cross_worker_mean"), tf.device(self.device):
            present = [i for i, g in enumerate(grads) if g is not None]
            dense = {i: _dense(grads[i]) for i in present}
            by_dtype = {}
            for i in present:
                by_dtype.setdefault(dense[i].dtype, []).append(i)
            out = list(grads)
            previous = None
            for dtype in sorted(by_dtype, key=lambda d: d.name):
                indices = by_dtype[dtype]
                sizes = [_num_elements(dense[i]) * dtype.size for i in indices]
                for group in pack_plan(sizes, pack_bytes):
                    members = [indices[j] for j in group]
                    reduced, previous = self._reduce_pack(
                        [dense[i] for i in members], fp16, previous)
                    for i, tensor in zip(members, reduced):
                        out[i] = tensor
            return out

    def _reduce_pack(self, tensors: list, fp16: bool, previous):
        """All-reduce one pack after `previous` (the last pack's result, or None)."""
        flat = [tf.reshape(t, [-1]) for t in tensors]
        buffer = flat[0] if len(flat) == 1 else tf.concat(flat, axis=0)
        dtype = buffer.dtype
        dependencies = [] if previous is None else [previous]
        with tf.control_dependencies(dependencies):
            if fp16 and dtype == tf.float32:
                half = tf.cast(buffer / float(self.num_workers), tf.float16)
                reduced = tf.cast(self.all_reduce(half, mean=False), dtype)
            else:
                reduced = self.all_reduce(tf.identity(buffer), mean=True)
        if all(t.shape.is_fully_defined() for t in flat):
            sizes = [t.shape.num_elements() for t in flat]
        else:
            sizes = tf.stack([tf.size(t) for t in flat])
        parts = [reduced] if len(flat) == 1 else tf.split(reduced, sizes)
        out = []
        for part, original in zip(parts, tensors):
            shaped = tf.reshape(part, tf.shape(original))
            shaped.set_shape(original.shape)
            out.append(shaped)
        return out, reduced

    def broadcast_variables(self, variables: Sequence, is_source: bool,
                            pack_bytes: int):
        """An op that sets every worker's `variables` to the source worker's values.

        Variables are packed per dtype like gradients; the packs go one after
        the other. The source sends and keeps its values; the others assign.
        """
        with tf.name_scope("broadcast_variables"), tf.device(self.device):
            by_dtype = {}
            for variable in variables:
                dtype = variable.dtype.base_dtype
                by_dtype.setdefault(dtype, []).append(variable)
            ops, previous = [], None
            for dtype in sorted(by_dtype, key=lambda d: d.name):
                group_vars = by_dtype[dtype]
                sizes = [_static_elements(v) * dtype.size for v in group_vars]
                for group in pack_plan(sizes, pack_bytes):
                    members = [group_vars[j] for j in group]
                    # One pack after the other, on the sending and receiving side.
                    with tf.control_dependencies([] if previous is None else [previous]):
                        flat = [tf.reshape(v.read_value(), [-1]) for v in members]
                        buffer = flat[0] if len(flat) == 1 else tf.concat(flat, axis=0)
                        received = self.broadcast(buffer, is_source)
                    previous = received
                    if is_source:
                        ops.append(received)
                        continue
                    counts = [_static_elements(v) for v in members]
                    parts = [received] if len(members) == 1 else tf.split(received, counts)
                    for variable, part in zip(members, parts):
                        ops.append(variable.assign(
                            tf.reshape(part, variable.shape), read_value=False))
            return tf.group(*ops)


def variables_checksum(variables: Sequence):
    """[sum, sum of squares, sum of index-weighted values] of all `variables`, float64.

    Equal on two workers when their weights are equal; a swapped or stale
    tensor changes the third entry even when the sums agree.
    """
    with tf.name_scope("variables_checksum"):
        totals = []
        for k, variable in enumerate(variables):
            value = tf.cast(tf.reshape(variable.read_value(), [-1]), tf.float64)
            totals.append(tf.stack([tf.reduce_sum(value), tf.reduce_sum(value * value),
                                    (k + 1) * tf.reduce_sum(value)]))
        if not totals:
            return tf.zeros([3], tf.float64)
        return tf.add_n(totals)


def signature_numbers(parts: Sequence[str]) -> list:
    """Each text -> an integer below 2**52 (exact in float64) for an all-gather."""
    return [int.from_bytes(hashlib.sha256(part.encode("utf-8")).digest()[:8], "big")
            % (2 ** 52) for part in parts]


def _dense(gradient):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.convert_to_tensor(gradient)
    return gradient


def _num_elements(tensor) -> int:
    """Static element count, or a large stand-in (own pack) when unknown."""
    if tensor.shape.is_fully_defined():
        return max(1, tensor.shape.num_elements())
    return 2 ** 40


def _static_elements(variable) -> int:
    return max(1, variable.shape.num_elements())
