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
from typing import IO, Dict, Iterator, List, Optional

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
        if path.endswith(".gz"):
            # The header names the file as gunzip -N would restore it, not the temporary.
            name = os.path.basename(without_gz(path))
            with open(temporary, "wb") as raw, \
                    gzip.GzipFile(name, "wb", fileobj=raw) as packed, \
                    io.TextIOWrapper(packed, encoding="utf-8") as output:
                yield output
        else:
            with open(temporary, "w", encoding="utf-8") as output:
                yield output


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
    """Turns answers into the output's lines, in order (a TSV's header first)."""

    def __init__(self, output_format: str):
        self.output_format = output_format
        self.header: List[str] = []

    def lines(self, answers: List[dict]) -> List[str]:
        if self.output_format == "jsonl":
            return [json.dumps(answer, ensure_ascii=False) + "\n" for answer in answers]
        lines = []
        for answer in answers:
            flat = _flat(answer)
            if not self.header:
                self.header = list(flat)
                lines.append("\t".join(self.header) + "\n")
            lines.append("\t".join(flat.get(column, "") for column in self.header) + "\n")
        return lines
