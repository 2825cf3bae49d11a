"""Load on `bert-ad serve` from an asynchronous HTTP client, beside the export's batch scoring.

    python -m benchmarks.serve_load --export_dir EXPORT --data_dir MR_DIR \\
        [--clients 1,4,16,64] [--seconds 10] [--rounds 3]

EXPORT is a classifier export (docs/serving.md has the commands: MiniLM
fine-tuned on the movie reviews); MR_DIR/test.tsv gives the texts. Two
processes hold the model, each idle while the other works:

  ceiling     what --do_predict --predict_from_export runs on the same rows:
              bert_ad.serving.tf_scorer.ExportScorer over length-sorted batches of
              --batch rows (dynamic padding); one pass over the rows, rows/sec;
              and one forward pass (one row of median length, batch 1), median
              latency of 30
  serve       `bert-ad serve --model_dir=EXPORT --port=0` under N clients: N
              concurrent connections (aiohttp's client), each sending one text
              a request, the next as soon as the answer arrives, for --seconds;
              requests/sec, latency percentiles (p50, p95, p99), the server's
              rows a batch (its /metrics) and peak RSS (VmHWM)

Beside a peer (`--infinity=PATH/infinity_emb`, issue 54): EXPORT is a features
export (`bert-ad features --do_export --export_format=onnx`) of the Hugging Face
model in --hf_dir (default: the minilm asset, all-MiniLM-L6-v2), and
infinity-emb serves --hf_dir with its CPU ONNX backend (`--engine optimum`),
installed in a venv of its own (never a dependency of ours):

    python3.11 -m venv /tmp/venv-infinity
    /tmp/venv-infinity/bin/pip install "infinity-emb[optimum,server]==0.0.78"
    python -m benchmarks.serve_load --export_dir EXPORT --data_dir MR_DIR \
        --infinity /tmp/venv-infinity/bin/infinity_emb

--hf_dir must hold model.onnx (`optimum-cli export onnx --model DIR --task
feature-extraction OUT`, then copy OUT/model.onnx into DIR); the venv's optimum
and transformers as docs/serving.md lists them.

Both are driven by the same client with the same texts, one a request, as
OpenAI's embeddings request ({"input": [text], "model": "bench"}: our
/v1/embeddings, infinity's /embeddings), level by level, the two servers in
turn (the first alternating), each idle while the other is measured; rows/sec,
p50/p99 and peak RSS side by side.

A shared virtual machine's speed drifts by 2x between minutes, so every serve
level is measured between two ceiling passes (and the one-client level between
two forward-pass measurements) and compared with their mean: the ratios pair
figures taken within seconds of each other. Rounds alternate the order of the
levels. Each side's rows per CPU-second (the server process's CPU time during
the level, the ceiling process's during its pass) compares them on a machine
shared with other jobs, where wall-clock rates follow the neighbours. The
client runs on the same machine and takes CPU from the server: on 2 cores the
serve rates are a lower bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from benchmarks import measuring as bench  # (no TensorFlow import)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER_MODULE = "benchmarks.serve_load"
WARMUP_BATCHES = 3
FORWARD_PASSES = 30
STARTUP_SECONDS = 300


def texts_of(data_dir: str, rows: int) -> list:
    with open(os.path.join(data_dir, "test.tsv"), encoding="utf-8") as f:
        texts = [line.rstrip("\n").split("\t", 1)[1] for line in f if line.strip()]
    return texts[:rows] if rows else texts


# --- the ceiling: the export's own batch scoring, in a worker process ------------------

def ceiling_worker(args) -> None:
    """Load the export, then answer each line of stdin ("pass" or "forward") with
    one BENCH_RESULT line."""
    import numpy as np

    from bert_ad.compat import TF_VERSION
    from bert_ad.data.batching import inference_batches, make_batch
    from bert_ad.inference.predictions import ServeOptions
    from bert_ad.inference.served_models import ModelSpec, load_model

    model = load_model(ModelSpec("ceiling", args.export_dir), ServeOptions())
    predictions = model.predictions
    texts = texts_of(args.data_dir, args.rows)
    features = predictions.featurize([predictions.parse(t) for t in texts]).examples
    batches = [[make_batch(features, i, "dynamic", batch_size=rows) for i in indices]
               for indices, rows in inference_batches(features, args.batch, 1)]
    for batch in batches[:WARMUP_BATCHES]:
        model.scorer.run(batch)
    middle = int(np.argsort(features.lengths)[len(features) // 2])
    single = [make_batch(features, [middle], "dynamic")]
    bench.emit_result({"rows": len(features), "tensorflow": TF_VERSION,
                       "onednn": bench.onednn_state()})
    for command in sys.stdin:
        if command.strip() == "pass":
            start, cpu = time.perf_counter(), time.process_time()
            for batch in batches:
                model.scorer.run(batch)
            result = {"rows_per_sec": len(features) / (time.perf_counter() - start),
                      "rows_per_cpu_sec": len(features) / (time.process_time() - cpu)}
        else:
            passes = []
            for _ in range(FORWARD_PASSES):
                started = time.perf_counter()
                model.scorer.run(single)
                passes.append(time.perf_counter() - started)
            result = {"forward_ms": 1000 * float(np.median(passes))}
        result["peak_rss_mb"] = bench.process_peak_rss_mb(os.getpid())
        bench.emit_result(result)
    model.close()


class Ceiling:
    """The ceiling worker process, asked for one measurement at a time."""

    def __init__(self, args):
        command = bench.worker_command(WORKER_MODULE, "ceiling", export_dir=args.export_dir,
                                       data_dir=args.data_dir, rows=args.rows,
                                       batch=args.batch)
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True,
                                        env=dict(os.environ, PYTHONPATH=REPO))
        self.info = self._result()

    def _result(self) -> dict:
        for line in self.process.stdout:
            if line.startswith(bench.RESULT_PREFIX):
                return json.loads(line[len(bench.RESULT_PREFIX):])
        raise RuntimeError(f"the ceiling worker exited {self.process.wait()}")

    def measure(self, what: str) -> dict:
        self.process.stdin.write(what + "\n")
        self.process.stdin.flush()
        return self._result()

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(60)


# --- the server under load ---------------------------------------------------------------

def predict_body(text: str) -> str:
    return json.dumps({"instances": [text]})


def embeddings_body(text: str) -> str:
    """OpenAI's embeddings request, the same to both servers."""
    return json.dumps({"input": [text], "model": "bench"})


