"""An output_dir is owned by one run at a time.

Two runs writing into one folder overwrite each other's checkpoints and
results, and the second silently resumes from the first's. The owner holds
`output_dir/.bert_ad.lock`, created exclusively and holding its host, pid
and command; it is removed when the run ends. A lock left by a process that
no longer exists on this host (kill -9, a crash, a power cut) is taken over
with a warning; a lock held by a live process, or by another host (whose
processes cannot be checked from here), refuses the second run with one
line naming the owner.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import sys
import time

from bert_ad.errors import fail

log = logging.getLogger("bert_ad")

LOCK_NAME = ".bert_ad.lock"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


class OutputDirLock:
    """Hold `directory`'s lock for a `with` block (the directory is created)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_NAME)
        self.held = False
        self.created = False  # an output_dir this run made and left empty goes again

    def _owner(self) -> dict:
        try:
            with open(self.path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def _describe(self, owner: dict) -> str:
        if not owner:
            return f"an unreadable lock {self.path}"
        return (f"pid {owner.get('pid')} on {owner.get('host')} (started "
                f"{owner.get('started', '?')}: {owner.get('command', '?')})")

    def acquire(self) -> None:
        self.created = not os.path.exists(self.directory)
        os.makedirs(self.directory, exist_ok=True)
        me = {"host": socket.gethostname(), "pid": os.getpid(),
              "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "command": " ".join(os.path.basename(a) if i == 0 else a
                                  for i, a in enumerate(sys.argv))[:300]}
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self._owner()
                if (owner.get("host") == me["host"] and isinstance(owner.get("pid"), int)
                        and not _pid_alive(owner["pid"])):
                    log.warning("warning: --output_dir=%s was locked by %s, which is no "
                                "longer running: taking the lock over", self.directory,
                                self._describe(owner))
                    try:
                        os.remove(self.path)
                    except FileNotFoundError:
                        pass
                    continue
                fail(f"--output_dir={self.directory} is in use by another run: "
                     f"{self._describe(owner)}; wait for it to finish, use another "
                     f"--output_dir, or remove {self.path} if that run is gone")
            except OSError as e:
                if e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                    fail(f"--output_dir={self.directory} is not writable ({e.strerror}); "
                         "choose a folder this user can write to")
                raise
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(me, f)
            self.held = True
            return
        fail(f"could not take the lock {self.path}: it keeps changing; is another run "
             "starting in the same --output_dir?")

    def release(self) -> None:
        if self.held:
            self.held = False
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass
            if self.created and not os.listdir(self.directory):
                os.rmdir(self.directory)

    def __enter__(self) -> "OutputDirLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()
