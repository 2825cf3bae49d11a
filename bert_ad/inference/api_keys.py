"""--api_key_file: the keys a client may send as `Authorization: Bearer KEY`.

The file holds one key a line (blank lines and lines starting with # are
skipped). It is re-read on SIGHUP and when it changes (its size, time or
inode, looked at once a second at most), so a key is added or revoked
without a restart; a re-read that finds the file missing or without a key
keeps the keys it had and says so in one line (locking every client out by a
half-written file would be worse). A key is compared with
hmac.compare_digest against every key, so the time a check takes says
nothing about how much of a key was right.
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from typing import List, Optional, Tuple

from bert_ad.errors import fail

log = logging.getLogger("bert_ad")

FLAG = "--api_key_file"
CHECK_EVERY_S = 1.0


def _read_keys(path: str) -> List[bytes]:
    """The file's keys; OSError or ValueError (no key, not UTF-8) otherwise."""
    with open(path, "rb") as f:
        lines = f.read().decode("utf-8").splitlines()
    keys = [line.strip().encode("utf-8") for line in lines]
    keys = [key for key in keys if key and not key.startswith(b"#")]
    if not keys:
        raise ValueError("it holds no key (one a line)")
    return keys


class ApiKeys:
    """The keys of --api_key_file, kept current (see the module docstring)."""

    def __init__(self, path: str):
        self.path = path
        try:
            self._keys = _read_keys(path)
            self._seen = self._stamp()
        except (OSError, ValueError) as e:
            fail(f"{FLAG}={path}: {getattr(e, 'strerror', None) or e}")
        self._checked = time.monotonic()

    def _stamp(self) -> Optional[Tuple[int, int, int]]:
        try:
            stat = os.stat(self.path)
        except OSError:
            return None
        return stat.st_mtime_ns, stat.st_size, stat.st_ino

    def reload(self, why: str) -> None:
        """Read the file again (SIGHUP, or it changed); keep the old keys if it fails."""
        self._seen = self._stamp()
        try:
            keys = _read_keys(self.path)
        except (OSError, ValueError) as e:
            log.warning("serve: %s: %s=%s not re-read (%s); the %d key(s) read before stay",
                        why, FLAG, self.path, getattr(e, "strerror", None) or e,
                        len(self._keys))
            return
        self._keys = keys
        log.info("serve: %s: %s re-read, %d key(s)", why, FLAG, len(keys))

    def _follow_file(self) -> None:
        now = time.monotonic()
        if now - self._checked < CHECK_EVERY_S:
            return
        self._checked = now
        if self._stamp() != self._seen:
            self.reload("the key file changed")

    def allows(self, authorization: Optional[str]) -> bool:
        """Whether an Authorization header carries one of the keys."""
        self._follow_file()
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            return False
        given = key.strip().encode("utf-8", "replace")
        # Every key compared, in constant time each: no early exit to time.
        found = False
        for known in self._keys:
            found |= hmac.compare_digest(given, known)
        return found
