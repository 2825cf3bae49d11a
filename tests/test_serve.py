"""bert-ad serve (bert_ad/inference/server.py): the real server, over HTTP, on a free port.

Tiny models are fine-tuned for a few steps (wide initialisation, so rows get
clearly different answers) and exported: a long-text (windows) classifier as a
frozen graph, a multi-label and a regression classifier, a token classifier
with a CRF, squad, and pooled features. Each export scores its test rows with
`--predict_from_export` (features: the `bert-ad features` run that wrote the
export). One server process serves all six (`--model_dir=NAME=DIR,...`,
`--port=0`) for the whole module; the tests talk HTTP to it with the standard
library and compare its answers with those files: labels, entities and
answers equal, numbers to 1e-5 (the files' 6 decimals). A second server is
stopped with SIGTERM under load.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

pytest.importorskip("aiohttp", reason='bert-ad serve needs the serve extra: '
                    'pip install "bert_ad[serve]"')
pytest.importorskip("prometheus_client", reason='bert-ad serve needs the serve extra: '
                    'pip install "bert_ad[serve]"')

from bert_ad.cli import classifier as classifier_cli  # noqa: E402
from bert_ad.cli import features as features_cli  # noqa: E402
from bert_ad.cli import ner as ner_cli  # noqa: E402
from bert_ad.cli import predict as predict_cli  # noqa: E402
from bert_ad.cli import serve as serve_cli  # noqa: E402
from bert_ad.cli import squad as squad_cli  # noqa: E402
from bert_ad.inference.layout import read_metadata  # noqa: E402
from bert_ad.inference.predictions import ServeOptions, SquadPredictions, split_words  # noqa: E402
from bert_ad.inference.exported_model import ExportedModel  # noqa: E402

from helpers import (REPO, SAMPLE_SENTIMENT, Processes, read_text, run_cli_in_process,  # noqa: E402
                     run_main, save_initial_checkpoint, tiny_model, wait)

SQUAD_EN = os.path.join(REPO, "data", "sample_squad", "en-v1.1.json")
ATOL = 1e-5
DOC_STRIDE, MAX_QUERY_LENGTH = 6, 16   # the squad and token runs' and the server's
STARTUP_SECONDS = 240
TAGS = {"alice": "PER", "bob": "PER", "carol": "PER", "paris": "LOC", "rome": "LOC",
        "acme": "ORG", "globex": "ORG"}
FILLER = "went to see the big old house near river with a dog and cat".split()


def lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def tsv_texts(path: str) -> list:
    return [line.split("\t", 1)[1] for line in lines(path) if line.strip()]


def conll_sentences(count: int, seed: int) -> list:
    """[(word, tag)] sentences of names and filler, some longer than a window."""
    rng = np.random.RandomState(seed)
    sentences = []
    for index in range(count):
        length = 22 if index % 3 == 0 else int(rng.randint(3, 9))
        words = [str(rng.choice(list(TAGS) + FILLER)) for _ in range(length)]
        sentences.append([(w, f"B-{TAGS[w]}" if w in TAGS else "O") for w in words])
    return sentences


def write_conll(path: str, sentences: list) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n" for s in sentences))
    return path


class Models:
    """The exports, the files their --predict_from_export runs wrote, the inputs."""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Models:
    m = Models()
    root = str(tmp_path_factory.mktemp("serve"))
    m.root = root
    # Wide initialisation and a tiny learning rate: a model whose answers differ row by row.
    sentiment = tiny_model(os.path.join(root, "sentiment_model"), initializer_range=1.0)
    common = {"vocab_file": sentiment.vocab_file, "bert_config_file": sentiment.config_file,
              "task_name": "sentiment", "data_dir": SAMPLE_SENTIMENT, "learning_rate": 1e-5,
              "train_batch_size": 4, "predict_batch_size": 5, "num_train_epochs": 1,
              "max_train_examples": 8}
    m.exports, m.checks = {}, {}
    m.test_texts = tsv_texts(os.path.join(SAMPLE_SENTIMENT, "test.tsv"))
    for name, flags in (("windows", {"long_text": "windows", "window_stride": 5,
                                     "max_windows": 0, "max_seq_length": 12,
                                     "export_format": "frozen_graph"}),
                        ("multi_label", {"multi_label": True, "max_seq_length": 16,
                                         "truncation": "head+tail", "multi_label_threshold":
                                         0.5}),
                        ("regression", {"regression": True, "max_seq_length": 16})):
        output_dir = os.path.join(root, name)
        assert run_main(classifier_cli, dict(common, output_dir=output_dir, do_train=True,
                                             do_export=True, **flags)) == 0
        m.exports[name] = export_of(output_dir)
        m.checks[name] = os.path.join(root, name + "_check")
        predict_flags = {k: v for k, v in flags.items() if k != "export_format"}
        assert run_main(classifier_cli, dict(
            task_name="sentiment", data_dir=SAMPLE_SENTIMENT, output_dir=m.checks[name],
            predict_batch_size=3, do_predict=True, predict_from_export=m.exports[name],
            **predict_flags)) == 0
    m.labels = lines(os.path.join(root, "windows", "labels.txt"))

    # Token classification with a CRF: sentences longer than a window of 14 pieces. Trained
    # until it tags names (at a tiny learning rate TF 1.15's initial model tags none).
    ner_dir = os.path.join(root, "ner_data")
    os.makedirs(ner_dir)
    write_conll(os.path.join(ner_dir, "train.txt"), conll_sentences(24, 1))
    m.ner_test = conll_sentences(9, 2)
    write_conll(os.path.join(ner_dir, "test.txt"), m.ner_test)
    ner_model = tiny_model(os.path.join(root, "ner_model"),
                           texts=[" ".join(list(TAGS) + FILLER)], initializer_range=1.0)
    ner_flags = {"data_dir": ner_dir, "max_seq_length": 16, "doc_stride": DOC_STRIDE}
    assert run_main(ner_cli, dict(ner_flags, vocab_file=ner_model.vocab_file,
                                  bert_config_file=ner_model.config_file, use_crf=True,
                                  learning_rate=1e-3, train_batch_size=4, num_train_epochs=2,
                                  output_dir=os.path.join(root, "ner"), do_train=True,
                                  do_predict=True, do_export=True)) == 0
    m.exports["ner"] = export_of(os.path.join(root, "ner"))
    m.checks["ner"] = os.path.join(root, "ner_check")
    assert run_main(ner_cli, dict(ner_flags, use_crf=True, output_dir=m.checks["ner"],
                                  do_predict=True, predict_from_export=m.exports["ner"])) == 0

    # Squad: the English sample, several windows a context.
    with open(SQUAD_EN, encoding="utf-8") as f:
        m.squad = json.load(f)
    squad_texts = [p["context"] for a in m.squad["data"] for p in a["paragraphs"]] + [
        q["question"] for a in m.squad["data"] for p in a["paragraphs"] for q in p["qas"]]
    squad_model = tiny_model(os.path.join(root, "squad_model"), squad_texts,
                             max_position_embeddings=64, initializer_range=1.0)
    squad_flags = {"max_seq_length": 48, "doc_stride": DOC_STRIDE,
                   "max_query_length": MAX_QUERY_LENGTH}
    assert run_main(squad_cli, dict(squad_flags, vocab_file=squad_model.vocab_file,
                                    bert_config_file=squad_model.config_file,
                                    train_file=SQUAD_EN, learning_rate=1e-5,
                                    train_batch_size=4, num_train_epochs=1,
                                    max_train_examples=4, output_dir=os.path.join(root, "squad"),
                                    do_train=True, do_export=True)) == 0
    m.exports["squad"] = export_of(os.path.join(root, "squad"))
    m.checks["squad"] = os.path.join(root, "squad_check")
    assert run_main(squad_cli, dict(squad_flags, output_dir=m.checks["squad"],
                                    predict_file=SQUAD_EN, do_predict=True,
                                    predict_from_export=m.exports["squad"])) == 0

    # Features: mean-pooled, normalised, with a prefix; the run that exports embeds the file.
    m.feature_texts = m.test_texts + [f"{a} ||| {b}" for a, b in zip(m.test_texts[:4],
                                                                      m.test_texts[4:8])]
    input_file = os.path.join(root, "features.txt")
    with open(input_file, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in m.feature_texts))
    checkpoint = save_initial_checkpoint(os.path.join(root, "init", "bert_model.ckpt"),
                                         sentiment.bert_config(), seed=1)
    m.exports["features"] = os.path.join(root, "features_export")
    m.embeddings_file = os.path.join(root, "embeddings.npy")
    assert run_main(features_cli, {
        "vocab_file": sentiment.vocab_file, "bert_config_file": sentiment.config_file,
        "init_checkpoint": checkpoint, "input_file": input_file,
        "output_file": m.embeddings_file, "max_seq_length": 16, "pooling": "mean",
        "normalize": True, "text_prefix": "the ", "do_export": True,
        "export_dir": m.exports["features"]}) == 0
    return m


def export_of(output_dir: str) -> str:
    (step,) = os.listdir(os.path.join(output_dir, "export"))
    return os.path.join(output_dir, "export", step)


class Served:
    """A running server: its process and base URL."""

    def __init__(self, process, url: str):
        self.process, self.url = process, url

    def post(self, path: str, body, timeout: float = 60) -> tuple:
        """(status, parsed JSON answer) of a POST; `body` as bytes or JSON-able."""
        data = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method="POST",
                                         headers={"Content-Type": "application/json"})
        return self._open(request, timeout)

    def get(self, path: str, timeout: float = 60) -> tuple:
        return self._open(urllib.request.Request(self.url + path), timeout)

    def predict(self, model: str, instances) -> list:
        status, answer = self.post(f"/v1/models/{model}:predict", {"instances": instances})
        assert status == 200, answer
        assert len(answer["predictions"]) == len(instances)
        return answer["predictions"]

    @staticmethod
    def _open(request, timeout: float) -> tuple:
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                text = response.read().decode("utf-8")
                status, kind = response.status, response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as e:
            text, status, kind = e.read().decode("utf-8"), e.code, e.headers["Content-Type"]
        return status, json.loads(text) if kind.startswith("application/json") else text


def start_server(processes: Processes, log_path: str, model_dirs: dict, *flags: str
                 ) -> Served:
    """`bert-ad serve` on a free port (--port=0), once it says where it listens."""
    command = [sys.executable, "-m", "bert_ad", "serve", "--port=0",
               "--model_dir=" + ",".join(f"{k}={v}" for k, v in model_dirs.items())]
    process = processes.start(command + list(flags), log_path)
    deadline = time.time() + STARTUP_SECONDS
    while time.time() < deadline:
        found = re.search(r"listening on (https?://[0-9.]+:\d+)", read_text(log_path))
        if found:
            return Served(process, found.group(1))
        if process.poll() is not None:
            pytest.fail(f"bert-ad serve exited {process.returncode}:\n{read_text(log_path)}")
        time.sleep(0.2)
    pytest.fail(f"bert-ad serve did not start in {STARTUP_SECONDS}s:\n{read_text(log_path)}")


@pytest.fixture(scope="module")
def server(models):
    with Processes() as processes:
        served = start_server(processes, os.path.join(models.root, "server.log"),
                              models.exports, f"--doc_stride={DOC_STRIDE}",
                              f"--max_query_length={MAX_QUERY_LENGTH}", "--max_batch_size=8",
                              "--max_instances=40", "--max_request_bytes=20000")
        yield served
        served.process.send_signal(signal.SIGTERM)
        assert wait(served.process, 60) == 0, read_text(served.process.log_path)


# ---------------------------------------------------------------------------
# Served answers equal --predict_from_export's.


def probabilities(path: str) -> np.ndarray:
    return np.array([[float(x) for x in line.split("\t")] for line in lines(path)])


def test_a_windows_classifier_answers_as_predict_from_export(models, server):
    check = models.checks["windows"]
    predictions = server.predict("windows", models.test_texts)
    expected = probabilities(os.path.join(check, "test_results.tsv"))
    labels = [models.labels[int(i)] for i in lines(os.path.join(check, "predict.txt"))]
    assert [p["label"] for p in predictions] == labels
    served = np.array([[p["probabilities"][label] for label in models.labels]
                       for p in predictions])
    np.testing.assert_allclose(served, expected, atol=ATOL)
    # Rows do differ (the comparison means something) and long texts have several windows.
    assert np.ptp(expected[:, 0]) > 0.01
    assert max(len(t.split()) for t in models.test_texts) > 2 * 10   # 10 pieces a window


def test_multi_label_and_regression_answer_as_predict_from_export(models, server):
    check = models.checks["multi_label"]
    predictions = server.predict("multi_label", [{"text_a": t} for t in models.test_texts])
    expected = probabilities(os.path.join(check, "test_results.tsv"))
    served = np.array([[p["probabilities"][label] for label in models.labels]
                       for p in predictions])
    np.testing.assert_allclose(served, expected, atol=ATOL)
    indices = [[int(i) for i in line.split("|") if i]
               for line in lines(os.path.join(check, "predict.txt"))]
    assert [p["labels"] for p in predictions] == [[models.labels[i] for i in row]
                                                  for row in indices]
    values = server.predict("regression", models.test_texts)
    expected = [float(v) for v in lines(os.path.join(models.checks["regression"],
                                                     "predict.txt"))]
    np.testing.assert_allclose([v["value"] for v in values], expected, atol=ATOL)
    assert np.ptp(expected) > 0.01


def test_bert_ad_predict_answers_tensorflow_exports_as_predict_from_export(models, tmp_path):
    """`bert-ad predict` on a SavedModel (multi-label, regression) and a frozen graph
    (windows): one JSONL answer a line, as --predict_from_export's files (both lanes)."""
    titles = tmp_path / "titles.txt"
    titles.write_text("".join(t + "\n" for t in models.test_texts), encoding="utf-8")
    answers = {}
    for name in ("multi_label", "regression", "windows"):
        out = tmp_path / f"{name}.jsonl"
        done = run_cli_in_process(predict_cli.cli, [
            "bert-ad predict", f"--model_dir={models.exports[name]}",
            f"--input_file={titles}", f"--output_file={out}", "--chunk_size=7"])
        assert done.returncode == 0, done.stderr[-3000:]
        answers[name] = [json.loads(line) for line in lines(str(out))]
    check = models.checks["multi_label"]
    np.testing.assert_allclose(
        [[a["probabilities"][label] for label in models.labels] for a in answers["multi_label"]],
        probabilities(os.path.join(check, "test_results.tsv")), atol=ATOL)
    indices = [[int(i) for i in line.split("|") if i]
               for line in lines(os.path.join(check, "predict.txt"))]
    assert [a["labels"] for a in answers["multi_label"]] == [
        [models.labels[i] for i in row] for row in indices]
    np.testing.assert_allclose([a["value"] for a in answers["regression"]], [
        float(v) for v in lines(os.path.join(models.checks["regression"], "predict.txt"))],
        atol=ATOL)
    assert [a["label"] for a in answers["windows"]] == [
        models.labels[int(i)] for i in lines(os.path.join(models.checks["windows"],
                                                          "predict.txt"))]


