"""CoNLL-style files: one token per line with its tag, a blank line between sentences.

  EU      B-ORG
  rejects O
  German  B-MISC
                      <- blank line: a sentence ends
  -DOCSTART- -X- O    <- document marker: skipped (also ends a sentence)

Columns are separated by tabs or spaces (ASCII only, so a token such as the
ideographic space U+3000 stays a token). The token column and the label column
are chosen by index (0 = first, -1 = last; default first and last). A file
with a single column holds tokens only: it can be predicted, not trained or
evaluated on. CRLF line ends and a UTF-8 BOM are accepted.

Every sentence keeps the input line number of each of its tokens, so that
`prediction_lines` can write predict.txt line for line against the input:
the token and its predicted tag where the input has a token, an empty line
where it has a blank line, `-DOCSTART-` lines echoed unchanged, and exactly as
many lines as the input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Optional, Sequence

from bert_ad.errors import UserError, require_file
from bert_ad.files import write_lines

DOCSTART = "-DOCSTART-"
_COLUMN_SEPARATOR = re.compile(r"[ \t]+")


@dataclass
class Sentence:
    """One sentence of a CoNLL file.

    Attributes:
      tokens: the tokens, in order.
      tags: one tag per token, or None when the file has no label column.
      line_numbers: the 1-based input line of each token.
    """

    tokens: List[str]
    tags: Optional[List[str]]
    line_numbers: List[int]


@dataclass
class ConllFile:
    """A parsed CoNLL file.

    Attributes:
      path: the file read.
      lines: every input line without its line end (BOM removed), so that
        len(lines) is the line count a text editor shows.
      sentences: the sentences, in file order.
      num_columns: columns of every token line.
      token_column: the token column index used (non-negative).
    """

    path: str
    lines: List[str]
    sentences: List[Sentence]
    num_columns: int
    token_column: int

    @property
    def has_tags(self) -> bool:
        return bool(self.sentences) and self.sentences[0].tags is not None


def split_columns(line: str) -> List[str]:
    """The columns of one line, split at runs of ASCII spaces and tabs."""
    stripped = line.strip(" \t")
    return _COLUMN_SEPARATOR.split(stripped) if stripped else []


def read_lines(path: str, what: str = "data file") -> List[str]:
    """The lines of a UTF-8 text file, without line ends (CRLF or LF) or BOM.

    A final line end does not start another line: "a\\nb\\n" and "a\\nb" both
    have two lines.
    """
    require_file(path, what)
    try:
        with open(path, encoding="utf-8-sig", newline="") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}); save the "
                        f"file as UTF-8") from None
    # split("\n"), not splitlines(): U+2028 and friends may be tokens.
    lines = [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]
    if lines and lines[-1] == "" and text.endswith("\n"):
        lines.pop()
    return lines


def _resolve_column(flag: str, index: int, num_columns: int, path: str,
                    line_number: int) -> int:
    resolved = index + num_columns if index < 0 else index
    if not 0 <= resolved < num_columns:
        raise UserError(f"{path} line {line_number}: {num_columns} columns, so "
                        f"--{flag}={index} is out of range; choose a column "
                        f"from 0 to {num_columns - 1} (or -1 for the last)")
    return resolved


def read_conll(path: str, token_column: int = 0, label_column: Optional[int] = -1,
               require_tags: bool = True) -> ConllFile:
    """Read a CoNLL-style file.

    Args:
      path: the file.
      token_column: index of the token column (0 = first, -1 = last).
      label_column: index of the tag column, or None to ignore tags. A file
        with a single column has no tags whatever this says.
      require_tags: a file without tags is a UserError (training, evaluation).

    Returns:
      A ConllFile; its sentences have tags unless the file (or
      label_column=None) has none.

    Raises:
      UserError naming the file and line: an empty file, a file without a
      sentence, a token line without a tag, inconsistent column counts,
      an out-of-range column.
    """
    lines = read_lines(path)
    if not any(line.strip() for line in lines):
        raise UserError(f"{path} is empty; expected one token and its tag per "
                        f"line, a blank line between sentences")
    sentences: List[Sentence] = []
    num_columns = 0
    first_token_line = 0
    token_index = label_index = None
    tokens: List[str] = []
    tags: List[str] = []
    numbers: List[int] = []

    def end_sentence():
        if tokens:
            sentences.append(Sentence(list(tokens), list(tags) if label_index is not None
                                      else None, list(numbers)))
            tokens.clear()
            tags.clear()
            numbers.clear()

    for number, line in enumerate(lines, start=1):
        columns = split_columns(line)
        if not columns or columns[0] == DOCSTART:
            end_sentence()
            continue
        if not num_columns:
            num_columns, first_token_line = len(columns), number
            if num_columns == 1 and require_tags and label_column is not None:
                raise UserError(f"{path} line {number}: token {columns[0]!r} has no "
                                f"tag; every token line needs the token and its tag, "
                                f"separated by a tab or spaces")
            token_index = _resolve_column("token_column", token_column, num_columns,
                                          path, number)
            if num_columns > 1 and label_column is not None:
                label_index = _resolve_column("label_column", label_column,
                                              num_columns, path, number)
                if label_index == token_index:
                    raise UserError(f"--token_column={token_column} and "
                                    f"--label_column={label_column} name the same "
                                    f"column of {path}; choose two columns")
        elif len(columns) != num_columns:
            if len(columns) == 1 and label_index is not None:
                raise UserError(f"{path} line {number}: token {columns[0]!r} has no "
                                f"tag; every token line needs the token and its tag")
            raise UserError(f"{path} line {number}: {len(columns)} columns, but line "
                            f"{first_token_line} has {num_columns}; every token line "
                            f"needs the same columns")
        tokens.append(columns[token_index])
        if label_index is not None:
            tags.append(columns[label_index])
        numbers.append(number)
    end_sentence()
    if not sentences:
        raise UserError(f"{path} has no sentence, only blank and {DOCSTART} lines; "
                        f"expected one token and its tag per line")
    return ConllFile(path, lines, sentences, num_columns, token_index)


def prediction_lines(conll: ConllFile, predicted_tags: Sequence[Sequence[str]]) -> List[str]:
    """predict.txt, line for line against the input file.

    Args:
      conll: the file that was predicted.
      predicted_tags: one tag per token for each sentence, in file order.

    Returns:
      len(conll.lines) lines (without line ends): `token<SEP>tag` on token
      lines (SEP a tab if the input line has one, else a space), "" on blank
      lines, -DOCSTART- lines unchanged.
    """
    if len(predicted_tags) != len(conll.sentences):
        raise ValueError(f"{len(predicted_tags)} predicted sentences for "
                         f"{len(conll.sentences)} in {conll.path}")
    output = ["" if not split_columns(line) else line for line in conll.lines]
    for index, (sentence, tags) in enumerate(zip(conll.sentences, predicted_tags)):
        if len(tags) != len(sentence.tokens):
            raise ValueError(f"sentence {index} of {conll.path}: {len(tags)} predicted "
                             f"tags for {len(sentence.tokens)} tokens")
        for token, tag, number in zip(sentence.tokens, tags, sentence.line_numbers):
            separator = "\t" if "\t" in conll.lines[number - 1] else " "
            output[number - 1] = f"{token}{separator}{tag}"
    return output


def token_separator(conll: ConllFile) -> str:
    """"" if every token is one character (Chinese text one character per
    line), else " ": what to put between tokens to show a span's text."""
    single = all(len(token) == 1 for sentence in conll.sentences for token in sentence.tokens)
    return "" if single else " "


def write_predictions(path: str, conll: ConllFile,
                      predicted_tags: Sequence[Sequence[str]]) -> str:
    """Write `prediction_lines` to `path` atomically; returns `path`."""
    return write_lines(path, prediction_lines(conll, predicted_tags))


# How a served text becomes a token classifier's words: "words" (whitespace, and
# each punctuation mark and CJK character alone: Google's basic tokenizer) or
# "characters" (every character but whitespace: models trained one character a line).
TOKEN_SPLITS = ("words", "characters")


def token_split_of(sentences) -> str:
    """The TOKEN_SPLITS value a model trained on `sentences` (each with `.tokens`)
    reads text with: "characters" when every training token is one character."""
    tokens = [token for sentence in sentences for token in sentence.tokens]
    return "characters" if tokens and all(len(t) == 1 for t in tokens) else "words"
