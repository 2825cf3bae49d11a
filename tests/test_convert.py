"""Checkpoint conversion: safetensors I/O, names, bit-exact round trips, bad input."""

from __future__ import annotations

import json
import os
import re
import struct
import sys

import numpy as np
import pytest

from bert_ad.cli import convert as convert_cli
from bert_ad.tools import convert, weight_names
from bert_ad.resources import safetensors
from bert_ad.compat import list_checkpoint_variables, load_checkpoint_tensor, tf
from bert_ad.errors import UserError, run_cli
from bert_ad.model.modeling import BertConfig, BertModel
from helpers import run_command, run_module

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MINILM_LAYERS, MINILM_HIDDEN, MINILM_INTERMEDIATE, MINILM_VOCAB = 6, 384, 1536, 30522


# --- safetensors_io ----------------------------------------------------------

def _sample_tensors() -> dict:
    rng = np.random.RandomState(0)
    return {
        "b.f32": rng.randn(3, 5).astype(np.float32),
        "a.f16": rng.randn(4).astype(np.float16),
        "ids.i64": np.arange(-3, 9, dtype=np.int64).reshape(2, 2, 3),
        "ids.i32": np.array([7, -1, 2 ** 31 - 1], dtype=np.int32),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "strided": rng.randn(6, 4).astype(np.float32).T,  # not C-contiguous
    }


def test_safetensors_round_trip_keeps_order_values_and_metadata(tmp_path):
    path = str(tmp_path / "t.safetensors")
    tensors = _sample_tensors()
    safetensors.save(tensors, path, metadata={"format": "pt", "note": "x"})
    loaded = safetensors.load(path)
    assert list(loaded) == list(tensors)
    for name, value in tensors.items():
        # F16 is widened to float32 on read; exactly, since every half is a float.
        want = value.astype(np.float32) if value.dtype == np.float16 else value
        assert loaded[name].dtype == want.dtype, name
        assert loaded[name].shape == want.shape, name
        np.testing.assert_array_equal(loaded[name], want)
    loaded["b.f32"][0, 0] = 1.0  # arrays are writable
    entries, metadata = safetensors.read_header(path)
    assert metadata == {"format": "pt", "note": "x"}
    assert entries["a.f16"]["dtype"] == "F16"
    # Written back to back in the given order: 60 + 8 + 96 bytes come first.
    assert entries["ids.i32"] == {"dtype": "I32", "shape": [3],
                                  "data_offsets": [164, 176]}
    (header_length,) = struct.unpack("<Q", open(path, "rb").read(8))
    assert (8 + header_length) % 8 == 0  # data aligned as the reference writes it
    assert os.listdir(str(tmp_path)) == ["t.safetensors"]  # no temp file left


def test_safetensors_reads_bf16_as_float32(tmp_path):
    # bfloat16 keeps the upper 16 bits of a float32: 1.0 -> 0x3F80 etc.
    values = np.array([1.0, -2.5, 0.15625, 3.0e38], dtype=np.float32)
    bits = (values.view(np.uint32) >> 16).astype("<u2")
    header = json.dumps({"w": {"dtype": "BF16", "shape": [2, 2],
                               "data_offsets": [0, 8]}}).encode()
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header + bits.tobytes())
    loaded = safetensors.load(str(path))["w"]
    assert loaded.dtype == np.float32 and loaded.shape == (2, 2)
    # The first three are exact in bfloat16; 3e38 loses its low mantissa bits.
    np.testing.assert_array_equal(loaded.ravel()[:3], values[:3])
    truncated = (values.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32)
    assert loaded.ravel()[3] == truncated[3] != values[3]


def test_safetensors_refuses_other_dtypes_on_write(tmp_path):
    with pytest.raises(TypeError, match="float64"):
        safetensors.save({"x": np.zeros(2)}, str(tmp_path / "x.safetensors"))
    assert not os.listdir(str(tmp_path))


@pytest.mark.parametrize("damage, message", [
    (lambda data: data[:4], "is truncated"),
    (lambda data: data[:-3], "is truncated: tensor 'ids.i32'"),
    (lambda data: struct.pack("<Q", 2 ** 40) + data[8:], "header length .* implausible"),
    (lambda data: data[:8] + b"{not json" + data[17:], "header is not valid JSON"),
    (lambda data: data.replace(b'"I32"', b'"Q99"'), "unsupported dtype 'Q99'"),
    (lambda data: data.replace(b'"shape":[3]', b'"shape":[4]'),
     r"tensor 'ids.i32'.*span 12 bytes but I32\[4\] needs 16"),
])
def test_safetensors_corrupt_files_name_the_file(tmp_path, damage, message):
    good = str(tmp_path / "good.safetensors")
    safetensors.save({"ids.i64": np.arange(4, dtype=np.int64),
                         "ids.i32": np.arange(3, dtype=np.int32)}, good)
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(damage(open(good, "rb").read()))
    with pytest.raises(UserError, match=message) as error:
        safetensors.load(str(bad))
    assert str(bad) in str(error.value)


