"""--help for the absl-flag command lines, and absl's parse errors as one line.

Google's scripts answer --help through absl.app; ours parse flags themselves
(so a bad flag is one `error:` line, exit 2), so they answer it here: usage,
the module's description, and only our own flags (TensorFlow's absl logging
flags would bury them). A closed pipe (`--help | head`) ends quietly.
"""

from __future__ import annotations

import os
import sys
from typing import Sequence

HELP_ARGS = ("-h", "-help", "--help", "--helpshort", "--helpfull")


def wants_help(argv: Sequence[str]) -> bool:
    return any(arg in HELP_ARGS for arg in argv[1:])


# Modules whose flags are not the command's (absl's and TensorFlow's own).
FOREIGN_FLAG_MODULES = ("absl", "tensorflow")


def flags_help(flag_values) -> str:
    """`--name: help (default: value)` for the flags the command defined (ours, or a
    plugin task's)."""
    lines = []
    for module, module_flags in sorted(flag_values.flags_by_module_dict().items()):
        if module.split(".")[0] in FOREIGN_FLAG_MODULES:
            continue
        for flag in sorted(module_flags, key=lambda f: f.name):
            lines.append(f"  --{flag.name}: {flag.help} (default: {flag.default_as_str})")
    return "\n".join(lines)


def print_help(usage: str, description: str, flag_values) -> None:
    """Print usage, description and flags to stdout, then exit 0."""
    print_text(f"usage: {usage}\n\n{description.strip()}\n\nflags:\n"
               f"{flags_help(flag_values)}")


def print_text(text: str) -> None:
    """Print a help text to stdout, then exit 0."""
    try:
        print(text)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader (head, less) went away: not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(0)


def flag_error_message(error: Exception) -> str:
    """absl's message on one line, without its own "ERROR::" prefix."""
    message = " ".join(str(error).split())
    if message.startswith("ERROR::"):
        message = message[len("ERROR::"):].strip()
    return message
