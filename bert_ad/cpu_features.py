"""The CPU's feature flags, read once from Linux's /proc/cpuinfo (no TensorFlow import).

Used by the start-up log (which bf16 path runs) and the benchmark tables (the vector ISA).
"""

from __future__ import annotations

from typing import Optional, Set


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> Optional[Set[str]]:
    """The flags of the first `flags` line; None without one (not Linux, unreadable)."""
    try:
        with open(cpuinfo) as f:
            line = next(line for line in f if line.startswith("flags"))
    except (OSError, StopIteration):
        return None
    return set(line.partition(":")[2].split())
