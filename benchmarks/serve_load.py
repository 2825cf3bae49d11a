"""Load on `bert-ad serve` from an asynchronous HTTP client, beside the export's batch scoring.

    python -m benchmarks.serve_load --export_dir EXPORT --data_dir MR_DIR \\
        [--clients 1,4,16,64] [--seconds 20] [--rounds 2]

EXPORT is a classifier export (docs/serving.md has the commands: MiniLM
fine-tuned on the movie reviews); MR_DIR/test.tsv gives the texts. Measured,
each in its own process, rounds alternating the order:

  ceiling     what --do_predict --predict_from_export runs on the same rows:
              bert_ad.serving.load.ExportScorer over length-sorted batches of
              --batch rows (dynamic padding), rows/sec after warm-up batches;
              and one forward pass (one row, batch 1), median latency
  serve       `bert-ad serve --model_dir=EXPORT` (--port=0) under N clients
              for each N of --clients: N concurrent connections (aiohttp's
              client), each sending one text a request, the next as soon as
              the answer arrives, for --seconds; requests/sec and latency
              percentiles (p50, p95, p99), the server's batch sizes (from its
              /metrics) and its peak RSS (VmHWM).

The client runs on the same machine, and takes CPU from the server: on a
2-core machine the serve rates are a lower bound.
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

from bert_ad.tools import benchmarking as bench  # (no TensorFlow import)

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

def ceiling_worker(args) -> dict:
    import numpy as np

    from bert_ad.compat import TF_VERSION
    from bert_ad.data.batching import inference_batches, make_batch
    from bert_ad.serving.predictions import ServeOptions
    from bert_ad.serving.served_models import ModelSpec, load_model

    model = load_model(ModelSpec("ceiling", args.export_dir), ServeOptions())
    predictions = model.predictions
    texts = texts_of(args.data_dir, args.rows)
    features = predictions.featurize([predictions.parse(t) for t in texts]).examples
    batches = list(inference_batches(features, args.batch, 1))
    for tower_indices, rows in batches[:WARMUP_BATCHES]:
        model.scorer.run([make_batch(features, i, "dynamic", batch_size=rows)
                          for i in tower_indices])
    start, cpu = time.perf_counter(), time.process_time()
    for tower_indices, rows in batches:
        model.scorer.run([make_batch(features, i, "dynamic", batch_size=rows)
                          for i in tower_indices])
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
    # One forward pass: one row of median length, alone.
    middle = int(np.argsort(features.lengths)[len(features) // 2])
    single = make_batch(features, [middle], "dynamic")
    passes = []
    for _ in range(FORWARD_PASSES):
        started = time.perf_counter()
        model.scorer.run([single])
        passes.append(time.perf_counter() - started)
    model.close()
    return {"rows": len(features), "rows_per_sec": len(features) / seconds,
            "rows_per_cpu_sec": len(features) / cpu_seconds,
            "forward_ms": 1000 * float(np.median(passes)), "tensorflow": TF_VERSION,
            "onednn": bench.onednn_state(), "peak_rss_mb": peak_rss_mb(os.getpid())}


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as f:
        found = re.search(r"VmHWM:\s+(\d+) kB", f.read())
    return int(found.group(1)) / 1024 if found else float("nan")


# --- the server under load ---------------------------------------------------------------

async def load(url: str, texts: list, clients: int, seconds: float) -> dict:
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
                body = json.dumps({"instances": [texts[k % len(texts)]]})
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
            "rows_per_sec": len(latencies) / elapsed, "p50_ms": percentile(50),
            "p95_ms": percentile(95), "p99_ms": percentile(99)}


def batch_figures(url: str) -> tuple:
    """(batches, rows) the server has scored, from its /metrics."""
    import urllib.request
    with urllib.request.urlopen(url + "/metrics") as response:
        text = response.read().decode("utf-8")
    count = re.search(r"bert_ad_serve_batch_rows_count\{[^}]*\} ([0-9.e+]+)", text)
    total = re.search(r"bert_ad_serve_batch_rows_sum\{[^}]*\} ([0-9.e+]+)", text)
    return float(count.group(1)), float(total.group(1))


def serve_round(args, texts: list, levels: list, log_path: str) -> dict:
    command = [sys.executable, "-m", "bert_ad", "serve", f"--model_dir=bench={args.export_dir}",
               "--port=0", f"--max_batch_size={args.max_batch_size}",
               f"--batch_timeout_ms={args.batch_timeout_ms}"]
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                  env=dict(os.environ, PYTHONPATH=REPO))
    try:
        url = wait_for_address(server, log_path)
        predict = url + "/v1/models/bench:predict"
        asyncio.run(load(predict, texts, 4, 2.0))   # warm-up
        results = []
        for clients in levels:
            before = batch_figures(url)
            result = asyncio.run(load(predict, texts, clients, args.seconds))
            after = batch_figures(url)
            result["mean_batch_rows"] = (after[1] - before[1]) / max(1.0, after[0] - before[0])
            results.append(result)
            print(f"  serve, {clients:3d} clients: {result['rows_per_sec']:7.1f} rows/sec, "
                  f"p50 {result['p50_ms']:.1f} ms, batches of {result['mean_batch_rows']:.1f}"
                  f" (load {os.getloadavg()[0]:.1f})", file=sys.stderr, flush=True)
        rss = peak_rss_mb(server.pid)
    finally:
        server.terminate()
        code = server.wait(120)
    if code != 0:
        raise RuntimeError(f"bert-ad serve exited {code} after SIGTERM; see {log_path}")
    return {"levels": results, "peak_rss_mb": rss}


def wait_for_address(server: subprocess.Popen, log_path: str) -> str:
    deadline = time.time() + STARTUP_SECONDS
    while time.time() < deadline:
        with open(log_path) as f:
            found = re.search(r"listening on (http://[0-9.]+:\d+)", f.read())
        if found:
            return found.group(1)
        if server.poll() is not None:
            break
        time.sleep(0.2)
    raise RuntimeError(f"bert-ad serve did not start; see {log_path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--export_dir", required=True, help="a classifier export")
    parser.add_argument("--data_dir", required=True, help="folder with test.tsv")
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--rows", type=int, default=0, help="first N texts only")
    parser.add_argument("--batch", type=int, default=32, help="the ceiling's batch")
    parser.add_argument("--max_batch_size", type=int, default=32)
    parser.add_argument("--batch_timeout_ms", type=float, default=1.0)
    parser.add_argument("--json", default=None, help="write every result here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        bench.emit_result(ceiling_worker(args))
        return 0
    levels = [int(n) for n in args.clients.split(",")]
    texts = texts_of(args.data_dir, args.rows)
    info = bench.machine_description()
    ceilings, serves = [], []
    worker = [sys.executable, "-m", WORKER_MODULE, "--worker", "--export_dir",
              args.export_dir, "--data_dir", args.data_dir, "--rows", str(args.rows),
              "--batch", str(args.batch)]
    with tempfile.TemporaryDirectory(prefix="serve_load_") as scratch:
        for round_index in range(args.rounds):
            steps = ("ceiling", "serve") if round_index % 2 == 0 else ("serve", "ceiling")
            for step in steps:
                if step == "ceiling":
                    result = bench.run_worker(worker, env={"PYTHONPATH": REPO})
                    ceilings.append(result)
                    print(f"  ceiling: {result['rows_per_sec']:7.1f} rows/sec, one forward "
                          f"pass {result['forward_ms']:.1f} ms (load {os.getloadavg()[0]:.1f})",
                          file=sys.stderr, flush=True)
                else:
                    serves.append(serve_round(args, texts, levels, os.path.join(
                        scratch, f"serve_{round_index}.log")))
    ceiling = bench.median([c["rows_per_sec"] for c in ceilings])
    forward = bench.median([c["forward_ms"] for c in ceilings])
    info.update(tensorflow=ceilings[0]["tensorflow"], onednn=ceilings[0]["onednn"])
    print("### Machine\n")
    print(bench.markdown_table(["", ""], [[k, v] for k, v in info.items()], "ll"))
    print("\n" + bench.cpu_line(ceilings[0]["onednn"]))
    print(f"\n### {len(texts)} texts of {args.data_dir}/test.tsv, one a request; "
          f"--max_batch_size={args.max_batch_size} --batch_timeout_ms={args.batch_timeout_ms}"
          f"; median of {args.rounds} rounds of {args.seconds:g} s\n")
    rows = [["--predict_from_export (batch " + str(args.batch) + ")", bench.fmt(ceiling),
             "1.00", "-", f"{forward:.1f} (one forward pass)", "-", "-", "-",
             bench.fmt(bench.median([c["peak_rss_mb"] for c in ceilings]), 0)]]
    one_client = None
    for i, clients in enumerate(levels):
        runs = [s["levels"][i] for s in serves]
        rate = bench.median([r["rows_per_sec"] for r in runs])
        one_client = rate if clients == 1 else one_client
        rows.append([f"serve, {clients} client{'s' if clients > 1 else ''}", bench.fmt(rate),
                     f"{rate / ceiling:.2f}",
                     f"{rate / one_client:.2f}" if one_client else "-",
                     bench.fmt(bench.median([r["p50_ms"] for r in runs])),
                     bench.fmt(bench.median([r["p95_ms"] for r in runs])),
                     bench.fmt(bench.median([r["p99_ms"] for r in runs])),
                     bench.fmt(bench.median([r["mean_batch_rows"] for r in runs])),
                     bench.fmt(bench.median([s["peak_rss_mb"] for s in serves]), 0)])
    print(bench.markdown_table(["", "rows/sec", "x ceiling", "x 1 client", "p50 ms", "p95 ms",
                                "p99 ms", "rows a batch", "peak RSS MB"], rows, "lrrrrrrrr"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "ceilings": ceilings, "serves": serves}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