def test_safetensors_missing_file(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        safetensors.load(str(tmp_path / "nope.safetensors"))


def test_safetensors_agrees_with_the_safetensors_package(tmp_path, minilm_dir):
    st_numpy = pytest.importorskip(
        "safetensors.numpy", reason="the safetensors package is only in the TF2 lane")
    from safetensors import safe_open
    ours = str(tmp_path / "ours.safetensors")
    tensors = _sample_tensors()
    safetensors.save(tensors, ours, metadata={"format": "pt"})
    theirs_view = st_numpy.load_file(ours)
    assert sorted(theirs_view) == sorted(tensors)
    for name, value in tensors.items():
        assert theirs_view[name].dtype == value.dtype, name
        np.testing.assert_array_equal(theirs_view[name], value)
    with safe_open(ours, framework="numpy") as f:
        assert f.metadata() == {"format": "pt"}

    theirs = str(tmp_path / "theirs.safetensors")
    st_numpy.save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()},
                       theirs, metadata={"k": "v"})
    our_view = safetensors.load(theirs)
    assert sorted(our_view) == sorted(tensors)
    for name, value in tensors.items():
        np.testing.assert_array_equal(our_view[name], value.astype(our_view[name].dtype))
    assert safetensors.read_header(theirs)[1] == {"k": "v"}

    real = os.path.join(minilm_dir, "model.safetensors")
    reference, mine = st_numpy.load_file(real), safetensors.load(real)
    assert sorted(reference) == sorted(mine)
    assert all(np.array_equal(reference[n], mine[n]) and reference[n].dtype == mine[n].dtype
               for n in reference)


# --- names -------------------------------------------------------------------

@pytest.mark.parametrize("hf_name, google_name", [
    ("embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings"),
    ("bert.embeddings.word_embeddings.weight", "bert/embeddings/word_embeddings"),
    ("embeddings.token_type_embeddings.weight", "bert/embeddings/token_type_embeddings"),
    ("embeddings.LayerNorm.weight", "bert/embeddings/LayerNorm/gamma"),
    ("bert.embeddings.LayerNorm.gamma", "bert/embeddings/LayerNorm/gamma"),
    ("embeddings.LayerNorm.beta", "bert/embeddings/LayerNorm/beta"),
    ("encoder.layer.0.attention.self.query.weight",
     "bert/encoder/layer_0/attention/self/query/kernel"),
    ("bert.encoder.layer.11.attention.self.value.bias",
     "bert/encoder/layer_11/attention/self/value/bias"),
    ("encoder.layer.3.attention.output.dense.weight",
     "bert/encoder/layer_3/attention/output/dense/kernel"),
    ("encoder.layer.0.attention.output.LayerNorm.weight",
     "bert/encoder/layer_0/attention/output/LayerNorm/gamma"),
    ("encoder.layer.2.intermediate.dense.weight",
     "bert/encoder/layer_2/intermediate/dense/kernel"),
    ("encoder.layer.0.output.dense.bias", "bert/encoder/layer_0/output/dense/bias"),
    ("encoder.layer.5.output.LayerNorm.bias", "bert/encoder/layer_5/output/LayerNorm/beta"),
    ("pooler.dense.weight", "bert/pooler/dense/kernel"),
    ("cls.predictions.transform.dense.weight", "cls/predictions/transform/dense/kernel"),
    ("cls.predictions.transform.LayerNorm.weight",
     "cls/predictions/transform/LayerNorm/gamma"),
    ("cls.predictions.transform.LayerNorm.bias", "cls/predictions/transform/LayerNorm/beta"),
    ("cls.predictions.bias", "cls/predictions/output_bias"),
    ("cls.predictions.decoder.bias", "cls/predictions/output_bias"),
    ("cls.seq_relationship.weight", "cls/seq_relationship/output_weights"),
    ("cls.seq_relationship.bias", "cls/seq_relationship/output_bias"),
    ("embeddings.position_ids", None),
    ("bert.embeddings.position_ids", None),
    ("cls.predictions.decoder.weight", None),  # tied to the word embeddings
    ("classifier.weight", None),
    ("encoder.layer.x.output.dense.bias", None),
])
def test_hf_to_google_names(hf_name, google_name):
    assert weight_names.hf_to_google_names(hf_name) == google_name


@pytest.mark.parametrize("google_name, hf_name", [
    ("bert/embeddings/word_embeddings", "embeddings.word_embeddings.weight"),
    ("bert/encoder/layer_10/attention/self/key/kernel",
     "encoder.layer.10.attention.self.key.weight"),
    ("bert/encoder/layer_0/output/LayerNorm/gamma", "encoder.layer.0.output.LayerNorm.weight"),
    ("cls/predictions/output_bias", "cls.predictions.bias"),
    ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight"),
    ("bert/encoder/layer_0/attention/self/key/kernel/adam_m", None),
    ("bert/embeddings/word_embeddings/adam_v", None),
    ("global_step", None),
    ("output_weights", None),
    ("bert/pooler/dense/kernel/ExponentialMovingAverage", None),
])
def test_google_to_hf_name(google_name, hf_name):
    assert weight_names.google_to_hf_name(google_name) == hf_name