def test_token_classifier_entities_and_tags_as_predict_from_export(models, server):
    check = models.checks["ner"]
    sentences = [[w for w, _ in s] for s in models.ner_test]
    predictions = server.predict("ner", [{"tokens": words} for words in sentences])
    tags = [line.split("\t")[1] for line in lines(os.path.join(check, "predict.txt")) if line]
    assert [t for p in predictions for t in p["tags"]] == tags
    expected = [json.loads(line)["entities"]
                for line in lines(os.path.join(check, "predict_entities.jsonl"))]
    assert [p["entities"] for p in predictions] == expected
    assert sum(len(e) for e in expected) >= 5   # the model tags something
    # As text: the same words, entities as characters of the text.
    texts = ["  ".join(words) for words in sentences]
    for text, words, answer, token_entities in zip(
            texts, sentences, server.predict("ner", texts), expected):
        assert answer["tokens"] == words
        assert [(e["type"], e["text"]) for e in answer["entities"]] == [
            (e["type"], e["text"]) for e in token_entities]
        assert all(text[e["start"]:e["end"]] == e["text"] for e in answer["entities"])


def test_a_token_classification_export_tags_as_its_checkpoint(models):
    """The export takes each word's piece (word_positions, word_mask): before, it
    read [CLS] for every word and its tags were not the checkpoint's."""
    inputs = read_metadata(models.exports["ner"]).inputs
    assert sorted(inputs) == ["input_ids", "input_mask", "segment_ids", "word_mask",
                              "word_positions"]
    for name in ("predict.txt", "predict_entities.jsonl"):
        assert lines(os.path.join(models.checks["ner"], name)) == lines(
            os.path.join(models.root, "ner", name))


