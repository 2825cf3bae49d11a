"""ONNX exports (--export_format=onnx, --export_precision=int8) and scoring them
in ONNX Runtime with no TensorFlow (bert_ad/serving/onnx_*.py, quantization.py).

A tiny BERT (hidden 32, 2 layers, wide initialisation so rows differ) with the
heads of six tasks: a sentence classifier, a windows classifier (attention
pooling), NER with a CRF, SQuAD, pooled features and rewrite. Each task's freshly
initialised checkpoint is exported as a SavedModel and as ONNX by its
launcher (in this process), then:

* the ONNX model's raw outputs equal the SavedModel's (1e-4): probabilities,
  window logits and scores, NER emissions and Viterbi tags, span logits,
  embeddings, rewrite scores;
* `--do_predict --predict_from_export=ONNX` writes the checkpoint's result
  files (and `bert-ad features` its vectors);
* every task's command line scores its ONNX export in a fresh Python process
  where TensorFlow cannot be imported, and writes the checkpoint's files;
* an int8 export is quantized (fused kernels, int8 matmuls), measured on the
  dev split (its fp32 accuracy is the checkpoint's, computed here from
  predict.txt) and stays close;
* bad input is one line: no ONNX tools, a missing or damaged model file,
  int8 for a TensorFlow format, fp16 for ONNX.

The tf1 lane (Python 3.7) has no ONNX tools: only the bad-input cases that
need none run there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from bert_ad.cli import classifier as classifier_cli
from bert_ad.cli import features as features_cli
from bert_ad.cli import ner as ner_cli
from bert_ad.cli import rewrite as rewrite_cli
from bert_ad.cli import squad as squad_cli
from bert_ad.data.feature_cache import file_digest
from bert_ad.errors import UserError
from bert_ad.inference import layout

import onnx_tasks
from helpers import (REPO, SAMPLE_SENTIMENT, basic_words, flag_args, run_main,
                     sample_sentiment_texts, tiny_model, tree_digest)

HAVE_ONNX = all(importlib.util.find_spec(name) for name in ("onnx", "onnxruntime", "tf2onnx"))
needs_onnx = pytest.mark.skipif(
    not HAVE_ONNX, reason="onnx, onnxruntime and tf2onnx are not installed in this lane "
    '(pip install "bert_ad[onnx]": Python 3.8+ with TensorFlow 2.x)')
SQUAD = os.path.join(REPO, "data", "sample_squad", "en-v1.1.json")
CLIS = {"classifier": classifier_cli, "windows": classifier_cli, "ner": ner_cli,
        "ner_softmax": ner_cli,
        "squad": squad_cli, "features": features_cli, "rewrite": rewrite_cli}
ATOL = 1e-4
BATCH = 4


# ---------------------------------------------------------------------------
# The tiny model, its data and its five tasks.


def squad_texts() -> list:
    with open(SQUAD, encoding="utf-8") as f:
        squad = json.load(f)
    return [text for a in squad["data"] for p in a["paragraphs"]
            for text in [p["context"]] + [q["question"] for q in p["qas"]]]


def conll_sentences(texts: list) -> str:
    """Sentences of the sample texts, one word a line; words of 6+ letters are an
    entity (B-LONG, I-LONG after another)."""
    lines = []
    for text in texts:
        previous = False
        for word in basic_words(text):
            long = len(word) >= 6
            lines.append(f"{word}\t{('I' if previous else 'B') + '-LONG' if long else 'O'}")
            previous = long
        lines.append("")
    return "\n".join(lines) + "\n"


class Setup:
    """Paths: the model, each task's data, checkpoint and exports."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    from bert_ad.data import rewrite_rows
    from bert_ad.data.tokenization import make_tokenizer
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("onnx"))
    texts = sample_sentiment_texts()
    s.model = tiny_model(os.path.join(s.root, "model"), texts + squad_texts(),
                         max_position_embeddings=64, initializer_range=0.5,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    ner_dir = os.path.join(s.root, "ner")
    os.makedirs(ner_dir)
    for split, rows in (("train", texts[:20]), ("dev", texts[20:30]), ("test", texts[30:45])):
        with open(os.path.join(ner_dir, f"{split}.txt"), "w", encoding="utf-8") as f:
            f.write(conll_sentences(rows))
    s.lines = os.path.join(s.root, "lines.txt")
    with open(s.lines, "w", encoding="utf-8") as f:
        f.write("\n".join(texts[:24]) + "\n")
    rewrite_dir = os.path.join(s.root, "rewrite")
    rewrite_rows.prepare([s.lines], rewrite_dir, make_tokenizer(s.model.vocab_file, True),
                         rewrite_rows.PrepareSettings(negatives=1, dev_fraction=0.25,
                                                      slots_per_text=1, seed=3))
    s.data = {"classifier": SAMPLE_SENTIMENT, "windows": SAMPLE_SENTIMENT, "ner": ner_dir,
              "ner_softmax": ner_dir,
              "squad": SQUAD, "features": s.lines, "rewrite": rewrite_dir}
    s.checkpoints, s.exports = {}, {}
    return s


def checkpoint(s: Setup, key: str) -> str:
    """The task's checkpoint (made on first use): its graph's fresh weights, perturbed."""
    from bert_ad.compat import tf
    from bert_ad.data.tokenization import make_tokenizer
    from bert_ad.tasks.base import TextEncoder
    if key not in s.checkpoints:
        length = onnx_tasks.FLAGS[key].get("max_seq_length", onnx_tasks.MAX_SEQ)
        encoder = TextEncoder(s.model.bert_config(), make_tokenizer(s.model.vocab_file, True),
                              s.model.vocab_file, True, length, compute_dtype=tf.float32)
        os.makedirs(os.path.join(s.root, "checkpoints", key))
        s.checkpoints[key] = perturbed_checkpoint(
            os.path.join(s.root, "checkpoints", key, "model.ckpt"),
            onnx_tasks.build(key, encoder, s.data), seed=len(key))
    return s.checkpoints[key]


def perturbed_checkpoint(prefix: str, task, seed: int) -> str:
    """The task's freshly initialised weights, each moved by noise (layer norms that
    are not 1 and 0, biases that are not 0, as in a trained model: an ONNX converter
    drops an addition of zeros, which changes what can be fused), saved at `prefix`."""
    from bert_ad.compat import tf
    from bert_ad.parallel.train_graph import feature_placeholders
    rng = np.random.RandomState(seed)
    with tf.Graph().as_default():
        tf.set_random_seed(seed)
        task.build_model(feature_placeholders(task.feature_spec, 0), False)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            for variable in tf.global_variables():
                value = session.run(variable)
                variable.load(value + rng.normal(0, 0.1, value.shape).astype(value.dtype),
                              session)
            tf.train.Saver().save(session, prefix, write_meta_graph=False)
    return prefix


def task_flags(s: Setup, key: str, **more) -> dict:
    flags = {"vocab_file": s.model.vocab_file, "bert_config_file": s.model.config_file,
             "max_seq_length": onnx_tasks.MAX_SEQ, "init_checkpoint": checkpoint(s, key)}
    flags.update(onnx_tasks.FLAGS[key])
    if key == "squad":
        flags["predict_file"] = s.data[key]
    elif key == "features":
        flags["input_file"] = s.data[key]
    else:
        flags["data_dir"] = s.data[key]
    flags.update(more)
    return flags


def export(s: Setup, key: str, fmt: str, precision: str = "fp32") -> str:
    """The task's checkpoint exported (once) by its launcher; the folder."""
    name = f"{key}_{fmt}_{precision}"
    if name not in s.exports:
        target = os.path.join(s.root, "exports", name)
        flags = task_flags(s, key, do_export=True, export_dir=target, export_format=fmt,
                           export_precision=precision)
        if key in ("features", "squad"):  # (their files are only read when scoring)
            flags.pop("input_file" if key == "features" else "predict_file")
        if key == "squad" and precision == "int8":  # (calibrated and measured on dev)
            flags["dev_file"] = s.data[key]
        if key != "features":
            flags["output_dir"] = os.path.join(s.root, "export_runs", name)
        assert run_main(CLIS[key], flags) == 0
        s.exports[name] = target
    return s.exports[name]


def prediction_flags(s: Setup, key: str, out: str, **more) -> dict:
    """The flags of a launcher scoring the task's rows into `out` (`more`: with an
    export: then the model flags come from it)."""
    if key == "features":
        flags = task_flags(s, key, output_file=out + ".npy", **more)
        dropped = ("init_checkpoint", "vocab_file", "bert_config_file", "max_seq_length")
    else:
        flags = task_flags(s, key, do_predict=True, output_dir=out, **more)
        dropped = ("init_checkpoint", "vocab_file", "bert_config_file", "labels")
    if "predict_from_export" in more:
        for model_flag in dropped:
            flags.pop(model_flag, None)
    return flags


def prediction_files(key: str, out: str) -> dict:
    """{file name: lines} a launcher wrote into `out`; features: {"embedding": vector
    lines}."""
    if key == "features":
        return {"embedding": [" ".join(f"{v:.7f}" for v in row) for row in np.load(out + ".npy")]}
    names = sorted(n for n in os.listdir(out) if n.startswith(("predict", "test_results",
                                                               "nbest", "null_odds")))
    result = {}
    for name in names:
        with open(os.path.join(out, name), encoding="utf-8") as f:
            result[name] = f.read().splitlines()
    return result


def predict(s: Setup, key: str, name: str, **more) -> dict:
    """{file name: lines} a launcher wrote scoring the task's rows (`more`: with an
    export); features: {"embedding": vector lines}."""
    out = os.path.join(s.root, "predictions", f"{key}_{name}")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    assert run_main(CLIS[key], prediction_flags(s, key, out, **more)) == 0
    return prediction_files(key, out)


@pytest.fixture(scope="module")
def checkpoint_files(setup) -> dict:
    """Every task's result files scored from its checkpoint (--do_predict)."""
    return {key: predict(setup, key, "checkpoint") for key in onnx_tasks.TASKS}


def raw_outputs(s: Setup, key: str, export_dir: str) -> dict:
    """The export's outputs for every row of the task's predict split, in order."""
    from bert_ad.inference.exported_model import score_split
    exported, task = export_task(s, key, export_dir)
    # Both formats through the one path: ExportedModel picks the scorer.
    return score_split(exported, task, task.read("predict"), BATCH)


def export_task(s: Setup, key: str, export_dir: str):
    """(the opened export, the task `key` built on the export's own tokenizer and length)."""
    from bert_ad.inference.exported_model import ExportedModel
    from bert_ad.tasks.base import TextEncoder
    exported = ExportedModel.open(export_dir)
    metadata = exported.metadata
    encoder = TextEncoder(config=exported.config, tokenizer=exported.tokenizer,
                          vocab_file=exported.vocab_path, do_lower_case=metadata.do_lower_case,
                          max_seq_length=metadata.max_seq_length)
    return exported, onnx_tasks.build(key, encoder, s.data)


def assert_close(a, b, atol: float = ATOL) -> None:
    for x, y in zip(a, b) if a.dtype == object else [(a, b)]:
        x, y = _padding_logits(x), _padding_logits(y)
        np.testing.assert_allclose(x, y, atol=atol, rtol=0)
    assert len(a) == len(b)


def _padding_logits(values) -> np.ndarray:
    """Span logits at padding as one number: -10000 added to what the encoder gave
    there, 0 in a SavedModel (padding removed) and a small logit in ONNX (kept)."""
    values = np.asarray(values, np.float64)
    return np.where(values < -5000.0, -10000.0, values)


# ---------------------------------------------------------------------------
# 1. fp32: the ONNX model answers as the SavedModel does.


@needs_onnx
@pytest.mark.parametrize("key", onnx_tasks.TASKS)
def test_onnx_outputs_equal_the_saved_models(setup, key):
    saved_model = raw_outputs(setup, key, export(setup, key, "saved_model"))
    onnx_dir = export(setup, key, "onnx")
    onnx = raw_outputs(setup, key, onnx_dir)
    assert sorted(onnx) == sorted(saved_model)
    for name in saved_model:
        assert_close(onnx[name], saved_model[name])
    # Every output is there and moves between rows (no constant stand-in served).
    floating = [n for n in onnx if np.asarray(list(onnx[n])[0]).dtype.kind == "f"]
    assert floating, onnx.keys()
    for name in floating:
        first = np.asarray(list(onnx[name])[0], np.float64)
        assert any(not np.allclose(np.asarray(v, np.float64), first)
                   for v in list(onnx[name])[1:] if np.shape(v) == first.shape), name
    metadata = layout.read_metadata(onnx_dir)
    assert metadata.format == "onnx" and metadata.precision == "fp32"
    assert metadata.onnx["opset"] == "17" and metadata.onnx["tf2onnx"]
    import onnx as onnx_library
    model = onnx_library.load(os.path.join(onnx_dir, layout.ONNX_FILE))
    inputs = {value.name: [d.dim_param for d in value.type.tensor_type.shape.dim]
              for value in model.graph.input}
    assert inputs["input_ids"] == ["batch", "sequence"]   # both dimensions dynamic
    assert sorted(inputs) == sorted(metadata.inputs)
    for name in ("assets/vocab.txt", "assets.extra/bert_config.json"):
        assert os.path.isfile(os.path.join(onnx_dir, name))


EXPECTED_OUTPUTS = {
    "classifier": ["label_ids", "probabilities"],
    "windows": ["label_ids", "probabilities", "window_documents", "window_logits",
                "window_scores"],
    "ner": ["logits", "predicted"],
    "ner_softmax": ["logits", "predicted"],
    "squad": ["end_logits", "start_logits"],
    "features": ["embedding"],
    "rewrite": ["score"],
}


@needs_onnx
def test_each_export_serves_what_its_task_reads(setup):
    for key, names in EXPECTED_OUTPUTS.items():
        metadata = layout.read_metadata(export(setup, key, "onnx"))
        assert sorted(metadata.outputs) == names, key
    ner = layout.read_metadata(export(setup, "ner", "onnx"))
    assert sorted(ner.inputs) == ["input_ids", "input_mask", "segment_ids", "word_mask",
                                  "word_positions"]
    assert ner.outputs["logits"].shape == [-1, -1, len(onnx_tasks.NER_LABELS)]


# ---------------------------------------------------------------------------
# 2. --predict_from_export with ONNX: the checkpoint's result files.


@needs_onnx
@pytest.mark.parametrize("key", onnx_tasks.TASKS)
def test_predict_from_an_onnx_export_writes_the_checkpoints_files(setup, checkpoint_files,
                                                                  key):
    onnx = predict(setup, key, "onnx", predict_from_export=export(setup, key, "onnx"))
    expected = checkpoint_files[key]
    assert sorted(onnx) == sorted(expected)
    for name, lines in expected.items():
        assert_same_lines(key, name, onnx[name], lines)


@needs_onnx
def test_a_softmax_ner_int8_export_finds_the_checkpoints_entities(setup, checkpoint_files):
    """The softmax tagger (the default, --use_crf=false) as int8: its tags and entities
    are the checkpoint's, but where two tags' logits are within int8's rounding (this
    tiny random model's activations are outsized: its fixed scales are coarse). Measured:
    predict.txt's lines at least 95% equal, 14 of 15 sentences' entity lists equal."""
    int8 = predict(setup, "ner_softmax", "onnx_int8",
                   predict_from_export=export(setup, "ner_softmax", "onnx", "int8"))
    want = checkpoint_files["ner_softmax"]
    for name, share in (("predict.txt", 0.95), ("predict_entities.jsonl", 0.9)):
        assert len(int8[name]) == len(want[name])
        same = sum(a == b for a, b in zip(int8[name], want[name]))
        assert same >= share * len(want[name]), (name, same, len(want[name]))
    assert any(json.loads(line)["entities"] for line in want["predict_entities.jsonl"])


def assert_same_lines(key: str, name: str, got: list, want: list) -> None:
    """A result file's lines equal, numbers to 2e-6 (files keep 6 or 7 decimals),
    answer files by their answers."""
    assert len(got) == len(want), (key, name)
    if name in ("test_results.tsv", "embedding") or (key, name) == ("rewrite", "predict.txt"):
        numbers = [[float(x) for x in line.split()[:None if name != "predict.txt" else 1]]
                   for line in got]
        expected = [[float(x) for x in line.split()[:None if name != "predict.txt" else 1]]
                    for line in want]
        np.testing.assert_allclose(numbers, expected, atol=2e-6)
        if name == "predict.txt":   # rewrite: the score, then the row's own columns
            assert [line.split("\t")[1:] for line in got] == [
                line.split("\t")[1:] for line in want]
    elif name.endswith(".json"):
        assert _answers(got) == _answers(want), (key, name)
    else:
        assert got == want, (key, name)


def _answers(lines: list):
    """The answer texts of a predictions.json-style file (logits-derived numbers aside)."""
    value = json.loads("\n".join(lines))
    if isinstance(value, dict):
        return {k: (v if isinstance(v, str) else [e["text"] for e in v] if isinstance(v, list)
                    else round(float(v), 3)) for k, v in value.items()}
    return value


# ---------------------------------------------------------------------------
# 3. Scoring with ONNX Runtime imports no TensorFlow.

# A machine without TensorFlow: importing it (or the converter) fails, then
# `python -m bert_ad COMMAND ...` runs as a user types it.
WITHOUT_TENSORFLOW = r"""
import runpy, sys
for name in ("tensorflow", "tf2onnx", "keras"):
    sys.modules[name] = None
sys.argv = ["bert-ad"] + sys.argv[1:]
runpy.run_module("bert_ad", run_name="__main__")
"""
COMMANDS = {"classifier": "classifier", "windows": "classifier", "ner": "ner",
            "ner_softmax": "ner",
            "squad": "squad", "features": "features", "rewrite": "rewrite"}


@needs_onnx
def test_the_command_lines_score_an_onnx_export_without_tensorflow(setup, checkpoint_files):
    """Every task's `--do_predict --predict_from_export=ONNX` (and `bert-ad features`)
    on a machine where TensorFlow cannot be imported writes the checkpoint's files."""
    for key in onnx_tasks.TASKS:
        out = os.path.join(setup.root, "no_tensorflow", key)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        flags = prediction_flags(setup, key, out,
                                 predict_from_export=export(setup, key, "onnx"))
        done = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, COMMANDS[key]]
                              + flag_args(flags), cwd=setup.root, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=300)
        assert done.returncode == 0, (key, done.stderr[-3000:])
        files = prediction_files(key, out)
        assert sorted(files) == sorted(checkpoint_files[key]), key
        for name, lines in files.items():
            assert_same_lines(key, name, lines, checkpoint_files[key][name])