def test_every_name_pair_maps_both_ways():
    for google, hf in weight_names.NAME_PAIRS:
        google, hf = google.replace("{n}", "7"), hf.replace("{n}", "7")
        assert weight_names.google_to_hf_name(google) == hf
        assert weight_names.hf_to_google_names(hf) == google


# --- the real MiniLM ---------------------------------------------------------

def _hf_weights(minilm_dir: str) -> dict:
    tensors = safetensors.load(os.path.join(minilm_dir, "model.safetensors"))
    del tensors["embeddings.position_ids"]
    return tensors


def test_minilm_round_trip_is_bit_exact(minilm_dir, minilm_google_ckpt, tmp_path):
    out = str(tmp_path / "hf")
    result = convert.convert_google_to_hf(minilm_google_ckpt, out)
    assert result.path == os.path.join(out, "model.safetensors")
    assert result.num_tensors == 6 * 16 + 5 + 2
    assert result.num_parameters == 22713216
    original, back = _hf_weights(minilm_dir), safetensors.load(result.path)
    assert sorted(back) == sorted(original)
    for name, value in original.items():
        assert back[name].dtype == np.float32, name
        assert np.array_equal(back[name], value), name
    assert safetensors.read_header(result.path)[1] == {"format": "pt"}
    with open(os.path.join(minilm_dir, "config.json")) as f:
        hf_config = json.load(f)
    with open(os.path.join(out, "config.json")) as f:
        round_config = json.load(f)
    assert round_config["architectures"] == ["BertModel"]
    assert round_config["model_type"] == "bert"
    for key in convert.GOOGLE_CONFIG_KEYS + ("layer_norm_eps",):
        assert round_config[key] == hf_config[key], key
    with open(os.path.join(minilm_dir, "vocab.txt"), "rb") as a, \
            open(os.path.join(out, "vocab.txt"), "rb") as b:
        assert a.read() == b.read()


