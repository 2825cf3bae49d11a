"""What extract_features makes of a row (--layers, --pooling, --normalize), without TensorFlow.

Read from the flags and checked before the model is loaded (bert_ad/cli/features.py);
bert_ad/tasks/features.py computes it.
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

from bert_ad.errors import fail

POOLINGS = ("none", "mean", "cls")
DEFAULT_LAYERS = (-1, -2, -3, -4)
EMBEDDING = "embedding"


def layer_output_name(position: int) -> str:
    """The output of the `position`-th layer named in --layers (Google's name)."""
    return f"layer_output_{position}"


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings:
    """What a row becomes.

    Attributes:
      layers: encoder layers as the user names them (-1 the last; 0 the first).
      pooling: "none" (per-token vectors of every layer in `layers`), "mean"
        or "cls" (one vector from the one layer in `layers`).
      normalize: divide a pooled vector by its L2 norm.
      text_prefix: put before every text (e5's "query: ").
    """
    layers: Tuple[int, ...] = DEFAULT_LAYERS
    pooling: str = "none"
    normalize: bool = False
    text_prefix: str = ""

    @property
    def pooled(self) -> bool:
        return self.pooling != "none"


def parse_layers(value: str) -> Tuple[int, ...]:
    """--layers "-1,-2" -> (-1, -2); UserError for anything but distinct integers."""
    items = [item.strip() for item in (value or "").split(",") if item.strip()]
    try:
        layers = tuple(int(item) for item in items)
    except ValueError:
        fail(f"--layers={value}: give layer indices separated by commas, e.g. -1,-2,-3,-4")
    if not layers:
        fail("--layers is empty: name at least one layer, e.g. --layers=-1")
    if len(set(layers)) != len(layers):
        fail(f"--layers={value} names a layer twice")
    return layers


def check_layers(layers: Tuple[int, ...], num_layers: int) -> None:
    """UserError for a layer the model does not have (Python's indexing: -L..L-1)."""
    for layer in layers:
        if not -num_layers <= layer < num_layers:
            fail(f"--layers: the model has no layer {layer}: it has {num_layers} encoder "
                 f"layers, -1 the last (use -{num_layers}..-1 or 0..{num_layers - 1})")
