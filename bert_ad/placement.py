"""Placement: where this process computes, its towers and, in a cluster, its place.

Built once from the flags (bert_ad/cli/builders.py); no TensorFlow at import.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # only named: this module is read before TensorFlow is imported
    from bert_ad.distributed.cluster import ClusterRuntime
    from bert_ad.parallel.towers import DevicePlan


@dataclasses.dataclass
class Placement:
    """Where this process computes: its towers and, in a cluster, its place."""
    plan: DevicePlan
    cluster: Optional[ClusterRuntime] = None
    use_xla: bool = False

    @property
    def num_workers(self) -> int:
        return 1 if self.cluster is None else self.cluster.num_workers

    @property
    def worker_index(self) -> int:
        return 0 if self.cluster is None else self.cluster.task_index

    @property
    def is_chief(self) -> bool:
        """True on a single machine and on worker 0: who reads checkpoints and writes."""
        return self.cluster is None or self.cluster.is_chief

    def local_session_config(self):
        """This machine's towers only (scoring; training without a cluster)."""
        from bert_ad.compat import session_config  # TensorFlow: only once a run starts
        return session_config(self.plan.num_cpu_devices, use_xla=self.use_xla,
                              collective_nccl=self.plan.replicated and self.plan.uses_gpu)
