"""bert-ad serve under hostile clients (issue 54): bounded, fair, authenticated.

One tiny token classifier (a CRF tagger, windows of 16 pieces) is trained and
exported once; two servers serve it on free ports:

* `server`: an API key file, batches of 2 rows, --access_log. Bad bodies of
  any content are one 400 and one log line; a client gone mid-body is one
  counted line (499), no traceback; a one-sentence request sent while a
  request of about a thousand windows is queued is answered first; keys are
  checked, and re-read when the file changes and on SIGHUP.
* a server on every interface without a key (a warning line), stopped with
  SIGTERM while three clients hold bodies 7 bytes into 100 (--body_timeout_s
  far away): it exits 0 within the drain; before that, a request past
  --request_timeout_s got 504 and its rows were dropped.
* a server with --tls_cert/--tls_key (tests/data/tls, a self-signed certificate
  for 127.0.0.1): HTTPS answers as the plain server does, with that certificate.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import ssl
import threading
import time

import numpy as np
import pytest

pytest.importorskip("aiohttp", reason='bert-ad serve needs the serve extra: '
                    'pip install "bert_ad[serve]"')
pytest.importorskip("prometheus_client", reason='bert-ad serve needs the serve extra: '
                    'pip install "bert_ad[serve]"')

from bert_ad.cli import ner as ner_cli  # noqa: E402
from bert_ad.cli import serve as serve_cli  # noqa: E402

from helpers import Processes, read_text, run_cli_in_process, run_main, tiny_model, wait  # noqa: E402
from test_serve import (FILLER, TAGS, conll_sentences, export_of, metric_values,  # noqa: E402
                        start_server, write_conll)

KEY = "key-one"
NER = "/v1/models/ner:predict"
DOC_STRIDE = 6
SENTENCE = "alice went to paris with bob"
TLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "tls")


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("hostile"))
    data = os.path.join(root, "data")
    os.makedirs(data)
    write_conll(os.path.join(data, "train.txt"), conll_sentences(8, 1))
    model = tiny_model(os.path.join(root, "model"), texts=[" ".join(list(TAGS) + FILLER)])
    assert run_main(ner_cli, {"data_dir": data, "max_seq_length": 16, "doc_stride": DOC_STRIDE,
                              "vocab_file": model.vocab_file,
                              "bert_config_file": model.config_file, "use_crf": True,
                              "train_batch_size": 4, "num_train_epochs": 1,
                              "output_dir": os.path.join(root, "ner"), "do_train": True,
                              "do_export": True}) == 0
    return export_of(os.path.join(root, "ner"))


class Client:
    """HTTP/1.1 to one server: (status, headers, parsed JSON or text) per request."""

    def __init__(self, url: str, tls: ssl.SSLContext = None):
        self.host, port = url.split("//")[1].split(":")
        self.port, self.tls = int(port), tls

    def request(self, method: str, path: str, body=None, key=KEY, headers=None,
                timeout: float = 120) -> tuple:
        data = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        if key:
            sent["Authorization"] = f"Bearer {key}"
        connection = (http.client.HTTPSConnection(self.host, self.port, timeout=timeout,
                                                  context=self.tls) if self.tls else
                      http.client.HTTPConnection(self.host, self.port, timeout=timeout))
        try:
            connection.request(method, path, body=data, headers=sent)
            response = connection.getresponse()
            text = response.read().decode("utf-8")
        finally:
            connection.close()
        kind = response.getheader("Content-Type", "")
        return (response.status, response.headers,
                json.loads(text) if kind.startswith("application/json") else text)

    def post(self, path: str, body, **options) -> tuple:
        return self.request("POST", path, body, **options)

    def metrics(self) -> dict:
        return metric_values(self.request("GET", "/metrics", key=None)[2])

    def partial_body(self, sent: bytes = b'{"insta', declared: int = 100) -> socket.socket:
        """A connection that declared `declared` body bytes and sent `sent`."""
        connection = socket.create_connection((self.host, self.port))
        connection.sendall(f"POST {NER} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}"
                           f"\r\nContent-Type: application/json\r\nContent-Length: {declared}"
                           "\r\n\r\n".encode() + sent)
        return connection


def write_keys(path: str, text: str) -> None:
    """Replaced whole, as an editor or a secret manager does (a new inode)."""
    with open(path + ".new", "w") as f:
        f.write(text)
    os.replace(path + ".new", path)


def long_text(words: int, seed: int = 0) -> str:
    rng = np.random.RandomState(seed)
    return " ".join(str(w) for w in rng.choice(list(TAGS) + FILLER, words))


@pytest.fixture(scope="module")
def served(export, tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    keys = str(root / "keys.txt")
    write_keys(keys, KEY + "\n")
    with Processes() as processes:
        server = start_server(processes, str(root / "server.log"), {"ner": export},
                              f"--doc_stride={DOC_STRIDE}", "--max_batch_size=2",
                              "--max_request_rows=1500", "--max_request_bytes=400000",
                              f"--api_key_file={keys}", "--access_log")
        server.client, server.keys = Client(server.url), keys
        yield server
        server.process.send_signal(signal.SIGTERM)
        assert wait(server.process, 60) == 0, read_text(server.process.log_path)


def log_of(server) -> str:
    return read_text(server.process.log_path)


# ---------------------------------------------------------------------------
# Any body: one 4xx naming the problem, one log line, no traceback.

BAD_BODIES = {
    "a lone surrogate in a text": (b'{"instances": ["John \\ud800 lives in Paris ."]}', 400,
                                   "instances[0] has a lone surrogate (\\ud800) at character 5"),
    "a lone surrogate in tokens": (b'{"instances": [{"tokens": ["John", "\\udfff"]}]}', 400,
                                   "instances[0]['tokens'][1] has a lone surrogate"),
    "200,000 nested [": (b"[" * 200000, 400, "nests deeper than 32 levels"),
    "33 nested lists": (b'{"instances": ' + b"[" * 33 + b"]" * 33 + b"}", 400,
                        "nests deeper than 32 levels"),
    "NaN": (b'{"instances": [NaN]}', 400, "NaN, which is not a number a request can use"),
    "1e999": (b'{"instances": [1e999]}', 400, "the number 1e999, out of range"),
    "a 30-digit integer": (b'{"instances": [' + b"9" * 30 + b"]}", 400,
                           "out of range (at most 64 bits)"),
    "a million-digit integer": (b"[" + b"7" * 300000 + b"]", 400,
                                "out of range (at most 64 bits)"),
}


@pytest.mark.parametrize("case", sorted(BAD_BODIES))
def test_a_bad_body_is_400_and_one_log_line(served, case):
    body, status, message = BAD_BODIES[case]
    request_id = "bad-" + re.sub(r"[^a-z0-9]", "-", case)
    got, headers, answer = served.client.post(NER, body, headers={"X-Request-Id": request_id})
    assert (got, list(answer)) == (status, ["error"]), answer
    assert message in answer["error"] and "\n" not in answer["error"], answer
    assert headers["X-Request-Id"] == request_id
    deadline = time.time() + 30
    while time.time() < deadline and request_id not in log_of(served):
        time.sleep(0.1)
    lines = [line for line in log_of(served).splitlines() if request_id in line]
    assert len(lines) == 1 and f" {status} " in lines[0] and message in lines[0], lines
    assert "Traceback" not in log_of(served)


def test_a_client_gone_mid_body_is_one_counted_line_not_a_traceback(served):
    before = served.client.metrics()
    connection = served.client.partial_body()
    time.sleep(0.3)   # the server is reading the body when the client leaves
    connection.close()
    series = 'bert_ad_serve_requests_total{code="499",model="ner"}'
    deadline = time.time() + 30
    while time.time() < deadline and served.client.metrics().get(series, 0) <= before.get(
            series, 0):
        time.sleep(0.1)
    after = served.client.metrics()
    assert after[series] == before.get(series, 0) + 1
    assert after.get('bert_ad_serve_request_errors_total{code="500",model="ner"}', 0) == \
        before.get('bert_ad_serve_request_errors_total{code="500",model="ner"}', 0)
    log = log_of(served)
    assert len(re.findall(r" 499 .*the client closed the connection mid-body", log)) == 1, log
    assert "Traceback" not in log, log


# ---------------------------------------------------------------------------
# Fair and bounded cost.


def test_a_short_request_is_answered_before_a_long_one_sent_first(served):
    client = served.client
    big = long_text(6000)   # about 1,000 windows of 14 pieces every 6: 500 batches of 2
    finished = []

    def send(name: str, instances) -> None:
        status, _, answer = client.post(NER, {"instances": instances})
        finished.append((name, status, answer))

    first = threading.Thread(target=send, args=("big", [big]))
    first.start()
    # Sent once the big one's rows are queued (tokenised): plain FIFO would
    # then answer it only after all of them.
    queued = 'bert_ad_serve_queued_rows{model="ner"}'
    deadline = time.time() + 120
    while time.time() < deadline and client.metrics().get(queued, 0) < 100:
        time.sleep(0.005)
    assert client.metrics()[queued] >= 100
    send("small", [SENTENCE])
    first.join(120)
    assert [(name, status) for name, status, _ in finished] == [("small", 200), ("big", 200)]
    assert len(finished[1][2]["predictions"][0]["tokens"]) == 6000
    assert finished[0][2]["predictions"][0]["tokens"] == SENTENCE.split()
    line = [line for line in log_of(served).splitlines() if " 200 rows=1 tokens=" in line]
    assert line and re.search(r"version=\d+", line[-1]), line


def test_a_request_of_too_many_rows_is_413_naming_the_limit(served):
    status, _, answer = served.client.post(NER, {"instances": [long_text(12000)]})
    assert status == 413, answer
    assert re.match(r"the request makes \d+ rows to score .* over --max_request_rows=1500",
                    answer["error"]), answer
    assert served.client.metrics()['bert_ad_serve_queued_rows{model="ner"}'] == 0


# ---------------------------------------------------------------------------
# Keys, ids, probes.


def test_an_api_key_is_needed_except_for_probes_and_metrics(served):
    client = served.client
    status, headers, answer = client.post(NER, {"instances": [SENTENCE]}, key=None)
    assert (status, headers["WWW-Authenticate"]) == (401, "Bearer")
    assert "needs an API key" in answer["error"]
    status, _, answer = client.post(NER, {"instances": [SENTENCE]}, key="key-onf")
    assert status == 401 and "does not carry one of this server's API keys" in answer["error"]
    status, headers, answer = client.post(NER, {"instances": [SENTENCE]},
                                          headers={"X-Request-Id": "mine-1"})
    assert status == 200 and headers["X-Request-Id"] == "mine-1"
    assert headers["X-Model-Version"].isdigit()
    assert re.search(r"serve: mine-1 POST /v1/models/ner:predict 200 rows=1 tokens=\d+ "
                     r"ms=[0-9.]+ version=\d+", log_of(served))
    assert client.request("GET", "/healthz", key=None)[::2] == (200, {
        "status": "ok", "models": ["ner"]})
    assert client.request("GET", "/readyz", key=None)[::2] == (200, {
        "status": "ready", "models": ["ner"]})
    assert client.request("GET", "/metrics", key=None)[0] == 200
    assert client.request("GET", "/v1/models/ner", key=None)[0] == 401


def test_the_key_file_is_re_read_when_it_changes_and_on_sighup(served):
    client = served.client
    write_keys(served.keys, "# rotated\nkey-two\n")
    deadline = time.time() + 60
    while time.time() < deadline and client.post(NER, {"instances": ["a"]},
                                                 key="key-two")[0] != 200:
        time.sleep(0.2)
    assert client.post(NER, {"instances": ["a"]}, key="key-two")[0] == 200
    assert client.post(NER, {"instances": ["a"]}, key=KEY)[0] == 401
    # SIGHUP re-reads at once (and does not stop the server).
    with open(served.keys, "a") as f:
        f.write(KEY + "\n")
    served.process.send_signal(signal.SIGHUP)
    deadline = time.time() + 60
    while time.time() < deadline and "SIGHUP: --api_key_file re-read, 2 key(s)" not in \
            log_of(served):
        time.sleep(0.1)
    assert "SIGHUP: --api_key_file re-read, 2 key(s)" in log_of(served)
    assert client.post(NER, {"instances": ["a"]}, key=KEY)[0] == 200
    assert served.process.poll() is None


# ---------------------------------------------------------------------------
# Deadlines and the drain.


def test_a_deadline_is_504_and_sigterm_ends_the_drain_whatever_clients_do(export, tmp_path):
    with Processes() as processes:
        server = start_server(processes, str(tmp_path / "server.log"), {"ner": export},
                              f"--doc_stride={DOC_STRIDE}", "--max_batch_size=2",
                              "--max_request_rows=2000", "--max_request_bytes=400000",
                              "--request_timeout_s=0.05", "--body_timeout_s=600",
                              "--drain_timeout_s=2", "--host=0.0.0.0")
        client = Client(server.url)
        status, _, answer = client.post(NER, {"instances": [long_text(6000)]}, key=None)
        assert status == 504 and "--request_timeout_s=0.05" in answer["error"], answer
        # Its rows left the queue: far fewer than its ~1,000 were scored.
        deadline = time.time() + 30
        while time.time() < deadline and client.metrics()[
                'bert_ad_serve_queued_rows{model="ner"}'] > 0:
            time.sleep(0.05)
        time.sleep(0.5)
        metrics = client.metrics()
        assert metrics['bert_ad_serve_queued_rows{model="ner"}'] == 0
        assert metrics.get('bert_ad_serve_batch_rows_sum{model="ner"}', 0) < 500, metrics
        assert metrics['bert_ad_serve_refusals_total{model="ner",reason="deadline"}'] == 1

        # Three clients 7 bytes into bodies of 100, then silent and still connected.
        held = [client.partial_body() for _ in range(3)]
        time.sleep(0.5)
        server.process.send_signal(signal.SIGTERM)
        # Without the drain's bound it would wait for them forever (600 s bodies).
        assert wait(server.process, 90) == 0, read_text(server.process.log_path)
        for connection in held:
            connection.close()
    log = read_text(server.process.log_path)
    assert "0 request(s) in flight will be answered (within --drain_timeout_s=2)" in log, log
    assert "listening on 0.0.0.0 without --api_key_file: anyone who can reach" in log, log
    assert "Traceback" not in log, log


def test_https_answers_as_plain_http_with_the_certificate_given(export, served, tmp_path):
    cert, key = os.path.join(TLS, "localhost.pem"), os.path.join(TLS, "localhost.key")
    with Processes() as processes:
        server = start_server(processes, str(tmp_path / "server.log"), {"ner": export},
                              f"--doc_stride={DOC_STRIDE}", f"--tls_cert={cert}",
                              f"--tls_key={key}")
        assert server.url.startswith("https://127.0.0.1:"), server.url
        # A client that trusts that certificate (and checks the address it names).
        trusted = Client(server.url, ssl.create_default_context(cafile=cert))
        status, _, answer = trusted.post(NER, {"instances": [SENTENCE]}, key=None)
        assert status == 200, answer
        plain = served.client.post(NER, {"instances": [SENTENCE]})[2]
        assert answer["predictions"] == plain["predictions"]
        # The certificate served is the one given: one nobody vouches for is refused.
        with pytest.raises(ssl.SSLCertVerificationError):
            Client(server.url, ssl.create_default_context()).request("GET", "/healthz")
        # Plain HTTP to the HTTPS port gets no answer, and the server serves on.
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            Client(server.url.replace("https://", "http://")).request("GET", "/healthz")
        assert trusted.request("GET", "/healthz", key=None)[0] == 200
        server.process.send_signal(signal.SIGTERM)
        assert wait(server.process, 60) == 0, read_text(server.process.log_path)
    assert "Traceback" not in read_text(server.process.log_path)


# ---------------------------------------------------------------------------
# Lines that say what is wrong.


def test_flags_that_cannot_work_are_one_line_saying_why(tmp_path):
    empty = tmp_path / "keys.txt"
    empty.write_text("# no key yet\n\n")
    cases = {
        ("--host=8.8.8.8",): "--host=8.8.8.8: 8.8.8.8 is not an address of this machine",
        ("--model_name=a b",): "--model_name='a b' is not usable in a URL: a name is "
                               "letters, digits, _ . and -",
        (f"--api_key_file={empty}",): f"--api_key_file={empty}: it holds no key (one a line)",
        (f"--api_key_file={tmp_path / 'none'}",): "No such file or directory",
        ("--tls_cert=cert.pem",): "--tls_cert and --tls_key go together",
        (f"--tls_cert={os.path.join(TLS, 'localhost.key')}",
         f"--tls_key={os.path.join(TLS, 'localhost.pem')}"): "not a certificate and its key",
        ("--drain_timeout_s=0",): "--drain_timeout_s=0.0 must be more than 0 seconds",
        ("--max_batch_tokens=0",): "--max_batch_tokens=0 must be at least 1",
    }
    for flags, message in cases.items():
        run = run_cli_in_process(serve_cli.cli, ["bert-ad serve", f"--model_dir={tmp_path}",
                                                 "--port=0", *flags])
        assert run.returncode == 2, (flags, run.stderr)
        (line,) = run.stderr.strip().splitlines()
        assert line.startswith("error: ") and message in line, line
