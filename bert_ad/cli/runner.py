"""Running a launcher: parse its flags, set up logging, turn bad input into one line.

Every launcher (bert_ad/cli/*.py) is `define_flags(fv)` + `main(f) -> int`;
`run_launcher` parses argv into a fresh absl FlagValues (so `--flagfile`,
Google's `--do_train=true` and `--nodo_lower_case` work, and a launcher can
run twice in one process), answers --help with only our flags, and runs
main under `run_cli`: a UserError is `error: ...` on stderr, exit 2.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Callable, Optional, Sequence

from absl import flags

from bert_ad.cli.help import flag_error_message, print_help, wants_help
from bert_ad.errors import fail, run_cli

log = logging.getLogger("bert_ad")


def configure_logging() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False


def parse_flags(define_flags: Callable[[flags.FlagValues], None], argv: Sequence[str],
                usage: str, description: str) -> flags.FlagValues:
    """A fresh FlagValues with the launcher's flags, parsed from argv (argv[0]: program).

    --help prints usage, description and the flags, then exits 0; a parse
    error is a UserError.
    """
    fv = flags.FlagValues()
    define_flags(fv)
    if wants_help(argv):
        print_help(f"{os.path.basename(argv[0])} {usage}", description, fv)
    try:
        rest = fv(list(argv))
    except flags.Error as e:
        fail(flag_error_message(e))
    if len(rest) > 1:
        fail(f"unexpected argument {rest[1]!r}; flags look like --name=value")
    return fv


def run_launcher(define_flags: Callable[[flags.FlagValues], None],
                 main: Callable[[flags.FlagValues], int], description: str,
                 usage: str = "--flag=value ... [--flagfile=FILE]",
                 argv: Optional[Sequence[str]] = None) -> None:
    """Parse argv, configure logging and run main as a CLI (exits)."""
    argv = sys.argv if argv is None else argv

    def parsed_main() -> int:
        f = parse_flags(define_flags, argv, usage, description)
        configure_logging()
        return main(f)

    run_cli(parsed_main)
