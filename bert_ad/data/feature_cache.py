"""The feature cache every task shares: any columns, checked before it is trusted.

A task's features (token ids per row, per-row targets, a token task's
windows) are built once per input file and settings and kept in
`<cache_dir>/<split>-<key>.npz`, where `key` hashes the input file's bytes,
the vocab's, and every setting the task names as shaping its features
(`cache_key`). A `Codec` turns the task's feature object into named arrays
and back: fixed-shape arrays as they are, ragged ones (a list of 1-D arrays,
one per row) as their values and lengths.

Beside each cache, `<cache>.json` records the row count, the arrays and a
SHA-256 of the .npz, written after it: a cache is used only when its record
exists and both match. Anything else (a cut file, an empty one, a lost
record, a row count that is not the task's) is rebuilt, with one warning
line; never trusted, never a traceback. Both files are written atomically
and reach the disk before they are renamed into place (bert_ad/files.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import logging
import os
import zipfile
from typing import Callable, Dict, Generic, List, Mapping, Optional, TypeVar, Union

import numpy as np

from bert_ad.data.batching import TokenizedExamples
# file_digest lives with the other file helpers; named here too, where callers find it.
from bert_ad.files import atomic_open, file_digest  # noqa: F401

log = logging.getLogger("bert_ad")

FORMAT = 2
RAGGED_VALUES, RAGGED_LENGTHS = ".values", ".lengths"

Arrays = Dict[str, Union[np.ndarray, List[np.ndarray]]]
T = TypeVar("T")


class DamagedCache(Exception):
    """A cache file that must not be used (the message says why)."""


@dataclasses.dataclass(frozen=True)
class Codec(Generic[T]):
    """How a kind of features becomes named arrays and back.

    encode(features) -> {name: array, or a list of 1-D arrays (ragged)};
    decode(arrays) -> features; rows(features) -> the number of rows, which
    the cache's record keeps and checks.
    """
    encode: Callable[[T], Arrays]
    decode: Callable[[Mapping[str, object]], T]
    rows: Callable[[T], int]


def cache_key(data_file: str, vocab_file: str, do_lower_case: bool,
              parts: Mapping[str, object]) -> str:
    """A hash of the input file's bytes, the vocab's, and every setting in `parts`."""
    values = {"data": file_digest(data_file) if data_file else "",
              "vocab": file_digest(vocab_file) if vocab_file else "",
              "do_lower_case": bool(do_lower_case), "format": FORMAT,
              "parts": {name: _plain(value) for name, value in parts.items()}}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:20]


def _plain(value):
    """A setting as JSON can hold it (dataclasses as dicts)."""
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return value


# --- arrays <-> one .npz with its record ---------------------------------------------------

def _flatten(arrays: Arrays) -> Dict[str, np.ndarray]:
    flat = {}
    for name, value in arrays.items():
        if isinstance(value, list):
            lengths = np.array([len(row) for row in value], np.int64)
            values = (np.concatenate([np.asarray(row).reshape(-1) for row in value])
                      if value else np.zeros(0, np.int32))
            flat[name + RAGGED_VALUES], flat[name + RAGGED_LENGTHS] = values, lengths
        else:
            flat[name] = np.asarray(value)
    return flat


def _unflatten(flat: Mapping[str, np.ndarray]) -> Arrays:
    arrays: Arrays = {}
    for name, value in flat.items():
        if name.endswith(RAGGED_LENGTHS):
            continue
        if name.endswith(RAGGED_VALUES):
            base = name[:-len(RAGGED_VALUES)]
            lengths = flat[base + RAGGED_LENGTHS]
            if int(lengths.sum()) != len(value):
                raise DamagedCache(f"{base} holds {len(value)} values for "
                                   f"{int(lengths.sum())}")
            arrays[base] = np.split(value, np.cumsum(lengths)[:-1]) if len(lengths) else []
        else:
            arrays[name] = value
    return arrays


def record_path(path: str) -> str:
    return path + ".json"


def write_arrays(path: str, arrays: Arrays, rows: int) -> None:
    """`path` (.npz) and its record, each atomically and durably.

    Raises:
      UserError: "cannot write PATH: CAUSE" (e.g. the disk is full).
    """
    buffer = io.BytesIO()
    np.savez(buffer, **_flatten(arrays))
    data = buffer.getvalue()
    with atomic_open(path, "wb") as f:
        f.write(data)
    record = {"format": FORMAT, "rows": int(rows), "bytes": len(data),
              "sha256": hashlib.sha256(data).hexdigest(), "arrays": sorted(arrays)}
    with atomic_open(record_path(path)) as f:
        json.dump(record, f, sort_keys=True)
        f.write("\n")


def read_arrays(path: str) -> tuple:
    """(arrays, the record's row count) of a cache that matches its record.

    Raises:
      DamagedCache: no record, a record of another format, a size or checksum
        that differs, or arrays that do not load.
    """
    try:
        with open(record_path(path), encoding="utf-8") as f:
            record = json.load(f)
        rows, size, checksum = int(record["rows"]), int(record["bytes"]), record["sha256"]
        if record.get("format") != FORMAT:
            raise DamagedCache(f"format {record.get('format')}, not {FORMAT}")
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise DamagedCache(f"its record {record_path(path)} is missing or unreadable "
                           f"({type(e).__name__})") from None
    with open(path, "rb") as f:
        data = f.read()
    if len(data) != size:
        raise DamagedCache(f"{len(data)} bytes where its record says {size}")
    if hashlib.sha256(data).hexdigest() != checksum:
        raise DamagedCache("its checksum differs from its record's")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
            flat = {name: loaded[name] for name in loaded.files}
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        raise DamagedCache(f"it does not load ({e})") from None
    return _unflatten(flat), rows


def cached(cache_dir: str, split: str, key: str, build: Callable[[], T],
           codec: Codec[T], expected_rows: Optional[int] = None) -> T:
    """The features in `<cache_dir>/<split>-<key>.npz`, else `build()`'s, cached.

    A cache that does not match its record, or whose row count is not
    `expected_rows` (when given), is rebuilt with one warning line. Without
    a `cache_dir` (a task built in code, not from flags) nothing is cached.
    """
    if not cache_dir:
        return build()
    path = os.path.join(cache_dir, f"{split}-{key}.npz")
    if os.path.exists(path):
        try:
            arrays, rows = read_arrays(path)
            features = codec.decode(arrays)
            if codec.rows(features) != rows:
                raise DamagedCache(f"it holds {codec.rows(features)} rows where its record "
                                   f"says {rows}")
            if expected_rows is not None and rows != expected_rows:
                raise DamagedCache(f"it holds {rows} rows, not this input's {expected_rows}")
            log.info("%s features: %d rows from cache %s", split, rows, path)
            return features
        except DamagedCache as e:
            log.warning("warning: the feature cache %s cannot be used (%s); rebuilding it",
                        path, e)
    features = build()
    rows = codec.rows(features)
    write_arrays(path, codec.encode(features), rows)
    log.info("%s features: %d rows, cached in %s", split, rows, path)
    return features


# --- TokenizedExamples, the features of most tasks ------------------------------------------

COLUMN, ROW, LABELS = "column:", "row:", "labels"


def encode_examples(examples: TokenizedExamples) -> Arrays:
    arrays: Arrays = {COLUMN + name: [np.asarray(row, np.int32) for row in column]
                      for name, column in examples.columns.items()}
    if examples.labels is not None:
        arrays[LABELS] = examples.labels
    for name, values in examples.row_values.items():
        arrays[ROW + name] = values
    return arrays


def decode_examples(arrays: Mapping[str, object]) -> TokenizedExamples:
    columns = {name[len(COLUMN):]: value for name, value in arrays.items()
               if name.startswith(COLUMN)}
    row_values = {name[len(ROW):]: value for name, value in arrays.items()
                  if name.startswith(ROW)}
    if not columns:
        raise DamagedCache("it holds no token columns")
    return TokenizedExamples(columns, arrays.get(LABELS), row_values)


EXAMPLES = Codec(encode_examples, decode_examples, len)


def write_features(path: str, examples: TokenizedExamples) -> None:
    """One TokenizedExamples cache file (and its record) at `path`."""
    write_arrays(path, encode_examples(examples), len(examples))


def read_features(path: str) -> TokenizedExamples:
    """The TokenizedExamples of a cache file that matches its record.

    Raises:
      DamagedCache: see read_arrays.
    """
    arrays, _ = read_arrays(path)
    return decode_examples(arrays)
