"""bert-ad serve: new versions of a model base path without a restart, and POST /v1/embeddings.

Two features exports of a tiny model (initial weights of two seeds, so their
vectors differ) and the vectors `bert-ad features` wrote with each. A real
server on a free port serves OUT=BASE whose version 1 is the first export,
under a steady load of client threads, while version 2 is published as the
export publishes one (built in a hidden `.2.XXXXXXXX.staging` folder, then
renamed): no request fails, every answer is the vectors of the version it
names, each client's answers switch from 1 to 2 once and for all, version 1
is unloaded. Then a broken version 3 (a damaged export.json) and a broken 4 (a
damaged model file) are each one log line, and version 2 goes on answering.

The same server answers OpenAI's /v1/embeddings (API key, shapes, base64) as
`bert-ad features` wrote.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("aiohttp", reason='bert-ad serve needs the serve extra: '
                    'pip install "bert_ad[serve]"')
pytest.importorskip("prometheus_client", reason='bert-ad serve needs the serve extra: '
                    'pip install "bert_ad[serve]"')

from bert_ad.cli import features as features_cli  # noqa: E402

from helpers import (Processes, read_text, run_main, sample_sentiment_texts,  # noqa: E402
                     save_initial_checkpoint, tiny_model, wait)
from test_serve import start_server  # noqa: E402

ATOL = 1e-5
KEY = "versions-test-key"
POLL_S = 0.2
CLIENTS = 3


class Exports:
    """Two features exports, the texts and each export's vectors of them."""


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> Exports:
    e = Exports()
    root = str(tmp_path_factory.mktemp("serve_versions"))
    e.root = root
    e.texts = sample_sentiment_texts()[:12]
    input_file = os.path.join(root, "texts.txt")
    with open(input_file, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in e.texts))
    model = tiny_model(os.path.join(root, "model"), initializer_range=1.0)
    e.exports, e.vectors = {}, {}
    for seed in (1, 2):
        checkpoint = save_initial_checkpoint(
            os.path.join(root, f"init{seed}", "bert_model.ckpt"), model.bert_config(),
            seed=seed)
        e.exports[seed] = os.path.join(root, f"export{seed}")
        output = os.path.join(root, f"vectors{seed}.npy")
        assert run_main(features_cli, {
            "vocab_file": model.vocab_file, "bert_config_file": model.config_file,
            "init_checkpoint": checkpoint, "input_file": input_file, "output_file": output,
            "max_seq_length": 16, "pooling": "mean", "normalize": True, "do_export": True,
            "export_dir": e.exports[seed]}) == 0
        e.vectors[seed] = np.load(output)
    assert np.abs(e.vectors[1] - e.vectors[2]).max() > 1e-2   # the versions differ
    return e


def publish(source: str, base: str, version: int, damage=None) -> None:
    """Copy `source` in as BASE/VERSION the way an export is published: whole in a
    hidden staging folder (left there a few polls: it must be skipped), then renamed."""
    staging = os.path.join(base, f".{version}.0123abcd.staging")
    shutil.copytree(source, staging)
    if damage is not None:
        damage(staging)
    time.sleep(3 * POLL_S)
    os.rename(staging, os.path.join(base, str(version)))


def damage_export_json(folder: str) -> None:
    with open(os.path.join(folder, "assets.extra", "export.json"), "w") as f:
        f.write('{"task": ')


def damage_model_file(folder: str) -> None:
    """The largest file of the export (its weights), cut to a quarter."""
    files = [os.path.join(d, n) for d, _, names in os.walk(folder) for n in names]
    largest = max(files, key=os.path.getsize)
    with open(largest, "r+b") as f:
        f.truncate(os.path.getsize(largest) // 4)


def post(served, path: str, body, key: str = KEY) -> tuple:
    """(status, parsed JSON answer) of a POST sending `key` as its bearer token."""
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(served.url + path, data=json.dumps(body).encode("utf-8"),
                                     headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode("utf-8"))


def get(served, path: str) -> tuple:
    request = urllib.request.Request(served.url + path,
                                     headers={"Authorization": f"Bearer {KEY}"})
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.status, json.loads(response.read().decode("utf-8"))


class Load:
    """Client threads predicting the texts in turn until stopped; every answer kept."""

    def __init__(self, served, texts: list):
        self.served, self.texts = served, texts
        self.answers = {c: [] for c in range(CLIENTS)}   # (status, text index, answer)
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(c,)) for c in
                        range(CLIENTS)]
        for thread in self.threads:
            thread.start()

    def _client(self, client: int) -> None:
        k = client
        while not self.stopping.is_set():
            index = k % len(self.texts)
            status, answer = post(self.served, "/v1/models/feat:predict",
                                  {"instances": [self.texts[index]]})
            self.answers[client].append((status, index, answer))
            k += CLIENTS

    def versions_seen(self) -> set:
        return {a["model_version"] for answers in self.answers.values()
                for status, _, a in answers if status == 200}

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(120)


