"""A scoring machine: `pip install "bert_ad[serve]"`, no TensorFlow (issue 50).

ONNX exports of every task that exports (a classifier, a windows classifier,
NER with a CRF, squad, pooled features) are scored and served where
TensorFlow cannot be imported: `--predict_from_export` writes each task's
files, `bert-ad serve` answers as those files say (labels and entities
exact, numbers to 1e-5), `bert-ad --version` says what the install can do,
a hand-edited export.json and a SavedModel are one `error:` line each.

Where it runs:
* CI's scoring step (.ci/run): a venv with `.[serve,test]` and no TensorFlow
  at all, on the exports the tf2 lane's run of this file left in
  $BERT_AD_SCORING_EXPORTS (its exports.json lists them);
* every lane with TensorFlow and the ONNX tools (the README's test command):
  the exports are made here (tiny models, a few training steps), and every
  command runs in a fresh Python process where `import tensorflow` fails.
Elsewhere (the tf1 lane: no ONNX Runtime for Python 3.7) the module is skipped
with the reason.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXPORTS_VARIABLE = "BERT_AD_SCORING_EXPORTS"
LIST_FILE = "exports.json"
TASKS = ("classifier", "windows", "ner", "squad", "features")
COMMANDS = {"classifier": "classifier", "windows": "classifier", "ner": "ner",
            "squad": "squad", "features": "features"}
SQUAD_FILE = os.path.join(REPO, "data", "sample_squad", "en-v1.1.json")
SENTIMENT = os.path.join(REPO, "data", "sample_sentiment")
ATOL = 1e-5
TIMEOUT = 300
# A fresh interpreter in which TensorFlow (and its converter) cannot be imported,
# running `bert-ad ARGS...`: what a machine without TensorFlow does.
WITHOUT_TENSORFLOW = r"""
import runpy, sys
for name in ("tensorflow", "tf2onnx", "keras"):
    sys.modules[name] = None