# ---------------------------------------------------------------------------
# 4. int8.


@needs_onnx
def test_an_int8_export_is_quantized_and_measured_on_dev(setup):
    import onnx as onnx_library
    from bert_ad.data.processors import get_task, read_examples

    int8_dir = export(setup, "classifier", "onnx", "int8")
    metadata = layout.read_metadata(int8_dir)
    assert metadata.precision == "int8"
    config = setup.model.bert_config()
    done = metadata.onnx["int8"]
    # Each layer's two layer norms fused, its GELU with its bias, and its attention.
    layers = config.num_hidden_layers
    assert done["fusions"] == {"LayerNormalization": 2 * layers, "BiasGelu": layers,
                               "Attention": layers}
    assert done["quantized_nodes"] == 4 * layers  # attention (q k v), o, in, out
    assert done["per_channel"] and not done["embeddings_quantized"]
    ops = [node.op_type for node in onnx_library.load(
        os.path.join(int8_dir, layout.ONNX_FILE)).graph.node]
    # Static: each matmul's input quantized with a calibrated, fixed scale, and the
    # int32 sums scaled back to float with the bias in the same kernel; the
    # attention's Q, K and V in one int8 matmul of its own kernel.
    assert "QuantizeLinear" in ops and "DynamicQuantizeLinear" not in ops
    assert ops.count("MatMulIntegerToFloat") == done["integer_matmuls_to_float"] \
        == 3 * layers and "MatMulInteger" not in ops
    assert ops.count("QAttention") == layers and "Softmax" not in ops
    with open(os.path.join(int8_dir, layout.EXTRA_DIR, layout.INT8_ACCURACY_FILE)) as f:
        report = json.load(f)
    dev = read_examples(get_task("sentiment"), SAMPLE_SENTIMENT, "dev")
    assert report["split"] == "dev" and report["rows"] == len(dev)
    assert done["calibration_rows"] == len(dev) and done["calibration_split"] == "dev"
    # The fp32 figures are the checkpoint's: its dev predictions scored here.
    predicted = predict(setup, "classifier", "checkpoint_dev",
                        predict_file=os.path.join(SAMPLE_SENTIMENT, "dev.tsv"))["predict.txt"]
    accuracy = np.mean([p == e.label for p, e in zip(predicted, dev)])
    assert report["fp32"]["eval_accuracy"] == pytest.approx(accuracy)
    assert report["change"]["eval_accuracy"] == pytest.approx(
        report["int8"]["eval_accuracy"] - accuracy)
    # Really int8 (the probabilities move), and close to fp32: this tiny model's wide
    # initialisation gives outsized activations, whose min/max ranges, fixed for
    # every row, are coarse (0.26 at most, 0.06 on average here; MiniLM: 0.085 at
    # most and 0.012 on average, docs/serving.md).
    change = report["outputs"]["probabilities"]
    assert 1e-6 < change["max_abs"] < 0.35 and change["mean_abs"] < 0.1, change
    assert 0.0 <= report["same_prediction_lines"]["share"] <= 1.0


