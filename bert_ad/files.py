"""The one way bert_ad writes a file: whole, under a temporary name, then renamed.

A reader never sees a half-written file, a crash or a full disk never leaves a
mixed set of results, and an earlier result is not silently lost: it can be
kept as `NAME.~N~` (GNU backup style). Whole folders are built and published
by bert_ad/folders.py.

  write_results(dir, {name: lines})   the result files of one run, as a set
  write_lines / write_key_values      one text file
  atomic_open(path)                   a file object, for other text/binary writes
  atomic_path(path)                   a temporary path, for writers that need one
                                      (tf.io.TFRecordWriter, savefig)
  StagedFiles                         several temporary paths committed together
                                      (pretraining shards)
  remove_stale_temporaries(dir)       the temporaries of a killed run, at start
  cannot_write(path, error)           the one-line UserError of a failed write

Temporary files are `.NAME.XXXXXXXX.tmp` beside their target (same file
system, so the rename is atomic) and are created with mode 0o666 minus the
umask, as `open()` would (not mkstemp's private 0600). Every OSError while
writing becomes a UserError naming the path and the cause, after the
temporary files are removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import hashlib
import logging
import math
import os
import re
import secrets
from typing import IO, Iterable, Iterator, List, Mapping, Optional, Tuple

from bert_ad.errors import UserError
from bert_ad.signals import forget, held, is_live, remove_on_stop

log = logging.getLogger("bert_ad")

# `.NAME.<8 random chars>.tmp`: ours, and those of the mkstemp-based writers
# before them ([a-z0-9_]); nothing else in a folder looks like this.
_TEMPORARY_NAME = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def backup_path(path: str) -> str:
    """The first free `path.~N~` (N = 1, 2, ...): where an earlier file is kept."""
    n = 1
    while os.path.lexists(f"{path}.~{n}~"):
        n += 1
    return f"{path}.~{n}~"


def cannot_write(path: str, error: BaseException) -> UserError:
    """The one-line UserError for a failed write of `path`.

    Args:
      path: the file the user asked for (not its temporary name).
      error: an OSError, or TensorFlow's OpError, whose message is
        "<temporary path>; <cause>".
    Returns:
      UserError("cannot write PATH: CAUSE"), e.g. "... No space left on device".
    """
    blocker = (file_in_the_way(path) if isinstance(error, OSError)
               and error.errno in (errno.EEXIST, errno.ENOTDIR) else "")
    if blocker:  # makedirs says only "File exists" (or "Not a directory")
        cause = f"{blocker} is a file, not a folder"
    elif isinstance(error, OSError):
        cause = error.strerror or str(error)
    else:
        cause = tensorflow_cause(error)
    return UserError(f"cannot write {path}: {' '.join(cause.split())}")


def file_in_the_way(path: str) -> str:
    """The nearest of `path` and its parents that exists and is not a folder (a
    file where a folder is needed: `--export_dir=FILE/sub`), or ""."""
    folder = os.path.abspath(path)
    while not os.path.lexists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    return "" if os.path.isdir(folder) or not os.path.lexists(folder) else folder


# Lines of a TensorFlow error that are not its cause: the op, the hint TensorFlow
# adds to any ResourceExhausted error (a full disk's too), and the frame TF 2.x
# puts around an error in a graph ("Graph execution error:", the node, its trace).
_NOT_THE_CAUSE = ("[[", "Hint:", "Graph execution error", "Detected at node", "Node:",
                  "Original stack trace", "File \"")


def tensorflow_cause(error: BaseException) -> str:
    """The cause in a TensorFlow error (an OpError, or any exception): the
    "PATH; CAUSE" line's cause, else its first line that says something; e.g.
    "Read less bytes than requested" where TF 2.x's message begins "Graph
    execution error:" and ends with an empty stack trace."""
    message = str(getattr(error, "message", "") or error)
    lines = [line.strip() for line in message.splitlines()]
    lines = [line for line in lines if line and not line.startswith(_NOT_THE_CAUSE)]
    located = [line for line in lines if "; " in line]
    line = located[-1] if located else (lines[0] if lines else message or type(error).__name__)
    return re.sub(r"\s*\[\[.*?\]\]", "", line.rsplit("; ", 1)[-1]).strip()


def _create_temporary(path: str) -> str:
    """A new empty `.NAME.XXXXXXXX.tmp` beside `path` (its folder is created),
    locked while it is registered; those of `path` a killed run left go first."""
    directory, name = os.path.split(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:  # a file where the folder should be
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                 directory) from None
    remove_stale_temporaries(directory, of=name)
    while True:
        temporary = os.path.join(directory, f".{name}.{secrets.token_hex(4)}.tmp")
        with held():  # created and registered, or neither, when a stop signal comes
            try:
                # 0o666: the kernel applies the umask, as for any new file.
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            except FileExistsError:
                continue
            return remove_on_stop(temporary, fd)


