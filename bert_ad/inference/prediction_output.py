"""`bert-ad predict`'s output: the answers bert-ad serve gives, one line each,
in the format --output_format names, else the file name's (.tsv: tsv, else
jsonl); a name ending .gz is written gzip-compressed.

  jsonl  each answer as its JSON object (bert_ad/inference/predictions.py makes
         them: label and probabilities, entities, answer and span, embedding)
  tsv    a header, then each answer flattened into columns: a number or a
         string as it is, a list of numbers or strings joined by spaces
         (tokens, tags, an embedding), an object of numbers one column per key
         (`probabilities.LABEL`), anything else (entities) as JSON; tabs and
         line ends inside a value become spaces
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
from typing import IO, Dict, Iterator, List, Optional, Sequence

from bert_ad.files import atomic_path
from bert_ad.inference.prediction_input import without_gz

FORMATS = ("jsonl", "tsv")


def format_of(path: str, given: Optional[str]) -> str:
    """The output format: `given`, else tsv for a .tsv (or .tsv.gz) file, else jsonl."""
    if given:
        return given
    return "tsv" if without_gz(path).lower().endswith(".tsv") else "jsonl"


@contextlib.contextmanager
def open_output(path: str) -> Iterator[IO]:
    """The text stream of --output_file: written under a temporary name beside it and
    renamed when the block ends without an error (nothing half-written is left);
    gzip for a name ending .gz (a reader that takes .tsv.gz input takes it back)."""
    with atomic_path(path) as temporary:
        with open(temporary, "wb") as raw, answer_stream(raw, path) as output:
            yield output


def answer_stream(raw: IO[bytes], path: str) -> io.TextIOWrapper:
    """UTF-8 text written to `raw`, the file being written as --output_file=`path`:
    a gzip member for a name ending .gz (closing the stream ends the member and
    leaves `raw` open)."""
    if not path.endswith(".gz"):
        return io.TextIOWrapper(raw, encoding="utf-8")
    # The header names the file as gunzip -N would restore it, not the temporary.
    packed = gzip.GzipFile(os.path.basename(without_gz(path)), "wb", fileobj=raw)
    return io.TextIOWrapper(packed, encoding="utf-8")


def _flat(answer: dict) -> Dict[str, str]:
    """{column: text} of one answer."""
    columns = {}
    for key, value in answer.items():
        if isinstance(value, dict) and all(isinstance(v, (int, float)) for v in value.values()):
            for label, number in value.items():
                columns[f"{key}.{label}"] = repr(float(number))
        elif isinstance(value, list) and all(isinstance(v, (int, float, str)) for v in value):
            columns[key] = " ".join(repr(v) if isinstance(v, float) else str(v)
                                    for v in value)
        elif isinstance(value, (dict, list)):
            columns[key] = json.dumps(value, ensure_ascii=False)
        elif value is None:
            columns[key] = ""
        else:
            columns[key] = repr(value) if isinstance(value, float) else str(value)
    return {key: " ".join(text.replace("\t", " ").splitlines())
            for key, text in columns.items()}


class AnswerLines:
    """Turns answers into the output's lines, in order (a TSV's header first).

    With `error_column` (bert-ad predict --skip_bad_lines) a bad line's answer
    is {"error": message}: in TSV a row of empty fields with the message in a
    last `error` column, which the header then always has (the columns follow
    the flags, not the data). The header is the first good answer's fields, so
    error rows before it wait for it (or for `finish`, if none comes).
    """

    def __init__(self, output_format: str, error_column: bool = False,
                 header: Sequence[str] = ()):
        self.output_format = output_format
        self.error_column = error_column
        # A resumed run's TSV header, written by the run that stopped.
        self.header: List[str] = list(header)
        self.waiting: List[Dict[str, str]] = []   # TSV error rows before the header is known

    def lines(self, answers: List[dict]) -> List[str]:
        if self.output_format == "jsonl":
            return [json.dumps(answer, ensure_ascii=False) + "\n" for answer in answers]
        lines = []
        for answer in answers:
            flat = _flat(answer)
            if not self.header:
                if _is_error(answer):
                    self.waiting.append(flat)
                    continue
                lines += self._header_lines(list(flat))
            lines.append(self._row(flat))
        return lines

    def finish(self) -> List[str]:
        """The lines still held back: error rows of an input without a good line."""
        if self.output_format == "jsonl" or not self.waiting:
            return []
        return self._header_lines([])

    def _header_lines(self, fields: List[str]) -> List[str]:
        self.header = fields + (["error"] if self.error_column else [])
        waiting, self.waiting = self.waiting, []
        return ["\t".join(self.header) + "\n"] + [self._row(flat) for flat in waiting]

    def _row(self, flat: Dict[str, str]) -> str:
        return "\t".join(flat.get(column, "") for column in self.header) + "\n"


def error_answer(message: str) -> dict:
    """A bad line's answer (--skip_bad_lines): its error, in its place."""
    return {"error": message}


def _is_error(answer: dict) -> bool:
    return list(answer) == ["error"]