sys.argv = ["bert-ad"] + sys.argv[1:]
runpy.run_module("bert_ad", run_name="__main__")
"""


def _have(*modules: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in modules)


def _skip_reason() -> str:
    if not _have("onnxruntime", "aiohttp", "prometheus_client"):
        return ('a scoring machine needs the serve extra: pip install "bert_ad[serve]" '
                "(ONNX Runtime: Python 3.8+)")
    listed = os.environ.get(EXPORTS_VARIABLE, "")
    if listed and os.path.isfile(os.path.join(listed, LIST_FILE)):
        return ""
    if not _have("tensorflow", "onnx", "tf2onnx"):
        return (f"no exports to score: set {EXPORTS_VARIABLE} to a folder a TensorFlow "
                'lane filled, or pip install "bert_ad[tf,onnx]" to make them here')
    return ""


pytestmark = pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "-")


# ---------------------------------------------------------------------------
# The exports (made with TensorFlow, once) and the files they are checked against.


def make_exports(root: str) -> dict:
    """Train tiny models a few steps, export each as ONNX; {task: flags to score it}."""
    from bert_ad.cli import classifier, features, ner, squad
    from helpers import (basic_words, run_main, sample_sentiment_texts,
                         save_initial_checkpoint, tiny_model)
    texts = sample_sentiment_texts()
    with open(SQUAD_FILE, encoding="utf-8") as f:
        squad_json = json.load(f)
    squad_texts = [t for a in squad_json["data"] for p in a["paragraphs"]
                   for t in [p["context"]] + [q["question"] for q in p["qas"]]]
    model = tiny_model(os.path.join(root, "model"), texts + squad_texts,
                       max_position_embeddings=64, initializer_range=1.0)
    model_flags = {"vocab_file": model.vocab_file, "bert_config_file": model.config_file}
    training = {"learning_rate": 1e-4, "train_batch_size": 4, "num_train_epochs": 1,
                "max_train_examples": 8, "do_train": True, "do_export": True,
                "export_format": "onnx"}
    # NER trained one character a line (as Chinese NER data is): a served text
    # must be split into characters, as export.json records, with no serve flag.
    ner_dir = os.path.join(root, "ner_data")
    os.makedirs(ner_dir)
    for split, rows in (("train", texts[:16]), ("test", texts[16:24])):
        with open(os.path.join(ner_dir, f"{split}.txt"), "w", encoding="utf-8") as f:
            for text in rows:
                f.write("".join(f"{c}\t{'B-V' if c in 'aeiou' else 'O'}\n"
                                for c in "".join(basic_words(text))[:40]) + "\n")
    lines_file = os.path.join(root, "lines.txt")
    with open(lines_file, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts[:12]) + "a short one ||| and its pair\n")
    scoring = {
        "classifier": {"task_name": "sentiment", "data_dir": SENTIMENT, "max_seq_length": 24},
        "windows": {"task_name": "sentiment", "data_dir": SENTIMENT, "max_seq_length": 16,
                    "long_text": "windows", "window_stride": 7,
                    "window_pooling": "attention"},
        # (one --doc_stride for the server's squad and NER: 16 fits both windows)
        "ner": {"data_dir": ner_dir, "max_seq_length": 24, "doc_stride": 16, "use_crf": True},
        # SQuAD v2.0: a served model answers "" as --do_predict does, with no serve flag.
        "squad": {"predict_file": SQUAD_FILE, "max_seq_length": 48, "doc_stride": 16,
                  "max_query_length": 16, "version_2_with_negative": True},
    }
    clis = {"classifier": classifier, "windows": classifier, "ner": ner, "squad": squad}
    made = {}
    for key, flags in scoring.items():
        output_dir = os.path.join(root, "runs", key)
        run_flags = dict(model_flags, output_dir=output_dir, **training, **flags)
        if key == "squad":
            run_flags.update(train_file=SQUAD_FILE, predict_file=None)
        assert run_main(clis[key], {k: v for k, v in run_flags.items()
                                    if v is not None}) == 0
        (step,) = os.listdir(os.path.join(output_dir, "export"))
        # Scoring takes the export's settings: only the data flags are given.
        made[key] = {"export": os.path.join(output_dir, "export", step), "folder": output_dir,
                     "flags": {k: v for k, v in flags.items() if k in (
                         "task_name", "data_dir", "predict_file", "doc_stride",
                         "max_query_length")}}
    # The classifier's folder exported again as int8, with no model flag (the folder's).
    int8_dir = os.path.join(root, "runs", "classifier_int8")
    assert run_main(classifier, {
        "task_name": "sentiment", "data_dir": SENTIMENT, "do_export": True,
        "output_dir": made["classifier"]["folder"], "export_format": "onnx",
        "export_precision": "int8", "export_dir": int8_dir}) == 0
    made["classifier_int8"] = {"export": int8_dir, "flags": made["classifier"]["flags"]}
    checkpoint = save_initial_checkpoint(os.path.join(root, "init", "bert_model.ckpt"),
                                         model.bert_config(), seed=1)
    export_dir = os.path.join(root, "runs", "features_export")
    assert run_main(features, dict(model_flags, init_checkpoint=checkpoint,
                                   max_seq_length=24, pooling="mean", normalize=True,
                                   do_export=True, export_dir=export_dir,
                                   export_format="onnx")) == 0
    made["features"] = {"export": export_dir, "flags": {"input_file": lines_file}}
    with open(os.path.join(root, LIST_FILE), "w", encoding="utf-8") as f:
        json.dump(made, f, indent=1)
    return made


class Machine:
    """The exports and, per task, the files `--predict_from_export` wrote."""


def without_tensorflow(args, cwd: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """`bert-ad ARGS` in a fresh interpreter where TensorFlow cannot be imported."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    return subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW] + list(args), cwd=cwd,
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=timeout)


def flag_list(flags: dict) -> list:
    return [f"--{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in flags.items()]


@pytest.fixture(scope="module")
def machine(tmp_path_factory) -> Machine:
    m = Machine()
    m.root = str(tmp_path_factory.mktemp("scoring_machine"))
    listed = os.environ.get(EXPORTS_VARIABLE, "")
    if listed and os.path.isfile(os.path.join(listed, LIST_FILE)):
        with open(os.path.join(listed, LIST_FILE), encoding="utf-8") as f:
            m.exports = json.load(f)
    else:
        folder = listed or os.path.join(m.root, "made")
        m.exports = make_exports(folder)
    m.outputs = {}
    # CI's tf2 lane runs only the checkpoint's test here, against these two; its
    # scoring step checks the rest (tests/conftest.py BERT_AD_SCORING_EXPORTS_ONLY).
    exports_only = os.environ.get("BERT_AD_SCORING_EXPORTS_ONLY") == "1"
    for key in ("classifier", "windows") if exports_only else TASKS:
        out = os.path.join(m.root, "predicted", key)
        flags = dict(m.exports[key]["flags"], predict_from_export=m.exports[key]["export"])
        if key == "features":
            flags["output_file"] = out + ".npy"
        else:
            flags.update(do_predict=True, output_dir=out)
        done = without_tensorflow([COMMANDS[key]] + flag_list(flags), m.root)
        assert done.returncode == 0, (key, done.stderr[-3000:])
        m.outputs[key] = out
    return m


def lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# ---------------------------------------------------------------------------
# The tests.


def test_version_says_this_install_scores_and_serves(machine):
    done = without_tensorflow(["--version"], machine.root)
    assert done.returncode == 0, done.stderr
    assert re.match(r"bert_ad \S+, no TensorFlow: this install scores and serves exports "
                    r"only", done.stdout), done.stdout


def test_predict_from_export_wrote_every_tasks_files(machine):
    for key in ("classifier", "windows"):
        predicted = lines(os.path.join(machine.outputs[key], "predict.txt"))
        assert len(predicted) == len(sentiment_texts())
        assert set(predicted) <= {"0", "1"}
    tags = [line for line in lines(os.path.join(machine.outputs["ner"], "predict.txt")) if line]
    assert tags and all(len(line.split("\t")) == 2 for line in tags)
    answers = json.loads(open(os.path.join(machine.outputs["squad"], "predictions.json"),
                              encoding="utf-8").read())
    assert len(answers) >= 3
    embeddings = np.load(machine.outputs["features"] + ".npy")
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-5)