@needs_onnx
def test_an_int8_export_of_a_crf_tagger_is_quantized_without_fusions(setup):
    """The CRF's Viterbi loops read outer values that ONNX Runtime's optimizer drops
    when it fuses, which made quantize_dynamic fail with a traceback: the tagger's
    matrices are quantized in the model as exported, and it scores like fp32."""
    int8_dir = export(setup, "ner", "onnx", "int8")
    done = layout.read_metadata(int8_dir).onnx["int8"]
    config = setup.model.bert_config()
    assert done["fusions"] == {} and done["quantized_nodes"] == 6 * config.num_hidden_layers
    int8, fp32 = (raw_outputs(setup, "ner", d)
                  for d in (int8_dir, export(setup, "ner", "onnx")))
    # Really int8 (the emissions move) and close: the tiny model's wide initialisation
    # makes int8's rounding larger than a trained model's (int8_tasks_study: F1).
    a = np.concatenate([np.asarray(row, float).ravel() for row in int8["logits"]])
    b = np.concatenate([np.asarray(row, float).ravel() for row in fp32["logits"]])
    # (Static ranges, fixed for every row, are coarser than one batch's own: 0.68 of
    # the largest emission at most here.)
    assert 1e-6 < np.max(np.abs(a - b)) < 0.75 * np.max(np.abs(b)), (
        np.max(np.abs(a - b)), np.max(np.abs(b)), np.corrcoef(a, b)[0, 1])
    assert np.corrcoef(a, b)[0, 1] > 0.9, np.corrcoef(a, b)[0, 1]
    # Measured on the first dev sentences only (--max_eval_examples): their lines alone
    # (the tags of the first 2 sentences, where it failed with a traceback).
    limited = os.path.join(setup.root, "exports", "ner_int8_first_2")
    assert run_main(ner_cli, task_flags(
        setup, "ner", do_export=True, export_dir=limited, export_format="onnx",
        export_precision="int8", max_eval_examples=2,
        output_dir=os.path.join(setup.root, "export_runs", "ner_int8_first_2"))) == 0
    with open(os.path.join(limited, layout.EXTRA_DIR, layout.INT8_ACCURACY_FILE)) as f:
        report = json.load(f)
    assert report["rows"] == 2 and report["fp32"]["eval_sentences"] == 2