async def load(url: str, texts: list, clients: int, seconds: float,
               body_of=predict_body) -> dict:
    """`clients` connections, each sending one text a request for `seconds`."""
    import aiohttp

    latencies, failures = [], 0
    connector = aiohttp.TCPConnector(limit=clients)
    async with aiohttp.ClientSession(connector=connector) as session:
        end = time.perf_counter() + seconds

        async def client(index: int) -> None:
            nonlocal failures
            k = index
            while time.perf_counter() < end:
                body = body_of(texts[k % len(texts)])
                k += clients
                started = time.perf_counter()
                async with session.post(url, data=body,
                                        headers={"Content-Type": "application/json"}) as r:
                    await r.read()
                    if r.status != 200:
                        failures += 1
                        continue
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*[client(i) for i in range(clients)])
        elapsed = time.perf_counter() - started
    latencies.sort()

    def percentile(p: float) -> float:
        return 1000 * latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))]

    return {"clients": clients, "requests": len(latencies), "failures": failures,
            "rows_per_sec": len(latencies) / elapsed, "seconds": elapsed,
            "p50_ms": percentile(50),
            "p95_ms": percentile(95), "p99_ms": percentile(99)}


def batch_figures(url: str) -> tuple:
    """(batches, rows) the server has scored, from its /metrics."""
    import urllib.request
    with urllib.request.urlopen(url + "/metrics") as response:
        text = response.read().decode("utf-8")
    count = re.search(r"bert_ad_serve_batch_rows_count\{[^}]*\} ([0-9.e+]+)", text)
    total = re.search(r"bert_ad_serve_batch_rows_sum\{[^}]*\} ([0-9.e+]+)", text)
    return float(count.group(1)), float(total.group(1))


def start_server(args, log_path: str) -> tuple:
    """(process, base URL) of `bert-ad serve` on the export, warmed up."""
    command = [sys.executable, "-m", "bert_ad", "serve", f"--model_dir=bench={args.export_dir}",
               "--port=0", f"--max_batch_size={args.max_batch_size}",
               f"--batch_timeout_ms={args.batch_timeout_ms}"]
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, PYTHONPATH=REPO))
    deadline = time.time() + STARTUP_SECONDS
    while time.time() < deadline:
        with open(log_path) as f:
            found = re.search(r"listening on (http://[0-9.]+:\d+)", f.read())
        if found:
            return server, found.group(1)
        if server.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"bert-ad serve did not start; see {log_path}")


