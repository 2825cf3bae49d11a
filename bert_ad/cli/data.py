"""bert-ad data prepare NAME --output_dir=DIR: build a real data set in our formats.

The data sets (sentiment reviews, People's Daily tagging, rewrite rows,
domain text, ...) and their flags are bert_ad/tools/prepare.py's;
`bert-ad data prepare --help` lists the names.
"""

from __future__ import annotations

from typing import Sequence

from bert_ad.cli.help import HELP_ARGS, print_text
from bert_ad.cli.registry import register_tool
from bert_ad.cli.run_inputs import flag_inputs
from bert_ad.cli.runner import tool_cli, parse_flags
from bert_ad.errors import fail
from bert_ad.path_overlaps import refuse_outputs_over_inputs
from bert_ad.tools import prepare

USAGE = "NAME --output_dir=DIR [--flag=value ...]"


def names_help(program: str) -> str:
    width = max(len(name) for name in prepare.DATASETS)
    lines = [f"usage: {program} prepare {USAGE}", "", __doc__.strip(), "", "data sets:"]
    lines += [f"  {name.ljust(width)}  {summary}"
              for name, summary in sorted(prepare.DATASETS.items())]
    lines += ["", f"`{program} prepare NAME --help` lists the flags."]
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    program = argv[0]
    if len(argv) < 2 or argv[1] != "prepare":
        if len(argv) >= 2 and argv[1] in HELP_ARGS:
            print_text(names_help(program))
        fail(f"{program}: the command is `{program} prepare {USAGE}`")
    if len(argv) < 3 or argv[2] in HELP_ARGS:
        if len(argv) >= 3:
            print_text(names_help(program))
        fail(f"{program} prepare: name a data set: {', '.join(sorted(prepare.DATASETS))}")
    name = argv[2]
    if name not in prepare.DATASETS:
        fail(f"{program} prepare: unknown data set {name!r}; choose one of "
             f"{', '.join(sorted(prepare.DATASETS))}")
    f = parse_flags(prepare.define_flags, [f"{program} prepare {name}"] + list(argv[3:]),
                    "--output_dir=DIR [--flag=value ...]", prepare.DATASETS[name])
    # --overwrite replaces --output_dir as a whole: not with a --source inside it.
    refuse_outputs_over_inputs((), flag_inputs(f), [("--output_dir", f.output_dir or "")]
                               if f.overwrite else [])
    return prepare.main(f, name)


cli = tool_cli(main)


register_tool("data", "build real data sets: `data prepare NAME --output_dir=DIR`", cli=cli)