@needs_onnx
def test_an_int8_export_of_a_question_answerer_is_measured_on_its_dev_file(setup):
    """squad's --dev_file is read by an int8 export (it was refused unless --do_eval)."""
    target = os.path.join(setup.root, "exports", "squad_int8_dev")
    flags = task_flags(setup, "squad", do_export=True, export_dir=target,
                       export_format="onnx", export_precision="int8",
                       dev_file=setup.data["squad"],
                       output_dir=os.path.join(setup.root, "export_runs", "squad_int8_dev"))
    flags.pop("predict_file")
    assert run_main(squad_cli, flags) == 0
    with open(os.path.join(target, layout.EXTRA_DIR, layout.INT8_ACCURACY_FILE)) as f:
        report = json.load(f)
    assert report["split"] == "dev" and report["source"] == flags["dev_file"]
    assert report["fp32"]["eval_questions"] == report["rows"] > 0


@needs_onnx
def test_an_int8_export_without_a_dev_split_calibrates_on_the_training_rows(setup, caplog):
    """No dev file: the training rows calibrate and measure the int8 model, and the
    log says so (it was refused)."""
    data_dir = os.path.join(setup.root, "train_only")
    os.makedirs(data_dir)
    shutil.copy(os.path.join(SAMPLE_SENTIMENT, "train.tsv"), data_dir)
    target = os.path.join(setup.root, "exports", "classifier_int8_train_only")
    with caplog.at_level("INFO", logger="bert_ad"):
        assert run_main(classifier_cli, task_flags(
            setup, "classifier", data_dir=data_dir, do_export=True, export_dir=target,
            export_format="onnx", export_precision="int8",
            output_dir=os.path.join(setup.root, "export_runs", "train_only"))) == 0
    with open(os.path.join(target, layout.EXTRA_DIR, layout.INT8_ACCURACY_FILE)) as f:
        report = json.load(f)
    with open(os.path.join(data_dir, "train.tsv"), encoding="utf-8") as f:
        rows = sum(1 for line in f if line.strip())
    assert report["split"] == "train" and report["rows"] == rows
    done = layout.read_metadata(target).onnx["int8"]
    assert done["calibration_split"] == "train" and done["calibration_rows"] == rows
    assert any("no dev split" in r.getMessage() and "training rows" in r.getMessage()
               for r in caplog.records)