def serve_level(server: subprocess.Popen, url: str, texts: list, clients: int,
                seconds: float) -> dict:
    before, cpu = batch_figures(url), bench.process_cpu_seconds(server.pid)
    result = asyncio.run(load(url + "/v1/models/bench:predict", texts, clients, seconds))
    after, cpu = batch_figures(url), bench.process_cpu_seconds(server.pid) - cpu
    result["rows_a_batch"] = (after[1] - before[1]) / max(1.0, after[0] - before[0])
    result["rows_per_cpu_sec"] = result["requests"] / max(cpu, 1e-9)
    return result


def measure(args, texts: list, levels: list, scratch: str) -> dict:
    """Every round: each level between two ceiling passes (1 client: and between two
    forward-pass measurements too)."""
    ceiling = Ceiling(args)
    server, url = start_server(args, os.path.join(scratch, "serve.log"))
    runs = {clients: [] for clients in levels}
    try:
        asyncio.run(load(url + "/v1/models/bench:predict", texts, 4, 2.0))   # warm-up
        for round_index in range(args.rounds):
            for clients in levels if round_index % 2 == 0 else levels[::-1]:
                single = clients == 1
                before = ceiling.measure("pass")
                forward_before = ceiling.measure("forward") if single else None
                result = serve_level(server, url, texts, clients, args.seconds)
                forward_after = ceiling.measure("forward") if single else None
                after = ceiling.measure("pass")
                result["ceiling"] = (before["rows_per_sec"] + after["rows_per_sec"]) / 2
                result["ceiling_per_cpu_sec"] = (before["rows_per_cpu_sec"]
                                                 + after["rows_per_cpu_sec"]) / 2
                if single:
                    result["forward_ms"] = (forward_before["forward_ms"]
                                            + forward_after["forward_ms"]) / 2
                runs[clients].append(result)
                print(f"  {clients:3d} clients: {result['rows_per_sec']:7.1f} rows/sec "
                      f"(ceiling {result['ceiling']:.1f}), p50 {result['p50_ms']:.1f} ms"
                      + (f" (forward pass {result['forward_ms']:.1f} ms)" if single else "")
                      + f", {result['rows_a_batch']:.1f} rows a batch "
                      f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        rss = {"serve": bench.process_peak_rss_mb(server.pid), "ceiling": after["peak_rss_mb"]}
    finally:
        server.terminate()
        code = server.wait(120)
        ceiling.close()
    if code != 0:
        raise RuntimeError(f"bert-ad serve exited {code} after SIGTERM")
    return {"info": ceiling.info, "runs": runs, "peak_rss_mb": rss}


# --- beside a peer: infinity-emb ----------------------------------------------------------

def scoring_figures(url: str) -> tuple:
    """(batches, rows, seconds spent scoring them) from the server's /metrics."""
    import urllib.request
    with urllib.request.urlopen(url + "/metrics") as response:
        text = response.read().decode("utf-8")

    def figure(name: str) -> float:
        found = re.search(name + r"\{[^}]*\} ([0-9.e+]+)", text)
        return float(found.group(1)) if found else 0.0

    return (figure("bert_ad_serve_batch_rows_count"), figure("bert_ad_serve_batch_rows_sum"),
            figure("bert_ad_serve_batch_seconds_sum"))


def start_infinity(args, log_path: str) -> tuple:
    """(process, base URL) of infinity-emb serving --hf_dir on its CPU ONNX backend."""
    import socket
    with socket.socket() as probe:   # a free port (infinity takes no port 0)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Run in the model's folder as "." : infinity 0.0.78 hands optimum 2.x the ONNX
    # file's path, which optimum wants relative to the folder. Mean pooling as the
    # model's sentence-transformers config says (infinity's "auto" took [CLS] here).
    command = [args.infinity, "v2", "--model-id", ".", "--engine", "optimum",
               "--device", "cpu", "--pooling-method", "mean", "--served-model-name", "bench",
               "--host", "127.0.0.1", "--port", str(port),
               "--batch-size", str(args.max_batch_size)]
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=args.hf_dir)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + STARTUP_SECONDS
    import urllib.request
    while time.time() < deadline and process.poll() is None:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.terminate()
    raise RuntimeError(f"infinity-emb did not start; see {log_path}")


