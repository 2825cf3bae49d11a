"""Seeds derived from one --random_seed, the same in every process and Python version.

Several workers (pretraining chunks, the rewrite data builder) each need
their own random stream, and a run must draw the same numbers wherever and
however often it is repeated. Python's `hash()` is salted per process, so
the seed is a digest of the parts instead.
"""

from __future__ import annotations

import hashlib


def derive_seed(random_seed: int, chunk_index: int, purpose: str) -> int:
    """A 64-bit seed for one chunk's generator, the same in every process
    and Python version."""
    text = f"{random_seed}/{chunk_index}/{purpose}".encode("ascii")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")