# ---------------------------------------------------------------------------
# 4b. int8 answers each row on its own: alone, in any batch, with any padding.

# What a row's outputs may move by with the rows around it (docs/serving.md): the int8
# export's activation scales are fixed, so only float32 summation order can differ.
INT8_ROW_TOLERANCE = 1e-3
ROWS = 64


def feature_rows(s: Setup, key: str, export_dir: str):
    """(the task's Batches, ROWS feature rows: indices into its examples) of the
    export's task over its rows (the predict split, then dev and train, as needed)."""
    from bert_ad.data.batching import ExampleBatches, concatenate
    _, task = export_task(s, key, export_dir)
    splits = [task.read("predict")]
    for split in ("dev", "train"):
        if key != "squad":   # (squad's rows: one file, hundreds of windows)
            splits.append(task.read(split))
    batches = [task.batches(data) for data in splits]
    examples = batches[0].examples
    for more in (batches * 3)[1:]:   # (NER's splits hold 61 windows, squad's 32: some twice)
        if len(examples) >= ROWS:
            break
        examples = concatenate(examples, more.examples)
    assert len(examples) >= ROWS, (key, len(examples))
    return ExampleBatches(examples, batches[0].padding, False), list(range(ROWS))


def scored_rows(scorer, batches, groups, padding=None) -> dict:
    """{row: {output: its own part}} scoring each group of rows as one batch
    (`padding`: every batch padded to that length instead of its longest row)."""
    from bert_ad.data.batching import make_batch
    result = {}
    for group in groups:
        batch = make_batch(batches.examples, group, padding or batches.padding)
        # A windows model pools the windows of a document within a request: each
        # window is its own document here, so its answer is its own.
        batch["document_index"] = np.arange(len(group), dtype=np.int32)
        outputs, = scorer.run([batch])
        for position, row in enumerate(group):
            result[row] = {name: own_part(name, value[position], batch, position)
                           for name, value in outputs.items()}
    return result


