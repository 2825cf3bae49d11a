"""Pretraining records: Google's tf.train.Example features, and the shard files.

Encoded here without TensorFlow (the data workers stay light); read back with
it. Output files are written under temporary names and renamed together.
"""

from __future__ import annotations

import functools
import glob
import os
import struct
import zlib
from typing import Dict, Iterator, List, Sequence

import numpy as np

from bert_ad.data.batching import Batches, padded_length
from bert_ad.errors import fail, require_file
from bert_ad.files import StagedFiles, cannot_write
from bert_ad.path_overlaps import refuse_outputs_over_inputs

FEATURE_NAMES = ("input_ids", "input_mask", "segment_ids", "masked_lm_positions",
                 "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")
FLOAT_FEATURES = ("masked_lm_weights",)
# Features with one value per token: trimmed to the batch's longest real row.
SEQUENCE_FEATURES = ("input_ids", "input_mask", "segment_ids")
# Features with one value per example: a [batch] column.
SCALAR_FEATURES = ("next_sentence_labels",)
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
    refuse_outputs_over_inputs([("output file", p) for p in paths],
                               [("input file", p) for p in input_files])
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


# --- reading: one decoder, an index of record offsets, streams --------------------------
#
# A TFRecord file is a sequence of records, each framed as
#   uint64 length | uint32 masked crc32c(length) | data | uint32 masked crc32c(data)
# (little-endian). Reading the framing alone (12 bytes per record and a seek)
# indexes a shard without parsing any example: that is how a corrupt or
# foreign shard is refused before training starts, and how a resumed run
# starts at record k without reading the k records before it.

_HEADER = struct.Struct("<QI")
_FOOTER_BYTES = 4


def _crc32c_table() -> List[int]:
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord framing uses it (pure Python: headers only)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record_offsets(path: str) -> np.ndarray:
    """Byte offsets of every record of a TFRecord file, from its framing alone.

    Raises:
      UserError naming the file and the record: not a TFRecord file (a length
      whose checksum does not match), or cut short (a record runs past the end).
    """
    require_file(path, "TFRecord file")
    size = os.path.getsize(path)
    offsets = []
    offset = 0
    with open(path, "rb") as f:
        while offset < size:
            header = f.read(_HEADER.size)
            where = f"{path}: record {len(offsets) + 1} (byte {offset})"
            if len(header) < _HEADER.size:
                fail(f"{where} is cut short: the file ends inside its header; the shard "
                     "was not written completely, make it again")
            length, length_crc = _HEADER.unpack(header)
            if masked_crc32c(header[:8]) != length_crc:
                fail(f"{where}: the length's checksum does not match: this is not a "
                     "TFRecord file of create_pretraining_data.py, or it is corrupt")
            end = offset + _HEADER.size + length + _FOOTER_BYTES
            if end > size:
                fail(f"{where} is cut short: it needs {end - offset} bytes, the file has "
                     f"{size - offset} left; the shard was not written completely, make "
                     "it again")
            offsets.append(offset)
            offset = end
            f.seek(offset)
    return np.array(offsets, np.int64)


def read_record(f, offset: int) -> bytes:
    """The data of the record at `offset` of an open TFRecord file."""
    f.seek(offset)
    length, _ = _HEADER.unpack(f.read(_HEADER.size))
    return f.read(length)


def decode_record(record: bytes, where: str = "pretraining record") -> Dict[str, np.ndarray]:
    """One tf.train.Example of create_pretraining_data.py as numpy arrays.

    Returns:
      {feature: 1-D int32 array (float32 for masked_lm_weights)}, as stored
      (next_sentence_labels has one value).
    """
    from bert_ad.compat import tf
    feature = tf.train.Example.FromString(record).features.feature
    parsed = {}
    for name in FEATURE_NAMES:
        if name not in feature:
            fail(f"{where} lacks the feature {name!r}: is this a file written by "
                 "create_pretraining_data.py?")
        values = feature[name]
        if name in FLOAT_FEATURES:
            parsed[name] = np.array(values.float_list.value, np.float32)
        else:
            parsed[name] = np.array(values.int64_list.value, np.int32)
    return parsed