@pytest.mark.real_model
def test_transformers_loads_google2hf_output(minilm_google_ckpt, tmp_path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    pytest.importorskip("torch", reason="PyTorch is only in the TF2 lane")
    transformers = pytest.importorskip(
        "transformers", reason="Hugging Face transformers is only in the TF2 lane")
    out = str(tmp_path / "hf")
    convert.convert_google_to_hf(minilm_google_ckpt, out)
    model, info = transformers.BertModel.from_pretrained(
        out, local_files_only=True, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert not info["mismatched_keys"], info
    ours = safetensors.load(os.path.join(out, "model.safetensors"))
    loaded = model.state_dict()
    for name in ("embeddings.word_embeddings.weight",
                 "encoder.layer.4.intermediate.dense.weight", "pooler.dense.bias"):
        np.testing.assert_array_equal(loaded[name].numpy(), ours[name])


def test_minilm_checkpoint_has_google_names_and_float32(minilm_dir, minilm_google_ckpt):
    prefix = os.path.join(minilm_google_ckpt, "bert_model.ckpt")
    assert sorted(os.listdir(minilm_google_ckpt)) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index", "vocab.txt"]
    shapes = dict(list_checkpoint_variables(prefix))
    h, i = MINILM_HIDDEN, MINILM_INTERMEDIATE
    expected_some = {
        "bert/embeddings/word_embeddings": [MINILM_VOCAB, h],
        "bert/embeddings/position_embeddings": [512, h],
        "bert/embeddings/token_type_embeddings": [2, h],
        "bert/embeddings/LayerNorm/gamma": [h],
        "bert/embeddings/LayerNorm/beta": [h],
        "bert/encoder/layer_0/attention/self/query/kernel": [h, h],
        "bert/encoder/layer_0/attention/self/key/bias": [h],
        "bert/encoder/layer_0/attention/output/dense/kernel": [h, h],
        "bert/encoder/layer_0/attention/output/LayerNorm/gamma": [h],
        "bert/encoder/layer_0/intermediate/dense/kernel": [h, i],
        "bert/encoder/layer_0/intermediate/dense/bias": [i],
        "bert/encoder/layer_0/output/dense/kernel": [i, h],
        "bert/encoder/layer_0/output/dense/bias": [h],
        "bert/encoder/layer_5/output/LayerNorm/beta": [h],
        "bert/pooler/dense/kernel": [h, h],
        "bert/pooler/dense/bias": [h],
    }
    for name, shape in expected_some.items():
        assert shapes.get(name) == shape, name
    assert len(shapes) == 103
    assert all(re.match(r"^bert/(embeddings|encoder/layer_[0-5]|pooler)/", n) for n in shapes)

    hf = _hf_weights(minilm_dir)
    for name in shapes:
        value = load_checkpoint_tensor(prefix, name)
        assert value.dtype == np.float32, name
    # Kernels are the transposed Linear weights, other tensors copies.
    query = load_checkpoint_tensor(prefix, "bert/encoder/layer_0/attention/self/query/kernel")
    np.testing.assert_array_equal(query, hf["encoder.layer.0.attention.self.query.weight"].T)
    inner = load_checkpoint_tensor(prefix, "bert/encoder/layer_3/intermediate/dense/kernel")
    np.testing.assert_array_equal(inner, hf["encoder.layer.3.intermediate.dense.weight"].T)
    gamma = load_checkpoint_tensor(prefix, "bert/encoder/layer_1/output/LayerNorm/gamma")
    np.testing.assert_array_equal(gamma, hf["encoder.layer.1.output.LayerNorm.weight"])

    config = BertConfig.from_json_file(os.path.join(minilm_google_ckpt, "bert_config.json"))
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers,
            config.num_attention_heads, config.intermediate_size) == (
                MINILM_VOCAB, h, MINILM_LAYERS, 12, i)
    assert config.hidden_act == "gelu" and config.layer_norm_eps == 1e-12


def test_minilm_checkpoint_matches_the_bert_model_graph(minilm_google_ckpt):
    config = BertConfig.from_json_file(os.path.join(minilm_google_ckpt, "bert_config.json"))
    with tf.Graph().as_default():
        input_ids = tf.placeholder(tf.int32, [None, 16])
        BertModel(config, is_training=False, input_ids=input_ids)
        graph_shapes = {v.op.name: v.shape.as_list() for v in tf.global_variables()}
    prefix = os.path.join(minilm_google_ckpt, "bert_model.ckpt")
    assert dict(list_checkpoint_variables(prefix)) == graph_shapes
    assert weight_names.google_variable_shapes(config) == graph_shapes


# --- heads, optimizer slots, directories (tiny synthetic models) -------------

TINY = {"vocab_size": 12, "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 16,
        "max_position_embeddings": 20, "type_vocab_size": 2}


def _tiny_hf_dir(path, prefix: str = "bert.", heads: bool = True,
                 old_layer_norm_names: bool = False) -> dict:
    """A random BERT in Hugging Face layout; returns its tensors."""
    config = BertConfig.from_dict(dict(TINY))
    rng = np.random.RandomState(1)
    tensors = {prefix + "embeddings.position_ids":
               np.arange(TINY["max_position_embeddings"], dtype=np.int64)[None]}
    for google, shape in weight_names.google_variable_shapes(config, with_heads=heads).items():
        hf = weight_names.google_to_hf_name(google)
        if not hf.startswith("cls."):
            hf = prefix + hf
        if old_layer_norm_names and "LayerNorm" in hf:
            hf = hf.replace(".weight", ".gamma").replace(".bias", ".beta")
        shape = shape[::-1] if weight_names.is_kernel(google) else shape
        tensors[hf] = rng.randn(*shape).astype(np.float32)
    if heads:  # what transformers writes for the tied decoder
        tensors["cls.predictions.decoder.bias"] = tensors["cls.predictions.bias"]
    os.makedirs(str(path), exist_ok=True)
    safetensors.save(tensors, os.path.join(str(path), "model.safetensors"))
    hf_config = dict(TINY, model_type="bert", architectures=["BertForPreTraining"],
                     hidden_act="gelu", layer_norm_eps=1e-12, directionality="bidi")
    with open(os.path.join(str(path), "config.json"), "w") as f:
        json.dump(hf_config, f)
    with open(os.path.join(str(path), "vocab.txt"), "w") as f:
        f.write("".join(f"tok{i}\n" for i in range(TINY["vocab_size"])))
    return tensors


def test_converted_folders_get_the_normal_modes(tmp_path, umask_022):
    _tiny_hf_dir(tmp_path / "hf", heads=False)
    google, hf = tmp_path / "google", tmp_path / "hf2"
    convert.convert_hf_to_google(str(tmp_path / "hf"), str(google))
    convert.convert_google_to_hf(str(google), str(hf))
    for folder in (google, hf):
        assert oct(os.stat(str(folder)).st_mode & 0o777) == "0o755"
        modes = {n: oct(os.stat(str(folder / n)).st_mode & 0o777)
                 for n in os.listdir(str(folder))}
        assert modes == dict.fromkeys(modes, "0o644") and len(modes) >= 3, modes


def test_heads_and_old_names_round_trip(tmp_path):
    hf = _tiny_hf_dir(tmp_path / "hf", old_layer_norm_names=True)
    google = str(tmp_path / "google")
    result = convert.convert_hf_to_google(str(tmp_path / "hf"), google)
    assert sorted(result.skipped) == ["bert.embeddings.position_ids",
                                      "cls.predictions.decoder.bias"]
    shapes = dict(list_checkpoint_variables(result.path))
    assert shapes["cls/predictions/transform/dense/kernel"] == [8, 8]
    assert shapes["cls/predictions/transform/LayerNorm/gamma"] == [8]
    assert shapes["cls/predictions/output_bias"] == [12]
    assert shapes["cls/seq_relationship/output_weights"] == [2, 8]
    assert shapes["cls/seq_relationship/output_bias"] == [2]
    np.testing.assert_array_equal(
        load_checkpoint_tensor(result.path, "cls/seq_relationship/output_weights"),
        hf["cls.seq_relationship.weight"])
    np.testing.assert_array_equal(
        load_checkpoint_tensor(result.path, "bert/embeddings/LayerNorm/gamma"),
        hf["bert.embeddings.LayerNorm.gamma"])

    back = convert.convert_google_to_hf(google, str(tmp_path / "back"))
    restored = safetensors.load(back.path)
    # With heads the encoder keeps the bert. prefix (bert-base-uncased's layout).
    canonical = {n.replace(".gamma", ".weight").replace(".beta", ".bias"): v
                 for n, v in hf.items()
                 if not n.endswith(("position_ids", "decoder.bias"))}
    assert sorted(restored) == sorted(canonical)
    assert all(np.array_equal(restored[n], canonical[n]) for n in canonical)
    with open(os.path.join(str(tmp_path / "back"), "config.json")) as f:
        assert json.load(f)["architectures"] == ["BertForPreTraining"]


def test_transformers_loads_heads_with_the_bert_prefix(tmp_path):
    os.environ["HF_HUB_OFFLINE"] = "1"
    pytest.importorskip("torch", reason="PyTorch is only in the TF2 lane")
    transformers = pytest.importorskip(
        "transformers", reason="Hugging Face transformers is only in the TF2 lane")
    hf = _tiny_hf_dir(tmp_path / "hf")
    convert.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "google"))
    convert.convert_google_to_hf(str(tmp_path / "google"), str(tmp_path / "back"))
    model, info = transformers.BertForPreTraining.from_pretrained(
        str(tmp_path / "back"), local_files_only=True, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    loaded = model.state_dict()
    for name in ("cls.seq_relationship.weight", "cls.predictions.bias",
                 "bert.encoder.layer.1.output.dense.weight"):
        np.testing.assert_array_equal(loaded[name].numpy(), hf[name])
    # The MLM decoder is tied to the word embeddings, as in Google's model.
    np.testing.assert_array_equal(loaded["cls.predictions.decoder.weight"].numpy(),
                                  hf["bert.embeddings.word_embeddings.weight"])


def test_mismatched_tied_bias_is_refused(tmp_path):
    hf = _tiny_hf_dir(tmp_path / "hf")
    hf["cls.predictions.decoder.bias"] = hf["cls.predictions.bias"] + 1
    safetensors.save(hf, str(tmp_path / "hf" / "model.safetensors"))
    with pytest.raises(UserError, match="cls.predictions.bias and "
                                        "cls.predictions.decoder.bias both map"):
        convert.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "out"))


