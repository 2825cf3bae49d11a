"""A student made of its teacher: which teacher layers it keeps, its config, its weights' names.

No TensorFlow: the command line checks a student against its teacher before
anything is imported (bert_ad/cli/distill.py), and the distillation task
(bert_ad/tasks/distillation.py) reads the same map to start the student and
to match its layers against the teacher's.

A student of K layers takes K of the teacher's L layers (STUDENT_LAYER_SELECTIONS):

  spread  evenly spread from the first to the last: round(i * (L - 1) / (K - 1)),
          so 3 of 12 are layers 0, 6 and 11 (0-based): the student's last layer
          is the teacher's last, the one its head was fine-tuned on
  first   layers 0 .. K-1 (ymcui's RBT3: the first three of RoBERTa-wwm-ext)

docs/distillation.md has the measurement behind the default.
"""

from __future__ import annotations

import copy
import re
from typing import Dict, Optional, Sequence, Tuple

from bert_ad.choices import STUDENT_LAYER_SELECTIONS
from bert_ad.bert_config import BertConfig

_LAYER = re.compile(r"^bert/encoder/layer_(\d+)/")


def teacher_layers(student_layers: int, teacher_layers_count: int,
                   selection: str) -> Tuple[int, ...]:
    """The teacher layer (0-based) each of the student's layers comes from / is matched to.

    Args:
      student_layers: K, 1 <= K <= teacher_layers_count.
      teacher_layers_count: L, the teacher's num_hidden_layers.
      selection: one of STUDENT_LAYER_SELECTIONS.
    """
    if selection not in STUDENT_LAYER_SELECTIONS:
        raise ValueError(f"selection must be one of {STUDENT_LAYER_SELECTIONS}")
    if not 1 <= student_layers <= teacher_layers_count:
        raise ValueError(f"{student_layers} student layers of {teacher_layers_count}")
    if selection == "first" or student_layers == 1:
        return tuple(range(student_layers))
    step = (teacher_layers_count - 1) / (student_layers - 1)
    # round-half-up, so the choice does not depend on Python's banker's rounding.
    return tuple(int(i * step + 0.5) for i in range(student_layers))


def student_config(teacher: BertConfig, layers: int) -> BertConfig:
    """The teacher's config with `layers` encoder layers."""
    config = copy.deepcopy(teacher)
    config.num_hidden_layers = layers
    return config


def source_name(name: str, layer_map: Optional[Sequence[int]]) -> str:
    """The checkpoint variable a student variable starts from.

    With `layer_map` (a student of the teacher's layers) the student's
    `bert/encoder/layer_i/...` reads the teacher's `layer_{layer_map[i]}/...`;
    every other variable (embeddings, pooler, the head) keeps its name.
    """
    if layer_map is None:
        return name
    match = _LAYER.match(name)
    if match is None:
        return name
    return f"bert/encoder/layer_{layer_map[int(match.group(1))]}/{name[match.end():]}"


def describe_layers(layer_map: Sequence[int], teacher_layers_count: int) -> str:
    """'layers 0, 6, 11 of the teacher's 12'."""
    return (f"layer{'s' if len(layer_map) > 1 else ''} "
            f"{', '.join(str(i) for i in layer_map)} of the teacher's {teacher_layers_count}")


def config_differences(student: BertConfig, teacher: BertConfig) -> Dict[str, tuple]:
    """{field: (student's, teacher's)} where the two configs differ (required fields)."""
    return {key: (getattr(student, key), getattr(teacher, key)) for key in BertConfig.REQUIRED
            if getattr(student, key) != getattr(teacher, key)}
