"""Who is in a cluster: TF_CONFIG or --worker_hosts/--task_index, checked, as a ClusterSpec.

The ecosystem's convention names the cluster: `TF_CONFIG`
(`{"cluster": {"worker": ["host:port", ...]}, "task": {"type": "worker",
"index": i}}`) or the flags `--worker_hosts` / `--task_index`. Worker 0 is
the chief. Everything here is plain data and checks (one-line errors naming
the flag or TF_CONFIG field); the server, the start-up handshake and the
deadlines are bert_ad/distributed/cluster.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Sequence

from bert_ad.errors import fail
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # read before TensorFlow is imported (the flags' checks)
    from bert_ad.parallel.towers import DevicePlan

log = logging.getLogger("bert_ad")

TF_CONFIG_SHAPE = ('{"cluster": {"worker": ["host:port", ...]}, '
                   '"task": {"type": "worker", "index": i}}')
JOB = "worker"


# --- who is in the cluster ------------------------------------------------------------

class ClusterSpec:
    """The workers' addresses and this process's place among them.

    Attributes:
      hosts: ["host:port", ...], worker i at hosts[i]; worker 0 is the chief.
      task_index: this worker.
      source: where it came from ("TF_CONFIG" or "--worker_hosts"), for messages.
    """

    def __init__(self, hosts: Sequence[str], task_index: int, source: str):
        self.hosts = list(hosts)
        self.task_index = task_index
        self.source = source

    @property
    def num_workers(self) -> int:
        return len(self.hosts)

    @property
    def is_chief(self) -> bool:
        return self.task_index == 0

    @property
    def address(self) -> str:
        return self.hosts[self.task_index]

    def task_prefix(self, task: int | None = None) -> str:
        task = self.task_index if task is None else task
        return f"/job:{JOB}/replica:0/task:{task}"

    def device(self, device_type: str = "CPU", index: int = 0) -> str:
        return f"{self.task_prefix()}/device:{device_type}:{index}"

    def describe(self) -> str:
        return (f"cluster from {self.source}: worker {self.task_index} of "
                f"{self.num_workers} at {self.address}"
                f"{' (chief)' if self.is_chief else ''}; workers {','.join(self.hosts)}")

    def __eq__(self, other) -> bool:
        return (isinstance(other, ClusterSpec) and self.hosts == other.hosts
                and self.task_index == other.task_index)


def parse_address(text, where: str) -> tuple:
    """"host:port" (or "[v6]:port") -> (host, port); UserError naming `where`."""
    if not isinstance(text, str) or not text.strip():
        fail(f"{where}: {text!r} is not a worker address; give host:port")
    text = text.strip()
    match = re.fullmatch(r"\[([0-9a-fA-F:.]+)\]:(\d+)|([^\s:\[\]/]+):(\d+)", text)
    if not match:
        fail(f"{where}: {text!r} is not host:port (e.g. 10.0.0.2:2222)")
    host = match.group(1) or match.group(3)
    port = int(match.group(2) or match.group(4))
    if not 1 <= port <= 65535:
        fail(f"{where}: port {port} of {text!r} is not in 1..65535")
    return host, port


def _check_hosts(hosts: Sequence, where: str) -> list:
    if not isinstance(hosts, list) or not hosts:
        fail(f"{where} must be a non-empty list of host:port strings")
    checked = []
    for i, host in enumerate(hosts):
        parse_address(host, f"{where}[{i}]")
        checked.append(host.strip())
    seen = {}
    for i, host in enumerate(checked):
        if host in seen:
            fail(f"{where}: worker {i} and worker {seen[host]} both use {host}; "
                 "give every worker its own host:port")
        seen[host] = i
    return checked


def _check_index(index, num_workers: int, where: str) -> int:
    if isinstance(index, bool) or not isinstance(index, int):
        fail(f"{where}={index!r} is not an integer; give 0..{num_workers - 1}")
    if not 0 <= index < num_workers:
        fail(f"{where}={index} is out of range: the cluster lists {num_workers} "
             f"worker(s), so it must be 0..{num_workers - 1}")
    return index


def parse_tf_config(text: str | None) -> ClusterSpec | None:
    """The cluster of a TF_CONFIG value; None when it is unset or empty."""
    if text is None or not text.strip():
        return None
    try:
        config = json.loads(text)
    except ValueError as e:
        fail(f"TF_CONFIG is not valid JSON ({e}); expected {TF_CONFIG_SHAPE}")
    if not isinstance(config, dict):
        fail(f"TF_CONFIG must be a JSON object like {TF_CONFIG_SHAPE}")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict):
        fail(f"TF_CONFIG has no \"cluster\" object; expected {TF_CONFIG_SHAPE}")
    others = sorted(job for job in cluster if job != JOB)
    if others:
        fail(f"TF_CONFIG cluster has the job(s) {', '.join(map(repr, others))}: only "
             "\"worker\" is supported (all-reduce, no parameter servers); list every "
             "machine under cluster.worker, worker 0 is the chief")
    if JOB not in cluster:
        fail(f"TF_CONFIG cluster has no \"worker\" list; expected {TF_CONFIG_SHAPE}")
    hosts = _check_hosts(cluster[JOB], "TF_CONFIG cluster.worker")
    task = config.get("task")
    if not isinstance(task, dict):
        fail(f"TF_CONFIG has no \"task\" object; expected {TF_CONFIG_SHAPE}")
    if task.get("type") != JOB:
        fail(f"TF_CONFIG task.type is {task.get('type')!r}; it must be \"worker\"")
    if "index" not in task:
        fail("TF_CONFIG task has no \"index\"; give this worker's position in "
             "cluster.worker (0 is the chief)")
    index = _check_index(task["index"], len(hosts), "TF_CONFIG task.index")
    return ClusterSpec(hosts, index, "TF_CONFIG")


def parse_worker_flags(worker_hosts: str | None, task_index: int | None
                       ) -> ClusterSpec | None:
    """The cluster of --worker_hosts=h:p,h:p --task_index=i; None when unset."""
    if not worker_hosts:
        if task_index is not None:
            fail(f"--task_index={task_index} needs --worker_hosts (host:port,host:port,...)")
        return None
    hosts = _check_hosts([h for h in worker_hosts.split(",")], "--worker_hosts")
    if task_index is None:
        fail("--worker_hosts needs --task_index (this worker's position in the list, "
             "0 is the chief)")
    index = _check_index(task_index, len(hosts), "--task_index")
    return ClusterSpec(hosts, index, "--worker_hosts")


def resolve_cluster(worker_hosts: str | None, task_index: int | None,
                    environ: dict | None = None) -> ClusterSpec | None:
    """The cluster from the flags or TF_CONFIG; None for a single machine.

    Both may be given only if they agree. A cluster of one worker is a
    single-machine run.
    """
    environ = os.environ if environ is None else environ
    from_flags = parse_worker_flags(worker_hosts, task_index)
    from_env = parse_tf_config(environ.get("TF_CONFIG"))
    if from_flags and from_env and from_flags != from_env:
        fail(f"--worker_hosts/--task_index ({from_flags.address}, worker "
             f"{from_flags.task_index} of {','.join(from_flags.hosts)}) and TF_CONFIG "
             f"(worker {from_env.task_index} of {','.join(from_env.hosts)}) disagree; "
             "set only one of them")
    spec = from_flags or from_env
    if spec is not None and spec.num_workers == 1:
        log.info("%s lists one worker: training on this machine alone", spec.source)
        return None
    return spec


# --- devices ------------------------------------------------------------------------

def _on_task(device: str, spec: ClusterSpec) -> str:
    """"/cpu:1" or "/gpu:0" -> "/job:worker/replica:0/task:i/device:CPU:1"."""
    match = re.fullmatch(r"/(?:device:)?(cpu|gpu):(\d+)", device.lower())
    if not match:
        raise ValueError(f"unexpected device string {device!r}")
    return spec.device(match.group(1).upper(), int(match.group(2)))


def worker_plan(plan: DevicePlan, spec: ClusterSpec) -> DevicePlan:
    """`plan` with every device on this worker's task (same towers, same cards)."""
    from bert_ad.parallel.towers import DevicePlan  # TensorFlow: a run is starting
    on_task = DevicePlan([_on_task(d, spec) for d in plan.tower_devices],
                         plan.physical_names, plan.uses_gpu)
    on_task.variable_device = _on_task(plan.variable_device, spec)
    return on_task