def _save_google_checkpoint(prefix: str, values: dict) -> None:
    with tf.Graph().as_default():
        variables = {n: tf.get_variable(n, initializer=tf.constant(v)) for n, v in values.items()}
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver(variables).save(session, prefix, write_meta_graph=False)


def test_google2hf_skips_optimizer_slots_and_picks_the_newest_step(tmp_path):
    config = BertConfig.from_dict(dict(TINY))
    rng = np.random.RandomState(2)
    weights = {n: rng.randn(*s).astype(np.float32)
               for n, s in weight_names.google_variable_shapes(config).items()}
    slots = {"bert/pooler/dense/kernel/adam_m": np.ones([8, 8], np.float32),
             "bert/embeddings/word_embeddings/adam_v": np.ones([12, 8], np.float32),
             "global_step": np.array(12, np.int64)}
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    older = {n: v + 1 for n, v in weights.items()}
    _save_google_checkpoint(str(train_dir / "model.ckpt-9"), older)
    _save_google_checkpoint(str(train_dir / "model.ckpt-12"), dict(weights, **slots))
    (train_dir / "bert_config.json").write_text(
        BertConfig.from_dict(dict(TINY)).to_json_string())

    result = convert.convert_google_to_hf(str(train_dir), str(tmp_path / "hf"))
    assert sorted(result.skipped) == sorted(slots)
    hf = safetensors.load(result.path)
    assert len(hf) == len(weights)
    for google, value in weights.items():
        want = value.T if weight_names.is_kernel(google) else value
        np.testing.assert_array_equal(hf[weight_names.google_to_hf_name(google)], want)
    assert not os.path.exists(str(tmp_path / "hf" / "vocab.txt"))  # none to copy


@pytest.mark.parametrize("vocab", ["pieces.tsv", "vocab.txt", None])
def test_google2hf_config_names_the_vocabs_padding_piece(tmp_path, vocab):
    """Hugging Face never updates the embedding row of config.json's pad_token_id
    (nn.Embedding's padding_idx). With a piece list <s> ([CLS]) is id 0 and <pad>
    id 1: a config saying 0 froze [CLS] in every Hugging Face fine-tune (issue 43)."""
    config = BertConfig.from_dict(dict(TINY))
    weights = {n: np.ones(s, np.float32)
               for n, s in weight_names.google_variable_shapes(config).items()}
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    _save_google_checkpoint(str(train_dir / "bert_model.ckpt"), weights)
    (train_dir / "bert_config.json").write_text(config.to_json_string())
    filler = [f"w{i}" for i in range(config.vocab_size - 5)]
    if vocab == "pieces.tsv":     # XLM-R's order: <s> <pad> </s> <unk>
        pieces = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] + filler
        (train_dir / vocab).write_text("".join(f"{p}\t0.0\n" for p in pieces))
    elif vocab == "vocab.txt":
        tokens = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"] + filler
        (train_dir / vocab).write_text("".join(t + "\n" for t in tokens))
    convert.convert_google_to_hf(str(train_dir), str(tmp_path / "hf"))
    with open(tmp_path / "hf" / "config.json", encoding="utf-8") as f:
        assert json.load(f)["pad_token_id"] == {"pieces.tsv": 1, "vocab.txt": 3, None: 0}[vocab]


