"""Entry points whose issue has not landed yet say so, instead of pretending to work."""

from __future__ import annotations

from bert_ad.errors import UserError, run_cli


def not_implemented(command: str, issue: str):
    """A `cli()` for `command` that exits 2 with a one-line 'not implemented yet'."""
    def main() -> int:
        raise UserError(f"{command} is not implemented yet (see the issue "
                        f"'{issue}'); nothing was run")
    return lambda: run_cli(main)
