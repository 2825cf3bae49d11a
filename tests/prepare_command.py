"""`bert-ad data prepare NAME [flags]` run in this process, as the command runs it.

The command parses the flags bert_ad/cli/data.py defines into a fresh
FlagValues and calls bert_ad/tools/prepare.py's main under run_cli (one
`error:` line, exit 2, for bad input). `run_prepare` does the same here and
returns a helpers.Run with the exit code and what was printed, so tests
assert on it as on a process.
"""

from __future__ import annotations

import contextlib
import io
from bert_ad.cli.data import define_flags
from bert_ad.cli.runner import parse_flags
from bert_ad.errors import run_cli
from bert_ad.tools import prepare
from helpers import Run

PROGRAM = "bert-ad data prepare"
USAGE = "NAME --output_dir=DIR [--flag=value ...]"


def run_prepare(name: str, *flag_args: str) -> Run:
    """`bert-ad data prepare name flag_args...`: its exit code, stdout and stderr."""
    stdout, stderr = io.StringIO(), io.StringIO()

    def main() -> int:
        f = parse_flags(define_flags, [PROGRAM] + list(flag_args), USAGE,
                        prepare.__doc__)
        return prepare.main(f, name)

    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            run_cli(main)
        except SystemExit as e:   # run_cli always exits
            code = e.code
    return Run([PROGRAM, name] + list(flag_args), code, stdout.getvalue(),
               stderr.getvalue())

