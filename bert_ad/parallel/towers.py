"""Where towers run, where variables live, and how tower gradients become one.

The policy in one place (after tf_cnn_benchmarks' variable managers):

* Tower i runs on `plan.tower_devices[i]`: the i-th visible GPU, round-robin
  when there are more towers than cards (several towers per card, on purpose,
  never left to soft placement), or the i-th logical CPU device when there is
  no GPU, so the same multi-tower graph runs for real on a CPU-only machine.
  At most 8 towers per card, or per logical CPU without GPUs (bert_ad/limits.py);
  the plan is logged one line per device.
* `--variable_update=parameter_server` (the default, the card's design; the
  name is tf_cnn_benchmarks' for this layout with the CPU as the parameter
  device): every variable and optimizer slot lives on the CPU
  (`plan.variable_device`). Towers read the weights, compute their gradients
  next to their own ops, and the CPU averages them (dense and IndexedSlices
  alike) for one apply.
* `--variable_update=replicated`: every tower keeps its own copy of the
  variables and slots on its own device, the towers all-reduce their
  gradients and each applies the mean to its copy (bert_ad/parallel/replicated.py;
  docs/gpu_scaling.md says when it pays). The collective ops need one tower
  per device, so more towers than cards is refused.
"""

from __future__ import annotations

import logging
import os
from typing import Callable, Sequence

from bert_ad.choices import PARAMETER_SERVER, REPLICATED, VARIABLE_UPDATES
from bert_ad.compat import tf
from bert_ad.compat.installed import list_gpu_count
from bert_ad.compat.onednn import onednn_state
from bert_ad.errors import fail
from bert_ad.limits import TRAINING_BATCH_FLAGS, check_tower_count, logical_cpus

log = logging.getLogger("bert_ad")

CPU = "/cpu:0"
# Where the scaling model (docs/gpu_scaling.md, benchmarks/gpu_scaling_model.py) puts
# a parameter_server step on GPUs; tests/test_gpu_scaling_model.py holds these
# figures to the model's. The layout stays the default until cards measure otherwise
# (scripts/gpu_smoke.sh).
PARAMETER_SERVER_ON_GPUS = (
    "  on GPUs the scaling model puts most of this layout's step on the host: BERT-base, "
    "seq 128 x 32, one H200: 175 ms a step, 110 ms of it the CPU's apply and 42 ms the "
    "weights' copy down, against 23 ms with --variable_update=replicated "
    "(docs/gpu_scaling.md)")


def parse_cuda_visible_devices(value: str | None) -> list[str] | None:
    """The cards listed in CUDA_VISIBLE_DEVICES, or None if it is not set.

    An empty value or "-1" hides every card (an empty list).
    """
    if value is None:
        return None
    cards = [c.strip() for c in value.split(",") if c.strip()]
    if cards and cards[0].startswith("-"):
        return []
    return cards


class DevicePlan:
    """Tower -> device assignment and the variable device for one worker."""

    def __init__(self, tower_devices: Sequence[str], physical_names: Sequence[str],
                 uses_gpu: bool, variable_update: str = PARAMETER_SERVER):
        self.tower_devices = list(tower_devices)
        self.physical_names = list(physical_names)
        self.uses_gpu = uses_gpu
        # Where the shared variables live (parameter_server; scoring graphs
        # always); replicated training keeps a copy on every tower device.
        self.variable_device = CPU
        self.variable_update = variable_update

    @property
    def replicated(self) -> bool:
        return self.variable_update == REPLICATED

    @property
    def num_towers(self) -> int:
        return len(self.tower_devices)

    @property
    def num_cpu_devices(self) -> int:
        """Logical CPU devices the session must create for this plan."""
        return 1 if self.uses_gpu else self.num_towers

    def describe(self) -> str:
        """The plan: its layout, one line per device with its towers (named as their
        ops are), on GPUs with the parameter_server layout where the scaling model
        puts the step's time, and the CPU kernels."""
        by_device = {}
        for i, (device, name) in enumerate(zip(self.tower_devices, self.physical_names)):
            by_device.setdefault((device, name), []).append(f"tower_{i}")
        where = (f"a copy of the variables and optimizer on every tower's device, "
                 f"gradients all-reduced ({self.collective_implementation})"
                 if self.replicated else f"variables and optimizer on {self.variable_device}")
        lines = [f"device plan: {_count(self.num_towers, 'tower')} on "
                 f"{_count(len(by_device), 'device')}, --variable_update="
                 f"{self.variable_update}: {where}"]
        for (device, name), towers in by_device.items():
            count = f" ({len(towers)} towers)" if len(towers) > 1 else ""
            lines.append(f"  {device} ({name}): {', '.join(towers)}{count}")
        if self.uses_gpu and not self.replicated:
            lines.append(PARAMETER_SERVER_ON_GPUS)
        # CPU ops (all of them without GPUs; the optimizer's apply with them).
        lines.append(f"  CPU kernels: oneDNN {onednn_state()}")
        return "\n".join(lines)

    @property
    def collective_implementation(self) -> str:
        """The towers' all-reduce (replicated): NCCL between GPUs, a ring on CPUs."""
        return "nccl" if self.uses_gpu else "ring"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" if n == 1 else f"{n} {what}s"


