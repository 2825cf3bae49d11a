"""Read and write `.safetensors` files with numpy alone.

The TF1 lane (Python 3.7, numpy 1.18) has no `safetensors` package, and the
format is small enough to do by hand:

  8 bytes   little-endian uint64 N, the length of the header
  N bytes   UTF-8 JSON: {name: {"dtype", "shape", "data_offsets": [begin, end]},
            "__metadata__": {str: str}} (optional), space-padded
  the rest  raw little-endian tensor bytes; offsets count from its start

F32/F16/BF16 tensors are read as float32 (half precision widened); F64 and
integers keep their type. Files are written as F32/F16/I64/I32, atomically
(bert_ad.files).
"""

from __future__ import annotations

import json
import os
import struct
import numpy as np

from bert_ad.errors import fail
from bert_ad.files import atomic_open

# dtype tag -> numpy dtype of the stored bytes (always little-endian).
_STORED = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # upper half of a float32; widened on read
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
# numpy dtype -> tag, for writing.
_WRITABLE = {
    np.dtype(np.float32): "F32",
    np.dtype(np.float16): "F16",
    np.dtype(np.int64): "I64",
    np.dtype(np.int32): "I32",
}
# The reference implementation refuses headers above 100 MB; so do we, which
# also catches a garbage length field before we try to allocate it.
MAX_HEADER_BYTES = 100 * 1000 * 1000
_ALIGNMENT = 8


def read_header(path: str) -> tuple[dict, dict]:
    """The tensor entries and the `__metadata__` of a safetensors file.

    Args:
      path: a `.safetensors` file.
    Returns:
      ({name: {"dtype", "shape", "data_offsets"}} in file order, metadata dict).
    Raises:
      UserError: the file is missing, truncated or not a safetensors file.
    """
    with _open(path) as f:
        entries, metadata, _ = _read_header(f, path)
    return entries, metadata


def load(path: str) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file, in the order of its header.

    Args:
      path: a `.safetensors` file.
    Returns:
      {name: array}; F32/F16/BF16 tensors as float32, others as stored.
    Raises:
      UserError: the file is missing, truncated or corrupt (naming the file).
    """
    out = {}
    with _open(path) as f:
        entries, _, data_start = _read_header(f, path)
        for name, entry in entries.items():
            begin, end = entry["data_offsets"]
            f.seek(data_start + begin)
            # A bytearray keeps the returned arrays writable.
            raw = bytearray(end - begin)
            if f.readinto(raw) != len(raw):
                fail(f"safetensors file {path!r} is truncated: tensor {name!r} "
                     "ends past the end of the file; download or convert it again")
            out[name] = _decode(raw, entry["dtype"], entry["shape"])
    return out


def save(tensors: dict[str, np.ndarray], path: str,
         metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to `path` as safetensors, atomically.

    Args:
      tensors: {name: array} of float32, float16, int64 or int32; written in
        this order, each C-contiguous and little-endian.
      path: destination; a temporary file beside it is renamed onto it.
      metadata: optional {str: str} stored as `__metadata__` (Hugging Face
        expects {"format": "pt"}).
    Raises:
      TypeError: an array of another dtype, or non-string metadata.
      UserError: "cannot write PATH: CAUSE" (e.g. the disk is full).
    """
    header = {}
    if metadata:
        for key, value in metadata.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"safetensors metadata must map str to str, "
                                f"got {key!r}: {value!r}")
        header["__metadata__"] = dict(metadata)
    arrays = []
    offset = 0
    for name, value in tensors.items():
        if name == "__metadata__":
            raise ValueError("'__metadata__' cannot name a tensor")
        array = np.asarray(value)
        tag = _WRITABLE.get(array.dtype.newbyteorder("="))
        if tag is None:
            raise TypeError(f"cannot write tensor {name!r} of dtype {array.dtype} "
                            f"to safetensors; use one of {sorted(_WRITABLE.values())}")
        # (not ascontiguousarray: it turns a 0-d array into shape [1])
        array = array.astype(_STORED[tag], order="C", copy=False)
        header[name] = {"dtype": tag, "shape": list(array.shape),
                        "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
        arrays.append(array)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    # Pad with spaces so the data starts 8-byte aligned, as the reference does.
    encoded += b" " * (-(len(encoded) + 8) % _ALIGNMENT)

    with atomic_open(path, "wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for array in arrays:
            f.write(array.tobytes())


def _open(path: str):
    if not os.path.isfile(path):
        fail(f"safetensors file {path!r} does not exist")
    try:
        return open(path, "rb")
    except OSError as e:
        fail(f"safetensors file {path!r} cannot be read: {e.strerror}")


def _read_header(f, path: str) -> tuple[dict, dict, int]:
    """Parse and check the header; returns (entries, metadata, data offset)."""
    size = os.fstat(f.fileno()).st_size
    corrupt = f"safetensors file {path!r} is corrupt"
    if size < 8:
        fail(f"safetensors file {path!r} is truncated ({size} bytes); "
             "download or convert it again")
    (length,) = struct.unpack("<Q", f.read(8))
    if length > MAX_HEADER_BYTES:
        fail(f"{corrupt}: header length {length} is implausible; "
             "is this a safetensors file?")
    if 8 + length > size:
        fail(f"safetensors file {path!r} is truncated: the header needs "
             f"{8 + length} bytes, the file has {size}; download or convert it again")
    try:
        header = json.loads(f.read(length).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        fail(f"{corrupt}: the header is not valid JSON ({e})")
    if not isinstance(header, dict):
        fail(f"{corrupt}: the header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        fail(f"{corrupt}: __metadata__ is not a JSON object")

    data_size = size - 8 - length
    for name, entry in header.items():
        where = f"{corrupt}: tensor {name!r}"
        if not isinstance(entry, dict):
            fail(f"{where} has no dtype/shape/data_offsets entry")
        dtype, shape = entry.get("dtype"), entry.get("shape")
        offsets = entry.get("data_offsets")
        if dtype not in _STORED:
            fail(f"{where} has unsupported dtype {dtype!r} "
                 f"(supported: {', '.join(_STORED)})")
        if (not isinstance(shape, list) or
                not all(isinstance(d, int) and d >= 0 for d in shape)):
            fail(f"{where} has an invalid shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2 or
                not all(isinstance(o, int) for o in offsets) or
                not 0 <= offsets[0] <= offsets[1]):
            fail(f"{where} has invalid data_offsets {offsets!r}")
        expected = int(np.prod(shape, dtype=np.int64)) * _STORED[dtype].itemsize
        if offsets[1] - offsets[0] != expected:
            fail(f"{where}: data_offsets {offsets} span {offsets[1] - offsets[0]} "
                 f"bytes but {dtype}{shape} needs {expected}")
        if offsets[1] > data_size:
            fail(f"safetensors file {path!r} is truncated: tensor {name!r} ends "
                 f"at byte {offsets[1]} of the data but the file holds "
                 f"{data_size}; download or convert it again")
    return header, metadata, 8 + length


def _decode(raw: bytearray, dtype: str, shape: list) -> np.ndarray:
    stored = np.frombuffer(raw, dtype=_STORED[dtype]).reshape(tuple(shape))
    if dtype == "BF16":
        # bfloat16 is the top 16 bits of a float32.
        return (stored.astype(np.uint32) << 16).view(np.float32)
    if dtype == "F16":
        return stored.astype(np.float32)
    # Native byte order for the caller (a no-op on little-endian machines).
    return stored.astype(stored.dtype.newbyteorder("="), copy=False)