def own_part(name: str, value, batch: dict, position: int) -> np.ndarray:
    """A row's output without its padding: the real words (a tagger's outputs), the
    real pieces (span logits); other outputs are whole per row."""
    value = np.asarray(value)
    if name in ("predicted", "logits"):
        return value[:int(batch["word_mask"][position].sum())]
    if name in ("start_logits", "end_logits"):
        return value[:int(batch["input_mask"][position].sum())]
    return value


LABELS = {"label_ids", "predicted"}   # compared exactly; span logits: their argmax


@needs_onnx
def test_the_scorers_threads_wait_without_spinning(setup):
    """ONNX Runtime's threads busy-wait by default, which under a server's load takes
    the cores from tokenising and answering (docs/serving.md): off in every scorer,
    with one thread a core this process may use."""
    from bert_ad.inference.onnx_scorer import OnnxScorer, cpu_cores
    export_dir = export(setup, "classifier", "onnx")
    with OnnxScorer(export_dir, layout.read_metadata(export_dir)) as scorer:
        options = scorer.session.get_session_options()
        assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
        assert options.intra_op_num_threads == cpu_cores()


@needs_onnx
@pytest.mark.parametrize("key", ["classifier", "windows", "ner", "ner_softmax", "squad"])
def test_an_int8_export_answers_a_row_the_same_in_any_batch(setup, key):
    """64 rows each scored alone, padded to the longest length, and inside shuffled
    batches of 1, 7 and 32 rows of other texts: the same labels, and every output
    within INT8_ROW_TOLERANCE (dynamic quantization moved a probability by up to
    0.1 and flipped labels: each matmul's scale came from the whole batch)."""
    from bert_ad.inference.onnx_scorer import OnnxScorer
    export_dir = export(setup, key, "onnx", "int8")
    batches, rows = feature_rows(setup, key, export_dir)
    rng = np.random.RandomState(7)
    with OnnxScorer(export_dir, layout.read_metadata(export_dir)) as scorer:
        alone = scored_rows(scorer, batches, [[row] for row in rows])
        longest = scored_rows(scorer, batches, [[row] for row in rows[:8]],
                              padding=int(batches.examples.lengths.max()) + 5)
        others = list(range(len(rows), len(batches.examples)))
        ways = [longest]
        for size in (1, 7, 32):
            order = rows + others
            rng.shuffle(order)
            ways.append(scored_rows(scorer, batches, [order[i:i + size]
                                                      for i in range(0, len(order), size)]))
    largest = 0.0
    for way in ways:
        for row, outputs in way.items():
            if row not in alone:
                continue
            for name, value in outputs.items():
                expected = alone[row][name]
                assert value.shape == expected.shape, (key, name)
                if name in LABELS:
                    assert np.array_equal(value, expected), (key, name, row)
                elif name == "window_documents":
                    continue   # (the row's place in its batch)
                else:
                    largest = max(largest, float(np.max(np.abs(value - expected))))
                    if name.endswith("_logits") and name != "window_logits":
                        assert np.argmax(value) == np.argmax(expected), (key, name, row)
    assert largest <= INT8_ROW_TOLERANCE, (key, largest)


# ---------------------------------------------------------------------------
# 5. Bad input: one line.