def wait_for(condition, what: str, timeout: float = 180.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if condition():
            return
        time.sleep(0.1)
    pytest.fail(f"timed out waiting for {what}")


def statuses(served) -> dict:
    status, answer = get(served, "/v1/models/feat")
    assert status == 200, answer
    return {entry["version"]: (entry["state"], entry["status"]["error_code"])
            for entry in answer["model_version_status"]}


def test_new_versions_are_switched_to_without_a_failed_request(exports, tmp_path):
    base = str(tmp_path / "base")
    os.makedirs(base)
    shutil.copytree(exports.exports[1], os.path.join(base, "1"))
    key_file = tmp_path / "keys.txt"
    key_file.write_text(KEY + "\n")
    with Processes() as processes:
        log_path = str(tmp_path / "server.log")
        served = start_server(processes, log_path, {"feat": base}, f"--poll_s={POLL_S}",
                              "--max_batch_size=4", f"--api_key_file={key_file}")
        load = Load(served, exports.texts)
        try:
            wait_for(lambda: sum(map(len, load.answers.values())) >= 20, "answers of 1")
            publish(exports.exports[2], base, 2)
            wait_for(lambda: "2" in load.versions_seen(), "answers of version 2")
            wait_for(lambda: statuses(served).get("1") == ("END", "OK"), "1 unloaded")
            answered = sum(map(len, load.answers.values()))
            wait_for(lambda: sum(map(len, load.answers.values())) >= answered + 20,
                     "answers after the switch")
            # Broken versions: each one line, and version 2 goes on answering.
            publish(exports.exports[2], base, 3, damage_export_json)
            publish(exports.exports[1], base, 4, damage_model_file)
            wait_for(lambda: "model feat version 4 not served" in read_text(log_path),
                     "version 4 refused")
            time.sleep(5 * POLL_S)   # polls that must not try them again
            answered = sum(map(len, load.answers.values()))
            wait_for(lambda: sum(map(len, load.answers.values())) >= answered + 10,
                     "answers after the broken versions")
        finally:
            load.stop()
        # TF Serving's states; the broken ones END with their error (its code
        # INVALID_ARGUMENT when the export is refused as one, UNKNOWN for another failure).
        listed = statuses(served)
        assert {v: listed[v] for v in ("1", "2", "3")} == {
            "1": ("END", "OK"), "2": ("AVAILABLE", "OK"), "3": ("END", "INVALID_ARGUMENT")}
        assert listed["4"][0] == "END" and listed["4"][1] in ("INVALID_ARGUMENT", "UNKNOWN")
        assert post(served, "/v1/models/feat/versions/1:predict", {"instances": ["a"]})[0] \
            == 404
        status, answer = post(served, "/v1/models/feat/versions/2:predict",
                              {"instances": ["a"]})
        assert (status, answer["model_version"]) == (200, "2")
        check_embeddings_route(served, exports)
        served.process.terminate()
        assert wait(served.process, 60) == 0
    log = read_text(log_path)
    for answers in load.answers.values():
        assert answers and all(status == 200 for status, _, _ in answers), answers[-3:]
        versions = [int(answer["model_version"]) for _, _, answer in answers]
        # Once a client is answered by version 2, never again by version 1.
        assert versions == sorted(versions) and versions[0] == 1 and versions[-1] == 2
        for _, index, answer in answers:   # each answer made by the version it names
            np.testing.assert_allclose(answer["predictions"][0]["embedding"],
                                       exports.vectors[int(answer["model_version"])][index],
                                       atol=ATOL)
    for version in (3, 4):
        assert log.count(f"model feat version {version} not served") == 1, log[-3000:]
    assert "version 1 unloaded" in log and "Traceback" not in log
    assert ".staging" not in log   # a folder not yet published is not looked at


def check_embeddings_route(served, exports) -> None:
    """OpenAI's /v1/embeddings on the served version (2): its vectors, as
    `bert-ad features` wrote them."""
    expected = exports.vectors[2]
    status, answer = post(served, "/v1/embeddings", {"input": exports.texts, "model": "feat"})
    assert status == 200, answer
    assert answer["object"] == "list" and answer["model"] == "feat"
    assert [d["index"] for d in answer["data"]] == list(range(len(exports.texts)))
    assert {d["object"] for d in answer["data"]} == {"embedding"}
    np.testing.assert_allclose([d["embedding"] for d in answer["data"]], expected, atol=ATOL)
    tokens = answer["usage"]["prompt_tokens"]
    assert tokens == answer["usage"]["total_tokens"] >= 3 * len(exports.texts)
    status, answer = post(served, "/v1/embeddings", {"input": exports.texts[3], "model": "feat",
                                                    "encoding_format": "base64"})
    assert status == 200, answer
    (data,) = answer["data"]
    vector = np.frombuffer(base64.b64decode(data["embedding"]), dtype="<f4")
    np.testing.assert_allclose(vector, expected[3], atol=ATOL)
    status, answer = post(served, "/v1/embeddings", {"input": "a", "model": "feat"}, key="")
    assert (status, list(answer)) == (401, ["error"])   # a key, as for predict
    for body, code, words in (
            ({"input": "a", "model": "nothing"}, 404, "no model named 'nothing'"),
            ({"input": [], "model": "feat"}, 400, '"input" is empty'),
            ({"input": [[1, 2]], "model": "feat"}, 400, "a string or a list of strings"),
            ({"input": "a"}, 400, 'the request needs "model"'),
            ({"input": "a", "model": "feat", "encoding_format": "int8"}, 400,
             "encoding_format 'int8' is not one of float, base64"),
            ({"input": "a", "model": "feat", "dimensions": 3}, 400, "are not shortened")):
        status, answer = post(served, "/v1/embeddings", body)
        assert (status, list(answer)) == (code, ["error"]), (body, answer)
        assert words in answer["error"], answer