def read_instances(path: str) -> Iterator[Dict[str, np.ndarray]]:
    """The decoded records of one TFRecord file, in file order."""
    offsets = record_offsets(path)
    with open(path, "rb") as f:
        for number, offset in enumerate(offsets, start=1):
            yield decode_record(read_record(f, int(offset)), f"{path} record {number}")


def expand_record_files(spec: str, flag: str) -> List[str]:
    """Files from a glob, a comma list (of globs) or a directory of shards."""
    files = []
    for part in (p.strip() for p in (spec or "").split(",")):
        if not part:
            continue
        if os.path.isdir(part):
            files.extend(sorted(os.path.join(part, f) for f in os.listdir(part)
                                if not f.startswith(".")))
            continue
        matched = sorted(glob.glob(part))
        if not matched:
            fail(f"{flag}: no file matches {part!r}")
        files.extend(matched)
    if not files:
        fail(f"{flag} is required (a glob, comma list or directory of TFRecord shards)")
    return files


def inspect_records(files: Sequence[str], vocab_size: int, max_seq_length: int,
                    max_predictions_per_seq: int, flag: str, sample: int = 1000) -> bool:
    """Check the shards against the model and the flags; return whether they carry NSP.

    Every shard's framing is checked (record_offsets), the first `sample`
    records are decoded. MLM-only data (create_pretraining_data --mode=mlm)
    has no segment B and no label 1. A token id beyond vocab_size means the
    shards were made with another vocab, which would otherwise fail deep
    inside TensorFlow; sequence and prediction lengths must be the flags'.
    """
    has_nsp = False
    seen = 0
    for path in files:
        offsets = record_offsets(path)
        if seen >= sample:
            continue
        with open(path, "rb") as f:
            for number, offset in enumerate(offsets[:sample - seen], start=1):
                where = f"{flag} {path} record {number}"
                example = decode_record(read_record(f, int(offset)), where)
                if len(example["input_ids"]) != max_seq_length:
                    fail(f"{where} has sequences of {len(example['input_ids'])} tokens but "
                         f"--max_seq_length={max_seq_length}; use the value the data was "
                         "made with")
                if len(example["masked_lm_ids"]) != max_predictions_per_seq:
                    fail(f"{where} has {len(example['masked_lm_ids'])} masked positions "
                         f"but --max_predictions_per_seq={max_predictions_per_seq}; use "
                         "the value the data was made with")
                largest = int(max(example["input_ids"].max(), example["masked_lm_ids"].max()))
                if largest >= vocab_size:
                    fail(f"{where} holds token id {largest} but --bert_config_file has "
                         f"vocab_size={vocab_size}: the shards were made with another vocab")
                if example["next_sentence_labels"][0] == 1 or example["segment_ids"].any():
                    has_nsp = True
                seen += 1
    if not seen:
        fail(f"{flag} ({', '.join(files)}) holds no records")
    return has_nsp


def stack_batch(examples: list, rows: int) -> dict:
    """Stack decoded examples into [rows, ...] arrays, trimmed to the longest real row.

    Missing rows (the end of an eval set) are zeros with example_weights 0.
    """
    seq = padded_length(max(int(e["input_mask"].sum()) for e in examples), "dynamic")
    seq = min(seq, len(examples[0]["input_ids"]))
    batch = {}
    for name in FEATURE_NAMES:
        first = examples[0][name]
        if name in SEQUENCE_FEATURES:
            shape = (rows, seq)
        elif name in SCALAR_FEATURES:
            shape = (rows,)
        else:
            shape = (rows,) + first.shape
        array = np.zeros(shape, first.dtype)
        for i, example in enumerate(examples):
            value = example[name]
            array[i] = value[:seq] if name in SEQUENCE_FEATURES else (
                value[0] if name in SCALAR_FEATURES else value)
        batch[name] = array
    weights = np.zeros(rows, np.float32)
    weights[:len(examples)] = 1.0
    batch["example_weights"] = weights
    return batch