def plan_devices(n_towers: int, cuda_visible_devices: str | None = None,
                 gpus_found: int | None = None, cpus: int | None = None,
                 variable_update: str = PARAMETER_SERVER,
                 batch_flags: str = TRAINING_BATCH_FLAGS) -> DevicePlan:
    """Decide where each of `n_towers` towers runs.

    Args:
      n_towers: --n_gpus, the number of towers (>= 1).
      cuda_visible_devices: the CUDA_VISIBLE_DEVICES value (None: unset). TF
        renumbers the listed cards /gpu:0..k-1, so "3,5" gives /gpu:0 (card 3)
        and /gpu:1 (card 5).
      gpus_found: GPUs TensorFlow can really use; None trusts the variable
        (for building graphs to inspect on a machine without cards).
      cpus: logical CPUs, the devices of a plan without GPUs (None: this
        machine's).
      variable_update: --variable_update, "parameter_server" or "replicated".
      batch_flags: the command's flags for a bigger batch, which the refusal of
        too many towers names.
    Raises:
      UserError: fewer than 1 tower, or more than MAX_TOWERS_PER_DEVICE per
        device (per card; per logical CPU without GPUs), or replicated with
        more towers than cards.
    """
    if n_towers < 1:
        fail(f"--n_gpus={n_towers}: need at least 1 tower")
    if variable_update not in VARIABLE_UPDATES:
        fail(f"--variable_update={variable_update} is not one of "
             f"{', '.join(VARIABLE_UPDATES)}")
    cards = parse_cuda_visible_devices(cuda_visible_devices)
    if gpus_found is not None:
        if cards is None:
            cards = [str(i) for i in range(gpus_found)]
        elif len(cards) > gpus_found:
            if gpus_found == 0:
                log.warning("CUDA_VISIBLE_DEVICES=%s but TensorFlow sees no GPU "
                            "(CPU-only build or no driver): towers run on CPU",
                            cuda_visible_devices)
            cards = cards[:gpus_found]
    if not cards:
        cpus = logical_cpus() if cpus is None else cpus
        check_tower_count(n_towers, cpus, "logical CPU" + ("" if cpus == 1 else "s")
                          + " (no GPU)", batch_flags)
        return DevicePlan([f"/cpu:{i}" for i in range(n_towers)],
                          [f"logical CPU {i}" for i in range(n_towers)], False,
                          variable_update)
    check_tower_count(n_towers, len(cards), "GPU" if len(cards) == 1 else "GPUs", batch_flags)
    if variable_update == REPLICATED and n_towers > len(cards):
        fail(f"--variable_update=replicated needs one tower per card: --n_gpus={n_towers} "
             f"on {_count(len(cards), 'card')} would put two copies of the variables in one "
             f"collective group; use --n_gpus={len(cards)} (more examples per tower with "
             "--train_batch_size) or --variable_update=parameter_server")
    devices, names = [], []
    for i in range(n_towers):
        slot = i % len(cards)
        devices.append(f"/gpu:{slot}")
        names.append(f"card {cards[slot]}")
    if n_towers > len(cards):
        log.info("%d towers on %d card(s): %d tower(s) per card", n_towers,
                 len(cards), -(-n_towers // len(cards)))
    return DevicePlan(devices, names, True, variable_update)


def plan_from_environment(n_towers: int, variable_update: str = PARAMETER_SERVER,
                          batch_flags: str = TRAINING_BATCH_FLAGS) -> DevicePlan:
    """The plan for this process: CUDA_VISIBLE_DEVICES and the GPUs TF sees."""
    return plan_devices(n_towers, os.environ.get("CUDA_VISIBLE_DEVICES"),
                        list_gpu_count(), variable_update=variable_update,
                        batch_flags=batch_flags)


def _on_variable_device(device: str):
    """A custom getter that creates (and initialises) variables on `device`."""
    def on_device(getter, *args, **kwargs):
        with tf.device(device):
            return getter(*args, **kwargs)
    return on_device


def build_towers(plan: DevicePlan, tower_fn: Callable[[int], object]) -> list:
    """Call `tower_fn(i)` once per tower under its device and a shared scope.

    Tower 0 creates the variables (on the CPU); the other towers reuse them.
    Ops are named `tower_i/...` so the placement is readable in a graph dump.
    """
    outputs = []
    outer = tf.get_variable_scope()
    for i, device in enumerate(plan.tower_devices):
        with tf.variable_scope(outer, reuse=True if i > 0 else outer.reuse,
                               custom_getter=_on_variable_device(plan.variable_device)), \
                tf.name_scope(f"tower_{i}"), tf.device(device):
            outputs.append(tower_fn(i))
    return outputs


def tower_gradients(loss, variables: Sequence) -> list:
    """d loss / d variables, each gradient op next to the forward op it undoes."""
    return tf.gradients(loss, list(variables), colocate_gradients_with_ops=True)


def average_gradients(per_tower: Sequence[Sequence], device: str = CPU) -> list:
    """Mean over towers of each variable's gradient, computed on `device`.

    `per_tower[t][j]` is tower t's gradient of variable j (a tensor,
    IndexedSlices or None). Sparse gradients stay sparse: their rows are
    concatenated and scaled, so only the rows the towers touched move.
    """
    n = len(per_tower)
    averaged = []
    with tf.device(device), tf.name_scope("average_gradients"):
        for grads in zip(*per_tower):
            present = [g for g in grads if g is not None]
            if not present:
                averaged.append(None)
            elif n == 1:
                averaged.append(present[0])
            elif all(isinstance(g, tf.IndexedSlices) for g in present):
                values = tf.concat([g.values for g in present], axis=0) / n
                indices = tf.concat([g.indices for g in present], axis=0)
                averaged.append(tf.IndexedSlices(values, indices,
                                                 present[0].dense_shape))
            else:
                dense = [tf.convert_to_tensor(g) for g in present]
                averaged.append(tf.add_n(dense) / n)
    return averaged