class Server:
    """`bert-ad serve` without TensorFlow on a free port."""

    def __init__(self, machine: Machine, model_dirs: dict, log_name: str, *flags: str):
        self.log_path = os.path.join(machine.root, log_name)
        env = dict(os.environ, PYTHONPATH=REPO)
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-c", WITHOUT_TENSORFLOW, "serve", "--port=0",
             "--model_dir=" + ",".join(f"{k}={v}" for k, v in model_dirs.items()),
             "--doc_stride=16", "--max_query_length=16", *flags],
            cwd=machine.root, env=env, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True)
        deadline = time.time() + TIMEOUT
        while time.time() < deadline:
            found = re.search(r"listening on (http://[0-9.]+:\d+)", self.text())
            if found:
                self.url = found.group(1)
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        pytest.fail(f"bert-ad serve did not start:\n{self.text()[-3000:]}")

    def text(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def predict(self, model: str, instances: list) -> list:
        body = json.dumps({"instances": instances}).encode("utf-8")
        request = urllib.request.Request(f"{self.url}/v1/models/{model}:predict", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return json.loads(response.read().decode("utf-8"))["predictions"]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()
        return self.process.returncode


@pytest.fixture(scope="module")
def server(machine):
    # The classifier as its fine-tuned folder (served from its newest export), the
    # others as export folders.
    model_dirs = {key: machine.exports[key]["export"] for key in TASKS}
    model_dirs["classifier"] = machine.exports["classifier"]["folder"]
    served = Server(machine, model_dirs, "server.log")
    yield served
    assert served.stop() == 0, served.text()[-3000:]
    assert "Traceback" not in served.text()


def sentiment_texts() -> list:
    """The sample's test texts (label<TAB>text, no header)."""
    return [line.split("\t", 1)[1] for line in lines(os.path.join(SENTIMENT, "test.tsv"))]


@pytest.mark.parametrize("key", ["classifier", "windows"])
def test_served_classifiers_answer_as_predict_from_export(machine, server, key):
    assert_classifier_answers(machine, key, server.predict(key, sentiment_texts()))


def test_served_ner_tags_as_predict_from_export(machine, server):
    sentences = ner_sentences(machine)
    expected = [line.split("\t")[1] for line in
                lines(os.path.join(machine.outputs["ner"], "predict.txt")) if line]
    entities = [json.loads(line)["entities"] for line in
                lines(os.path.join(machine.outputs["ner"], "predict_entities.jsonl"))]
    answers = server.predict("ner", [{"tokens": s} for s in sentences])
    assert [t for a in answers for t in a["tags"]] == expected
    assert [a["entities"] for a in answers] == entities
    assert "B-V" in expected and "O" in expected
    # As text, split into characters as the model was trained (export.json), with no
    # --token_split: the same tags (split into words, the counts would differ).
    texts = [" ".join(s[:10]) + "".join(s[10:]) for s in sentences]
    answers = server.predict("ner", texts)
    assert [a["tokens"] for a in answers] == sentences
    assert [t for a in answers for t in a["tags"]] == expected


def test_served_squad_answers_as_predict_from_export(machine, server):
    with open(SQUAD_FILE, encoding="utf-8") as f:
        squad = json.load(f)
    questions = [(q["id"], q["question"], p["context"]) for a in squad["data"]
                 for p in a["paragraphs"] for q in p["qas"]]
    expected = json.loads(open(os.path.join(machine.outputs["squad"], "predictions.json"),
                               encoding="utf-8").read())
    answers = server.predict("squad", [{"question": q, "context": c}
                                       for _, q, c in questions])
    assert [a["answer"] for a in answers] == [expected[i] for i, _, _ in questions]
    # A v2.0 model, served with no --version_2_with_negative: v2.0's answers (null odds
    # beside every one, and "" wherever --do_predict answered ""), as export.json says.
    assert all("null_odds" in a for a in answers)
    assert machine_settings(machine, "squad")["version_2_with_negative"] is True


def test_served_embeddings_as_features(machine, server):
    instances = []
    for line in lines(machine.exports["features"]["flags"]["input_file"]):
        a, separator, b = line.partition(" ||| ")
        instances.append({"text_a": a, "text_b": b} if separator else line)
    served = np.array([a["embedding"] for a in server.predict("features", instances)])
    np.testing.assert_allclose(served, np.load(machine.outputs["features"] + ".npy"),
                               atol=ATOL)


def machine_settings(machine, key: str) -> dict:
    with open(os.path.join(machine.exports[key]["export"], "assets.extra", "export.json"),
              encoding="utf-8") as f:
        return json.load(f)["settings"]


def post_json(url: str, body) -> tuple:
    request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode("utf-8"))


def test_openai_embeddings_as_features(machine, server):
    """POST /v1/embeddings (OpenAI's shape) answers `bert-ad features`' vectors."""
    texts = lines(machine.exports["features"]["flags"]["input_file"])
    singles = [i for i, line in enumerate(texts) if " ||| " not in line]
    expected = np.load(machine.outputs["features"] + ".npy")[singles]
    status, answer = post_json(server.url + "/v1/embeddings",
                               {"input": [texts[i] for i in singles], "model": "features"})
    assert status == 200, answer
    assert [d["index"] for d in answer["data"]] == list(range(len(singles)))
    np.testing.assert_allclose([d["embedding"] for d in answer["data"]], expected, atol=ATOL)
    assert answer["usage"]["prompt_tokens"] > len(singles)
    status, answer = post_json(server.url + "/v1/embeddings",
                               {"input": "a text", "model": "classifier"})
    assert status == 400 and "'classifier' is not an embedding model" in answer["error"]
    assert post_json(server.url + "/v1/embeddings",
                     {"input": "a text", "model": "nothing"})[0] == 404


def edited_export(machine, name: str, change) -> str:
    """A copy of the classifier's export with export.json changed by `change`."""
    target = os.path.join(machine.root, "edited", name)
    shutil.copytree(machine.exports["classifier"]["export"], target)
    path = os.path.join(target, "assets.extra", "export.json")
    with open(path, encoding="utf-8") as f:
        metadata = json.load(f)
    change(metadata, target)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(metadata, f)
    return target


def assert_one_error_line(done: subprocess.CompletedProcess, *expected: str) -> None:
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-3000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0] == done.stderr.splitlines()[-1], done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    for words in expected:
        assert words in errors[0], errors[0]