def test_squad_answers_as_predict_from_export(models, server):
    expected = json.loads(read_text(os.path.join(models.checks["squad"],
                                                 "predictions.json")))
    questions = [(q["id"], q["question"], p["context"]) for a in models.squad["data"]
                 for p in a["paragraphs"] for q in p["qas"]]
    answers = server.predict("squad", [{"question": q, "context": c}
                                       for _, q, c in questions])
    assert [a["answer"] for a in answers] == [expected[i] for i, _, _ in questions]
    for (_, _, context), answer in zip(questions, answers):
        assert context[answer["start"]:answer["end"]] == answer["answer"]
        assert 0 < answer["score"] <= 1
    assert len({a["answer"] for a in answers}) > 1


def test_features_embeddings_as_the_run_that_exported_them(models, server):
    expected = np.load(models.embeddings_file)
    instances = [{"text_a": a, "text_b": b} if b is not None else a for a, b in
                 (split_pair(t) for t in models.feature_texts)]
    served = np.array([p["embedding"] for p in server.predict("features", instances)])
    np.testing.assert_allclose(served, expected, atol=ATOL)


def split_pair(line: str) -> tuple:
    a, separator, b = line.partition(" ||| ")
    return (a, b) if separator else (a, None)


def test_texts_longer_than_the_window_are_truncated_or_windowed(models, server):
    long_text = " ".join(models.test_texts) * 3
    for model in ("windows", "multi_label", "regression", "features"):
        assert len(server.predict(model, [long_text])) == 1
    assert server.predict("ner", [long_text])[0]["tokens"] == [
        long_text[s:e] for s, e in split_words(long_text)]
    (answer,) = server.predict("squad", [{"question": long_text, "context": long_text}])
    assert long_text[answer["start"]:answer["end"]] == answer["answer"]


