"""The files a command line names as its inputs, for `path_overlaps.refuse_outputs_over_inputs`.

Every flag's value that names an existing file or folder is an input (each
item of a comma list too), except the flags that name where output goes; a
checkpoint flag stands for every file of its checkpoint (the `.index` and
data files of a prefix; of a folder, the model files in it: checkpoints and
the config and vocabulary read beside them); and the flagfiles the flags
came from are inputs as well. One list for every command, so that a new flag
is covered without anyone remembering to add it.

The models a command reads (`input_models`: an --init_checkpoint, a
distillation's teacher) are checked twice more, in `check_input_models`:
output_dir must not overlap their folders, and no live run may still be
writing them (bert_ad/locks.py).
"""

from __future__ import annotations

import glob
import os
import re
from typing import List, Tuple

from absl import flags

from bert_ad.cli import flagfiles
from bert_ad.path_overlaps import same_file
from bert_ad.folders import refuse_output_dir_over_models
from bert_ad.locks import refuse_reading_while_written

# Flags naming what a command writes (cache_dir is written too: never an input).
OUTPUT_FLAGS = ("output_file", "output_dir", "export_dir", "cache_dir")
# Flags naming a checkpoint: a prefix (bert_model.ckpt) or the folder holding it.
CHECKPOINT_FLAGS = ("init_checkpoint", "checkpoint")


# What a model folder holds besides its checkpoints (read when no flag names them).
MODEL_FILES = ("checkpoint", "bert_config.json", "vocab.txt", "pieces.tsv",
               "normalization.tsv", "sentencepiece.model")
_CHECKPOINT_FILE = re.compile(r"\.(index|data-\d+-of-\d+)$")


def checkpoint_files(value: str) -> List[str]:
    """The files a checkpoint flag reads: `PREFIX.*`, or a folder's model files."""
    if not os.path.isdir(value):
        return sorted(glob.glob(glob.escape(value) + ".*"))
    return [os.path.join(value, name) for name in sorted(os.listdir(value))
            if name in MODEL_FILES or _CHECKPOINT_FILE.search(name)]


def flag_inputs(f: flags.FlagValues) -> List[Tuple[str, str]]:
    """(`--name`, path) of every file or folder the parsed flags `f` read."""
    found: List[Tuple[str, str]] = []
    for name in f:
        value = f[name].value
        if name in OUTPUT_FLAGS or not isinstance(value, str) or not value:
            continue
        items = [value] + ([item.strip() for item in value.split(",")] if "," in value else [])
        found += [(f"--{name}", item) for item in items if item and os.path.exists(item)]
        if name in CHECKPOINT_FLAGS:
            found += [(f"--{name}", path) for path in checkpoint_files(value)]
    return found + [("--flagfile", path) for path in flagfiles.of(f)]


# Flags naming a model a command reads, and whose model it is (for messages).
# The teacher's is never this run's own; a checkpoint flag's may be (scoring
# output_dir's own checkpoint), so it counts only for a run that trains.
MODEL_FLAGS = {"teacher_dir": "the teacher", "teacher_checkpoint": "the teacher",
               "student_init_checkpoint": "the student's starting model",
               "init_checkpoint": "the starting model", "checkpoint": "the model"}
TEACHER_FLAGS = ("teacher_dir", "teacher_checkpoint")


def model_folder(value: str) -> str:
    """The folder of a model flag's value: a folder itself, or a checkpoint prefix's
    (or one of its files') folder."""
    return value if os.path.isdir(value) else os.path.dirname(os.path.abspath(value))


def input_models(f: flags.FlagValues, names=tuple(MODEL_FLAGS)) -> List[Tuple[str, str, str]]:
    """(`--name=value`, its folder, whose model) of every model flag of `names` given."""
    return [(f"--{name}={f[name].value}", model_folder(f[name].value), MODEL_FLAGS[name])
            for name in names if name in f and f[name].value]


def check_input_models(f: flags.FlagValues) -> None:
    """The models the flags name: output_dir overlaps none the run could harm (one
    line naming it), and no live run is still writing one (refused, or read with a
    warning under --read_while_training)."""
    trains = "do_train" in f and bool(f.do_train)
    refuse_output_dir_over_models(f.output_dir if "output_dir" in f else "",
                                  input_models(f) if trains else input_models(f, TEACHER_FLAGS))
    read_anyway = "read_while_training" in f and bool(f.read_while_training)
    output_dir = f.output_dir if "output_dir" in f and f.output_dir else ""
    for named, folder, _ in input_models(f):
        # output_dir's own model is guarded by the lock this run takes on it.
        if os.path.isdir(folder) and not (output_dir and same_file(folder, output_dir)):
            refuse_reading_while_written(folder, named, read_anyway)