@pytest.mark.parametrize("field, value, expected", [
    ("max_seq_length", "abc", "'max_seq_length' is \"abc\", not a whole number of at least 3"),
    ("labels", 7, "'labels' is 7, not null or a list of distinct strings"),
    ("max_seq_length", 4096, "more than the model's max_position_embeddings=64"),
])
def test_a_hand_edited_export_json_is_one_line(machine, field, value, expected):
    export_dir = edited_export(machine, f"{field}_{value}",
                               lambda m, _: m.__setitem__(field, value))
    served = without_tensorflow(["serve", "--port=0", f"--model_dir={export_dir}"],
                                machine.root)
    assert_one_error_line(served, export_dir, expected)
    predicted = without_tensorflow(
        ["classifier"] + flag_list(dict(machine.exports["classifier"]["flags"],
                                        do_predict=True, predict_from_export=export_dir,
                                        output_dir=os.path.join(machine.root, "edited_out"))),
        machine.root)
    assert_one_error_line(predicted, export_dir, expected)
    assert not os.path.exists(os.path.join(machine.root, "edited_out", "predict.txt"))


def test_a_saved_model_without_tensorflow_is_one_line(machine):
    def as_saved_model(metadata, target):
        metadata["format"] = "saved_model"
        open(os.path.join(target, "saved_model.pb"), "wb").close()

    export_dir = edited_export(machine, "saved_model", as_saved_model)
    done = without_tensorflow(["serve", "--port=0", f"--model_dir={export_dir}"],
                              machine.root)
    assert_one_error_line(done, f"--model_dir={export_dir} is a saved_model export, which "
                          "TensorFlow scores, and no TensorFlow is installed here",
                          "--export_format=onnx")


def test_a_model_folder_without_an_export_is_one_line(machine):
    folder = os.path.join(machine.root, "folder_without_export")
    shutil.copytree(machine.exports["windows"]["folder"], folder,
                    ignore=shutil.ignore_patterns("export"))
    done = without_tensorflow(["serve", "--port=0", f"--model_dir={folder}"], machine.root)
    assert_one_error_line(done, f"--model_dir={folder} is a fine-tuned model folder with no "
                          "export in it", "--do_export", "--export_format=onnx")


