"""Pretraining records: Google's tf.train.Example features, and the shard files.

Encoded here without TensorFlow (the data workers stay light); read back with
it. Output files are written under temporary names and renamed together.
"""

from __future__ import annotations

import functools
import glob
import os
import struct
from typing import Dict, Iterator, List, Sequence

import numpy as np

from bert_ad.errors import fail, require_file
from bert_ad.files import StagedFiles, cannot_write

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
FLOAT_FEATURES = ("masked_lm_weights",)
SHARD_NAME = "pretrain-{:05d}-of-{:05d}.tfrecord"
SHARD_GLOB = "pretrain-*-of-*.tfrecord"


@functools.lru_cache(maxsize=1 << 18)  # ids repeat: encode each once
def _varint(value: int) -> bytes:
    if value < 0:
        raise ValueError(f"cannot encode {value}: int64 features here are >= 0")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _length_delimited(tag: int, payload: bytes) -> bytes:
    return bytes((tag,)) + _varint(len(payload)) + payload


def encode_example(features: Dict[str, Sequence]) -> bytes:
    """A serialized tf.train.Example of int64 and float lists.

    Names in FLOAT_FEATURES become FloatList, the others Int64List (values
    must be >= 0); features are written in the order given, so equal inputs
    give equal bytes.
    """
    entries = []
    for name, values in features.items():
        if name in FLOAT_FEATURES:
            # FloatList { repeated float value = 1 [packed] } in Feature field 2
            payload = struct.pack(f"<{len(values)}f", *values)
            feature = _length_delimited(0x12, _length_delimited(0x0A, payload))
        else:
            # Int64List { repeated int64 value = 1 [packed] } in Feature field 3
            payload = b"".join([_varint(v) for v in values])
            feature = _length_delimited(0x1A, _length_delimited(0x0A, payload))
        # map<string, Feature> entry: key = 1, value = 2; Features.feature = 1
        entry = (_length_delimited(0x0A, name.encode("utf-8"))
                 + _length_delimited(0x12, feature))
        entries.append(_length_delimited(0x0A, entry))
    return _length_delimited(0x0A, b"".join(entries))  # Example.features = 1


def read_instances(path: str) -> Iterator[Dict[str, np.ndarray]]:
    """The records of one TFRecord file written here, in file order.

    Yields:
      dict feature name -> 1-D array (int64; float32 for masked_lm_weights).
    """
    require_file(path, "TFRecord file")
    from bert_ad.compat import tf
    for record in tf.io.tf_record_iterator(path):
        example = tf.train.Example.FromString(record)
        features = example.features.feature
        out = {}
        for name in FEATURE_NAMES:
            if name in FLOAT_FEATURES:
                out[name] = np.array(features[name].float_list.value, np.float32)
            else:
                out[name] = np.array(features[name].int64_list.value, np.int64)
        yield out


def shard_paths(output_dir: str, num_shards: int) -> List[str]:
    return [os.path.join(output_dir, SHARD_NAME.format(i, num_shards))
            for i in range(num_shards)]


def output_paths(output_file: str, output_dir: str, num_shards: int) -> List[str]:
    """The files to write, from --output_file or --output_dir/--num_shards."""
    if bool(output_file) == bool(output_dir):
        fail("give exactly one of --output_file (a comma list of files) and "
             "--output_dir (with --num_shards)"
             + (f"; got --output_file={output_file} and --output_dir="
                f"{output_dir}" if output_file else ""))
    if output_dir:
        if num_shards < 1:
            fail(f"--num_shards={num_shards} must be at least 1")
        if os.path.exists(output_dir) and not os.path.isdir(output_dir):
            fail(f"--output_dir {output_dir!r} is a file, not a folder")
        return shard_paths(output_dir, num_shards)
    paths = [p.strip() for p in output_file.split(",") if p.strip()]
    if not paths:
        fail(f"--output_file={output_file!r} names no file")
    seen = set()
    for p in paths:
        key = os.path.realpath(p)
        if key in seen:
            fail(f"--output_file lists {p!r} twice")
        seen.add(key)
        if os.path.isdir(p):
            fail(f"--output_file {p!r} is a folder; use --output_dir for shards")
    return paths


def check_outputs(paths: Sequence[str], input_files: Sequence[str],
                  overwrite: bool, output_dir: str = "") -> None:
    """Refuse to clobber inputs, existing outputs (without --overwrite), or
    to mix shards with those of an earlier run with another --num_shards."""
    inputs = {os.path.realpath(p) for p in input_files}
    for p in paths:
        if os.path.realpath(p) in inputs:
            fail(f"output file {p!r} is also an input file; write elsewhere")
    existing = [p for p in paths if os.path.exists(p)]
    if existing and not overwrite:
        fail(f"output file {existing[0]!r} exists"
             + (f" (and {len(existing) - 1} more)" if len(existing) > 1 else "")
             + "; pass --overwrite to replace, or write elsewhere")
    if output_dir:
        ours = {os.path.realpath(p) for p in paths}
        stale = sorted(p for p in glob.glob(os.path.join(output_dir, SHARD_GLOB))
                       if os.path.realpath(p) not in ours)
        if stale:
            fail(f"--output_dir {output_dir!r} holds {os.path.basename(stale[0])}"
                 + (f" and {len(stale) - 1} more shards" if len(stale) > 1 else "")
                 + " from a run with another --num_shards; a reader of the "
                   "folder would mix both runs, so remove them or use another "
                   "--output_dir")


class ShardWriter:
    """TFRecord writers on temporary names; commit() renames them into place
    together, abort() removes them (bert_ad.files.StagedFiles). Record k goes
    to file k % len(paths).

    A file that cannot be created or written (e.g. the disk is full) is a
    UserError "cannot write PATH: CAUSE", raised after every temporary file
    is removed.
    """

    def __init__(self, paths: Sequence[str]):
        from bert_ad.compat import tf  # here: the data workers stay TF-free
        self._tf_error = tf.errors.OpError
        self.paths = list(paths)
        self.files = StagedFiles()
        self.writers = []
        self.count = 0
        try:
            for path in self.paths:
                temporary = self.files.stage(path)
                try:
                    self.writers.append(tf.io.TFRecordWriter(temporary))
                except self._tf_error as e:
                    raise cannot_write(path, e) from e
        except BaseException:
            self.abort()
            raise

    def write(self, record: bytes) -> None:
        index = self.count % len(self.writers)
        try:
            self.writers[index].write(record)
        except self._tf_error as e:  # e.g. the disk is full
            self.abort()
            raise cannot_write(self.paths[index], e) from e
        self.count += 1

    def commit(self) -> List[str]:
        """Flush and close every file, then rename them all into place."""
        for path, writer in zip(self.paths, self.writers):
            try:
                writer.close()
            except self._tf_error as e:
                self.abort()
                raise cannot_write(path, e) from e
        self.writers = []
        self.files.commit()
        return self.paths

    def abort(self) -> None:
        """Remove every temporary file; the targets are untouched."""
        try:
            for writer in self.writers:
                try:
                    writer.close()
                except self._tf_error:
                    pass  # the file is being thrown away
        finally:
            self.writers = []
            self.files.discard()
