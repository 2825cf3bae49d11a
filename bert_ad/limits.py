"""Bounds on the flags that multiply a resource: towers per device, processes per CPU.

A count flag with no bound turns a typo into an outage: `--n_gpus=100000`
planned 100,000 towers (100,000 log lines, past 6 GB before step 1) and
`--num_workers=100000` would start 100,000 interpreters. Each bound says
why in its one `error:` line and what to raise instead.
"""

from __future__ import annotations

import os

from bert_ad.errors import fail

# Towers on one device run one after the other and each holds a whole copy of
# the model's graph and activations: past a few per device they only add
# memory and graph-building time. 8 per device still lets a CPU-only machine
# stand in for an 8-GPU plan.
MAX_TOWERS_PER_DEVICE = 8
# Building pretraining instances is CPU-bound Python: past one process per
# CPU nothing gets faster, and each process holds a tokenizer and chunks of
# text; 4 per CPU leaves room for a machine with more CPUs than this one.
MAX_WORKERS_PER_CPU = 4


def logical_cpus() -> int:
    """CPUs this process may run on (its affinity mask where there is one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# What raises a training run's global batch instead of more towers; an
# inference command names its own flag (features: --batch_size).
TRAINING_BATCH_FLAGS = "--train_batch_size or --gradient_accumulation_steps"


def check_tower_count(n_towers: int, devices: int, kind: str,
                      batch_flags: str = TRAINING_BATCH_FLAGS) -> None:
    """Refuse more than MAX_TOWERS_PER_DEVICE towers per device.

    Args:
      n_towers: --n_gpus.
      devices: the cards, or the logical CPUs without GPUs.
      kind: what the devices are, for the message ("GPUs", "logical CPUs (no GPU)").
      batch_flags: the command's own flags that give a bigger batch instead.
    """
    bound = MAX_TOWERS_PER_DEVICE * devices
    if n_towers > bound:
        fail(f"--n_gpus={n_towers} asks for {n_towers} towers on {devices} {kind}: at most "
             f"{MAX_TOWERS_PER_DEVICE} towers per device ({bound} here), since towers "
             "sharing a device run one after the other and each adds a copy of the "
             f"model's graph and memory; for a bigger batch raise {batch_flags}")


def check_worker_count(num_workers: int, flag: str = "--num_workers",
                       cpus: int | None = None) -> None:
    """Refuse fewer than 1 worker process, or more than MAX_WORKERS_PER_CPU per CPU."""
    if num_workers < 1:
        fail(f"{flag}={num_workers} must be at least 1")
    cpus = logical_cpus() if cpus is None else cpus
    bound = MAX_WORKERS_PER_CPU * cpus
    if num_workers > bound:
        fail(f"{flag}={num_workers} would start {num_workers} processes on {cpus} "
             f"logical CPU{'' if cpus == 1 else 's'}: at most {MAX_WORKERS_PER_CPU} per CPU "
             f"({bound} here), since the work is CPU-bound and each process holds its own "
             f"tokenizer and text; use {flag}={min(cpus, bound)} for the fastest run")
