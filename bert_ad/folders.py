"""Whole folders: built in a hidden staging folder beside their target, published by a rename.

  staging_directory(target)           a hidden folder to build a whole
                                      directory in (model conversion, data sets)
  replace_directory(staging, target)  publish it, replacing an existing target
  publish_directory(staging, target)  the same for a command's --overwrite: never
                                      over a folder holding what it did not write
  refuse_foreign_entries(folder, ours)  that check alone, before the work
  restore_directory(target)           undo what a killed writer of `target` left
  remove_stale_staging(dir)           the staging folders of a killed run, at start
  refuse_output_dir_over_models(...)  no run writes into the folder of a model it reads

A reader sees the old folder or the new one, never a half-built one; a
folder being built is registered with bert_ad/signals.py, so a stop signal
removes it.

`--overwrite` replaces what the command itself writes in its output folder
and nothing else: `data prepare --output_dir=. --overwrite` in a folder
holding the user's thesis.txt and sub/data.bin left only the data set. A
folder holding anything the command does not write is refused, naming it.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
from typing import Iterable, List, Optional, Tuple

from bert_ad.errors import UserError, fail
from bert_ad.files import cannot_write, fsync_path
from bert_ad.path_overlaps import is_inside
from bert_ad.signals import held, is_live, remove_on_stop


def staging_directory(target: str) -> str:
    """A new hidden folder beside `target` to build a whole directory in.

    Created with mode 0o777 minus the umask (not mkdtemp's private 0700), as
    it may become `target` itself by a rename. The caller publishes or removes
    it. What a killed writer of `target` left beside it goes first
    (`restore_directory`): every run cleans up after the one before.

    Args:
      target: the directory that will be published.
    Returns:
      The path of `.NAME.XXXXXXXX.staging` in `target`'s parent.
    """
    parent, name = os.path.split(os.path.abspath(target))
    try:
        os.makedirs(parent, exist_ok=True)
        restore_directory(target)
        while True:
            staging = os.path.join(parent, f".{name}.{secrets.token_hex(4)}.staging")
            with held():  # made and registered, or neither, when a stop signal comes
                try:
                    os.mkdir(staging, 0o777)
                except FileExistsError:
                    continue
                return remove_on_stop(staging)
    except OSError as e:
        raise cannot_write(target, e) from e


def replace_directory(staging: str, target: str) -> None:
    """Publish the complete folder `staging` as `target`, replacing any old one.

    The old folder is renamed aside (`STAGING.old`), the new one renamed into
    place, then the old one removed: a reader sees the old folder or the new
    one, and a crash between the two renames leaves the old one beside the
    target, where `restore_directory` finds it.

    Args:
      staging: a folder from `staging_directory(target)`, complete.
      target: the folder to publish it as.
    Raises:
      UserError: "cannot write TARGET: CAUSE".
    """
    old = staging + ".old"
    try:
        # Every file's bytes on the disk before the folder is published.
        for folder, _, names in os.walk(staging):
            for name in names:
                fsync_path(os.path.join(folder, name))
            fsync_path(folder)
        if os.path.exists(target):
            os.rename(target, old)
        os.rename(staging, target)
        fsync_path(os.path.dirname(os.path.abspath(target)))
    except OSError as e:
        if os.path.exists(old) and not os.path.exists(target):
            os.rename(old, target)
        raise cannot_write(target, e) from e
    shutil.rmtree(old, ignore_errors=True)


def entries(folder: str) -> List[str]:
    """Every file and folder under `folder`, as paths relative to it, sorted."""
    found = []
    for root, dirs, names in os.walk(folder):
        found += [os.path.relpath(os.path.join(root, name), folder) for name in dirs + names]
    return sorted(found)


def foreign_entry(folder: str, ours: Iterable[str]) -> Optional[str]:
    """The first entry under `folder` (relative to it) not among `ours`, else None."""
    ours = set(ours)
    return next((entry for entry in entries(folder) if entry not in ours), None)


def refuse_foreign_entries(folder: str, ours: Iterable[str],
                           flag: str = "--output_dir") -> None:
    """One error line unless every entry of the existing `folder` is among `ours`
    (relative paths of what the command writes): what --overwrite may replace.

    Call it before the work, with the names the command will write; a missing
    folder passes.
    """
    if not os.path.lexists(folder):
        return
    if not os.path.isdir(folder):
        fail(f"{flag}={folder} exists and is not a folder; give a folder")
    entry = foreign_entry(folder, ours)
    if entry is not None:
        fail(f"{flag}={folder} holds {entry}, which this command does not write: "
             "--overwrite replaces only what the command writes there, never anything "
             "else; move it away or choose another folder")


def publish_directory(staging: str, target: str, ours: Iterable[str] = (),
                      flag: str = "--output_dir") -> None:
    """`replace_directory` for a command's output folder: an existing `target` is
    replaced only if it holds nothing but what `staging` holds and `ours` (every
    name the command writes: its own files of an earlier run); otherwise one
    error line names what it holds, `staging` is removed and `target` stays.
    """
    try:
        refuse_foreign_entries(target, entries(staging) + list(ours), flag)
    except UserError:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    replace_directory(staging, target)


def restore_directory(target: str) -> List[str]:
    """Undo what a killed `replace_directory` or writer left beside `target`.

    A missing `target` with a `.NAME.XXXXXXXX.staging.old` beside it gets the
    old folder back; every other staging folder of `target` is removed. A
    staging folder a live process is building is locked (bert_ad/signals.py)
    and stays, with its `.old`.

    Returns:
      The names removed or restored.
    """
    parent, name = os.path.split(os.path.abspath(target))
    pattern = re.compile(r"^\." + re.escape(name) + r"\.[0-9a-f]{8}\.staging(\.old)?$")
    found = sorted(n for n in os.listdir(parent) if pattern.match(n)) \
        if os.path.isdir(parent) else []
    done = []
    for entry in found:
        path = os.path.join(parent, entry)
        if is_live(path[:-len(".old")] if entry.endswith(".old") else path):
            continue
        if entry.endswith(".old") and not os.path.exists(target):
            os.rename(path, target)
        else:
            shutil.rmtree(path, ignore_errors=True)
        done.append(entry)
    return done


_STAGING_NAME = re.compile(r"^\.(.+)\.[0-9a-f]{8}\.staging(\.old)?$")


def remove_stale_staging(directory: str) -> List[str]:
    """Undo what killed writers of whole folders left in `directory`.

    `restore_directory` for every folder a `.NAME.XXXXXXXX.staging` in
    `directory` was building (an export, best/, a converted model): a kill -9
    runs no cleanup.

    Returns:
      The paths removed or restored.
    """
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return []
    targets = sorted({match.group(1) for match in map(_STAGING_NAME.match, names) if match})
    return [os.path.join(directory, name) for target in targets
            for name in restore_directory(os.path.join(directory, target))]


def _overlap(output_dir: str, folder: str) -> str:
    """How `output_dir` and `folder` overlap: "is", "lies inside", "holds", or ""."""
    if is_inside(output_dir, folder):
        return "is" if is_inside(folder, output_dir) else "lies inside"
    return "holds" if is_inside(folder, output_dir) else ""


def refuse_output_dir_over_models(output_dir: str,
                                  models: Iterable[Tuple[str, str, str]],
                                  advice: str = "give this run a --output_dir of its own"
                                  ) -> None:
    """One error line if output_dir overlaps the folder of a model this run reads.

    A run writes checkpoints, results and a config into output_dir, renames a
    broken checkpoint aside, deletes old ones (--keep_checkpoint_max) and
    replaces best/ and its exports: `distill --output_dir=T --teacher_dir=T`
    resumed from the teacher's checkpoint, trained the student over it and
    deleted the teacher's only checkpoint. So output_dir may be neither the
    folder of an input model, nor inside it, nor hold it.

    Args:
      output_dir: the run's --output_dir.
      models: (flag as typed, e.g. "--teacher_dir=T"; the model's folder; whose it
        is, e.g. "the teacher") of every model the run reads.
      advice: what to do, ending the line.
    Raises:
      UserError: naming output_dir, the model's flag and whose folder it is.
    """
    if not output_dir:
        return
    for named, folder, whose in models:
        how = _overlap(output_dir, folder) if folder and os.path.isdir(folder) else ""
        if how == "is":
            raise UserError(f"--output_dir={output_dir} is {named}: that is {whose}'s folder, "
                            f"which this run would write over; {advice}")
        if how:
            raise UserError(f"--output_dir={output_dir} {how} {whose}'s folder {folder} "
                            f"({named}), where this run must write nothing; {advice}")