def test_a_model_folder_newer_than_its_export_is_served_with_a_warning(machine):
    folder = os.path.join(machine.root, "folder_with_newer_checkpoint")
    shutil.copytree(machine.exports["windows"]["folder"], folder)
    open(os.path.join(folder, "model.ckpt-999.index"), "wb").close()
    served = Server(machine, {"windows": folder}, "newer.log")
    try:
        assert len(served.predict("windows", ["a text"])) == 1
    finally:
        assert served.stop() == 0
    assert re.search(r"warning: --model_dir=\S+ holds model\.ckpt-999, newer than its newest "
                     r"export \(\d+\), which is served", served.text()), served.text()[-2000:]


def test_an_int8_model_answers_a_text_alike_under_16_concurrent_clients(machine):
    """Static int8 scales: a text's answer does not depend on the requests batched
    with it (dynamic quantization flipped labels under concurrent clients)."""
    from concurrent.futures import ThreadPoolExecutor
    served = Server(machine, {"int8": machine.exports["classifier_int8"]["export"]},
                    "int8.log", "--max_batch_size=32", "--batch_timeout_ms=20")
    try:
        texts = sentiment_texts() * 4
        alone = {text: served.predict("int8", [text])[0] for text in set(texts)}
        rng = np.random.RandomState(3)

        def client(seed: int) -> list:
            order = np.random.RandomState(seed).permutation(len(texts))
            answers = []
            for start in range(0, len(order), 1 + seed % 7):
                chosen = [int(i) for i in order[start:start + 1 + seed % 7]]
                answers += list(zip(chosen, served.predict("int8", [texts[i] for i in chosen])))
            return answers

        with ThreadPoolExecutor(16) as pool:
            results = [a for batch in pool.map(client, rng.randint(0, 1000, 16)) for a in batch]
    finally:
        assert served.stop() == 0
    assert len(results) == 16 * len(texts)
    texts = sentiment_texts() * 4
    for index, answer in results:
        reference = alone[texts[index]]
        assert answer["label"] == reference["label"]
        for label, p in reference["probabilities"].items():
            assert abs(answer["probabilities"][label] - p) <= 1e-3


# ---------------------------------------------------------------------------
# bert-ad predict (issue 52): a file of texts in, one answer a line out, on the same
# exports, without TensorFlow; checked against the --predict_from_export files above.


def predict(machine, *args, stdin: str = None) -> subprocess.CompletedProcess:
    """`bert-ad predict ARGS` without TensorFlow (standard input from `stdin`)."""
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, "predict"] + list(args),
                          cwd=machine.root, env=env, input=stdin, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)


def write_text(path: str, text) -> str:
    mode = "wb" if isinstance(text, bytes) else "w"
    with open(path, mode, **({} if mode == "wb" else {"encoding": "utf-8"})) as f:
        f.write(text)
    return path


def json_lines(text: str) -> list:
    return [json.loads(line) for line in text.splitlines()]


def assert_classifier_answers(machine, key: str, answers: list) -> None:
    """Label names exact and probabilities to 1e-5 against --predict_from_export's files."""
    out = machine.outputs[key]
    labels = lines(os.path.join(machine.exports[key]["export"], "assets", "labels.txt"))
    assert [a["label"] for a in answers] == [labels[int(i)] for i in
                                             lines(os.path.join(out, "predict.txt"))]
    expected = np.array([[float(x) for x in line.split("\t")]
                         for line in lines(os.path.join(out, "test_results.tsv"))])
    got = np.array([[a["probabilities"][label] for label in labels] for a in answers])
    np.testing.assert_allclose(got, expected, atol=ATOL)
    assert np.ptp(expected[:, 0]) > 1e-3


def test_predict_a_file_of_titles_from_the_model_folder(machine):
    """One title a line in, one JSONL answer a line out, in order, from the fine-tuned
    folder (its newest export, ONNX); chunks of 5 lines so order is restored across them."""
    titles = write_text(os.path.join(machine.root, "titles.txt"),
                        "".join(t + "\n" for t in sentiment_texts()))
    out = os.path.join(machine.root, "titles.jsonl")
    done = predict(machine, f"--model_dir={machine.exports['classifier']['folder']}",
                   f"--input_file={titles}", f"--output_file={out}", "--chunk_size=5",
                   "--batch_size=3")
    assert done.returncode == 0, done.stderr[-3000:]
    assert_classifier_answers(machine, "classifier", json_lines(open(out).read()))
    assert re.search(r"predict: 16 lines answered \(16 rows\), [0-9.,]+ lines/sec \(done\)",
                     done.stderr), done.stderr[-2000:]
    assert not [n for n in os.listdir(machine.root) if n.startswith(".titles.jsonl")]