def fsync_path(path: str) -> None:
    """Flush a file's bytes (or a folder's entries) to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    except OSError as e:  # cleanup must not hide the error being handled
        log.warning("could not remove the temporary file %s: %s", path, e.strerror)


class StagedFiles:
    """Temporary files beside their targets, renamed onto them together.

    `stage(path)` returns a temporary path to write; `commit()` renames every
    staged file onto its target (an existing target kept as `NAME.~N~` with
    `keep_backup`); `discard()` removes them. Used as a context manager it
    commits on success and discards on any exception, turning an OSError into
    a UserError naming the file.

    If a rename fails half-way (rare: the files are complete by then), the
    targets renamed so far get back their earlier content from the backups
    (with `keep_backup`; without it, targets that did not exist are removed).
    """

    def __init__(self, keep_backup: bool = False):
        self.keep_backup = keep_backup
        self._staged = []  # type: List[Tuple[str, str]]  # (temporary, target)

    @property
    def targets(self) -> List[str]:
        return [target for _, target in self._staged]

    def stage(self, path: str) -> str:
        """A new temporary path for `path` (absolute; its folder is created).

        Raises:
          UserError: the file cannot be created; everything staged is discarded.
        """
        target = os.path.abspath(path)
        try:
            temporary = _create_temporary(target)
        except OSError as e:
            self.discard()
            raise cannot_write(target, e) from e
        self._staged.append((temporary, target))
        return temporary

    def commit(self) -> List[str]:
        """Rename every staged file onto its target; returns the targets.

        Each file's bytes reach the disk before its rename, and the renames
        before commit returns (fsync of the files, then of their folders): a
        power cut leaves the old file or the new one, never an empty one.
        """
        done = []  # type: List[_Step]
        target = ""
        try:
            # (`target` names the file in the error if its fsync fails.)
            for temporary, target in self._staged:  # noqa: B007
                fsync_path(temporary)
            for temporary, target in self._staged:
                step = _Step(target, existed=os.path.lexists(target))
                done.append(step)
                if step.existed and self.keep_backup:
                    backup = backup_path(target)
                    _keep_as(target, backup)
                    step.backup = backup
                os.replace(temporary, target)
                step.replaced = True
                if step.backup:
                    log.info("kept the earlier %s as %s", os.path.basename(target),
                             os.path.basename(step.backup))
        except OSError as e:
            _roll_back(done)
            self.discard()
            raise cannot_write(target, e) from e
        targets = self.targets
        for temporary, _ in self._staged:
            forget(temporary)
        self._staged = []
        for folder in sorted({os.path.dirname(t) for t in targets}):
            try:
                fsync_path(folder)
            except OSError as e:
                raise cannot_write(folder, e) from e
        return targets

    def discard(self) -> None:
        """Remove every staged temporary file (the targets are untouched)."""
        for temporary, _ in self._staged:
            remove_quietly(temporary)
            forget(temporary)
        self._staged = []

    def __enter__(self) -> "StagedFiles":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is None:
            self.commit()
            return
        staged = list(self._staged)
        self.discard()
        if isinstance(error, OSError):
            raise cannot_write(_failed_target(staged, error), error) from error


def _failed_target(staged: List[Tuple[str, str]], error: OSError) -> str:
    """The target an OSError is about: by its file name, else the only one,
    else their common folder."""
    for temporary, target in staged:
        if error.filename in (temporary, target):
            return target
    if len(staged) == 1:
        return staged[0][1]
    if staged:
        return os.path.commonpath([target for _, target in staged])
    return str(error.filename or "")


def _keep_as(target: str, backup: str) -> None:
    """Keep `target`'s content as `backup`: a hard link, so `target` never
    disappears, or a rename where the file system has no links."""
    try:
        os.link(target, backup)
    except OSError:
        os.rename(target, backup)


@dataclasses.dataclass
class _Step:
    """What commit() did to one target, for a roll-back."""
    target: str
    existed: bool
    backup: Optional[str] = None
    replaced: bool = False


def _roll_back(done: List[_Step]) -> None:
    """Undo the steps of a failed commit, newest first (best effort)."""
    for step in reversed(done):
        try:
            if step.backup and os.path.lexists(step.target) and not step.replaced:
                os.remove(step.backup)  # a link: the target was never touched
            elif step.backup:
                os.replace(step.backup, step.target)
            elif step.replaced and not step.existed:
                os.remove(step.target)
        except OSError as e:
            log.warning("could not restore %s: %s", step.target, e.strerror)


@contextlib.contextmanager
def atomic_path(path: str, keep_backup: bool = False) -> Iterator[str]:
    """A temporary path beside `path`, renamed onto it when the block succeeds.

    For writers that open a path themselves, e.g.
    `with atomic_path(p) as temp: tf.io.TFRecordWriter(temp)`. On any
    exception the temporary file is removed; an OSError becomes a UserError
    "cannot write PATH: CAUSE".

    Args:
      path: the file to write.
      keep_backup: keep an existing `path` as `path.~N~`.
    Yields:
      The temporary path (an existing empty file, mode 0o666 minus the umask).
    """
    with StagedFiles(keep_backup) as staged:
        yield staged.stage(path)


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "w", encoding: Optional[str] = None,
                newline: Optional[str] = None, keep_backup: bool = False) -> Iterator[IO]:
    """`open(path, mode)` on a temporary file, renamed onto `path` on success.

    Args:
      path: the file to write.
      mode: "w" (text) or "wb" (binary).
      encoding: for text; UTF-8 unless given (never the locale's).
      newline: as for open().
      keep_backup: keep an existing `path` as `path.~N~`.
    Yields:
      The open file object.
    """
    if mode not in ("w", "wt", "wb"):
        raise ValueError(f"atomic_open writes a whole file: mode 'w' or 'wb', not {mode!r}")
    if "b" not in mode and encoding is None:
        encoding = "utf-8"
    with atomic_path(path, keep_backup) as temporary:
        with open(temporary, mode, encoding=encoding, newline=newline) as f:
            yield f


def write_results(directory: str, files: Mapping[str, Iterable[str]]) -> List[str]:
    """Write the result files of one run into `directory`, committed as a set.

    Every file is written to its temporary name first; only when all are
    complete are they renamed into place together, existing ones kept as
    `NAME.~N~`. If anything fails before (an iterable raises, the disk is
    full), every temporary file is removed and `directory` is unchanged.

    Args:
      directory: the output folder (created if missing).
      files: {file name: its lines, each without "\\n"}; written UTF-8, each
        line followed by "\\n".
    Returns:
      The absolute paths written, in the order of `files`.
    Raises:
      UserError: "cannot write PATH: CAUSE" for any OSError.
    """
    with StagedFiles(keep_backup=True) as staged:
        for name, lines in files.items():
            if isinstance(lines, str):  # would be written one character a line
                raise TypeError(f"write_results: the lines of {name} are one str")
            path = os.path.join(os.path.abspath(directory), name)
            temporary = staged.stage(path)
            try:
                with open(temporary, "w", encoding="utf-8", newline="\n") as f:
                    for line in lines:
                        f.write(line + "\n")
            except OSError as e:
                raise cannot_write(path, e) from e
        return staged.commit()


def write_lines(path: str, lines: Iterable[str]) -> str:
    """Write `lines` (each without its newline) to `path` atomically; an
    existing file is kept as `path.~N~`. Returns `path`."""
    directory, name = os.path.split(os.path.abspath(path))
    write_results(directory, {name: lines})
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


def remove_stale_temporaries(directory: str, of: Optional[str] = None) -> List[str]:
    """Remove the `.NAME.XXXXXXXX.tmp` files a killed run left in `directory`.

    A temporary file of a live writer (this process or another) is locked
    (bert_ad/signals.py) and stays. Every writer calls it for its own target
    before making a temporary file, so the next run removes what a kill -9
    left; the driver calls it on its output_dir at the start of a run.

    Args:
      directory: the folder.
      of: only the temporary files of this target file name.
    Returns:
      The paths removed (none if `directory` does not exist).
    Raises:
      UserError: a stale file cannot be removed.
    """
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    pattern = _TEMPORARY_NAME if of is None else re.compile(
        r"^\." + re.escape(of) + r"\.[a-z0-9_]{8}\.tmp$")
    removed = []
    for name in names:
        path = os.path.join(directory, name)
        if not pattern.match(name) or os.path.islink(path) \
                or not os.path.isfile(path) or is_live(path):
            continue
        try:
            os.remove(path)
        except OSError as e:
            raise UserError(f"cannot remove {path}, a temporary file left by an "
                            f"interrupted run: {e.strerror}; remove it by hand") from e
        log.warning("removed %s, left by an interrupted run", path)
        removed.append(path)
    return removed


def file_digest(path: str) -> str:
    """SHA-256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
