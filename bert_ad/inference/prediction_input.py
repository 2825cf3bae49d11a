"""`bert-ad predict`'s input: lines of a file (or standard input, or a .gz) -> instances.

One instance a line, in the shape `bert-ad serve` takes (a string, or an
object with the task's fields: bert_ad/inference/predictions.py), so the
task's own `parse` checks it:

  text   the line is the text (the default)
  tsv    --text_column (and --text_b_column) of tab-separated columns
  csv    the same of comma-separated values (one record a line)
  jsonl  the line is a JSON instance as bert-ad serve takes it, or, with
         --text_column, an object whose named fields are the texts

A column is a number (0-based) or a name: a name reads the first line as the
header. Lines are decoded as every command reads them
(bert_ad/data/text_lines.py: UTF-8, `\\n` ends a line). A line that cannot be
read (not UTF-8, a column missing, not JSON, not what the task takes) is a
`BadLine` naming its number: the caller stops there, or skips it.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import os
import sys
from typing import BinaryIO, Iterable, Iterator, Optional, Sequence, Tuple, Union

from bert_ad.data.text_lines import decode_line
from bert_ad.errors import UserError, fail

FORMATS = ("text", "tsv", "csv", "jsonl")
STANDARD_STREAM = "-"


@dataclasses.dataclass(frozen=True)
class InputSettings:
    """How the lines become instances (the flags of the same names).

    Attributes:
      input_format: one of FORMATS.
      text_column, text_b_column: a column's number or name (tsv, csv) or a
        field's name (jsonl); "" = not given.
    """
    input_format: str = "text"
    text_column: str = ""
    text_b_column: str = ""


@dataclasses.dataclass(frozen=True)
class BadLine:
    """A line that cannot be read: its number and the one-line reason."""
    number: int
    message: str


Item = Tuple[int, object]   # (line number, instance)


def line_number(item: Union[Item, BadLine]) -> int:
    """The input line an item of read_instances comes from."""
    return item.number if isinstance(item, BadLine) else item[0]


def without_gz(path: str) -> str:
    """`path` without a .gz ending: the name of what it holds (bert-ad predict reads
    and writes a .gz name compressed)."""
    return path[:-3] if path.endswith(".gz") else path


def format_of(path: str, given: Optional[str]) -> str:
    """The input format: `given`, else the file name's (.tsv, .csv, .jsonl, each
    perhaps .gz), else text."""
    if given:
        return given
    extension = os.path.splitext(without_gz(path))[1].lstrip(".").lower()
    return extension if extension in FORMATS else "text"


def source_name(path: str) -> str:
    return "standard input" if path == STANDARD_STREAM else f"--input_file={path}"


def open_input(path: str) -> BinaryIO:
    """The binary stream of --input_file: standard input for `-`, a .gz
    decompressed; one error line for a file that cannot be opened."""
    if path == STANDARD_STREAM:
        return sys.stdin.buffer
    try:
        if path.endswith(".gz"):
            return gzip.open(path, "rb")
        return open(path, "rb")
    except OSError as e:
        fail(f"--input_file={path} cannot be read ({e.strerror or e}); give a file of one "
             "text a line, or - for standard input")


def count_lines(path: str) -> Optional[int]:
    """The lines of a plain file (for the progress line's ETA), counted at the
    speed of the disk; None for standard input and .gz (not known in advance)."""
    if path == STANDARD_STREAM or path.endswith(".gz") or not os.path.isfile(path):
        return None
    lines, last = 0, b"\n"
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def read_instances(stream: Iterable[bytes], source: str, settings: InputSettings,
                   text_fields: Sequence[str]) -> Iterator[Union[Item, BadLine]]:
    """(line number, instance) for each line of `stream`, or a BadLine.

    Args:
      source: how messages name the input ("--input_file=a.tsv").
      text_fields: the instance's field for the first and the second text (the
        task's Predictions.text_fields, e.g. ("question", "context")).
    """
    columns = None
    for number, raw in enumerate(stream, 1):
        try:
            line = decode_line(raw, number, source)
        except UserError as e:
            yield BadLine(number, str(e))
            continue
        if settings.input_format == "text":
            yield number, line
            continue
        if settings.input_format == "jsonl":
            yield _json_instance(line, number, source, settings, text_fields)
            continue
        if settings.input_format == "tsv":
            fields = line.split("\t")
        else:
            try:
                fields = _csv_fields(line)
            except csv.Error as e:
                bad = BadLine(number, f"{source} line {number} is not one CSV record ({e}: "
                              "a quote not closed on its line, or text after a closing "
                              "quote); a record is one line, a quote inside a quoted field "
                              'is written "" (RFC 4180)')
                if columns is None and _has_header(settings):
                    fail(f"{bad.message}; the header line must be read to find the columns")
                yield bad
                continue
        if columns is None:
            columns = _column_indexes(fields, source, settings)
            if _has_header(settings):
                continue   # the header line
        yield _column_instance(fields, columns, number, source, settings, text_fields)


def _given(settings: InputSettings) -> Tuple[str, ...]:
    """The columns named, first text first (column 0 when none is)."""
    return (settings.text_column or "0",) + (
        (settings.text_b_column,) if settings.text_b_column else ())


def _has_header(settings: InputSettings) -> bool:
    """A column named (not numbered) is looked up in the first line, the header."""
    return any(not name.isdigit() for name in _given(settings))


def _csv_fields(line: str) -> list:
    """The fields of one CSV record; csv.Error for a line that is not one (strict:
    a quote left open would otherwise swallow the rest of the line as text)."""
    return next(csv.reader([line], strict=True), [])


def _column_indexes(first: Sequence[str], source: str, settings: InputSettings) -> list:
    """Each named column's index: a number as it is, a name found in the header
    (`first`); one error line for a name the header lacks."""
    indexes = []
    for flag, name in zip(("--text_column", "--text_b_column"), _given(settings)):
        if name.isdigit():
            indexes.append(int(name))
        elif name in first:
            indexes.append(list(first).index(name))
        else:
            fail(f"{flag}={name} is not a column of {source}'s header (line 1: "
                 f"{', '.join(first[:10])}); name one of them, or give its number (0-based)")
    return indexes


def _instance(texts: Sequence[Optional[str]], text_fields: Sequence[str]) -> object:
    """The instance of one text (a string) or two (an object of the task's fields)."""
    if len(texts) == 1 and text_fields[0] in ("text", "text_a"):
        return texts[0]
    return {field: text for field, text in zip(text_fields, texts)}


def _column_instance(fields, columns, number, source, settings, text_fields):
    if max(columns) >= len(fields):
        separated = "tab-separated" if settings.input_format == "tsv" else "comma-separated"
        return BadLine(number, f"{source} line {number} has {len(fields)} {separated} "
                       f"column(s); column {max(columns)} (0-based) is missing")
    return number, _instance([fields[i] for i in columns], text_fields)


def _json_instance(line, number, source, settings, text_fields):
    try:
        value = json.loads(line)
    except ValueError as e:
        return BadLine(number, f"{source} line {number} is not JSON ({e})")
    if not settings.text_column:
        return number, value   # the instance as bert-ad serve takes it
    if not isinstance(value, dict):
        return BadLine(number, f"{source} line {number} is not a JSON object, which "
                       "--text_column names a field of")
    texts = []
    for flag, name in zip(("--text_column", "--text_b_column"), _given(settings)):
        if name not in value or not isinstance(value[name], str):
            return BadLine(number, f"{source} line {number} has no string field {name!r} "
                           f"({flag})")
        texts.append(value[name])
    return number, _instance(texts, text_fields)
