"""User-facing errors: one clear line on stderr and exit code 2, no traceback.

Code anywhere in bert_ad raises `UserError("what is wrong; what to do")` for
bad input (a flag, a file, a line of a file). Entry points wrap their main in
`run_cli`, which turns it into the one-line message.
"""

from __future__ import annotations

import os
import sys
from typing import Callable, NoReturn

EXIT_USER_ERROR = 2


class UserError(Exception):
    """Bad input the user can fix. The message is shown as is, on one line."""


def fail(message: str) -> NoReturn:
    raise UserError(message)


def require_file(path: str, what: str) -> str:
    """Return `path` if it is a readable file, else a UserError naming `what`."""
    if not path:
        fail(f"{what} is not set")
    if not os.path.exists(path):
        fail(f"{what} {path!r} does not exist")
    if not os.path.isfile(path):
        fail(f"{what} {path!r} is not a file")
    if not os.access(path, os.R_OK):
        fail(f"{what} {path!r} is not readable")
    return path


def run_cli(main: Callable[[], int | None]) -> NoReturn:
    """Run `main`; a UserError becomes `error: ...` on stderr and exit 2."""
    try:
        code = main()
    except UserError as e:
        message = " ".join(str(e).split())
        print(f"error: {message}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)
    sys.exit(code or 0)