def measure_beside_infinity(args, texts: list, levels: list, scratch: str) -> dict:
    """Every round, every level: bert-ad serve and infinity-emb in turn."""
    ours, ours_url = start_server(args, os.path.join(scratch, "serve.log"))
    peer, peer_url = start_infinity(args, os.path.join(scratch, "infinity.log"))
    routes = {"ours": (ours, ours_url + "/v1/embeddings"),
              "infinity": (peer, peer_url + "/embeddings")}
    runs = {side: {clients: [] for clients in levels} for side in routes}
    try:
        for _, url in routes.values():   # warm-up
            asyncio.run(load(url, texts, 4, 3.0, embeddings_body))
        turn = 0
        for round_index in range(args.rounds):
            for clients in levels if round_index % 2 == 0 else levels[::-1]:
                sides = list(routes) if turn % 2 == 0 else list(routes)[::-1]
                turn += 1
                for side in sides:
                    process, url = routes[side]
                    cpu = bench.process_cpu_seconds(process.pid)
                    before = scoring_figures(ours_url) if side == "ours" else None
                    result = asyncio.run(load(url, texts, clients, args.seconds,
                                              embeddings_body))
                    result["cpu_seconds"] = bench.process_cpu_seconds(process.pid) - cpu
                    if before is not None:   # where our time goes: the model's share
                        after = scoring_figures(ours_url)
                        result["rows_a_batch"] = (after[1] - before[1]) / max(
                            1.0, after[0] - before[0])
                        result["scoring_share"] = (after[2] - before[2]) / result["seconds"]
                    result["loadavg"] = os.getloadavg()[0]
                    runs[side][clients].append(result)
                    print(f"  {side:8s} {clients:3d} clients: {result['rows_per_sec']:7.1f} "
                          f"rows/sec, p50 {result['p50_ms']:.1f} ms, p99 "
                          f"{result['p99_ms']:.1f} ms, {result['failures']} failed (load "
                          f"{result['loadavg']:.1f})", file=sys.stderr, flush=True)
        rss = {side: bench.process_peak_rss_mb(process.pid)
               for side, (process, _) in routes.items()}
    finally:
        for process, _ in routes.values():
            process.terminate()
            process.wait(120)
    return {"runs": runs, "peak_rss_mb": rss}


