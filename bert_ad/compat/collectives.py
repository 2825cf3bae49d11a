"""Several workers: TensorFlow's gRPC server and collective ops, in both lanes."""

from __future__ import annotations

from bert_ad.compat import IS_TF1, tf

#
# Both lanes have the v1 collective ops (`collective_ops.all_reduce` and
# friends) in graph mode. TF 2.x takes the implementation as
# `communication_hint` (and has a per-op timeout we leave off: the cluster
# runtime puts one deadline on the whole session call, the same in both
# lanes); TF 1.15 picks NCCL through the session's
# `experimental.collective_nccl`, only sums ("Add") or multiplies, wants the
# op's input placed, and its CPU ring has no float16.

def _collective_ops():
    from tensorflow.python.ops import collective_ops
    return collective_ops


def _hint(implementation: str) -> dict:
    return {} if IS_TF1 else {"communication_hint": implementation}


def collective_all_reduce(tensor, group_size: int, group_key: int, instance_key: int,
                          final_op: str = "Id", implementation: str = "ring"):
    """Sum over the group (then `final_op`: "Id" or "Div" by the group size)."""
    return _collective_ops().all_reduce(tensor, group_size, group_key, instance_key,
                                        "Add", final_op, **_hint(implementation))


def collective_all_gather(tensor, group_size: int, group_key: int, instance_key: int,
                          implementation: str = "ring"):
    return _collective_ops().all_gather(tensor, group_size, group_key, instance_key,
                                        **_hint(implementation))


def collective_broadcast_send(tensor, group_size: int, group_key: int, instance_key: int,
                              implementation: str = "ring"):
    return _collective_ops().broadcast_send(tensor, tensor.shape, tensor.dtype, group_size,
                                            group_key, instance_key, **_hint(implementation))


def collective_broadcast_recv(shape, dtype, group_size: int, group_key: int,
                              instance_key: int, implementation: str = "ring"):
    return _collective_ops().broadcast_recv(shape, dtype, group_size, group_key,
                                            instance_key, **_hint(implementation))


def collective_fp16_problem(implementation: str) -> str | None:
    """Why float16 exchange cannot run here, or None when it can."""
    if IS_TF1 and implementation == "ring":
        return ("TensorFlow 1.15's CPU ring all-reduce has no float16 "
                "(CollectiveImplementation does not support datatype 19)")
    return None


def configure_collectives(config, group_leader: str, task_filter: str,
                          implementation: str) -> None:
    """Set a worker's ConfigProto up for between-graph collectives.

    Args:
      config: the ConfigProto (changed in place).
      group_leader: "/job:worker/replica:0/task:0", who resolves groups.
      task_filter: "/job:worker/task:i": this worker's session sees only its
        own devices (no cross-worker placement, no waiting for every worker
        at session creation).
      implementation: "ring" or "nccl".
    """
    config.experimental.collective_group_leader = group_leader
    del config.device_filters[:]
    config.device_filters.append(task_filter)
    if IS_TF1 and implementation == "nccl":
        config.experimental.collective_nccl = True


def start_server(hosts: list, task_index: int, config):
    """Start this worker's gRPC server (tf.distribute.Server in TF 2.x)."""
    cluster = tf.train.ClusterSpec({"worker": list(hosts)})
    return tf.train.Server(cluster, job_name="worker", task_index=task_index,
                           config=config, start=True)
