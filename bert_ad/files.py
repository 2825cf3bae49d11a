"""Result files: written whole under a temporary name, then renamed into place.

A crash never leaves a half-written predict.txt, and an earlier result is not
silently lost: it is kept as `<name>.~N~` (GNU backup style) and the log says so.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from typing import Iterable, Mapping

log = logging.getLogger("bert_ad")


def backup_path(path: str) -> str:
    n = 1
    while os.path.exists(f"{path}.~{n}~"):
        n += 1
    return f"{path}.~{n}~"


def write_lines(path: str, lines: Iterable[str]) -> str:
    """Write `lines` (each without its newline) to `path` atomically."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line + "\n")
        if os.path.exists(path):
            kept = backup_path(path)
            os.replace(path, kept)
            log.info("kept the earlier %s as %s", os.path.basename(path), kept)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def format_value(value) -> str:
    """Floats with 6 decimals (nan as `nan`), everything else as str()."""
    if isinstance(value, float) and not math.isnan(value):
        return f"{value:.6f}"
    return str(value)


def write_key_values(path: str, values: Mapping) -> str:
    """`key = value` lines sorted by key (eval_results.txt, train_results.txt)."""
    return write_lines(path, (f"{key} = {format_value(value)}"
                              for key, value in sorted(values.items())))


def read_key_values(path: str) -> dict:
    """The {key: str value} of a file write_key_values wrote."""
    values = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition(" = ")
            if sep:
                values[key] = value
    return values
