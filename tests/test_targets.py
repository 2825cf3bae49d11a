"""Regression and multi-label heads of the classifier (--regression, --multi_label).

Losses on a fixed batch against numpy written here; the metrics against numpy
written here (and scipy / scikit-learn where the lane has them); the feature
cache keeps targets; and run_classifier_mgpu.py end to end: STS-B's layout as
`--task_name=sts-b`, a multi-label tsv, whose files are checked line by line
against eval_results.txt.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from bert_ad.compat import tf
from bert_ad.data import processors
from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.feature_cache import read_features, write_features
from bert_ad.errors import UserError
from bert_ad.metrics.classification import multi_label_metrics
from bert_ad.metrics.regression import regression_metrics
from bert_ad.model.heads import FEATURE_SPEC, TARGET_FEATURES, classifier
from bert_ad.model.modeling import BertConfig
from bert_ad.tasks.base import Encoder, SplitData, TextEncoder
from bert_ad.tasks.classification import ClassificationTask

from helpers import REPO, flag_args, run_launcher_in_process, sample_sentiment_texts, tiny_model

LAUNCHER = os.path.join(REPO, "run_classifier_mgpu.py")
CONFIG = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=32, max_position_embeddings=32,
                    hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                    initializer_range=0.5)


# ---------------------------------------------------------------------------
# Losses on a fixed batch.


def fixed_batch(rows: int = 5, labels: int = 3) -> dict:
    rng = np.random.RandomState(7)
    ids = rng.randint(5, 40, size=(rows, 9)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 6:] = 0
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids),
            "label_ids": rng.randint(0, labels, rows).astype(np.int32),
            # The last row is a filler: it must not count.
            "example_weights": np.array([1, 1, 1, 1, 0], np.float32)[:rows],
            "multi_hot_labels": (rng.rand(rows, labels) < 0.5).astype(np.float32),
            "targets": rng.uniform(0, 5, rows).astype(np.float32)}


def run_head(objective: str, batch: dict, num_outputs: int) -> dict:
    spec = dict(FEATURE_SPEC, **TARGET_FEATURES[objective])
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        features = {name: tf.constant(batch[name]) for name in spec}
        out = classifier(Encoder(CONFIG).model(features, False), features, num_outputs,
                         is_training=False, objective=objective)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            return session.run({"logits": out.logits, "per_example_loss": out.per_example_loss,
                                "probabilities": out.probabilities, "loss": out.loss})


def test_multi_label_loss_is_binary_cross_entropy():
    batch = fixed_batch()
    got = run_head("sigmoid", batch, 3)
    x = got["logits"].astype(np.float64)
    y = batch["multi_hot_labels"]
    p = 1 / (1 + np.exp(-x))
    expected = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p), axis=1)
    assert np.ptp(x) > 0.01                      # the logits differ: a real check
    np.testing.assert_allclose(got["per_example_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(got["probabilities"], p, rtol=1e-5)
    w = batch["example_weights"]
    assert got["loss"] == pytest.approx(np.sum(expected * w) / np.sum(w), rel=1e-5)


def test_regression_loss_is_squared_error():
    batch = fixed_batch()
    got = run_head("mse", batch, 1)
    assert got["logits"].shape == (5, 1)
    expected = (got["logits"][:, 0].astype(np.float64) - batch["targets"]) ** 2
    np.testing.assert_allclose(got["per_example_loss"], expected, rtol=1e-5)
    w = batch["example_weights"]
    assert got["loss"] == pytest.approx(np.sum(expected * w) / np.sum(w), rel=1e-5)


def test_single_label_loss_is_unchanged_cross_entropy():
    batch = fixed_batch()
    got = run_head("softmax", batch, 3)
    x = got["logits"].astype(np.float64)
    log_p = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    expected = -log_p[np.arange(5), batch["label_ids"]]
    np.testing.assert_allclose(got["per_example_loss"], expected, rtol=1e-5)


# ---------------------------------------------------------------------------
# Metrics.


def numpy_ranks(values):
    """Average ranks, the slow obvious way."""
    values = list(values)
    return np.array([sum(v < x for v in values) + (sum(v == x for v in values) + 1) / 2
                     for x in values])


def test_regression_metrics_against_numpy():
    rng = np.random.RandomState(3)
    truth = np.round(rng.uniform(0, 5, 40), 1)      # rounded: ties in both
    predicted = np.round(truth + rng.normal(0, 1.0, 40), 0)
    got = regression_metrics(truth, predicted)
    assert got["eval_pearson"] == pytest.approx(np.corrcoef(truth, predicted)[0, 1], abs=1e-12)
    assert got["eval_spearman"] == pytest.approx(
        np.corrcoef(numpy_ranks(truth), numpy_ranks(predicted))[0, 1], abs=1e-12)
    assert got["eval_mse"] == pytest.approx(np.mean((truth - predicted) ** 2), abs=1e-12)
    # Constant predictions correlate with nothing: nan, never an improvement.
    assert np.isnan(regression_metrics(truth, np.ones(40))["eval_pearson"])


def test_regression_metrics_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.RandomState(4)
    truth = np.round(rng.uniform(0, 5, 60), 1)
    predicted = np.round(truth * 0.5 + rng.normal(0, 1.0, 60), 1)
    got = regression_metrics(truth, predicted)
    assert got["eval_pearson"] == pytest.approx(stats.pearsonr(truth, predicted)[0], abs=1e-10)
    assert got["eval_spearman"] == pytest.approx(stats.spearmanr(truth, predicted)[0],
                                                 abs=1e-10)


def reference_multi_label(truth, predicted):
    """Micro/macro F1 and subset accuracy, label by label with Python counts."""
    truth, predicted = truth.astype(bool), predicted.astype(bool)
    f1s, tp_all, fp_all, fn_all = [], 0, 0, 0
    for k in range(truth.shape[1]):
        tp = sum(1 for t, p in zip(truth[:, k], predicted[:, k]) if t and p)
        fp = sum(1 for t, p in zip(truth[:, k], predicted[:, k]) if not t and p)
        fn = sum(1 for t, p in zip(truth[:, k], predicted[:, k]) if t and not p)
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        f1s.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
        tp_all, fp_all, fn_all = tp_all + tp, fp_all + fp, fn_all + fn
    precision, recall = tp_all / (tp_all + fp_all), tp_all / (tp_all + fn_all)
    return {"eval_micro_f1": 2 * precision * recall / (precision + recall),
            "eval_macro_f1": float(np.mean(f1s)), "f1s": f1s,
            "eval_subset_accuracy": float(np.mean([list(t) == list(p)
                                                   for t, p in zip(truth, predicted)]))}


def test_multi_label_metrics_against_numpy():
    rng = np.random.RandomState(5)
    truth = rng.rand(30, 4) < 0.4
    predicted = truth ^ (rng.rand(30, 4) < 0.2)
    predicted[:, 3] = False                     # a label never predicted: F1 0
    got = multi_label_metrics(truth, predicted, ["a", "b", "c", "d"])
    expected = reference_multi_label(truth, predicted)
    for key in ("eval_micro_f1", "eval_macro_f1", "eval_subset_accuracy"):
        assert got[key] == pytest.approx(expected[key], abs=1e-12), key
    assert [got[f"f1_{x}"] for x in "abcd"] == pytest.approx(expected["f1s"], abs=1e-12)
    assert got["f1_d"] == 0.0


def test_multi_label_metrics_against_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.RandomState(6)
    truth = rng.rand(50, 5) < 0.3
    predicted = truth ^ (rng.rand(50, 5) < 0.25)
    got = multi_label_metrics(truth, predicted, list("abcde"))
    assert got["eval_micro_f1"] == pytest.approx(
        metrics.f1_score(truth, predicted, average="micro", zero_division=0), abs=1e-12)
    assert got["eval_macro_f1"] == pytest.approx(
        metrics.f1_score(truth, predicted, average="macro", zero_division=0), abs=1e-12)
    assert got["eval_subset_accuracy"] == pytest.approx(
        metrics.accuracy_score(truth, predicted), abs=1e-12)


def test_the_feature_cache_keeps_targets(tmp_path):
    features = TokenizedExamples(
        {"input_ids": [np.array([2, 7, 3]), np.array([2, 3])],
         "segment_ids": [np.zeros(3, np.int32), np.zeros(2, np.int32)]},
        np.array([0, 0]),
        {"targets": np.array([1.5, -0.25], np.float32),
         "multi_hot_labels": np.array([[1, 0, 1], [0, 0, 0]], np.float32),
         "document_index": np.array([0, 1], np.int32)})
    path = str(tmp_path / "cache.tf_record")
    write_features(path, features)
    back = read_features(path)
    assert sorted(back.row_values) == ["document_index", "multi_hot_labels", "targets"]
    for name, values in features.row_values.items():
        np.testing.assert_array_equal(back.row_values[name], values)
        assert back.row_values[name].dtype == values.dtype, name


# ---------------------------------------------------------------------------
# End to end.


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("targets_model")))


def run_cli(flags: dict):
    """The launcher's entry point in this process (test_classifier_cli.py runs it as a
    user types it)."""
    return run_launcher_in_process([LAUNCHER] + flag_args(flags))


def common_flags(model, data_dir: str, output_dir: str) -> dict:
    return {"data_dir": data_dir, "vocab_file": model.vocab_file,
            "bert_config_file": model.config_file, "output_dir": output_dir,
            "max_seq_length": 48, "n_gpus": 2, "train_batch_size": 4, "eval_batch_size": 3,
            "predict_batch_size": 3, "learning_rate": 2e-3, "num_train_epochs": 3,
            "do_train": True, "do_eval": True, "do_predict": True}


def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def read_results(output_dir: str) -> dict:
    lines = read_lines(os.path.join(output_dir, "eval_results.txt"))
    return {k: float(v) for k, v in (line.split(" = ") for line in lines)}


def test_sts_b_layout_trains_as_a_regression_task(model, tmp_path):
    texts = sample_sentiment_texts()
    rng = np.random.RandomState(0)
    header = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
              "sentence2\tscore")
    rows = []
    for i in range(36):
        a, b = texts[i], texts[(i * 7 + 3) % len(texts)]
        score = round(float(rng.uniform(0, 5)), 3)
        rows.append([str(i), "main-captions", "MSRvid", "2012test", str(i), "none", "none",
                     a, b, f"{score}"])
    data = tmp_path / "sts"
    data.mkdir()
    (data / "train.tsv").write_text(
        "\n".join([header] + ["\t".join(r) for r in rows[:28]]) + "\n", encoding="utf-8")
    dev = rows[28:]
    (data / "dev.tsv").write_text(
        "\n".join([header] + ["\t".join(r) for r in dev]) + "\n", encoding="utf-8")
    # GLUE's test layout: no score. The same pairs as dev, to check the files.
    (data / "test.tsv").write_text(
        "\n".join([header.rsplit("\t", 1)[0]] + ["\t".join(r[:9]) for r in dev]) + "\n",
        encoding="utf-8")
    output_dir = str(tmp_path / "out")
    run = run_cli(dict(common_flags(model, str(data), output_dir), task_name="stsb")).check()
    predicted = read_lines(os.path.join(output_dir, "predict.txt"))
    assert len(predicted) == len(dev)
    assert all(re.fullmatch(r"-?\d+\.\d{6}", line) for line in predicted), predicted
    values = np.array([float(x) for x in predicted])
    truth = np.array([float(r[9]) for r in dev])
    results = read_results(output_dir)
    assert set(results) >= {"eval_pearson", "eval_spearman", "eval_mse", "eval_loss"}
    # predict.txt's values (6 decimals) are the ones eval scored.
    assert results["eval_mse"] == pytest.approx(np.mean((values - truth) ** 2), abs=1e-4)
    # Rounding each value by <= 5e-7 moves a correlation by at most about 2 * 5e-7 / sd:
    # a tiny model's predictions barely vary, so that bound, not a fixed 1e-3, is the
    # tolerance (TF 1.15 needed 3e-3 here).
    tolerance = 1e-4 + 2 * 5e-7 / values.std()
    assert results["eval_pearson"] == pytest.approx(np.corrcoef(values, truth)[0, 1],
                                                    abs=tolerance)
    assert not os.path.exists(os.path.join(output_dir, "labels.txt"))
    assert "eval: Pearson" in run.stderr


def test_multi_label_files_agree_with_eval(model, tmp_path):
    texts = sample_sentiment_texts()
    labels = ["long", "question", "short", "the"]

    def cell(text):  # facts of the text itself, so the head can learn them
        words = text.split()
        found = [name for name, yes in (("long", len(words) > 15), ("short", len(words) <= 8),
                                        ("the", "the" in words), ("question", "?" in text))
                 if yes]
        return "|".join(found)

    data = tmp_path / "ml"
    data.mkdir()
    rows = [f"{cell(t)}\t{t}" for t in texts]
    # Rows with none of the labels (an empty cell) train and score like any.
    assert sum(row.startswith("\t") for row in rows[:40]) >= 3
    assert sum(row.startswith("\t") for row in rows[40:]) >= 2
    (data / "train.tsv").write_text("\n".join(rows[:40]) + "\n", encoding="utf-8")
    (data / "dev.tsv").write_text("\n".join(rows[40:]) + "\n", encoding="utf-8")
    output_dir = str(tmp_path / "out")
    run_cli(dict(common_flags(model, str(data), output_dir), task_name="tsv",
                 multi_label=True, predict_file=str(data / "dev.tsv"))).check()
    assert read_lines(os.path.join(output_dir, "labels.txt")) == labels
    predicted = read_lines(os.path.join(output_dir, "predict.txt"))
    probabilities = np.array([[float(x) for x in line.split("\t")] for line in
                              read_lines(os.path.join(output_dir, "test_results.tsv"))])
    dev_rows = rows[40:]
    assert len(predicted) == len(dev_rows) and probabilities.shape == (len(dev_rows), 4)
    # Each line: the indices whose probability reaches 0.5, joined by |.
    for line, row in zip(predicted, probabilities):
        assert line == "|".join(str(i) for i in np.flatnonzero(row >= 0.5))
    chosen = np.zeros_like(probabilities, bool)
    for r, line in enumerate(predicted):
        for i in filter(None, line.split("|")):
            chosen[r, int(i)] = True
    truth = np.array([[name in row.split("\t")[0].split("|") for name in labels]
                      for row in dev_rows])
    expected = reference_multi_label(truth, chosen)
    results = read_results(output_dir)
    for key in ("eval_micro_f1", "eval_macro_f1", "eval_subset_accuracy"):
        assert results[key] == pytest.approx(expected[key], abs=1e-6), key
    p = np.clip(probabilities, 1e-6, 1 - 1e-6)
    loss = -np.mean(truth * np.log(p) + (1 - truth) * np.log(1 - p))
    assert results["eval_loss"] == pytest.approx(loss, abs=2e-4)


def test_multi_label_cells_are_read_with_a_fixed_label_list(tmp_path):
    """--labels=a,b,c fixes the list; a cell "a|c" is two labels of it, not one."""
    (tmp_path / "train.tsv").write_text("a|c\tone\nb\ttwo\nc|a|b\tthree\nd|a\tfour\n",
                                        encoding="utf-8")
    spec = processors.get_task("tsv", {"labels": "a,b,c"})
    encoder = TextEncoder(config=None, tokenizer=None, vocab_file="", do_lower_case=True,
                          max_seq_length=32)
    task = ClassificationTask(encoder, spec, str(tmp_path), target="multi_label")
    data = task.read("train")
    task.labels = task.resolve_labels(data, None)
    assert task.labels == ["a", "b", "c"]
    with pytest.raises(UserError, match=r"train.tsv line 4: label 'd' is not one of "
                                        r"\['a', 'b', 'c'\]"):
        task.check_labels(data)
    first_three = SplitData(data.split, data.rows[:3], data.source)
    assert task.truth(first_three).tolist() == [[1, 0, 1], [0, 1, 0], [1, 1, 1]]


def test_an_empty_multi_label_cell_is_a_row_with_no_label(tmp_path):
    (tmp_path / "train.tsv").write_text("a|c\tone\n\ttwo\nb\tthree\n", encoding="utf-8")
    encoder = TextEncoder(config=None, tokenizer=None, vocab_file="", do_lower_case=True,
                          max_seq_length=32)
    task = ClassificationTask(encoder, processors.get_task("tsv"), str(tmp_path),
                              target="multi_label")
    data = task.read("train")
    assert [row.label for row in data.rows] == ["a|c", "", "b"]
    task.labels = task.resolve_labels(data, None)
    assert task.labels == ["a", "b", "c"]
    task.check_labels(data)
    assert task.truth(data).tolist() == [[1, 0, 1], [0, 0, 0], [0, 1, 0]]
    # Single-label reading still refuses an empty cell.
    single = ClassificationTask(encoder, processors.get_task("tsv"), str(tmp_path))
    with pytest.raises(UserError, match=r"train.tsv line 2: empty label in column 0"):
        single.read("train")


def test_a_dev_set_given_one_label_throughout_is_flagged(tmp_path):
    """A fine-tune stuck at chance answers one label everywhere: its accuracy (the
    majority share) looks plausible, so the eval says so in a warning line."""
    (tmp_path / "dev.tsv").write_text("neg\tone\npos\ttwo\npos\tthree\n", encoding="utf-8")
    encoder = TextEncoder(config=None, tokenizer=None, vocab_file="", do_lower_case=True,
                          max_seq_length=32)
    task = ClassificationTask(encoder, processors.get_task("tsv"), str(tmp_path))
    data = task.read("dev")
    task.labels = ["neg", "pos"]
    truth = np.array([0, 1, 1])

    def figures(probabilities):
        probabilities = np.array(probabilities, np.float32)
        losses = -np.log(probabilities[np.arange(3), truth])
        return task.metrics(data, {"probabilities": probabilities, "label_ids": truth,
                                   "per_example_loss": losses})

    collapsed = figures([[0.4, 0.6], [0.3, 0.7], [0.45, 0.55]])
    assert collapsed["eval_predicted_labels"] == 1
    assert collapsed["eval_accuracy"] == pytest.approx(2 / 3)
    [warning] = task.metric_warnings(collapsed)
    assert warning.startswith("every one of the 3 dev rows got the same label: the model "
                              "collapsed to one class. On small data try --optimizer=adam")
    mixed = figures([[0.6, 0.4], [0.3, 0.7], [0.55, 0.45]])
    assert mixed["eval_predicted_labels"] == 2 and task.metric_warnings(mixed) == []
    # One label everywhere, and right everywhere: nothing to warn about.
    (tmp_path / "dev.tsv").write_text("pos\tone\npos\ttwo\n", encoding="utf-8")
    data, truth = task.read("dev"), np.array([1, 1])
    right = task.metrics(data, {"probabilities": np.array([[0.2, 0.8], [0.1, 0.9]]),
                                "label_ids": truth, "per_example_loss": np.zeros(2)})
    assert right["eval_predicted_labels"] == 1 and task.metric_warnings(right) == []