def one_line(cli, flags: dict) -> str:
    with pytest.raises(UserError) as caught:
        run_main(cli, flags)
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def fake_onnx_export(s: Setup, name: str, model_bytes: bytes = b"not a model") -> str:
    """A classifier export folder whose metadata is right and whose model.onnx
    holds `model_bytes` (made without any ONNX tool: both lanes)."""
    target = os.path.join(s.root, "fake", name)
    os.makedirs(os.path.join(target, layout.ASSETS_DIR))
    os.makedirs(os.path.join(target, layout.EXTRA_DIR))
    shutil.copy(s.model.vocab_file, os.path.join(target, layout.ASSETS_DIR))
    shutil.copy(s.model.config_file, layout.bert_config_path(target))
    io = {n: layout.TensorInfo(n, "int32", [-1, -1])
          for n in ("input_ids", "input_mask", "segment_ids")}
    metadata = layout.ExportMetadata(
        format="onnx", precision="fp32", task="classifier", labels=["0", "1"],
        max_seq_length=onnx_tasks.MAX_SEQ, do_lower_case=True, vocab_file="vocab.txt",
        tokenizer="wordpiece", vocab_sha256=file_digest(s.model.vocab_file),
        tensorflow_version="-", checkpoint="-", global_step=0, inputs=io,
        outputs={"probabilities": layout.TensorInfo("probabilities", "float32", [-1, 2])},
        settings={"long_text": "truncate", "truncation": "head"})
    with open(layout.metadata_path(target), "w") as f:
        f.write(metadata.to_json())
    with open(os.path.join(target, layout.ONNX_FILE), "wb") as f:
        f.write(model_bytes)
    return target


def small_frozen_graph():
    """A frozen graph with work for tf2onnx's optimisers (a transpose pair, a
    duplicated constant, identities) around a 32x32 matrix (a weight); its input
    and output tensors' names; and its TensorFlow output for one batch."""
    from bert_ad.compat import tf
    rows = np.random.RandomState(0).randn(3, 32).astype(np.float32)
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 32], name="x")
        weight = tf.constant(np.random.RandomState(1).randn(32, 32).astype(np.float32))
        h = tf.matmul(tf.identity(x), weight) + tf.constant(0.5) + tf.constant(0.5)
        y = tf.identity(tf.transpose(tf.transpose(tf.tanh(h))), name="y")
        with tf.Session(graph=graph) as session:
            expected = session.run(y, {x: rows})
    return graph.as_graph_def(), {"x": "x:0"}, {"y": "y:0"}, rows, expected


def onnx_answers(model, rows) -> np.ndarray:
    import onnxruntime
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(["y"], {"x": rows})[0]


@needs_onnx
def test_the_conversion_without_tf2onnxs_copies_makes_its_careful_model(monkeypatch):
    """convert() turns off tf2onnx's copy of the graph before each optimiser: the
    model is the one tf2onnx makes with its copies; when an optimiser fails part
    way, the conversion is made again the careful way (that optimiser skipped)."""
    import copy
    from tf2onnx import constants
    from tf2onnx.graph import Graph
    from tf2onnx.optimizer import transpose_optimizer
    from bert_ad.serving import onnx_export
    graph_def, inputs, outputs, rows, expected = small_frozen_graph()
    real_deepcopy = copy.deepcopy
    copies = []

    def counted_deepcopy(x, *args):
        if isinstance(x, Graph):
            copies.append(x)
        return real_deepcopy(x, *args)
    monkeypatch.setattr(copy, "deepcopy", counted_deepcopy)
    monkeypatch.delenv(constants.ENV_TF2ONNX_CATCH_ERRORS, raising=False)
    fast = onnx_export.convert(real_deepcopy(graph_def), inputs, outputs)
    assert copies == []
    assert constants.ENV_TF2ONNX_CATCH_ERRORS not in os.environ   # left as it was
    # tf2onnx's own careful conversion, copies and all.
    careful, _ = onnx_export.require_converter().convert.from_graph_def(
        real_deepcopy(graph_def), input_names=list(inputs.values()),
        output_names=list(outputs.values()), opset=onnx_export.OPSET,
        tensors_to_rename={"x:0": "x", "y:0": "y"})
    assert len(copies) >= len(onnx_export.require_converter().optimizer._get_optimizers())
    fast_nodes = [(n.op_type, list(n.input), list(n.output)) for n in fast.graph.node]
    assert fast_nodes == [(n.op_type, list(n.input), list(n.output))
                          for n in careful.graph.node]
    np.testing.assert_allclose(onnx_answers(fast, rows), expected, atol=1e-5)

    # An optimiser that fails after changing the graph: made again the careful way.
    def fail_part_way(self, graph):
        graph.remove_node(graph.get_nodes()[-1].name)
        raise RuntimeError("an optimiser failed")
    monkeypatch.setenv(constants.ENV_TF2ONNX_CATCH_ERRORS, "a user's value")
    monkeypatch.setattr(transpose_optimizer.TransposeOptimizer, "_optimize", fail_part_way)
    copies.clear()
    rescued = onnx_export.convert(real_deepcopy(graph_def), inputs, outputs)
    assert copies, "the second conversion was tf2onnx's careful one"
    assert os.environ[constants.ENV_TF2ONNX_CATCH_ERRORS] == "a user's value"
    np.testing.assert_allclose(onnx_answers(rescued, rows), expected, atol=1e-5)


def predict_flags(s: Setup, export_dir: str) -> dict:
    return {"task_name": "sentiment", "data_dir": SAMPLE_SENTIMENT, "do_predict": True,
            "output_dir": os.path.join(s.root, "bad", os.path.basename(export_dir)),
            "predict_from_export": export_dir}


def test_an_onnx_export_without_onnxruntime_is_one_line(setup, monkeypatch):
    if importlib.util.find_spec("onnxruntime"):
        monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if not installed
    flags = predict_flags(setup, fake_onnx_export(setup, "no_runtime"))
    message = one_line(classifier_cli, flags)
    assert "is an ONNX export, which ONNX Runtime scores, and onnxruntime is not " \
           "installed" in message
    assert 'pip install "bert_ad[onnx]"' in message and "Python 3.8+" in message
    assert not os.path.exists(flags["output_dir"]) or not any(
        n.startswith("predict") for n in os.listdir(flags["output_dir"]))


