"""Lines of text as every command reads them: from a file or standard input alike.

One reader, so the same bytes are the same lines whatever the route. Before
it, `bert-ad tokenize` read standard input through Python's text layer (bad
UTF-8 became `[UNK]`, exit 0) and its --input_file strictly (refused), and a
lone `\\r` ended a line in the file (universal newlines) but not on standard
input: 6 output lines for 5; `vocab trim --corpus` split at a lone `\\r` too,
while features and create_pretraining_data did not. Here:

  * a line ends at `\\n` only; the `\\r` of a CRLF line end is dropped, a `\\r`
    anywhere else is part of the line (whitespace to a tokenizer), as
    Google's extract_features reads its input;
  * the bytes must be UTF-8: the first line that is not is one `error:` line
    naming the source, the line and the byte;
  * a byte order mark at the start is dropped.
"""

from __future__ import annotations

from typing import BinaryIO, Iterator

from bert_ad.errors import fail

BYTE_ORDER_MARK = "\ufeff"


def text_lines(stream: BinaryIO, source: str) -> Iterator[str]:
    """The lines of a binary stream, each without its line end.

    Args:
      stream: a file opened "rb", or sys.stdin.buffer.
      source: how messages name it ("--input_file=a.txt", "standard input").
    Raises:
      UserError: "SOURCE line N is not UTF-8 text (its byte K); ...".
    """
    for number, raw in enumerate(stream, 1):
        yield decode_line(raw, number, source)


def decode_line(raw: bytes, number: int, source: str) -> str:
    """One line's text (line `number` of `source`), as `text_lines` reads it: UTF-8,
    a first line's byte order mark and the line end (`\\n`, `\\r\\n`) dropped.

    Raises:
      UserError: "SOURCE line N is not UTF-8 text (its byte K); ...".
    """
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        fail(f"{source} line {number} is not UTF-8 text (its byte {e.start + 1}); "
             "convert it to UTF-8 (e.g. iconv -f GBK -t UTF-8)")
    if number == 1 and line.startswith(BYTE_ORDER_MARK):
        line = line[1:]
    if line.endswith("\n"):
        line = line[:-1]
        if line.endswith("\r"):
            line = line[:-1]
    return line
