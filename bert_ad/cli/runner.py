"""Parsing every command line: absl flags into a fresh FlagValues, one line for bad input.

Every command is `define_flags(fv)` + `main(f) -> int`, tasks and tools alike:
`run_launcher` parses argv into a fresh absl FlagValues (so `--flagfile`,
Google's `--do_train=true`, `--nodo_lower_case` and `--name value` work, and a
command can run twice in one process), answers --help with the command's
flags, and runs main under `run_cli`: a UserError is `error: ...` on stderr,
exit 2. A tool with subcommands (`convert hf2google`, `vocab extend`) lists
them as `Subcommand`s; `parse_subcommand` picks one by its first argument and
parses the rest the same way. absl's is the only flag parser and the only
true/false parser.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Callable, List, Optional, Sequence, Tuple

from absl import flags

from bert_ad.cli import flagfiles
from bert_ad.cli.help import HELP_ARGS, flag_error_message, print_help, print_text, wants_help
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
    """A fresh FlagValues with the command's flags, parsed from argv (argv[0]: program).

    --help prints usage, description and the flags, then exits 0; a parse
    error, or an argument that is not a flag, is a UserError.
    """
    fv, rest = parse_flags_and_arguments(define_flags, argv, usage, description)
    if rest:
        fail(f"unexpected argument {rest[0]!r}; flags look like --name=value")
    return fv


def parse_flags_and_arguments(define_flags: Callable[[flags.FlagValues], None],
                              argv: Sequence[str], usage: str, description: str
                              ) -> Tuple[flags.FlagValues, List[str]]:
    """parse_flags for a command that also takes arguments (`assets NAME ...`):
    (the flags, the arguments that are not flags)."""
    fv = flags.FlagValues()
    define_flags(fv)
    if wants_help(argv):
        print_help(f"{os.path.basename(argv[0])} {usage}", description, fv)
    read_from = flagfiles.read_flagfiles(argv)  # not UTF-8: one line, not absl's traceback
    try:
        rest = fv(list(argv))
    except flags.Error as e:
        fail(flag_error_message(e))
    flagfiles.record(fv, read_from)
    return fv, list(rest[1:])


def require_flags(f: flags.FlagValues, *names: str) -> None:
    """One line for the first of `names` not given."""
    for name in names:
        if f[name].value in (None, ""):
            fail(f"--{name} is required")


@dataclasses.dataclass(frozen=True)
class Subcommand:
    """One subcommand of a tool: `PROGRAM NAME --flag=value ...`.

    Attributes:
      name, summary: as listed by the tool's --help.
      define_flags: its absl flags.
      main: (parsed flags) -> exit code.
      required: flags it cannot run without (one `error:` line names the first
        missing one).
      usage: what follows `PROGRAM NAME` in its usage line.
    """
    name: str
    summary: str
    define_flags: Callable[[flags.FlagValues], None]
    main: Callable[[flags.FlagValues], int]
    required: Tuple[str, ...] = ()
    usage: str = "--flag=value ..."


def subcommands_help(program: str, subcommands: Sequence[Subcommand],
                     description: str) -> str:
    width = max(len(s.name) for s in subcommands)
    lines = [f"usage: {program} {{{','.join(s.name for s in subcommands)}}} [flags]", "",
             description.strip(), "", "commands:"]
    lines += [f"  {s.name.ljust(width)}  {s.summary}" for s in subcommands]
    lines += ["", f"`{program} COMMAND --help` lists a command's flags."]
    return "\n".join(lines)


def parse_subcommand(subcommands: Sequence[Subcommand], argv: Sequence[str],
                     description: str) -> Tuple[Subcommand, flags.FlagValues]:
    """The subcommand argv[1] names and its parsed flags (argv[0]: the program).

    `PROGRAM --help` (or no argument) lists the subcommands and exits 0
    (--help) or fails with one line (nothing given).
    """
    program = argv[0]
    if len(argv) < 2 or argv[1] in HELP_ARGS:
        if len(argv) >= 2:
            print_text(subcommands_help(program, subcommands, description))
        fail(f"{program}: name a command: {', '.join(s.name for s in subcommands)} "
             f"(`{program} --help` says what each does)")
    by_name = {s.name: s for s in subcommands}
    if argv[1] not in by_name:
        fail(f"{program}: unknown command {argv[1]!r}; choose one of "
             f"{', '.join(by_name)}")
    chosen = by_name[argv[1]]
    f = parse_flags(chosen.define_flags, [f"{program} {chosen.name}"] + list(argv[2:]),
                    chosen.usage, chosen.summary)
    require_flags(f, *chosen.required)
    return chosen, f


def run_subcommand(subcommands: Sequence[Subcommand], argv: Sequence[str],
                   description: str) -> int:
    """Parse argv (see parse_subcommand) and run the chosen subcommand's main."""
    chosen, f = parse_subcommand(subcommands, argv, description)
    return chosen.main(f)


def split_list(value: Optional[str]) -> List[str]:
    """A comma list flag's items, blanks dropped."""
    return [item.strip() for item in (value or "").split(",") if item.strip()]


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


def tool_cli(main: Callable[[Sequence[str]], int]) -> Callable[..., None]:
    """A tool's command line: `cli(argv=None)` runs `main(argv)` (argv[0]: the
    program as the user typed it; default sys.argv) under run_cli; exits."""
    def cli(argv: Optional[Sequence[str]] = None) -> None:
        arguments = list(sys.argv if argv is None else argv)
        run_cli(lambda: main(arguments))
    return cli
