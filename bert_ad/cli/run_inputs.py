"""The files a command line names as its inputs, for `files.refuse_outputs_over_inputs`.

Every flag's value that names an existing file or folder is an input (each
item of a comma list too), except the flags that name where output goes; a
checkpoint flag stands for every file of its checkpoint (the `.index` and
data files of a prefix; of a folder, the model files in it: checkpoints and
the config and vocabulary read beside them); and the flagfiles the flags
came from are inputs as well. One list for every command, so that a new flag
is covered without anyone remembering to add it.
"""

from __future__ import annotations

import glob
import os
import re
from typing import List, Tuple

from absl import flags

from bert_ad.cli import flagfiles

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
