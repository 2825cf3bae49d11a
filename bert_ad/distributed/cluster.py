"""Several machines at run time: TensorFlow's server, and keeping workers in step.

Which machines form the cluster (TF_CONFIG or --worker_hosts/--task_index,
worker 0 the chief) is bert_ad/distributed/cluster_config.py. Each worker
starts TensorFlow's own gRPC server, builds its own graph with its local
towers (between-graph replication) and talks to the others only through
collective ops (bert_ad/parallel/collective.py):

* At start, before any step: every worker's model, global batch and flags
  are compared (an all-gather of their hashes), the chief's weights and
  optimizer state are broadcast to every worker (so only the chief reads
  --init_checkpoint or resumes from --output_dir), and a checksum of the
  weights is compared across workers.
* Each step: this worker's mean gradient is all-reduced to the cluster mean
  (packed, once per applied step), then every worker applies the same update.
* A worker that dies or never comes up cannot hang the others: every
  session call runs under a deadline (`--collective_timeout_s`, and
  `--cluster_start_timeout_s` for start-up and for the first run of each
  step kind, which includes TensorFlow's graph set-up). TF 2.x then aborts
  the collective itself; where TensorFlow keeps waiting (TF 1.15 ignores run
  timeouts inside collectives), a watchdog thread ends the process. Either
  way the worker stops with a one-line error naming the workers that no
  longer answer.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import sys
import threading
import time
import weakref
from typing import Callable, Sequence

from bert_ad.choices import COLLECTIVE_IMPLEMENTATIONS as IMPLEMENTATIONS
from bert_ad import compat
from bert_ad.compat import collectives
from bert_ad.compat import tf, with_grappler_setting
from bert_ad.distributed.cluster_config import JOB, ClusterSpec, parse_address, worker_plan
from bert_ad.errors import EXIT_USER_ERROR, fail
from bert_ad.parallel.collective import (CHECKSUM_INSTANCE_KEY, LOSS_INSTANCE_KEY,
                                         SIGNATURE_INSTANCE_KEY, STOP_INSTANCE_KEY,
                                         CollectiveKeys, Collectives, signature_numbers,
                                         variables_checksum)
from bert_ad.parallel.towers import DevicePlan

log = logging.getLogger("bert_ad")

# Extra time the watchdog grants TensorFlow's own timeout before ending the process.
WATCHDOG_GRACE_S = 5.0
_SIGNATURE_PARTS = ("model variables", "global batch and step count", "training flags")


# --- the network ----------------------------------------------------------------------

def port_is_free(port: int) -> bool:
    """Whether this machine can listen on `port` (as TensorFlow's server will).

    SO_REUSEADDR as gRPC sets it: a port left in TIME_WAIT by a killed run is
    free again, one that another process listens on is not.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("", port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def answers(address: str, timeout_s: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port."""
    host, port = parse_address(address, "worker address")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


# --- deadlines ------------------------------------------------------------------------

class Watchdog:
    """Ends the process when a guarded call overruns its deadline.

    A session call blocked in a collective op cannot be interrupted from
    Python, and TF 1.15 ignores run timeouts there; this thread writes the
    one-line error (as `run_cli` would) and exits with the user-error code.
    """

    def __init__(self, exit_fn: Callable[[int], None] = os._exit):
        self._condition = threading.Condition()
        self._deadline = None
        self._message_fn = None
        self._exit = exit_fn
        self._thread = None

    @contextlib.contextmanager
    def guard(self, seconds: float, message_fn: Callable[[], str]):
        with self._condition:
            if self._thread is None:
                self._thread = threading.Thread(target=self._watch, daemon=True,
                                                name="bert_ad-watchdog")
                self._thread.start()
            self._deadline = time.time() + seconds
            self._message_fn = message_fn
            self._condition.notify()
        try:
            yield
        finally:
            with self._condition:
                self._deadline = None
                self._message_fn = None
                self._condition.notify()

    def _watch(self) -> None:
        while True:
            with self._condition:
                while self._deadline is None:
                    self._condition.wait()
                remaining = self._deadline - time.time()
                if remaining > 0:
                    self._condition.wait(remaining)
                    continue
                message_fn = self._message_fn
            message = " ".join(message_fn().split())
            try:
                sys.stdout.flush()
                print(f"error: {message}", file=sys.stderr, flush=True)
            finally:
                self._exit(EXIT_USER_ERROR)
            return


# --- one worker's part in a cluster run ----------------------------------------------

# TensorFlow errors that mean "a peer is gone or late", not a bug in the graph.
_PEER_ERRORS = ("DeadlineExceededError", "UnavailableError", "AbortedError",
                "CancelledError")


class ClusterRuntime:
    """This worker's server, collective settings and start/step protocol.

    Args:
      spec: the cluster.
      session_config: the single-machine ConfigProto of this worker's plan
        (logical CPU devices, XLA); the server creates its devices from it.
      uses_gpu: whether the towers run on GPUs (NCCL possible, the default).
      implementation: "auto" (NCCL with GPUs, else ring), "ring" or "nccl".
      pack_mb: gradients are exchanged in buffers of about this many MiB.
      fp16: exchange gradients as float16.
      step_timeout_s: a step (after start-up) must finish within this.
      start_timeout_s: every worker must be up and in step within this.
      signature: text of the flags that must agree on every worker.
    """

    def __init__(self, spec: ClusterSpec, session_config, uses_gpu: bool,
                 implementation: str = "auto", pack_mb: float = 32.0, fp16: bool = False,
                 step_timeout_s: float = 300.0, start_timeout_s: float = 600.0,
                 signature: str = ""):
        if implementation not in IMPLEMENTATIONS:
            fail(f"--collective_implementation={implementation}: use one of "
                 f"{', '.join(IMPLEMENTATIONS)}")
        if implementation == "auto":
            implementation = "nccl" if uses_gpu else "ring"
        if implementation == "nccl" and not uses_gpu:
            fail("--collective_implementation=nccl needs GPU towers, but this worker "
                 "trains on the CPU; use ring (the default without GPUs)")
        if fp16:
            problem = collectives.collective_fp16_problem(implementation)
            if problem:
                fail(f"--collective_fp16 is not available here: {problem}; leave it off "
                     "or use TensorFlow 2.x")
        for flag, value in (("--collective_timeout_s", step_timeout_s),
                            ("--cluster_start_timeout_s", start_timeout_s),
                            ("--collective_pack_mb", pack_mb)):
            if not value > 0:
                fail(f"{flag}={value} must be positive")
        self.spec = spec
        self.implementation = implementation
        self.device_type = "GPU" if implementation == "nccl" else "CPU"
        self.pack_bytes = int(pack_mb * 2 ** 20)
        self.fp16 = fp16
        self.step_timeout_s = float(step_timeout_s)
        self.start_timeout_s = float(start_timeout_s)
        self.signature = signature
        self.session_config = tf.ConfigProto()
        if session_config is not None:
            self.session_config.CopyFrom(session_config)
        with_grappler_setting(self.session_config)
        collectives.configure_collectives(self.session_config, spec.task_prefix(0),
                                     f"/job:{JOB}/task:{spec.task_index}", implementation)
        self.server = None
        self.watchdog = Watchdog()
        self._keys = weakref.WeakKeyDictionary()
        # Fetch sets run once already: later runs get the step deadline.
        self._warm = set()

    # The cluster as the rest of the code sees it.
    @property
    def is_chief(self) -> bool:
        return self.spec.is_chief

    @property
    def task_index(self) -> int:
        return self.spec.task_index

    @property
    def num_workers(self) -> int:
        return self.spec.num_workers

    @property
    def target(self) -> str:
        if self.server is None:
            raise RuntimeError("start() the server first")
        return self.server.target

    def describe(self) -> str:
        return (f"{self.spec.describe()}; gradients all-reduced by {self.implementation} "
                f"in packs of {self.pack_bytes / 2 ** 20:g} MiB"
                f"{' as float16' if self.fp16 else ''}")

    def start(self) -> None:
        """Start this worker's TensorFlow server on its port (UserError if taken)."""
        _, port = parse_address(self.spec.address, "this worker's address")
        where = f"worker {self.task_index} ({self.spec.source})"
        if not port_is_free(port):
            fail(f"{where}: port {port} of {self.spec.address} is already in use on this "
                 "machine (an earlier run still alive?); stop that process or give this "
                 "worker another port")
        try:
            with compat.quiet_stderr():
                self.server = collectives.start_server(self.spec.hosts, self.task_index,
                                                  self.session_config)
        except tf.errors.OpError as e:
            fail(f"{where}: TensorFlow could not start its server on "
                 f"{self.spec.address} ({e.message.splitlines()[0]}); is port {port} "
                 "free?")
        log.info("TensorFlow server at %s", self.server.target)
        # Let the server go while TensorFlow's modules still exist: left to the
        # interpreter's teardown, TF 1.15's Server.__del__ finds them gone and prints a
        # traceback after a refused worker's one error line.
        atexit.register(self._release_server)

    def _release_server(self) -> None:
        self.server = None

    # --- graph building (the same order on every worker) -----------------------------
    def plan(self, plan: DevicePlan) -> DevicePlan:
        """This worker's towers addressed inside the cluster."""
        return worker_plan(plan, self.spec)

    def _graph_keys(self) -> CollectiveKeys:
        graph = tf.get_default_graph()
        if graph not in self._keys:
            self._keys[graph] = CollectiveKeys()
        return self._keys[graph]

    def _collectives(self, device_type: str) -> Collectives:
        implementation = self.implementation if device_type == "GPU" else "ring"
        return Collectives(self.num_workers, self.spec.device(device_type, 0), device_type,
                           self._graph_keys(), implementation)

    def gradient_reducer(self) -> Callable[[list], list]:
        """The `cross_worker_reduce` hook of build_train_graph."""
        def reduce(grads: list) -> list:
            collectives = self._collectives(self.device_type)
            return collectives.mean_gradients(grads, self.pack_bytes, self.fp16)
        return reduce

    def mean_over_workers(self, scalar, after=None):
        """The cluster mean of a float32 scalar (the loss to log), after `after`."""
        with tf.control_dependencies([] if after is None else [after]):
            value = tf.identity(scalar)
        return self._collectives("CPU").all_reduce(
            value, mean=True, instance_key=LOSS_INSTANCE_KEY)

    def build_stop_vote(self) -> dict:
        """Ops for `agree_to_stop`: this worker's vote in, the cluster's sum out."""
        vote = tf.placeholder(tf.float32, [], name="stop_vote")
        votes = self._collectives("CPU").all_reduce(vote, mean=False,
                                                    instance_key=STOP_INSTANCE_KEY)
        return {"vote": vote, "votes": votes}

    def build_start_sync(self, variables: Sequence, run_signature: str) -> dict:
        """Ops that bring every worker into step; run them with `synchronize`.

        Args:
          variables: every variable a checkpoint holds (weights, slots, step).
          run_signature: the loop's global batch and step count, as text.
        """
        collectives = self._collectives("CPU")
        described = ";".join(f"{v.name}:{v.shape}:{v.dtype.base_dtype.name}"
                             for v in variables)
        parts = [described, run_signature, self.signature]
        numbers = signature_numbers(parts)
        with tf.name_scope("cluster_start"):
            signature = collectives.all_gather(tf.constant(numbers, tf.float64),
                                               instance_key=SIGNATURE_INSTANCE_KEY)
            broadcast = collectives.broadcast_variables(variables, self.is_chief,
                                                        self.pack_bytes)
            with tf.control_dependencies([broadcast]):
                checksum = variables_checksum(variables)
            checksums = collectives.all_gather(checksum,
                                               instance_key=CHECKSUM_INSTANCE_KEY)
        return {"signature": signature, "mine": numbers, "broadcast": broadcast,
                "checksums": checksums}

    # --- running ------------------------------------------------------------------------
    def synchronize(self, session, sync: dict) -> None:
        """Wait for every worker, compare their settings, broadcast the chief's
        weights and compare checksums. UserError (or exit) on any mismatch."""
        started = time.time()
        self.wait_for_workers(self.start_timeout_s)
        deadline = started + self.start_timeout_s

        def run(fetch, what):
            return self.run(session, fetch, what=what,
                            timeout_s=max(1.0, deadline - time.time()),
                            flag="--cluster_start_timeout_s")

        gathered = run(sync["signature"], "the start-up exchange of settings")
        n = len(sync["mine"])
        rows = [list(gathered[i * n:(i + 1) * n]) for i in range(self.num_workers)]
        for worker, row in enumerate(rows):
            for part, (theirs, chief) in enumerate(zip(row, rows[0])):
                if theirs != chief:
                    fail(f"worker {worker} was started with other "
                         f"{_SIGNATURE_PARTS[part]} than the chief (worker 0); start "
                         "every worker with the same model and flags (only the task "
                         "index and --output_dir may differ)")
        run(sync["broadcast"], "the broadcast of the chief's weights")
        checksums = run(sync["checksums"], "the weight checksum exchange")
        reference = checksums[0:3]
        for worker in range(self.num_workers):
            row = checksums[worker * 3:(worker + 1) * 3]
            for mine, chief in zip(row, reference):
                if abs(mine - chief) > 1e-9 * max(1.0, abs(chief)):
                    fail(f"worker {worker}'s weights differ from the chief's after the "
                         f"broadcast (checksum {row.tolist()} vs {reference.tolist()})")
        log.info("%d workers in step after %.1fs; weights from the chief "
                 "(checksum %.6g)", self.num_workers, time.time() - started, reference[0])

    def agree_to_stop(self, session, ops: dict, stop: bool, what: str) -> bool:
        """True on every worker when any worker votes to stop (the chief, after
        an evaluation during training), so all leave the step loop together.

        The others wait here while the chief evaluates, which may take longer
        than a step: the wait is bounded by the larger of the step and start-up
        deadlines.
        """
        timeout_s = max(self.step_timeout_s, self.start_timeout_s)
        votes = self.run(session, ops["votes"], {ops["vote"]: float(stop)}, what=what,
                         timeout_s=timeout_s, flag="--collective_timeout_s")
        return float(votes) > 0

    def wait_for_workers(self, timeout_s: float) -> None:
        """Return once every other worker's server accepts connections."""
        deadline = time.time() + timeout_s
        waiting = [i for i in range(self.num_workers) if i != self.task_index]
        logged = False
        while waiting:
            waiting = [i for i in waiting if not answers(self.spec.hosts[i], 1.0)]
            if not waiting:
                return
            if time.time() >= deadline:
                names = ", ".join(f"worker {i} ({self.spec.hosts[i]})" for i in waiting)
                fail(f"worker {self.task_index}: {names} did not come up within "
                     f"--cluster_start_timeout_s={self.start_timeout_s:g}; start every "
                     f"worker (same flags, each with its own task index) or check "
                     f"{self.spec.source}")
            if not logged:
                log.info("waiting for %s", ", ".join(
                    f"worker {i} ({self.spec.hosts[i]})" for i in waiting))
                logged = True
            time.sleep(0.5)

    def unreachable(self) -> list:
        """Indices of the other workers whose server no longer answers."""
        return [i for i in range(self.num_workers)
                if i != self.task_index and not answers(self.spec.hosts[i], 1.0)]

    def stalled_message(self, what: str, flag: str, timeout_s: float,
                        error: str = "") -> str:
        gone = self.unreachable()
        if gone:
            who = ", ".join(f"worker {i} ({self.spec.hosts[i]})" for i in gone)
            cause = f"{who} no longer answer{'s' if len(gone) == 1 else ''}"
        else:
            cause = ("every other worker still answers, so one hangs or is much slower "
                     f"(raise {flag} if that is expected)")
        if error and error != "DeadlineExceededError":
            happened = f"{what} failed ({error})"
        else:
            happened = f"{what} did not complete within {flag}={timeout_s:g}"
        return (f"worker {self.task_index} of {self.num_workers}: {happened}: {cause}; "
                "stopping. Restart every worker with the same flags to resume from the "
                "chief's newest checkpoint in --output_dir")

    def run(self, session, fetches, feed_dict=None, what: str = "a step",
            timeout_s: float | None = None, flag: str = "--collective_timeout_s"):
        """session.run with a deadline; a lost peer becomes a one-line error.

        The deadline is `timeout_s` if given, else --collective_timeout_s, or
        --cluster_start_timeout_s on the first run of these fetches
        (TensorFlow prunes, places and optimises the graph then).
        """
        key = _fetch_key(fetches)
        if timeout_s is None:
            if key in self._warm:
                timeout_s = self.step_timeout_s
            else:
                timeout_s, flag = self.start_timeout_s, "--cluster_start_timeout_s"
        options = tf.RunOptions(timeout_in_ms=int(timeout_s * 1000))
        with self.watchdog.guard(timeout_s + WATCHDOG_GRACE_S,
                                 lambda: self.stalled_message(what, flag, timeout_s)):
            try:
                values = session.run(fetches, feed_dict, options=options)
            except tf.errors.OpError as e:
                if type(e).__name__ not in _PEER_ERRORS:
                    raise
                fail(self.stalled_message(what, flag, timeout_s, type(e).__name__))
        self._warm.add(key)
        return values


def _fetch_key(fetches) -> tuple:
    """What identifies a fetch structure across steps: its tensor and op names."""
    if isinstance(fetches, dict):
        return tuple(sorted((k, _fetch_key(v)) for k, v in fetches.items()))
    if isinstance(fetches, (list, tuple)):
        return tuple(_fetch_key(v) for v in fetches)
    return (getattr(fetches, "name", repr(fetches)),)
