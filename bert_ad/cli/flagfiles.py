"""--flagfile: the files a command line takes flags from, checked before absl reads them.

absl opens a flagfile with the locale's encoding and lets a decoding error
escape: a flagfile saved as UTF-16 (Windows Notepad's "Unicode", with its
byte order mark) was a 41-line UnicodeDecodeError traceback in every
command. `read_flagfiles` finds the flagfiles as absl does (`--flagfile=F`,
`--flagfile F`, one dash too, nested `--flagfile=` lines, `~` expanded,
relative to the working directory), checks that each is UTF-8 text (one
`error:` line naming the file otherwise) and returns their paths: they are
inputs of the run like any data file, which no output may write over
(`bert_ad.path_overlaps.refuse_outputs_over_inputs`); `of(fv)` gives them back.
"""

from __future__ import annotations

import os
import weakref
from typing import List, Sequence

from bert_ad.errors import fail

_DIRECTIVES = ("--flagfile", "-flagfile")
# The flagfiles each parsed FlagValues was read from.
_READ_FROM: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _directive_file(argument: str) -> str:
    """F of `--flagfile=F` (or `-flagfile=F`), else ""."""
    for directive in _DIRECTIVES:
        if argument.startswith(directive + "="):
            return os.path.expanduser(argument[len(directive) + 1:].strip())
    return ""


def read_flagfiles(argv: Sequence[str]) -> List[str]:
    """The flagfiles argv (argv[0]: the program) names, nested ones included.

    Raises:
      UserError: a flagfile that is not UTF-8 text (or starts with a byte order
        mark, which absl would read as part of the first flag). A flagfile
        that cannot be opened is left to absl's own one-line message.
    """
    found: List[str] = []
    arguments = list(argv[1:])
    for i, argument in enumerate(arguments):
        if argument == "--":
            break
        if argument in _DIRECTIVES and i + 1 < len(arguments):
            _read(os.path.expanduser(arguments[i + 1]), found, [])
        elif _directive_file(argument):
            _read(_directive_file(argument), found, [])
    return found


def _read(path: str, found: List[str], stack: List[str]) -> None:
    if path in stack:  # absl warns and skips a flagfile that includes itself
        return
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return
    flag = f"--flagfile={path}"
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        fail(f"{flag} is UTF-16 text (Windows Notepad's \"Unicode\"); save it as UTF-8 "
             "(Notepad: Save As, Encoding UTF-8)")
    if data.startswith(b"\xef\xbb\xbf"):
        fail(f"{flag} starts with a byte order mark, which would be read as part of its "
             "first flag; save it as UTF-8 without BOM")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        column = e.start - data.rfind(b"\n", 0, e.start)
        fail(f"{flag}: line {line} is not UTF-8 text (its byte {column}); save the file "
             "as UTF-8")
    found.append(path)
    for line in text.splitlines():
        nested = _directive_file(line)
        if nested:
            _read(nested, found, stack + [path])


def record(fv, paths: Sequence[str]) -> None:
    """Remember that the flags `fv` holds were read from the flagfiles `paths`."""
    _READ_FROM[fv] = list(paths)


def of(fv) -> List[str]:
    """The flagfiles `fv`'s flags were read from (none for flags set otherwise)."""
    return list(_READ_FROM.get(fv, ()))
