"""A folder's checkpoints by their file names, without TensorFlow.

What a run needs to know of output_dir before (or without) building a graph:
which `model.ckpt-N` saves it holds, a save's step, and the `*.tempstate*`
files a killed save left. Scoring an ONNX export (bert_ad/onnx_predict.py)
runs on these alone; reading a checkpoint's variables is
bert_ad/parallel/checkpoints.py's.
"""

from __future__ import annotations

import os
import re
from typing import List

_STEP_RE = re.compile(r"model\.ckpt-(\d+)\.index$")


def step_checkpoints(directory: str) -> List[str]:
    """Every `model.ckpt-N` prefix in `directory`, oldest step first."""
    if not os.path.isdir(directory):
        return []
    steps = sorted(int(m.group(1)) for m in map(_STEP_RE.match, os.listdir(directory))
                   if m)
    return [os.path.join(directory, f"model.ckpt-{step}") for step in steps]


def checkpoint_step(prefix: str) -> int:
    """`.../model.ckpt-120` -> 120 (0 for a prefix without a step: bert_model.ckpt)."""
    match = re.search(r"-(\d+)$", prefix)
    return int(match.group(1)) if match else 0


def remove_partial_save(output_dir: str) -> List[str]:
    """Remove what a failed or killed Saver.save left behind (`*.tempstate*` files)."""
    names = [n for n in os.listdir(output_dir) if ".tempstate" in n]
    for name in names:
        os.remove(os.path.join(output_dir, name))
    return names