def test_google2hf_of_a_fine_tuned_checkpoint_names_the_head_it_leaves_out(tmp_path):
    """A classifier's head was left out, hidden among 86 "non-weights" (optimizer
    slots). Hugging Face's BertModel has no place for it, and which head class
    would fit depends on the task (pooled or per token, CRF): it is named plainly."""
    config = BertConfig.from_dict(dict(TINY))
    weights = {n: np.ones(s, np.float32)
               for n, s in weight_names.google_variable_shapes(config).items()}
    weights.update({"output_weights": np.ones([3, 8], np.float32),
                    "output_bias": np.zeros([3], np.float32),
                    "crf/transitions": np.zeros([3, 3], np.float32),
                    "output_weights/adam_m": np.ones([3, 8], np.float32),
                    "bert/pooler/dense/kernel/adam_v": np.ones([8, 8], np.float32),
                    "global_step": np.array(7, np.int64)})
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    _save_google_checkpoint(str(train_dir / "model.ckpt-7"), weights)
    (train_dir / "bert_config.json").write_text(config.to_json_string())
    result = convert.convert_google_to_hf(str(train_dir), str(tmp_path / "hf"))
    assert result.summary() == (
        f"wrote {tmp_path / 'hf' / 'model.safetensors'}: 39 tensors, 1,560 parameters (left "
        "out 3 non-weights: bert/pooler/dense/kernel/adam_v, global_step, "
        "output_weights/adam_m); NOT converted: the task head crf/transitions [3, 3], "
        "output_bias [3], output_weights [3, 8], which Hugging Face's BertModel has no place "
        "for (it stays in the checkpoint)")
    assert "output_weights" not in safetensors.load(result.path)


def test_hf2google_of_a_fine_tuned_model_names_the_head_it_leaves_out(tmp_path):
    """Sibling: BertForSequenceClassification's classifier.weight/bias were left out
    among "non-weights", next to the position-id buffer."""
    hf = _tiny_hf_dir(tmp_path / "hf", heads=False)
    hf["classifier.weight"] = np.ones([3, 8], np.float32)
    hf["classifier.bias"] = np.zeros([3], np.float32)
    safetensors.save(hf, str(tmp_path / "hf" / "model.safetensors"))
    result = convert.convert_hf_to_google(str(tmp_path / "hf"), str(tmp_path / "google"))
    assert result.summary().endswith(
        "(left out 1 non-weight: bert.embeddings.position_ids); NOT converted: the task head "
        "classifier.bias [3], classifier.weight [3, 8], which Google's BERT checkpoint has no "
        "name for (bert_ad trains its own head: --init_checkpoint loads the encoder)")


def test_occupied_output_dir_needs_overwrite(tmp_path):
    _tiny_hf_dir(tmp_path / "hf", heads=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "bert_model.ckpt.data-00000-of-00002").write_text("stale shard")
    (out / "bert_model.ckpt.index").write_text("old")
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match=r"already holds bert_model\.ckpt\..*--overwrite"):
        convert.convert_hf_to_google(str(tmp_path / "hf"), str(out))
    assert (out / "bert_model.ckpt.index").read_text() == "old"
    convert.convert_hf_to_google(str(tmp_path / "hf"), str(out), overwrite=True)
    assert sorted(os.listdir(str(out))) == [
        "bert_config.json", "bert_model.ckpt.data-00000-of-00001",
        "bert_model.ckpt.index", "notes.txt", "vocab.txt"]
    assert len(list_checkpoint_variables(str(out / "bert_model.ckpt"))) == 2 * 16 + 5 + 2