def test_words_of_a_text_keep_their_characters():
    text = "Alice 在北京, ok?  x"
    assert [text[s:e] for s, e in split_words(text)] == ["Alice", "在", "北", "京", ",", "ok",
                                                       "?", "x"]
    assert split_words("ab c\u3000d", characters=True) == [(0, 1), (1, 2), (3, 4), (5, 6)]


# ---------------------------------------------------------------------------
# Status, metadata, health, metrics.


def test_status_metadata_health_and_metrics(models, server):
    status, answer = server.get("/v1/models/windows")
    assert status == 200
    assert answer == {"model_version_status": [{"version": os.path.basename(
        models.exports["windows"]), "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""}}]}
    status, answer = server.get("/v1/models/ner/metadata")
    assert status == 200
    metadata = answer["metadata"]
    assert metadata["task"] == "token_classification"
    assert metadata["labels"] == lines(os.path.join(models.root, "ner", "labels.txt"))
    assert (metadata["max_seq_length"], metadata["precision"]) == (16, "fp32")
    assert answer["model_spec"]["version"] == str(metadata["version"])
    assert server.get("/healthz") == (200, {"status": "ok", "models": sorted(models.exports)})
    before = metric_values(server.get("/metrics")[1])
    server.predict("regression", ["a", "b", "c"])
    server.post("/v1/models/regression:predict", {"instances": []})
    status, text = server.get("/metrics")
    assert status == 200
    after = metric_values(text)

    def grew(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    assert grew('bert_ad_serve_requests_total{code="200",model="regression"}') == 1
    assert grew('bert_ad_serve_request_errors_total{code="400",model="regression"}') == 1
    assert grew('bert_ad_serve_instances_total{model="regression"}') == 3
    assert grew('bert_ad_serve_batch_rows_sum{model="regression"}') == 3
    assert grew('bert_ad_serve_request_seconds_count{model="regression"}') == 1
    assert after['bert_ad_serve_batch_rows_bucket{le="8.0",model="regression"}'] >= 1
    assert after['bert_ad_serve_queued_rows{model="regression"}'] == 0


def metric_values(text: str) -> dict:
    """{series: value} of Prometheus' text format."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


# ---------------------------------------------------------------------------
# Bad requests: a 4xx with {"error": ...} naming the problem; the server goes on.

PREDICT = "/v1/models/windows:predict"
BAD_REQUESTS = {
    "not JSON": (PREDICT, b'{"instances": [', 400, "the request body is not JSON"),
    "not UTF-8": (PREDICT, b'{"instances": ["\xff"]}', 400, "not UTF-8 text"),
    "a list body": (PREDICT, [], 400, 'must be a JSON object {"instances"'),
    "no instances": (PREDICT, {"texts": ["a"]}, 400, 'the request has no "instances"'),
    "columnar inputs": (PREDICT, {"inputs": {"input_ids": [[1]]}}, 400,
                        'the columnar "inputs" form takes token ids'),
    "unknown field": (PREDICT, {"instances": ["a"], "extra": 1}, 400, "unknown field 'extra'"),
    "instances not a list": (PREDICT, {"instances": "a"}, 400,
                             '"instances" must be a list, not a string'),
    "empty list": (PREDICT, {"instances": []}, 400, '"instances" is empty'),
    "a number instance": (PREDICT, {"instances": ["a", 3]}, 400,
                          "instances[1] must be a string or an object with text_a, not a "
                          "number"),
    "text_a missing": (PREDICT, {"instances": [{"text_b": "a"}]}, 400,
                       "instances[0] has no 'text_a'"),
    "text_a not a string": (PREDICT, {"instances": [{"text_a": ["a"]}]}, 400,
                            "instances[0] 'text_a' must be a string, not a list"),
    "squad without context": ("/v1/models/squad:predict", {"instances": [{"question": "q"}]},
                              400, "instances[0] has no 'context'"),
    "tokens not strings": ("/v1/models/ner:predict", {"instances": [{"tokens": [1]}]}, 400,
                           '"tokens" must be a list of non-blank strings'),
    "another signature": (PREDICT, {"instances": ["a"], "signature_name": "x"}, 400,
                          "the only signature is 'serving_default'"),
    "too many instances": (PREDICT, {"instances": ["a"] * 41}, 413,
                           "41 instances are over --max_instances=40"),
    "too large a body": (PREDICT, {"instances": ["a" * 30000]}, 413,
                         "is over --max_request_bytes=20000"),
    "unknown model": ("/v1/models/nothing:predict", {"instances": ["a"]}, 404,
                      "no model named 'nothing' here"),
    "unknown version": ("/v1/models/windows/versions/999999:predict", {"instances": ["a"]},
                        404, "has no version 999999"),
    "unknown path": ("/v2/anything", {"instances": ["a"]}, 404, "no such path"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_a_bad_request_is_a_4xx_naming_the_problem(server, case):
    path, body, status, message = BAD_REQUESTS[case]
    got, answer = server.post(path, body)
    assert (got, list(answer)) == (status, ["error"]), answer
    assert message in answer["error"]
    assert "\n" not in answer["error"]


def test_after_bad_requests_the_server_still_answers(models, server):
    assert server.get("/v1/models/windows:predict")[0] == 405
    assert len(server.predict("windows", ["still here"])) == 1


# ---------------------------------------------------------------------------
# Batching: many concurrent requests, each gets its own answers.


def test_concurrent_distinct_inputs_get_their_own_answers(models, server):
    expected = np.load(models.embeddings_file)
    texts = models.feature_texts
    requests = [[(i + k) % len(texts) for k in range(1 + i % 3)] for i in range(96)]

    def ask(indices):
        instances = [{"text_a": a, "text_b": b} if b is not None else a
                     for a, b in (split_pair(texts[i]) for i in indices)]
        return indices, server.predict("features", instances)

    with ThreadPoolExecutor(24) as pool:
        for indices, predictions in pool.map(ask, requests):
            np.testing.assert_allclose([p["embedding"] for p in predictions],
                                       expected[indices], atol=ATOL)
    _, metrics = server.get("/metrics")
    batches = re.search(r'bert_ad_serve_batch_rows_count\{model="features"\} (\d+)', metrics)
    rows = re.search(r'bert_ad_serve_batch_rows_sum\{model="features"\} ([0-9.]+)', metrics)
    assert float(rows.group(1)) / int(batches.group(1)) > 1.5, metrics  # rows were batched


# ---------------------------------------------------------------------------
# Stopping and refusing to start.


def test_sigterm_under_load_answers_what_it_received_and_exits_0(models, tmp_path):
    expected = np.load(models.embeddings_file)
    texts = models.feature_texts
    # Requests of 100 rows in batches of 8: each is in the server for many batches,
    # so requests are in flight whenever the signal comes.
    order = [i % len(texts) for i in range(100)]
    instances = [{"text_a": a, "text_b": b} for a, b in (split_pair(texts[i]) for i in order)]
    results, stop_at = [], []
    with Processes() as processes:
        served = start_server(processes, str(tmp_path / "server.log"),
                              {"features": models.exports["features"]}, "--max_batch_size=8")

        def client() -> None:
            while True:
                try:
                    status, answer = served.post("/v1/models/features:predict",
                                                 {"instances": instances}, timeout=60)
                except OSError as e:   # refused or closed once it stopped
                    results.append((time.time(), None, repr(e)))
                    return
                results.append((time.time(), status, answer))
                if status != 200 or stop_at:
                    return

        threads = [threading.Thread(target=client) for _ in range(8)]
        for thread in threads:
            thread.start()
        time.sleep(3.0)
        # The signal while the server holds requests (its in-flight gauge): it answers
        # faster than the clients send, so at any one moment it may hold none.
        deadline = time.time() + 60
        while time.time() < deadline and metric_values(served.get("/metrics")[1]).get(
                "bert_ad_serve_in_flight_requests", 0) < 2:
            time.sleep(0.005)
        stop_at.append(time.time())
        served.process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(120)
        assert wait(served.process, 120) == 0, read_text(served.process.log_path)
    log = read_text(served.process.log_path)
    assert "serve: stopping on SIGTERM" in log, log
    in_flight = int(re.search(r"(\d+) request\(s\) in flight will be answered", log).group(1))
    assert in_flight >= 1, log
    answered = int(re.search(r"stopped after answering (\d+) predict request", log).group(1))
    # Judged by what the server received, not by when a client began sending: on 2
    # busy cores a request can leave the client well before the server reads it.
    # Every request the server took in reached its client answered in full ...
    ok = [r for r in results if r[1] == 200]
    assert len(ok) == answered, (len(ok), answered, log[-2000:])
    for _, _, answer in ok:
        np.testing.assert_allclose([p["embedding"] for p in answer["predictions"]],
                                   expected[order], atol=ATOL)
    assert len([r for r in ok if r[0] < stop_at[0]]) >= 8
    # ... those in flight at the signal among them, answered after it ...
    assert len([r for r in ok if r[0] > stop_at[0]]) >= in_flight, (results, log[-2000:])
    # ... and the rest were refused (503, or no connection) only once it was stopping.
    for finished, status, answer in results:
        if status != 200:
            assert finished > stop_at[0] and status in (503, None), (status, answer)


def test_a_folder_that_is_not_an_export_is_one_error_line(tmp_path, models):
    empty = tmp_path / "empty"
    empty.mkdir()
    cases = {str(empty): "is not an export of bert_ad",
             str(tmp_path / "missing"): "is not a directory",
             f"a={models.exports['ner']},a={models.exports['squad']}":
                 "the model name 'a' is given twice"}
    for model_dir, message in cases.items():
        run = run_cli_in_process(serve_cli.cli, ["bert-ad serve", f"--model_dir={model_dir}",
                                                 "--port=0"])
        assert run.returncode == 2, run.stderr
        (line,) = run.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line, line
    for flag, message in (("--port=70000", "--port=70000 must be between 0 and 65535 (0: "
                                               "any free one)"),
                          ("--max_batch_size=0", "--max_batch_size=0 must be at least 1")):
        run = run_cli_in_process(serve_cli.cli, ["bert-ad serve", "--model_dir=x", flag])
        assert (run.returncode, run.stderr.strip()) == (2, f"error: {message}")


def test_without_the_serve_extra_it_is_one_line_naming_it(monkeypatch, models):
    monkeypatch.setitem(sys.modules, "aiohttp", None)   # as if not installed
    run = run_cli_in_process(serve_cli.cli, ["bert-ad serve",
                                             f"--model_dir={models.exports['ner']}"])
    assert (run.returncode, run.stderr) == (2, 'error: bert-ad serve needs aiohttp, which is '
                                               'not installed: pip install "bert_ad[serve]"\n')


def test_help_lists_the_flags():
    run = run_cli_in_process(serve_cli.cli, ["bert-ad serve", "--help"])
    assert run.returncode == 0
    for flag in ("--model_dir", "--max_batch_size", "--batch_timeout_ms", "--max_request_bytes",
                 "--port", "--token_split"):
        assert [line for line in run.stdout.splitlines() if line.startswith(f"  {flag}: ")]


def test_squad_takes_the_null_threshold_export_json_records(models):
    exported = ExportedModel.open(models.exports["squad"])
    metadata = exported.metadata
    short = ServeOptions(max_query_length=MAX_QUERY_LENGTH)
    assert SquadPredictions(exported, short).answer_settings \
        .null_score_diff_threshold == 0.0
    metadata.settings["null_score_diff_threshold"] = -1.5
    for options, expected in ((short, -1.5),
                              (ServeOptions(max_query_length=MAX_QUERY_LENGTH,
                                            null_score_diff_threshold=2.0), 2.0)):
        answers = SquadPredictions(exported, options).answer_settings
        assert answers.null_score_diff_threshold == expected