# Records are shuffled in windows of this many records of one file: each epoch
# deals the windows of all files in a seeded order and each window's records
# in a seeded order, so record k of the stream is a function of (files, seed, k)
# found by arithmetic on the index.
SHUFFLE_WINDOW = 1000


def _window_seed(seed: int, epoch: int, file_index: int, window: int) -> int:
    return zlib.crc32(f"{seed}/{epoch}/{file_index}/{window}".encode("ascii"))


def record_stream(counts: Sequence[int], seed: int, start_example: int,
                  window: int = SHUFFLE_WINDOW) -> Iterator[tuple]:
    """Endless (file index, record index) pairs, epoch after epoch.

    Starting at `start_example` costs one pass over the windows of an epoch,
    whatever the step: no record before it is read.
    """
    total = int(sum(counts))
    if total == 0:
        raise ValueError("no records")
    windows = [(i, w) for i, count in enumerate(counts)
               for w in range(-(-int(count) // window))]
    epoch, skip = divmod(int(start_example), total)
    while True:
        rng = np.random.RandomState((seed * 1000003 + epoch) % (2 ** 32))
        for file_index, w in (windows[i] for i in rng.permutation(len(windows))):
            first = w * window
            size = min(window, int(counts[file_index]) - first)
            if skip >= size:
                skip -= size
                continue
            order = np.random.RandomState(
                _window_seed(seed, epoch, file_index, w)).permutation(size)
            for position in order[skip:]:
                yield file_index, first + int(position)
            skip = 0
        epoch += 1


class RecordBatches(Batches):
    """Pretraining shards as the driver batches them.

    Training: the endless shuffled stream (`record_stream`); each global
    micro-batch is dealt to `workers * towers` towers as one machine with that
    many towers would deal it, and this worker reads and decodes only its
    towers' records. Scoring: the files in order, `max_scoring_batches`
    global batches at most.
    """

    def __init__(self, files: Sequence[str], max_seq_length: int,
                 max_scoring_batches: int = 100):
        self.files = list(files)
        self.max_seq_length = max_seq_length
        self.max_scoring_batches = max_scoring_batches
        self.offsets = [record_offsets(path) for path in self.files]
        self.num_examples = None  # a stream: training runs a fixed number of steps

    def _decode(self, handles: dict, file_index: int, record: int) -> dict:
        if file_index not in handles:
            handles[file_index] = open(self.files[file_index], "rb")
        data = read_record(handles[file_index], int(self.offsets[file_index][record]))
        return decode_record(data, f"{self.files[file_index]} record {record + 1}")

    def training(self, per_tower, towers, workers, worker_index, seed, start_example):
        counts = [len(o) for o in self.offsets]
        stream = record_stream(counts, seed, start_example)
        handles = {}
        try:
            while True:
                mine = []
                for tower in range(towers * workers):
                    places = [next(stream) for _ in range(per_tower)]
                    if tower // towers == worker_index:
                        mine.append(stack_batch([self._decode(handles, *p) for p in places],
                                                per_tower))
                yield mine
        finally:
            for handle in handles.values():
                handle.close()

    def scoring(self, per_tower, towers):
        places = [(i, r) for i, offsets in enumerate(self.offsets) for r in range(len(offsets))]
        places = places[:self.max_scoring_batches * per_tower * towers]
        handles = {}
        try:
            for start in range(0, len(places), per_tower * towers):
                chunk = np.arange(start, min(start + per_tower * towers, len(places)))
                tower_indices = [chunk[t::towers] for t in range(towers)]
                batches = []
                for indices in tower_indices:
                    examples = [self._decode(handles, *places[i]) for i in indices]
                    if examples:
                        batches.append(stack_batch(examples, per_tower))
                    else:  # a short last batch: this tower gets filler rows only
                        batches.append({k: np.zeros_like(v) for k, v in batches[0].items()})
                yield tower_indices, batches
        finally:
            for handle in handles.values():
                handle.close()
