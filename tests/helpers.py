"""What several test files share: running launchers in-process."""

from __future__ import annotations

from typing import Sequence

from bert_ad.cli import create_pretraining_data as create_pretraining_data_cli
from bert_ad.cli.runner import parse_flags


def create_pretraining_data(argv: Sequence[str]) -> int:
    """create_pretraining_data.py's main on `argv` (argv[0] the program), in this
    process: a UserError propagates instead of exiting."""
    cli = create_pretraining_data_cli
    return cli.main(parse_flags(cli.define_flags, argv, cli.USAGE, cli.__doc__))
