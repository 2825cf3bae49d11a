"""User-facing errors: one clear line on stderr and exit code 2, no traceback.

Code anywhere in bert_ad raises `UserError("what is wrong; what to do")` for
bad input (a flag, a file, a line of a file). Entry points wrap their main in
`run_cli`, which turns it into the one-line message.
"""

from __future__ import annotations

import io
import os
import select
import stat
import sys
from typing import Callable, NoReturn

from bert_ad.signals import stop_on_signals

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C


class UserError(Exception):
    """Bad input the user can fix. The message is shown as is, on one line."""


class Stopped(UserError):
    """The run was stopped on purpose (Ctrl-C, SIGTERM) after saving what it could.

    `exit_code` is 128 + the signal number (130 for SIGINT, 143 for SIGTERM),
    as a shell reports a process a signal ended.
    """

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class MissingFile(UserError):
    """A file the run was pointed at (or a split's default file) is not there:
    what a caller with another source for the rows can catch (an int8 export
    without a dev split calibrates on the training rows)."""


def fail(message: str) -> NoReturn:
    raise UserError(message)


def require_file(path: str, what: str) -> str:
    """Return `path` if it is a readable file, else a UserError naming `what`."""
    if not path:
        raise MissingFile(f"{what} is not set")
    if not os.path.exists(path):
        raise MissingFile(f"{what} {path!r} does not exist")
    if not os.path.isfile(path):
        fail(f"{what} {path!r} is not a file")
    if not os.access(path, os.R_OK):
        fail(f"{what} {path!r} is not readable")
    return path


def run_cli(main: Callable[[], int | None]) -> NoReturn:
    """Run `main` as a command line: every way it can fail is one line, no traceback.

    A UserError becomes `error: ...` on stderr and exit 2 (a Stopped run exits
    with its own code); an OSError (a read-only or full disk, a path under a
    file) names its path and cause, exit 2; standard output's reader going away
    (`| head`) ends the command quietly, exit 0. Ctrl-C, SIGTERM or SIGHUP outside
    the training loop (which saves first) remove what was being written, say
    so in one line and exit 128 + the signal (bert_ad/signals.py).
    """
    with stop_on_signals():
        try:
            code = main()
        except UserError as e:
            _error_line(str(e))
            sys.exit(getattr(e, "exit_code", EXIT_USER_ERROR))
        except BrokenPipeError as e:
            if not _reader_gone(sys.stdout):
                _os_error_line(e)
                sys.exit(EXIT_USER_ERROR)
            # `bert-ad tokenize ... | head -1`: the reader had what it wanted. A
            # normal end; the unflushed rest goes nowhere instead of to a last
            # failed flush at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(0)
        except OSError as e:
            _os_error_line(e)
            sys.exit(EXIT_USER_ERROR)
        except KeyboardInterrupt:  # where no handler could be installed (not the main thread)
            _error_line("stopped by Ctrl-C (SIGINT): nothing half-written was kept (files "
                        "being written were removed); run the same command again to finish")
            sys.exit(EXIT_INTERRUPTED)
    sys.exit(code or 0)


def _os_error_line(e: OSError) -> None:
    where = f"{e.filename}: " if e.filename else ""
    _error_line(f"{where}{e.strerror or e}; check the path, its permissions and the "
                "free disk space")


def _reader_gone(stream) -> bool:
    """Whether `stream` is a pipe whose reading end was closed (poll says POLLERR)."""
    try:
        fd = stream.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poll = select.poll()
        poll.register(fd, select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        return False


def _error_line(message: str) -> None:
    try:
        print(f"error: {' '.join(message.split())}", file=sys.stderr, flush=True)
    except OSError:  # stderr is gone (a hung-up terminal): the exit code still tells
        pass
