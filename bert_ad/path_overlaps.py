"""No output is one of the run's inputs: paths compared however they are spelled.

Every command refuses, before it writes, an output that is one of its inputs
(`refuse_outputs_over_inputs`); bert_ad/folders.py refuses an output folder
that is, holds or lies in an input model (`is_inside`).
"""

from __future__ import annotations

import os
from typing import Iterable, List, Tuple

from bert_ad.errors import UserError


def same_file(a: str, b: str) -> bool:
    """Whether paths `a` and `b` name one file however they are spelled: relative
    or absolute, with `./` or `..`, through a symlink (the same real path) or a
    hard link (the same device and inode)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        first, second = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def is_inside(path: str, folder: str) -> bool:
    """Whether `path` is `folder` or lies in it, by their real paths."""
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top.rstrip(os.sep) + os.sep)


def files_in(folder: str) -> List[str]:
    """Every file in `folder` and its subfolders (none when it is not a folder): a
    model folder's weights, settings, checkpoints and exports, none of which an
    output may be."""
    return [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]


def _named(what: str, path: str) -> str:
    """`--flag=PATH` for a flag, `the dev file PATH` for anything else."""
    return f"{what}={path}" if what.startswith("-") else f"{what} {path}"


def refuse_outputs_over_inputs(outputs: Iterable[Tuple[str, str]],
                               inputs: Iterable[Tuple[str, str]],
                               replaced_folders: Iterable[Tuple[str, str]] = (),
                               advice: str = "write the output elsewhere") -> None:
    """One error line if this run would write over a file it reads.

    The same file spelled another way counts (`same_file`): `features
    --output_file=./in.txt --input_file=in.txt` replaced the text with its
    embeddings, and `--output_file` naming the model's config or checkpoint
    index destroyed the model.

    Args:
      outputs: (what the user calls it, path) of every file the run writes,
        e.g. ("--output_file", "out.npy") or ("the result file", "OUT/predict.txt").
      inputs: (what, path) of every file (or folder) it reads: data, vocab,
        config, checkpoint files, flagfiles.
      replaced_folders: (what, path) of folders the run replaces as a whole:
        no input may lie inside one.
      advice: what to do, ending the line.
    Raises:
      UserError: naming the output, the input and what to do.
    """
    inputs = [(what, path) for what, path in inputs if path]
    for out_what, out_path in outputs:
        for in_what, in_path in inputs:
            if os.path.isdir(in_path) or not same_file(out_path, in_path):
                continue
            how = ("" if os.path.abspath(out_path) == os.path.abspath(in_path) else
                   " (the same file by its real path)" if os.path.realpath(out_path)
                   == os.path.realpath(in_path) else " (a hard link of it)")
            raise UserError(f"{_named(out_what, out_path)} is {_named(in_what, in_path)}{how}: "
                            f"this run reads it and would write over it; {advice}")
    for out_what, folder in replaced_folders:
        if not folder or not os.path.isdir(folder):  # nothing there to replace
            continue
        for in_what, in_path in inputs:
            if is_inside(in_path, folder):
                raise UserError(f"{_named(in_what, in_path)} lies in {_named(out_what, folder)}, "
                                f"which this run replaces as a whole; {advice}")