def test_an_onnx_export_without_the_converter_is_one_line(setup, monkeypatch):
    if HAVE_ONNX:
        monkeypatch.setitem(sys.modules, "tf2onnx", None)
    flags = task_flags(setup, "classifier", do_export=True, export_format="onnx",
                       output_dir=os.path.join(setup.root, "bad", "no_converter"),
                       export_dir=os.path.join(setup.root, "bad", "no_converter_export"))
    message = one_line(classifier_cli, flags)
    assert "--export_format=onnx needs onnx, onnxruntime and tf2onnx" in message
    assert 'pip install "bert_ad[onnx]"' in message
    assert not os.path.exists(flags["export_dir"])


@needs_onnx
@pytest.mark.parametrize("missing", ["sympy", "onnx"])
def test_an_int8_export_missing_a_tool_is_refused_before_training(setup, monkeypatch, missing):
    """An int8 export's tools (onnx, onnxruntime, tf2onnx, and sympy, which onnxruntime's
    shape inference needs and does not pull in) are checked with the flags: one line in
    seconds, not a traceback after hours of training; output_dir gets no checkpoint."""
    monkeypatch.setitem(sys.modules, missing, None)
    output_dir = os.path.join(setup.root, "bad", f"int8_without_{missing}")
    flags = task_flags(setup, "classifier", do_train=True, do_export=True,
                       export_format="onnx", export_precision="int8", output_dir=output_dir,
                       export_dir=os.path.join(setup.root, "bad", f"int8_{missing}_export"))
    flags.pop("init_checkpoint")
    message = one_line(classifier_cli, flags)
    assert message.startswith("--export_precision=int8 needs onnx, onnxruntime, tf2onnx and "
                              f"sympy ({missing}"), message
    assert 'pip install "bert_ad[onnx]"' in message
    assert not os.path.exists(output_dir) or not [
        name for name in os.listdir(output_dir) if name.startswith("model.ckpt")]


def test_a_missing_model_file_is_one_line(setup):
    target = fake_onnx_export(setup, "missing")
    os.remove(os.path.join(target, layout.ONNX_FILE))
    message = one_line(classifier_cli, predict_flags(setup, target))
    assert message == (f"--predict_from_export={target} is an incomplete export: model.onnx "
                       "is missing; export again with --do_export")


@needs_onnx
def test_a_damaged_model_file_is_one_line(setup):
    real = os.path.join(export(setup, "classifier", "onnx"), layout.ONNX_FILE)
    with open(real, "rb") as f:
        truncated = f.read()[:2000]
    target = fake_onnx_export(setup, "damaged", truncated)
    flags = predict_flags(setup, target)
    before = tree_digest(os.path.dirname(flags["output_dir"]))
    message = one_line(classifier_cli, flags)
    assert message.startswith(f"--predict_from_export={target}: model.onnx does not load "
                              "in ONNX Runtime")
    assert message.endswith("export again with --do_export")
    assert tree_digest(os.path.dirname(flags["output_dir"])) == before


@pytest.mark.parametrize("fmt, precision, expected", [
    ("saved_model", "int8", "--export_precision=int8 is not a precision of "
     "--export_format=saved_model (it has fp32, fp16); int8 is for --export_format=onnx"),
    ("frozen_graph", "int8", "--export_precision=int8 is not a precision of "
     "--export_format=frozen_graph (it has fp32, fp16); int8 is for --export_format=onnx"),
    ("onnx", "fp16", "--export_precision=fp16 is not a precision of --export_format=onnx "
     "(it has fp32, int8); fp16 is for --export_format=saved_model or frozen_graph"),
])
def test_a_precision_the_format_has_not_is_one_line(setup, fmt, precision, expected):
    flags = task_flags(setup, "classifier", do_export=True, export_format=fmt,
                       export_precision=precision,
                       output_dir=os.path.join(setup.root, "bad", f"{fmt}_{precision}"))
    assert one_line(classifier_cli, flags) == expected


def test_bert_ad_serve_answers_with_an_onnx_export_as_predict_from_export(setup, tmp_path):
    """`bert-ad serve` scores an ONNX export in ONNX Runtime (ExportedModel.open_scorer):
    the classifier's labels and probabilities equal --predict_from_export's with it."""
    for module in ("aiohttp", "onnxruntime", "tf2onnx"):  # the serve and onnx extras
        pytest.importorskip(module)
    from helpers import Processes
    from test_serve import start_server
    export_dir = export(setup, "classifier", "onnx")
    files = predict(setup, "classifier", "onnx_served", predict_from_export=export_dir)
    with open(os.path.join(SAMPLE_SENTIMENT, "test.tsv"), encoding="utf-8") as f:
        texts = [line.rstrip("\n").split("\t")[-1] for line in f if line.strip()]
    labels = layout.read_metadata(export_dir).labels
    with Processes() as processes:
        served = start_server(processes, str(tmp_path / "serve.log"), {"onnx": export_dir})
        predictions = served.predict("onnx", texts)
        served.process.terminate()
    expected = np.array([[float(v) for v in line.split("\t")]
                         for line in files["test_results.tsv"]])
    assert [p["label"] for p in predictions] == [labels[int(i)] for i in files["predict.txt"]]
    got = np.array([[p["probabilities"][label] for label in labels] for p in predictions])
    np.testing.assert_allclose(got, expected, atol=1e-5)
