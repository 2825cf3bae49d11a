"""Ctrl-C, SIGTERM and SIGHUP end a run cleanly wherever they arrive.

The training loop saves a checkpoint and stops after the current step
(bert_ad/parallel/loop.py, StopSignals). Everywhere else (reading and
checking inputs, building a graph, predicting, exporting, converting) the
run stops at once (`stop_on_signals`, around every command line in
`errors.run_cli`): what was being written is removed (every temporary file
and staging folder bert_ad/files.py hands out, and the output_dir lock, are
registered here while they exist), one line says so, and the process exits
128 + the signal, as a shell reports it.

The stop happens in the handler itself rather than by raising an exception
into the interrupted code: TensorFlow calls back into Python from C++, and an
exception raised there can be swallowed (the run then went on to its end).
A signal the process started with ignored stays ignored (`nohup` ignores
SIGHUP).

While a path is registered, this process holds a kernel lock (flock) on it,
so another run can tell a file or folder being written (`is_live`) from one
a killed run left behind (kill -9 runs no handler), which it then removes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import sys
import threading
from typing import Callable, Dict, Iterator, Optional

# The signals that stop a run, as its one line names them.
NAMES = {signal.SIGINT: "Ctrl-C (SIGINT)", signal.SIGTERM: "SIGTERM",
         signal.SIGHUP: "SIGHUP (the terminal closed)"}

# Paths to remove if a stop signal ends the process while they exist, in the
# order registered, each with the descriptor holding its lock (None: no lock
# could be taken, e.g. out of descriptors).
_REMOVE_ON_STOP: Dict[str, Optional[int]] = {}


def signal_name(signum: int) -> str:
    return NAMES.get(signum, f"signal {signum}")


def remove_on_stop(path: str, fd: Optional[int] = None, lock: bool = True) -> str:
    """Register `path` (a temporary file or a staging folder being written): a stop
    signal outside the training loop removes it before the process exits, and
    until then this process holds its lock (`is_live`). A path that no longer
    exists then (renamed into place) is left alone. Returns `path`.

    Args:
      fd: a descriptor of `path` to hold the lock with (closed by `forget`);
        default: one is opened.
      lock: False for a path whose caller locks it itself (the output_dir lock).
    """
    _release_gone()
    path = os.path.abspath(path)
    _REMOVE_ON_STOP[path] = _lock(path, fd) if lock else None
    return path


def _lock(path: str, fd: Optional[int] = None) -> Optional[int]:
    """A descriptor holding an exclusive flock on `path` (a file or a folder), or None."""
    if fd is None:
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _release(fd: Optional[int]) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def _release_gone() -> None:
    """Forget the registered paths that are gone (renamed into place, removed):
    a long process (a test run) must not hold a descriptor per folder it wrote."""
    for path in [p for p in _REMOVE_ON_STOP if not os.path.lexists(p)]:
        _release(_REMOVE_ON_STOP.pop(path))


def is_live(path: str) -> bool:
    """Whether a process (this one included) holds `path`'s lock: it is being
    written. False for a path a killed run left, or one that is gone."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    except OSError:
        return True  # another user's, say: what cannot be told stays
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False  # a file system without flock: nothing can be told apart
    finally:
        os.close(fd)
    return False


# While above 0, stop_now waits: the signal it got is kept in _pending.
_held = 0
_pending = None


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Within the block, a stop signal waits (it stops the run when the block ends).

    Around creating a file and registering it with `remove_on_stop`: a signal
    between the two would leave the new file behind (seen in CI: SIGTERM just
    after the export's staging folder was made). Done here, not with a signal
    mask: with TensorFlow's threads running, the kernel hands a masked signal
    to another thread, and Python still runs the handler in the main thread.
    """
    global _held
    _held += 1
    try:
        yield
    finally:
        _held -= 1
        if not _held and _pending is not None:
            stop_now(_pending)


def forget(path: str) -> None:
    """`path` is no longer this process's to remove (committed, or handed over)."""
    _release(_REMOVE_ON_STOP.pop(os.path.abspath(path), None))


def install(handler: Callable) -> Dict[int, object]:
    """Set `handler` for every stop signal not ignored; returns the previous handlers.

    Nothing is installed outside the main thread (Python allows handlers only
    there; tests run loops in threads).
    """
    previous = {}
    if threading.current_thread() is not threading.main_thread():
        return previous
    for signum in NAMES:
        if signal.getsignal(signum) == signal.SIG_IGN:
            continue  # e.g. nohup's SIGHUP: the user asked for it to be ignored
        previous[signum] = signal.signal(signum, handler)
    return previous


def restore(previous: Dict[int, object]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def _remove_registered() -> None:
    for path in reversed(list(_REMOVE_ON_STOP)):
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.remove(path)
        except OSError:
            pass  # best effort: the next run removes what is left (driver.remove_leftovers)


def write_from_handler(text: str) -> None:
    """`text` on stderr from a signal handler (Python's buffered streams may be in
    the middle of a write of the interrupted code)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, RuntimeError, ValueError, AttributeError):
            pass
    try:
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except OSError:  # stderr is gone (a hung-up terminal): the exit code still tells
        pass


def stop_now(signum: int, frame=None) -> None:
    """The handler outside the training loop: remove what is being written, say so
    in one line, exit 128 + `signum` (at the end of a `held` block, if in one)."""
    global _pending
    if _held:
        _pending = signum
        return
    _remove_registered()
    write_from_handler(f"error: stopped by {signal_name(signum)}: nothing half-written was kept "
                "(files being written were removed); run the same command again to finish")
    os._exit(128 + signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within the block, a stop signal stops the process at once, cleanly (`stop_now`)."""
    previous = install(stop_now)
    try:
        yield
    finally:
        restore(previous)