def report_beside_infinity(args, texts: list, levels: list, measured: dict) -> None:
    runs, rss = measured["runs"], measured["peak_rss_mb"]
    print("\n" + bench.cpu_line())
    print(f"\n### {len(texts)} texts of {args.data_dir}/test.tsv, one a request "
          f"(/v1/embeddings, OpenAI's shape); --max_batch_size={args.max_batch_size}; "
          f"medians of {args.rounds} rounds of {args.seconds:g} s a level\n")
    rows = []
    ones = runs["ours"].get(1, [])
    for clients in levels:
        ours, peer = runs["ours"][clients], runs["infinity"][clients]
        ratio = bench.median([a["rows_per_sec"] / b["rows_per_sec"] for a, b in zip(ours, peer)])
        versus_one = bench.median([r["rows_per_sec"] / one["rows_per_sec"]
                                   for r, one in zip(ours, ones)]) if ones else float("nan")
        failures = sum(r["failures"] for r in ours + peer)
        rows.append([str(clients)] + [bench.fmt(bench.median([r[k] for r in side]))
                                      for side in (ours, peer)
                                      for k in ("rows_per_sec", "p50_ms", "p99_ms")]
                    + [f"{ratio:.2f}", f"{versus_one:.2f}",
                       bench.fmt(bench.median([r["rows_a_batch"] for r in ours])),
                       "{:.0%}".format(bench.median([r["scoring_share"] for r in ours])),
                       str(failures),
                       f"{bench.median([r['loadavg'] for r in ours + peer]):.1f}"])
    print(bench.markdown_table(
        ["clients", "bert-ad serve rows/sec", "p50 ms", "p99 ms", "infinity-emb rows/sec",
         "p50 ms", "p99 ms", "x infinity", "x 1 client (ours)", "rows a batch (ours)",
         "model busy (ours)", "failed", "load avg"], rows, "rrrrrrrrrrrrr"))
    print(f"\nPeak RSS: bert-ad serve {rss['ours']:.0f} MB, infinity-emb {rss['infinity']:.0f} "
          "MB.")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--export_dir", required=True, help="a classifier export")
    parser.add_argument("--data_dir", required=True, help="folder with test.tsv")
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=0, help="first N texts only")
    parser.add_argument("--batch", type=int, default=32, help="the ceiling's batch")
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--batch_timeout_ms", type=float, default=5.0)
    parser.add_argument("--json", default=None, help="write every result here")
    parser.add_argument("--infinity", default=None,
                        help="infinity-emb's executable: measure beside it (EXPORT: a "
                             "features export of --hf_dir)")
    parser.add_argument("--hf_dir", default=None,
                        help="the Hugging Face model infinity serves (default: the minilm "
                             "asset)")
    bench.add_worker_flag(parser, ["ceiling"])
    args = parser.parse_args(argv)
    if args.worker:
        ceiling_worker(args)
        return 0
    levels = [int(n) for n in args.clients.split(",")]
    texts = texts_of(args.data_dir, args.rows)
    info = bench.machine_description()
    if args.infinity:
        args.hf_dir = args.hf_dir or bench.default_hf_dir()
        with tempfile.TemporaryDirectory(prefix="serve_load_") as scratch:
            measured = measure_beside_infinity(args, texts, levels, scratch)
        info.update(loadavg_after=" ".join(f"{x:.2f}" for x in os.getloadavg()))
        print("### Machine\n")
        print(bench.markdown_table(["", ""], [[k, v] for k, v in info.items()], "ll"))
        report_beside_infinity(args, texts, levels, measured)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"machine": info, "measured": measured}, f)
        return 0
    with tempfile.TemporaryDirectory(prefix="serve_load_") as scratch:
        measured = measure(args, texts, levels, scratch)
    runs, worker = measured["runs"], measured["info"]
    info.update(tensorflow=worker["tensorflow"], onednn=worker["onednn"],
                loadavg_after=" ".join(f"{x:.2f}" for x in os.getloadavg()))
    print("### Machine\n")
    print(bench.markdown_table(["", ""], [[k, v] for k, v in info.items()], "ll"))
    print("\n" + bench.cpu_line(worker["onednn"]))
    print(f"\n### {len(texts)} texts of {args.data_dir}/test.tsv, one a request; "
          f"--max_batch_size={args.max_batch_size} --batch_timeout_ms={args.batch_timeout_ms}"
          f"; medians of {args.rounds} rounds of {args.seconds:g} s a level\n")
    ones = runs.get(1, [])
    rows = []
    for clients in levels:
        level = runs[clients]
        ratio = bench.median([r["rows_per_sec"] / r["ceiling"] for r in level])
        versus_one = bench.median([r["rows_per_sec"] / one["rows_per_sec"]
                                   for r, one in zip(level, ones)]) if ones else float("nan")
        p50 = bench.fmt(bench.median([r["p50_ms"] for r in level]))
        if clients == 1:
            p50 += " ({:.2f}x one forward pass of {:.1f} ms)".format(
                bench.median([r["p50_ms"] / r["forward_ms"] for r in level]),
                bench.median([r["forward_ms"] for r in level]))
        per_cpu = bench.median([r["rows_per_cpu_sec"] / r["ceiling_per_cpu_sec"]
                                for r in level])
        rows.append([str(clients), bench.fmt(bench.median([r["rows_per_sec"] for r in level])),
                     bench.fmt(bench.median([r["ceiling"] for r in level])), f"{ratio:.2f}",
                     f"{per_cpu:.2f}", f"{versus_one:.2f}", p50,
                     bench.fmt(bench.median([r["p95_ms"] for r in level])),
                     bench.fmt(bench.median([r["p99_ms"] for r in level])),
                     bench.fmt(bench.median([r["rows_a_batch"] for r in level]))])
    print(bench.markdown_table(
        ["clients", "serve rows/sec", "ceiling rows/sec (beside)", "x ceiling",
         "x ceiling per CPU-sec", "x 1 client", "p50 ms", "p95 ms", "p99 ms", "rows a batch"],
        rows, "rrrrrrlrrr"))
    rss = measured["peak_rss_mb"]
    print(f"\nPeak RSS: bert-ad serve {rss['serve']:.0f} MB, the ceiling's process "
          f"{rss['ceiling']:.0f} MB. Ceiling: --predict_from_export's scoring, batches of "
          f"{args.batch} rows sorted by length.")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "measured": measured}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