def test_failed_write_leaves_output_dir_untouched(tmp_path, monkeypatch):
    _tiny_hf_dir(tmp_path / "hf", heads=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")

    def fail_midway(tensors, prefix):
        with open(prefix + ".index", "w") as f:
            f.write("half")
        raise OSError("disk full")

    monkeypatch.setattr(convert, "write_tf_checkpoint", fail_midway)
    for target in (out, tmp_path / "new"):
        with pytest.raises(UserError) as error:
            convert.convert_hf_to_google(str(tmp_path / "hf"), str(target))
        assert str(error.value) == f"cannot write {target}: disk full"
    assert os.listdir(str(out)) == ["notes.txt"]
    assert sorted(os.listdir(str(tmp_path))) == ["hf", "out"]  # no staging dirs


# --- the command line --------------------------------------------------------

def _our_stderr(stderr: str) -> list:
    """stderr without TensorFlow's own start-up log lines (absl/glog format)."""
    return [line for line in stderr.splitlines()
            if not line.startswith("WARNING: All log messages before absl")
            and not re.match(r"^[IWE]\d{4} ", line)]


def _break(kind: str, hf_dir) -> None:
    hf_dir = str(hf_dir)
    if kind == "no_config":
        os.remove(os.path.join(hf_dir, "config.json"))
    elif kind == "no_weights":
        os.remove(os.path.join(hf_dir, "model.safetensors"))
    elif kind == "no_vocab":
        os.remove(os.path.join(hf_dir, "vocab.txt"))
    elif kind == "config_fields":
        with open(os.path.join(hf_dir, "config.json"), "w") as f:
            json.dump({"vocab_size": 12, "num_hidden_layers": 2}, f)
    elif kind == "vocab_lines":
        with open(os.path.join(hf_dir, "vocab.txt"), "a") as f:
            f.write("extra1\nextra2\n")
    elif kind == "embedding_rows":  # config and vocab agree, the weights do not
        path = os.path.join(hf_dir, "config.json")
        with open(path) as f:
            values = json.load(f)
        values["vocab_size"] = 14
        with open(path, "w") as f:
            json.dump(values, f)
        with open(os.path.join(hf_dir, "vocab.txt"), "a") as f:
            f.write("extra1\nextra2\n")
    elif kind in ("roberta", "relative_positions"):
        path = os.path.join(hf_dir, "config.json")
        with open(path) as f:
            values = json.load(f)
        if kind == "roberta":
            values["model_type"] = "roberta"
        else:
            values["position_embedding_type"] = "relative_key"
        with open(path, "w") as f:
            json.dump(values, f)
    elif kind == "corrupt_weights":
        with open(os.path.join(hf_dir, "model.safetensors"), "r+b") as f:
            f.truncate(100)
    elif kind == "not_finite":  # a damaged file, or a model saved after it diverged
        path = os.path.join(hf_dir, "model.safetensors")
        tensors = safetensors.load(path)
        weight = tensors["bert.encoder.layer.1.output.dense.weight"]
        weight[3, 5], weight[7, 1] = np.nan, -np.inf
        safetensors.save(tensors, path)


BAD_HF_INPUT = [
    ("no_hf_dir", r"--hf_dir '.*missing' is not a directory"),
    ("no_config", r"Hugging Face config '.*config\.json' does not exist"),
    ("no_weights", r"Hugging Face weights '.*model\.safetensors' does not exist"),
    ("no_vocab", r"vocab file '.*vocab\.txt' does not exist"),
    ("config_fields", r"config\.json' lacks the field\(s\) hidden_size, "
                      r"num_attention_heads, intermediate_size"),
    ("vocab_lines", r"vocab mismatch: .*vocab\.txt has 14 lines but vocab_size in "
                    r".*config\.json is 12"),
    ("embedding_rows", r"vocab mismatch: .*model\.safetensors has 12 word embeddings "
                       r"but .*vocab\.txt has 14 lines"),
    ("corrupt_weights", r"safetensors file '.*model\.safetensors' is truncated"),
    ("not_finite", r"^error: .*hf/model\.safetensors: bert\.encoder\.layer\.1\.output\.dense\."
                   r"weight holds 2 non-finite numbers \(1 NaN, 1 inf\), the first at "
                   r"\[3, 5\]; the file is damaged or was saved from a model that diverged"),
    ("roberta", r"config\.json describes a 'roberta' model; only BERT"),
    ("relative_positions", r"position_embedding_type 'relative_key' is not supported"),
]


def _bad_hf_case(tmp_path, kind):
    """(argv, output_dir) of an hf2google call whose input is broken by `kind`."""
    hf_dir = tmp_path / "hf"
    _tiny_hf_dir(hf_dir, heads=False)
    _break(kind, hf_dir)
    if kind == "no_hf_dir":
        hf_dir = tmp_path / "missing"
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("keep me")
    return ["hf2google", "--hf_dir", str(hf_dir), "--output_dir", str(out)], out


def _cli_in_process(argv, capsys):
    """`python -m bert_ad.convert ARGV` without the process: (exit code, out, err)."""
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: convert_cli.main(argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err


@pytest.mark.parametrize("kind, message", BAD_HF_INPUT)
def test_hf2google_bad_input_is_one_line(tmp_path, capsys, kind, message):
    # In-process (run_cli around main, as `__main__` does) to keep this fast;
    # the subprocess tests below check the real entry point.
    argv, out = _bad_hf_case(tmp_path, kind)
    code, stdout, stderr = _cli_in_process(argv, capsys)
    assert code == 2 and stdout == ""
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert re.search(message, lines[0]), lines[0]
    assert os.listdir(str(out)) == ["notes.txt"]  # untouched
    assert sorted(os.listdir(str(tmp_path))) == ["hf", "out"]  # no staging dirs


@pytest.mark.parametrize("kind, message", [
    case for case in BAD_HF_INPUT if case[0] in ("no_config", "vocab_lines")])
def test_hf2google_bad_input_through_the_command_line(tmp_path, kind, message):
    argv, out = _bad_hf_case(tmp_path, kind)
    result = run_module("bert_ad.convert", argv)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = _our_stderr(result.stderr)
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert re.search(message, lines[0]), lines[0]
    assert os.listdir(str(out)) == ["notes.txt"]


def test_google2hf_missing_checkpoint_is_one_line(tmp_path, capsys):
    # In-process: the real entry point, and TensorFlow's start-up lines before ours, are
    # the command-line tests' above (vocab_lines is refused after TensorFlow is up).
    code, _, stderr = _cli_in_process([
        "google2hf", "--checkpoint", str(tmp_path / "nothing" / "model.ckpt-5"),
        "--output_dir", str(tmp_path / "out")], capsys)
    assert code == 2 and "Traceback" not in stderr
    lines = _our_stderr(stderr)
    assert len(lines) == 1, stderr
    assert re.match(r"error: --checkpoint=.*model\.ckpt-5 is not a checkpoint", lines[0])
    assert not os.path.exists(str(tmp_path / "out"))


def test_google2hf_without_config_is_one_line(tmp_path, minilm_google_ckpt, capsys):
    ckpt_dir = tmp_path / "ckpt"
    ckpt_dir.mkdir()
    for name in os.listdir(minilm_google_ckpt):
        if name.startswith("bert_model.ckpt"):
            os.symlink(os.path.join(minilm_google_ckpt, name), str(ckpt_dir / name))
    code, _, stderr = _cli_in_process(
        ["google2hf", "--checkpoint", str(ckpt_dir), "--output_dir", str(tmp_path / "o")],
        capsys)
    assert code == 2
    assert re.fullmatch(r"error: no bert_config\.json next to checkpoint "
                        r".*ckpt/bert_model\.ckpt; pass --bert_config_file\n", stderr)
    # A config that does not fit the checkpoint is named with both shapes.
    config = BertConfig.from_json_file(os.path.join(minilm_google_ckpt, "bert_config.json"))
    values = config.to_dict()
    values["intermediate_size"] = 1024
    (tmp_path / "small.json").write_text(json.dumps(values))
    code, _, stderr = _cli_in_process(
        ["google2hf", "--checkpoint", str(ckpt_dir), "--output_dir", str(tmp_path / "o"),
         "--bert_config_file", str(tmp_path / "small.json")], capsys)
    assert code == 2
    assert re.fullmatch(r"error: checkpoint .*: bert/encoder/layer_0/intermediate/dense/"
                        r"bias has shape \[1536\] but .*small\.json implies \[1024\]\n",
                        stderr)
    assert sorted(os.listdir(str(tmp_path))) == ["ckpt", "small.json"]


def test_google2hf_refuses_a_checkpoint_with_non_finite_weights(tmp_path, capsys):
    """NaN or inf weights were converted and the run exited 0."""
    config = BertConfig.from_dict(dict(TINY))
    weights = {n: np.ones(s, np.float32)
               for n, s in weight_names.google_variable_shapes(config).items()}
    weights["bert/encoder/layer_0/attention/self/key/bias"][6] = np.inf
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    _save_google_checkpoint(str(train_dir / "model.ckpt-3"), weights)
    (train_dir / "bert_config.json").write_text(config.to_json_string())
    code, _, stderr = _cli_in_process(["google2hf", "--checkpoint", str(train_dir),
                                       "--output_dir", str(tmp_path / "hf")], capsys)
    assert code == 2
    assert re.fullmatch(
        r"error: --checkpoint=.*train: the checkpoint .*train/model\.ckpt-3 holds "
        r"non-finite numbers: bert/encoder/layer_0/attention/self/key/bias holds 1 "
        r"non-finite number \(1 inf\), the first at \[6\]; it was damaged, or saved by a "
        r"run that diverged: use an earlier checkpoint\n", stderr), stderr
    assert sorted(os.listdir(str(tmp_path))) == ["train"]


def test_cli_converts_and_prints_a_summary(tmp_path, capsys):
    _tiny_hf_dir(tmp_path / "hf", prefix="")
    code, stdout, _ = _cli_in_process(
        ["hf2google", "--hf_dir", str(tmp_path / "hf"), "--output_dir",
         str(tmp_path / "google")], capsys)
    assert code == 0
    # 2 layers x 16 + 5 embedding + 2 pooler + 7 head tensors; parameters:
    # embeddings 12*8 + 20*8 + 2*8 + 16, layers 2 * 600, pooler 72, heads 118.
    assert stdout == (
        f"wrote {tmp_path / 'google' / 'bert_model.ckpt'}: 46 tensors, 1,678 parameters "
        "(left out 2 non-weights: embeddings.position_ids, cls.predictions.decoder.bias)\n")


def test_fetch_minilm_script_is_idempotent(minilm_dir, tmp_path):
    env = dict(PYTHON=sys.executable,
               BERT_AD_CACHE=os.path.dirname(os.path.dirname(os.path.dirname(minilm_dir))))
    out = str(tmp_path / "minilm google")
    script = os.path.join(REPO, "scripts", "fetch_minilm.sh")
    first = run_command(["bash", script, out], cwd=str(tmp_path), **env)
    assert first.returncode == 0, first.stderr
    prefix = os.path.join(out, "bert_model.ckpt")
    assert first.stdout.splitlines()[-1] == prefix
    assert "103 tensors, 22,713,216 parameters" in first.stdout
    assert len(list_checkpoint_variables(prefix)) == 103
    second = run_command(["bash", script, out], cwd=str(tmp_path), **env)
    assert second.returncode == 0, second.stderr
    assert second.stdout.splitlines() == [
        f"MiniLM checkpoint already in {out}; nothing to do", prefix]