def test_predict_from_standard_input_to_standard_output(machine):
    """The windows classifier's export: stdin to stdout, the same answers."""
    done = predict(machine, f"--model_dir={machine.exports['windows']['export']}",
                   "--input_file=-", "--output_file=-",
                   stdin="".join(t + "\n" for t in sentiment_texts()))
    assert done.returncode == 0, done.stderr[-3000:]
    assert_classifier_answers(machine, "windows", json_lines(done.stdout))


def test_predict_gzip_tsv_columns_and_tsv_output(machine):
    import gzip
    path = os.path.join(machine.root, "titles.tsv.gz")
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("id\ttitle\n" + "".join(f"{i}\t{t}\n" for i, t in enumerate(sentiment_texts())))
    done = predict(machine, f"--model_dir={machine.exports['classifier']['export']}",
                   f"--input_file={path}", "--text_column=title", "--output_file=-",
                   "--output_format=tsv")
    assert done.returncode == 0, done.stderr[-3000:]
    header, *rows = done.stdout.splitlines()
    assert header.split("\t") == ["label", "probabilities.0", "probabilities.1"]
    answers = [{"label": r.split("\t")[0],
                "probabilities": {"0": float(r.split("\t")[1]), "1": float(r.split("\t")[2])}}
               for r in rows]
    assert_classifier_answers(machine, "classifier", answers)
    # Written to a .tsv.gz: TSV by the name (no --output_format), gzip-compressed, the
    # header naming the file gunzip restores (not the temporary it was written as).
    out = os.path.join(machine.root, "answers.tsv.gz")
    again = predict(machine, f"--model_dir={machine.exports['classifier']['export']}",
                    f"--input_file={path}", "--text_column=title", f"--output_file={out}")
    assert again.returncode == 0, again.stderr[-3000:]
    with open(out, "rb") as f:
        packed = f.read()
    assert packed[:2] == b"\x1f\x8b" and packed[3] & 0x08   # gzip, with a file name
    assert packed[10:packed.index(b"\0", 10)] == b"answers.tsv"
    assert gzip.decompress(packed).decode("utf-8") == done.stdout


