"""The files extract_features.py writes, one row at a time, whole or not at all.

  google  Google's extract_features.py output, exactly: one JSON object a
          line, {"linex_index": i, "features": [{"token": t, "layers":
          [{"index": -1, "values": [...]}, ...]}, ...]}, every value
          round(float(x), 6) and the line json.dumps'd as Google's does, so
          scripts that read Google's files read ours unchanged.
  npy     one pooled vector a line: float32 [rows, hidden], a plain .npy file
          (np.load reads it; the header is written first, the rows follow).
  jsonl   one pooled vector a line: {"linex_index": i, "embedding": [...]}.
  tsv     one pooled vector a line, values tab-separated (the format of
          TensorBoard's embedding projector).

Rows are written as they arrive, in input order, to a temporary file beside
the target (bert_ad/files.py); `commit` renames it into place once every row
is there, an existing file kept as `NAME.~N~`. A failure, or a run stopped
half-way, leaves no output file (and an existing one as it was).
"""

from __future__ import annotations

import json
import os
from typing import Iterable, Sequence, Tuple

import numpy as np

from bert_ad.errors import fail
from bert_ad.files import StagedFiles, cannot_write

GOOGLE, NPY, JSONL, TSV = "google", "npy", "jsonl", "tsv"
POOLED_FORMATS = {".npy": NPY, ".tsv": TSV}


def output_format(path: str, pooled: bool) -> str:
    """The format an --output_file gets: per-token output is Google's JSON lines
    whatever the name; a pooled vector goes to .npy, .tsv, else JSON lines."""
    extension = os.path.splitext(path)[1].lower()
    if not pooled:
        if extension in POOLED_FORMATS:
            fail(f"--output_file={path}: a {extension} file holds one vector per line: "
                 "set --pooling=mean or --pooling=cls, or write the per-token vectors to "
                 "a .jsonl file (Google's format)")
        return GOOGLE
    return POOLED_FORMATS.get(extension, JSONL)


def rounded(values: np.ndarray) -> list:
    """Google's round(float(x), 6) of every float32 value, as Python floats, in numpy.

    The same doubles, not just close ones: x * 1e6 is exact in float64 for a
    float32 x (24 + 14 bits of mantissa: 1e6 = 2^6 * 15625), so rint rounds the exact value to
    an integer n, ties to even, as Python's round does; n / 1e6 is then the
    double nearest to n * 10^-6, which is what round() returns. (Exact below
    |x| = 2^53 / 1e6, about 9e9: far above any activation.)
    """
    scaled = np.asarray(values, np.float32).astype(np.float64).ravel() * 1e6
    return (np.rint(scaled) / 1e6).tolist()


def google_json_line(index: int, tokens: Sequence[str],
                     layers: Iterable[Tuple[int, np.ndarray]]) -> str:
    """One line of Google's output (without the newline).

    Args:
      index: the input line's position (0-based): "linex_index".
      tokens: the row's tokens, [CLS] and [SEP] included.
      layers: (layer index as the user named it, [len(tokens), hidden] values).
    """
    layers = list(layers)
    features = []
    for position, token in enumerate(tokens):
        features.append({"token": token,
                         "layers": [{"index": layer_index,
                                     "values": rounded(values[position])}
                                    for layer_index, values in layers]})
    return json.dumps({"linex_index": index, "features": features})


class EmbeddingFile:
    """One output file written row by row, committed whole (a context manager).

    The temporary file is created when the object is made: an output that
    cannot be written is refused there, before any scoring.
    """

    def __init__(self, path: str, file_format: str, rows: int, hidden: int):
        """Args:
          path: the output file (an existing one is kept as `path.~N~` at commit).
          file_format: GOOGLE, NPY, JSONL or TSV (`output_format`).
          rows: how many rows will be written (the .npy header says so).
          hidden: the vectors' width.
        Raises:
          UserError: `path` is a folder, or its temporary file cannot be made.
        """
        self.path, self.format, self.rows, self.hidden = path, file_format, rows, hidden
        if os.path.isdir(path):
            fail(f"--output_file={path} is a directory; give a file name")
        # An earlier output is kept as NAME.~N~, as every command keeps the result
        # files it replaces (docs/reliability.md, round four).
        self._staged = StagedFiles(keep_backup=True)
        temporary = self._staged.stage(path)
        self.written = 0
        try:
            self._file = open(temporary, "wb")
            if file_format == NPY:
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")),
                          "fortran_order": False, "shape": (rows, hidden)}
                np.lib.format.write_array_header_1_0(self._file, header)
        except OSError as e:
            self._staged.discard()
            raise cannot_write(path, e) from e

    def write_tokens(self, index: int, tokens: Sequence[str],
                     layers: Iterable[Tuple[int, np.ndarray]]) -> None:
        """Row `index`'s per-token vectors (Google's format)."""
        self._write(index, google_json_line(index, tokens, layers))

    def write_vector(self, index: int, vector: np.ndarray) -> None:
        """Row `index`'s pooled vector [hidden]."""
        if self.format == NPY:
            self._check_order(index)
            self._file.write(np.asarray(vector, "<f4").tobytes())
            return
        if self.format == TSV:
            self._write(index, "\t".join(repr(x) for x in rounded(vector)))
        else:
            self._write(index, json.dumps({"linex_index": index,
                                           "embedding": rounded(vector)}))

    def _check_order(self, index: int) -> None:
        if index != self.written:
            raise AssertionError(f"row {index} written after {self.written} rows")
        self.written += 1

    def _write(self, index: int, line: str) -> None:
        self._check_order(index)
        self._file.write(line.encode("utf-8") + b"\n")

    def commit(self) -> str:
        """Rename the complete file into place; returns its path."""
        if self.written != self.rows:
            raise AssertionError(f"{self.written} of {self.rows} rows written")
        self._file.close()
        self._staged.commit()
        return self.path

    def discard(self) -> None:
        """Remove the temporary file (the target is untouched)."""
        try:
            self._file.close()
        except OSError:
            pass  # the file is removed anyway
        self._staged.discard()

    def __enter__(self) -> "EmbeddingFile":
        return self

    def __exit__(self, kind, error, traceback) -> None:
        if error is not None:
            self.discard()
            if isinstance(error, OSError):
                raise cannot_write(self.path, error) from error
            return
        try:
            self.commit()
        except BaseException as e:
            self.discard()
            if isinstance(e, OSError):
                raise cannot_write(self.path, e) from e
            raise
