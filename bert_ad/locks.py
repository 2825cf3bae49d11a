"""An output_dir is owned by one run at a time.

Two runs writing into one folder overwrite each other's checkpoints and
results, and the second silently resumes from the first's. The owner holds
`output_dir/.bert_ad.lock` locked with flock(2) for the whole run: the
kernel releases the lock when the process ends, however it ends (kill -9, a
crash, a power cut), so a lock file no live process holds never blocks the
next run, whatever it contains (an empty file a full disk left, a pid that
a reboot gave to another process, a run on another host of a shared file
system). The file also records the owner (host, pid, start, command), written
durably, so that a second run refused by a live owner can say which.

A command that reads a model folder (a teacher, an --init_checkpoint) asks
`refuse_reading_while_written` whether a live run holds that folder's lock: a
checkpoint being trained may be replaced or deleted while it is read.
Where flock(2) does not work (some FUSE and network mounts) the owner record
alone decides, as a pid check: a live run on this host is seen, a run on
another host is not (docs/reliability.md).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import sys
import time
from typing import Optional

from bert_ad.errors import fail
from bert_ad.files import cannot_write, fsync_path
from bert_ad.signals import forget, remove_on_stop

try:
    import fcntl
except ImportError:  # not a POSIX system: no kernel lock, the owner record alone
    fcntl = None

log = logging.getLogger("bert_ad")

LOCK_NAME = ".bert_ad.lock"
# flock(2) is not implemented by every file system (some FUSE and network
# mounts): there the owner record alone guards the folder, as a pid check.
_NO_FLOCK = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS)


# A writer whose flock is refused tries again this long: a reader's probe
# (`live_writer`) holds a shared lock on the file for microseconds.
_RETRY_SECONDS = (0.05, 0.1, 0.2)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def describe_owner(owner: dict) -> str:
    """'pid 123 on host (started 2026-01-02 03:04:05: run_classifier_mgpu.py ...)'."""
    return (f"pid {owner.get('pid')} on {owner.get('host')} (started "
            f"{owner.get('started', '?')}: {owner.get('command', '?')})")


def missing_folders(directory: str) -> list:
    """`directory` and its ancestors that do not exist yet, deepest first."""
    missing = []
    folder = os.path.abspath(directory)
    while not os.path.exists(folder):
        missing.append(folder)
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


def _read_owner(path: str) -> dict:
    """The owner record in the lock file `path` ({} when there is none to read)."""
    try:
        with open(path, encoding="utf-8") as f:
            owner = json.load(f)
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _live_elsewhere(owner: dict) -> bool:
    """Without flock: the recorded owner is another live process of this host (a
    run on another host is taken at its word: gone)."""
    return (owner.get("host") == socket.gethostname()
            and isinstance(owner.get("pid"), int) and owner["pid"] != os.getpid()
            and _pid_alive(owner["pid"]))


def _mine(owner: dict) -> bool:
    return owner.get("host") == socket.gethostname() and owner.get("pid") == os.getpid()


def live_writer(folder: str) -> Optional[dict]:
    """The owner record of another live run holding `folder`'s lock ({} while it is
    still writing it), or None when no other live run holds it.

    The probe takes a shared flock and lets it go at once: it never waits, and a
    writer starting in that instant retries (`_RETRY_SECONDS`).
    """
    path = os.path.join(folder, LOCK_NAME)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # no lock file (no run, or one that ended well), or unreadable
        return None
    try:
        if fcntl is None:
            held = None
        else:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                held = False
            except BlockingIOError:
                held = True
            except OSError as e:
                if e.errno not in _NO_FLOCK:
                    raise
                held = None
    finally:
        os.close(fd)  # a flock is the open file's: the owner's lock stays
    owner = _read_owner(path)
    if held is None:  # no kernel lock here: the owner record alone
        return owner if _live_elsewhere(owner) else None
    return owner if held and not _mine(owner) else None


def refuse_reading_while_written(folder: str, named: str, read_anyway: bool = False) -> None:
    """Refuse to read a model folder another live run is writing (one error line
    naming the folder and the run), or with `read_anyway` warn and go on.

    Args:
      folder: the model folder (a --teacher_dir, an --init_checkpoint's folder).
      named: the flag as the user typed it, e.g. "--teacher_dir=T".
      read_anyway: --read_while_training: read its newest complete checkpoint.
    """
    owner = live_writer(folder)
    if owner is None:
        return
    who = describe_owner(owner) if owner else "a run that is starting"
    where = (f"{named} is a folder" if os.path.abspath(named.partition("=")[2])
             == os.path.abspath(folder) else f"{named} lies in {folder}, a folder")
    if not read_anyway:
        fail(f"{where} that a live run is still writing ({who}); wait for it to finish, "
             "or add --read_while_training to read its newest complete checkpoint")
    log.warning("warning: %s that a live run is still writing (%s): reading its newest "
                "complete checkpoint (--read_while_training); a later one is not seen",
                where, who)


class OutputDirLock:
    """Hold `directory`'s lock for a `with` block (the directory is created)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self.held = False
        # The folders this run made for output_dir (it and missing parents), deepest
        # first: those it leaves empty go again, so a refused run leaves no trace.
        self.created = []
        self._fd = None

    def _owner(self) -> dict:
        return _read_owner(self.path)

    def _refuse(self, owner: dict) -> None:
        who = describe_owner(owner) if owner else "a run that is starting (its details are " \
                                                  "not written yet)"
        fail(f"--output_dir={self.directory} is in use by another run: {who}; wait for it "
             "to finish or use another --output_dir")

    def acquire(self) -> None:
        self.created = missing_folders(self.directory)
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as e:  # a file in the way: say which
            raise cannot_write(self.directory, e) from e
        me = {"host": socket.gethostname(), "pid": os.getpid(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": " ".join(os.path.basename(a) if i == 0 else a
                                  for i, a in enumerate(sys.argv))[:300]}
        for _ in range(10):
            fd = self._open()
            if not self._lock(fd):
                os.close(fd)
                self._refuse(self._owner())
            # A run that ended between our open and our flock removed the file
            # we hold: the lock that counts is the one on the file at the path.
            try:
                same = _same_file(fd, self.path)
            except OSError:
                same = False
            if not same:
                os.close(fd)
                continue
            self._fd = fd
            left = self._owner()
            if left and left.get("pid") != me["pid"]:
                log.warning("warning: --output_dir=%s was locked by %s, which is no longer "
                            "running: taking the lock over", self.directory,
                            describe_owner(left))
            self._write_owner(me)
            remove_on_stop(self.path, lock=False)  # a run stopped by a signal leaves no lock file
            self.held = True
            return
        fail(f"could not take the lock {self.path}: it keeps changing; is another run "
             "starting in the same --output_dir?")

    def _open(self) -> int:
        try:
            return os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                fail(f"--output_dir={self.directory} is not writable ({e.strerror}); "
                     "choose a folder this user can write to")
            raise cannot_write(self.path, e) from e

    def _lock(self, fd: int) -> bool:
        """Take the kernel lock on `fd`; False if a live process holds it."""
        if fcntl is None:
            return not _live_elsewhere(_read_owner(self.path))
        for pause in _RETRY_SECONDS + (None,):
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if pause is None:
                    return False
                time.sleep(pause)
            except OSError as e:
                if e.errno not in _NO_FLOCK:
                    raise cannot_write(self.path, e) from e
                return not _live_elsewhere(_read_owner(self.path))
            else:
                return True

    def _write_owner(self, me: dict) -> None:
        """Record the owner, durably; a failed write (a full disk) is one line naming
        the lock file, and leaves nothing behind."""
        try:
            data = (json.dumps(me) + "\n").encode("utf-8")
            os.ftruncate(self._fd, 0)
            written = 0
            while written < len(data):
                written += os.pwrite(self._fd, data[written:], written)
            os.fsync(self._fd)
            fsync_path(self.directory)
        except OSError as e:
            self._drop()
            raise cannot_write(self.path, e) from e

    def _drop(self) -> None:
        """Remove the lock file (while it is ours) and let the lock go."""
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass
        finally:
            os.close(self._fd)  # releases the flock
            self._fd = None
        for folder in self.created:
            if not os.path.isdir(folder) or os.listdir(folder):
                break
            os.rmdir(folder)

    def release(self) -> None:
        if self.held:
            self.held = False
            forget(self.path)
            self._drop()

    def __enter__(self) -> "OutputDirLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _same_file(fd: int, path: str) -> bool:
    """Whether the open file `fd` is the file now at `path`."""
    held, current = os.fstat(fd), os.stat(path)
    return (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino)