def test_predict_stopped_by_sigterm_goes_on_where_it_stopped(machine):
    """A real SIGTERM to bert-ad predict (no TensorFlow) in the middle of 4,800 titles
    written as TSV gzip: it stops after the chunk being scored and keeps the answers so
    far (docs/predict.md "Stopped and resumed"); a run with other flags is refused and
    changes nothing; the same command goes on and every line is answered as
    --predict_from_export answered it, the header written once."""
    import gzip
    texts = sentiment_texts()
    repeats = 300
    titles = write_text(os.path.join(machine.root, "many_titles.txt"),
                        "".join(t + "\n" for t in texts) * repeats)
    out = os.path.join(machine.root, "many_answers.tsv.gz")
    args = [f"--model_dir={machine.exports['classifier']['export']}", f"--input_file={titles}",
            f"--output_file={out}", "--chunk_size=20", "--batch_size=4"]
    log_path = os.path.join(machine.root, "stopped.log")
    with open(log_path, "w") as log:
        # A progress line after every chunk: the signal comes once answers are written.
        process = subprocess.Popen(
            [sys.executable, "-c", WITHOUT_TENSORFLOW, "predict", *args,
             "--progress_every_s=0.001"], cwd=machine.root,
            env=dict(os.environ, PYTHONPATH=REPO), stdout=subprocess.DEVNULL, stderr=log)
        try:
            deadline = time.time() + TIMEOUT
            while "lines answered" not in open(log_path).read():
                assert process.poll() is None and time.time() < deadline, \
                    open(log_path).read()[-3000:]
                time.sleep(0.02)
            process.send_signal(signal.SIGTERM)
            code = process.wait(TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    text = open(log_path).read()
    assert code == 128 + signal.SIGTERM, text[-3000:]
    stopped = re.fullmatch(
        rf"error: stopped by SIGTERM after line (\d+) of --input_file={re.escape(titles)}: "
        rf"the answers to it and the lines before it \((\d+)\) are kept in "
        rf"{re.escape(out)}\.partial; the same command goes on from there",
        text.splitlines()[-1])
    assert stopped and "Traceback" not in text, text[-3000:]
    kept = int(stopped.group(1))
    assert kept == int(stopped.group(2)) and kept % 20 == 0 and 0 < kept < 300 * len(texts)
    assert not os.path.exists(out)
    with gzip.open(out + ".partial", "rt", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 1 + kept   # the header and the kept answers
    partial = open(out + ".partial", "rb").read()

    refused = predict(machine, *args, "--output_format=jsonl")
    assert_one_error_line(refused, f"{out}.partial holds the answers to the first {kept} "
                          "line(s) made with other flags (output_format: 'tsv' then, "
                          "'jsonl' now)")
    assert open(out + ".partial", "rb").read() == partial

    done = predict(machine, *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"going on from line {kept + 1} of --input_file={titles}" in done.stderr
    assert f"predict: {300 * len(texts)} answer(s) written to {out}" in done.stderr
    assert not [n for n in os.listdir(machine.root) if n.startswith("many_answers.tsv.gz.")]
    with gzip.open(out, "rt", encoding="utf-8") as f:   # two gzip members, one stream
        header, *rows = f.read().splitlines()
    assert header.split("\t") == ["label", "probabilities.0", "probabilities.1"]
    assert len(rows) == 300 * len(texts)
    for start in range(0, len(rows), len(texts)):
        answers = [{"label": r.split("\t")[0], "probabilities": {
            "0": float(r.split("\t")[1]), "1": float(r.split("\t")[2])}}
            for r in rows[start:start + len(texts)]]
        assert_classifier_answers(machine, "classifier", answers)


def ner_sentences(machine) -> list:
    sentences, words = [], []
    for line in lines(os.path.join(machine.exports["ner"]["flags"]["data_dir"], "test.txt")):
        if line:
            words.append(line.split("\t")[0])
        elif words:
            sentences.append(words)
            words = []
    return sentences


def test_predict_ner_tokens_and_text_as_predict_from_export(machine):
    sentences = ner_sentences(machine)
    expected = [line.split("\t")[1] for line in
                lines(os.path.join(machine.outputs["ner"], "predict.txt")) if line]
    entities = [json.loads(line)["entities"] for line in
                lines(os.path.join(machine.outputs["ner"], "predict_entities.jsonl"))]
    tokens = write_text(os.path.join(machine.root, "ner.jsonl"),
                        "".join(json.dumps({"tokens": s}) + "\n" for s in sentences))
    done = predict(machine, f"--model_dir={machine.exports['ner']['export']}",
                   f"--input_file={tokens}", "--output_file=-", "--doc_stride=16")
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json_lines(done.stdout)
    assert [t for a in answers for t in a["tags"]] == expected
    assert [a["entities"] for a in answers] == entities
    # Plain text, split into characters as the model was trained: the same tags, and
    # each entity's character offsets point at its text.
    texts = write_text(os.path.join(machine.root, "ner.txt"),
                       "".join(" ".join(s[:10]) + "".join(s[10:]) + "\n" for s in sentences))
    done = predict(machine, f"--model_dir={machine.exports['ner']['export']}",
                   f"--input_file={texts}", "--output_file=-", "--doc_stride=16")
    assert done.returncode == 0, done.stderr[-3000:]
    answers = json_lines(done.stdout)
    assert [t for a in answers for t in a["tags"]] == expected
    for text, answer in zip(lines(texts), answers):
        assert all(text[e["start"]:e["end"]] == e["text"] for e in answer["entities"])


def test_predict_squad_columns_and_jsonl_as_predict_from_export(machine):
    with open(SQUAD_FILE, encoding="utf-8") as f:
        squad = json.load(f)
    questions = [(q["id"], q["question"], p["context"]) for a in squad["data"]
                 for p in a["paragraphs"] for q in p["qas"]]
    expected = json.loads(open(os.path.join(machine.outputs["squad"], "predictions.json"),
                               encoding="utf-8").read())
    flags = [f"--model_dir={machine.exports['squad']['export']}", "--output_file=-",
             "--doc_stride=16", "--max_query_length=16"]
    jsonl = write_text(os.path.join(machine.root, "squad.jsonl"), "".join(
        json.dumps({"question": q, "context": c}) + "\n" for _, q, c in questions))
    csv_file = write_text(os.path.join(machine.root, "squad.csv"), "".join(
        '"{}","{}"\n'.format(q.replace('"', '""'), c.replace('"', '""'))
        for _, q, c in questions))
    for args in ([f"--input_file={jsonl}"],
                 [f"--input_file={csv_file}", "--text_column=0", "--text_b_column=1"]):
        done = predict(machine, *(flags + args))
        assert done.returncode == 0, done.stderr[-3000:]
        answers = json_lines(done.stdout)
        assert [a["answer"] for a in answers] == [expected[i] for i, _, _ in questions]
        for (_, _, context), answer in zip(questions, answers):
            if answer["answer"]:
                assert context[answer["start"]:answer["end"]] == answer["answer"]


def test_predict_embeddings_as_features(machine):
    instances = []
    for line in lines(machine.exports["features"]["flags"]["input_file"]):
        a, separator, b = line.partition(" ||| ")
        instances.append({"text_a": a, "text_b": b} if separator else line)
    path = write_text(os.path.join(machine.root, "features.jsonl"),
                      "".join(json.dumps(i) + "\n" for i in instances))
    done = predict(machine, f"--model_dir={machine.exports['features']['export']}",
                   f"--input_file={path}", "--output_file=-")
    assert done.returncode == 0, done.stderr[-3000:]
    got = np.array([a["embedding"] for a in json_lines(done.stdout)])
    np.testing.assert_allclose(got, np.load(machine.outputs["features"] + ".npy"), atol=ATOL)


@pytest.mark.parametrize("name, content, flags, expected", [
    ("bad_utf8.txt", b"a fine title\nanother\n\xff\xfe broken\nlast\n", [],
     "--input_file={path} line 3 is not UTF-8 text (its byte 1)"),
    ("bad.jsonl", b'"a title"\n{"text_a": "fine"}\n{"text_a": \n', [],
     "--input_file={path} line 3 is not JSON"),
    ("short.tsv", b"1\ta title\n2\n3\tlast\n", ["--text_column=1"],
     "--input_file={path} line 2 has 1 tab-separated column(s); column 1 (0-based) is "
     "missing"),
    ("unknown.jsonl", b'"a title"\n{"title": "x"}\n', [],
     "--input_file={path} line 2: the instance has an unknown field 'title'"),
])
def test_predict_refuses_a_bad_line_by_number_and_writes_nothing(machine, name, content,
                                                                 flags, expected):
    path = write_text(os.path.join(machine.root, name), content)
    out = os.path.join(machine.root, name + ".out.jsonl")
    done = predict(machine, f"--model_dir={machine.exports['classifier']['export']}",
                   f"--input_file={path}", f"--output_file={out}", "--chunk_size=1", *flags)
    assert_one_error_line(done, expected.format(path=path), "--skip_bad_lines",
                          "nothing was written")
    assert not os.path.exists(out)
    assert not [n for n in os.listdir(machine.root) if n.startswith("." + name)]
    # --skip_bad_lines: one answer line per input line, the bad one's error in its place.
    done = predict(machine, f"--model_dir={machine.exports['classifier']['export']}",
                   f"--input_file={path}", f"--output_file={out}", "--skip_bad_lines", *flags)
    assert done.returncode == 0, done.stderr[-3000:]
    answers = [json.loads(line) for line in lines(out)]
    assert len(answers) == len(content.splitlines())
    bad = int(expected.split(" line ")[1].split()[0].rstrip(":")) - 1
    assert answers[bad]["error"].startswith(expected.format(path=path))
    assert [list(a) for i, a in enumerate(answers) if i != bad] == \
        [["label", "probabilities"]] * (len(answers) - 1)
    assert "1 of them the errors of bad lines (--skip_bad_lines)" in done.stderr


def test_predict_refuses_a_hand_edited_export_json_in_one_line(machine):
    export_dir = edited_export(machine, "predict_labels", lambda m, _: m.__setitem__("labels", 7))
    titles = write_text(os.path.join(machine.root, "one.txt"), "a title\n")
    out = os.path.join(machine.root, "edited.jsonl")
    done = predict(machine, f"--model_dir={export_dir}", f"--input_file={titles}",
                   f"--output_file={out}")
    assert_one_error_line(done, export_dir, "'labels' is 7, not null or a list of distinct "
                          "strings")
    assert not os.path.exists(out)


@pytest.mark.skipif(not _have("tensorflow"), reason="scoring a checkpoint needs TensorFlow")
def test_predict_from_a_folders_checkpoint_on_two_towers(machine):
    """A fine-tuned folder without an export: its checkpoint scored on 2 towers (with
    TensorFlow), the same answers as its ONNX export's --predict_from_export."""
    for key in ("classifier", "windows"):
        folder = os.path.join(machine.root, f"{key}_without_export")
        shutil.copytree(machine.exports[key]["folder"], folder,
                        ignore=shutil.ignore_patterns("export", "cache"))
        out = os.path.join(machine.root, f"{key}_checkpoint.jsonl")
        titles = write_text(os.path.join(machine.root, "ckpt_titles.txt"),
                            "".join(t + "\n" for t in sentiment_texts()))
        done = subprocess.run(
            [sys.executable, "-m", "bert_ad", "predict", f"--model_dir={folder}",
             f"--input_file={titles}", f"--output_file={out}", "--n_gpus=2",
             "--batch_size=5"], cwd=machine.root, env=dict(os.environ, PYTHONPATH=REPO),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=TIMEOUT)
        assert done.returncode == 0, done.stderr[-3000:]
        assert "on 2 tower(s)" in done.stderr
        assert_classifier_answers(machine, key, json_lines(open(out).read()))
