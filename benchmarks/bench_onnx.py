"""Scoring full windows: our checkpoint, ONNX fp32, ONNX int8 and Hugging Face fp32, side by side.

    python -m benchmarks.bench_onnx                 # MiniLM and the Chinese model, 128 and 512
    python -m benchmarks.bench_onnx --models minilm --seqs 128
    python -m benchmarks.bench_onnx --tables_from onnx.json

Set up once in --work_dir (kept): each model fetched by our scripts
(scripts/fetch_minilm.sh, scripts/fetch_chinese_model.sh), fine-tuned one step
as a sentence classifier (so the checkpoint has its head), exported at each
max_seq_length as ONNX fp32 and int8 (`--do_export --export_format=onnx`,
int8 measured on 32 dev rows), and converted for Hugging Face (bert_ad.convert
google2hf); a predict file of running text (Pang & Lee's reviews for MiniLM,
People's Daily for the Chinese model) whose every row fills max_seq_length.

Each round runs two workers at the same time, one core each
(benchmarks/measuring.py: run_workers_side_by_side), then again with the
cores swapped: one of ours beside Hugging Face.

* ours (`tf`, `onnx_fp32`, `onnx_int8`): one whole `bert-ad classifier
  --do_predict` process, from the checkpoint or with --predict_from_export,
  batches of 32. Its rate is the rows over the process's whole life (Python
  start, imports, the tokenizer, loading the model, scoring, the result
  files), and also over the time inside the scorer's `run` alone ("model").
  The ONNX processes import no TensorFlow (bert_ad/onnx_predict.py; the
  worker fails if one did), as on a scoring machine without it.
* hf: BertForSequenceClassification (transformers, PyTorch CPU) in eval mode
  under torch.inference_mode, batches of 32 of the same token ids, after one
  untimed batch: rows over the forward passes ("model"), and over the
  process's life.

Peak RSS is each worker process's own (measuring.peak_rss_mb).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks import measuring as bench  # (no TensorFlow import)
from benchmarks.measuring import checkout_env, hf_dir_for, peak_rss_mb

WORKER_MODULE = "benchmarks.bench_onnx"
MODELS = ("minilm", "chinese")
OURS = ("tf", "onnx_fp32", "onnx_int8")
BATCH = 32
# Rows scored per worker: one to three minutes of Hugging Face on one core.
ROWS = {128: 480, 512: 96}
DEV_ROWS = 32


# --- setup ------------------------------------------------------------------------------

def process_seconds() -> float:
    """How long this process has lived (from /proc: its start to now)."""
    with open("/proc/self/stat") as f:
        started = int(f.read().rsplit(")", 1)[1].split()[19])   # field 22, clock ticks
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    return uptime - started / os.sysconf("SC_CLK_TCK")


def long_rows(name: str, tokenizer, seq: int, count: int) -> list:
    """`count` texts of the model's running text, each of at least seq - 2 pieces."""
    from benchmarks.bench_memory import texts_of
    rows, words, pieces = [], [], 0
    for text in texts_of(name):
        for word in text.split():
            words.append(word)
            pieces += len(tokenizer.tokenize(word))
            if pieces >= seq:
                rows.append(" ".join(words).replace("\t", " "))
                words, pieces = [], 0
                if len(rows) == count:
                    return rows
    raise RuntimeError(f"the {name} text fills only {len(rows)} rows of {seq} pieces")


def prepare(name: str, seq: int, args) -> dict:
    """Paths of one model at one length: checkpoint, exports, data, HF copy (made once)."""
    from benchmarks.bench_memory import model_dir, vocab_of
    from bert_ad.data.tokenization import make_tokenizer
    directory = model_dir(name, args.work_dir)
    vocab, lower = vocab_of(directory)
    work = os.path.join(args.work_dir, name)
    paths = {"model_dir": directory, "vocab": vocab, "lower": lower,
             "hf_dir": hf_dir_for(directory, args.work_dir, name),
             "data": os.path.join(work, f"data_{seq}"), "output": os.path.join(work, "trained"),
             "exports": {p: os.path.join(work, f"export_{seq}_{p}") for p in ("fp32", "int8")}}
    model_flags = [f"--vocab_file={vocab}", f"--do_lower_case={str(lower).lower()}",
                   f"--bert_config_file={directory}/bert_config.json"]
    paths["model_flags"] = model_flags
    if not os.path.exists(os.path.join(paths["data"], "test.tsv")):
        tokenizer = make_tokenizer(vocab, lower)
        texts = long_rows(name, tokenizer, seq, ROWS[seq] + DEV_ROWS + BATCH)
        staging = paths["data"] + ".staging"
        shutil.rmtree(staging, ignore_errors=True)
        os.makedirs(staging)
        for split, part in (("train", texts[:BATCH]), ("dev", texts[BATCH:BATCH + DEV_ROWS]),
                            ("test", texts[BATCH + DEV_ROWS:])):
            with open(os.path.join(staging, f"{split}.tsv"), "w", encoding="utf-8") as f:
                f.writelines(f"{i % 2}\t{text}\n" for i, text in enumerate(part))
        os.rename(staging, paths["data"])
    launcher = [sys.executable, "-m", "bert_ad", "classifier", "--task_name=sentiment",
                f"--data_dir={paths['data']}", f"--max_seq_length={seq}"] + model_flags
    env = dict(os.environ, **checkout_env())
    if not os.path.exists(os.path.join(paths["output"], "train_results.txt")):
        subprocess.run(launcher + [f"--init_checkpoint={directory}/bert_model.ckpt",
                                   "--do_train", "--train_batch_size=4", "--max_train_examples=4",
                                   "--num_train_epochs=1", f"--output_dir={paths['output']}"],
                       check=True, env=env)
    for precision, target in paths["exports"].items():
        if not os.path.exists(target):
            print(f"  export {name} {seq} onnx {precision}", file=sys.stderr, flush=True)
            subprocess.run(launcher + [f"--output_dir={paths['output']}", "--do_export",
                                       "--export_format=onnx",
                                       f"--export_precision={precision}",
                                       f"--export_dir={target}"], check=True, env=env)
    return paths


# --- workers ----------------------------------------------------------------------------

def worker_ours(args) -> dict:
    """One whole --do_predict process (this one), timed from its start."""
    from bert_ad.cli import classifier
    from bert_ad.inference import onnx_scorer

    inside = [0.0]

    def timed(run):
        def wrapper(self, batches):
            started = time.perf_counter()
            try:
                return run(self, batches)
            finally:
                inside[0] += time.perf_counter() - started
        return wrapper

    if args.variant == "tf":
        from bert_ad.parallel import scoring  # (TensorFlow)
        scoring.Scorer.run = timed(scoring.Scorer.run)
    else:
        onnx_scorer.OnnxScorer.run = timed(onnx_scorer.OnnxScorer.run)
    argv = ["bench", "--task_name=sentiment", f"--data_dir={args.data}", "--do_predict",
            f"--predict_batch_size={BATCH}", f"--output_dir={args.output_dir}"]
    if args.variant == "tf":
        argv += [f"--max_seq_length={args.seq}", f"--init_checkpoint={args.checkpoint}",
                 "--n_gpus=1", "--labels=0,1"] + args.model_flags.split()
    else:
        argv += [f"--predict_from_export={args.export}"]
    try:
        classifier.cli(argv)
    except SystemExit as e:
        if e.code:
            raise RuntimeError(f"the launcher exited {e.code}") from None
    wall = process_seconds()
    with open(os.path.join(args.output_dir, "predict.txt"), encoding="utf-8") as f:
        rows = sum(1 for _ in f)
    result = {"impl": args.variant, "rows": rows, "process_sec": wall,
              "rows_per_sec": rows / wall, "model_rows_per_sec": rows / inside[0],
              "peak_rss_mb": peak_rss_mb(), "threads": len(os.sched_getaffinity(0))}
    tensorflow = sorted(name for name in sys.modules if name.split(".")[0] == "tensorflow")
    if args.variant == "tf":
        result["onednn"] = bench.onednn_state()
    else:
        if tensorflow:  # the ONNX path of the command line imports none
            raise RuntimeError(f"TensorFlow was imported: {tensorflow[:3]}")
        import onnxruntime
        result["onnxruntime"] = onnxruntime.__version__
    return result


def worker_hf(args) -> dict:
    """Hugging Face scoring the same rows' ids: eval mode, torch.inference_mode."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench_train
    import numpy as np
    import torch
    import transformers
    from transformers import BertForSequenceClassification

    from bert_ad.data.processors import get_task, read_examples
    from bert_ad.data.tokenization import make_tokenizer

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    tokenizer = make_tokenizer(args.vocab, args.lower == "true")
    cls, sep = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    ids = np.array([[cls] + tokenizer.convert_tokens_to_ids(
        tokenizer.tokenize(e.text_a))[:args.seq - 2] + [sep]
        for e in read_examples(get_task("sentiment"), args.data, "test")], np.int64)
    model = BertForSequenceClassification.from_pretrained(args.hf_dir, num_labels=2).eval()
    stamps = []
    with torch.inference_mode():
        for start in range(-BATCH, len(ids), BATCH):  # one untimed batch first
            rows = torch.from_numpy(ids[max(start, 0):max(start, 0) + BATCH])
            if start == 0:
                stamps.append(time.perf_counter())
            model(input_ids=rows, attention_mask=torch.ones_like(rows)).logits.float()
        stamps.append(time.perf_counter())
    if "tensorflow" in sys.modules:  # its thread pools would share the core
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    return {"impl": "hf", "rows": len(ids), "model_rows_per_sec": len(ids) / (
        stamps[-1] - stamps[0]), "process_sec": process_seconds(),
        "rows_per_sec": len(ids) / process_seconds(), "peak_rss_mb": peak_rss_mb(),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "attn_implementation": getattr(model.config, "_attn_implementation", "?"),
        "threads": torch.get_num_threads()}


# --- driver -----------------------------------------------------------------------------

def worker_command(impl: str, paths: dict, seq: int, round_dir: str) -> list:
    flags = {"seq": seq, "data": paths["data"], "vocab": paths["vocab"],
             "lower": str(paths["lower"]).lower()}
    if impl == "hf":
        return bench.worker_command(WORKER_MODULE, impl, hf_dir=paths["hf_dir"], **flags)
    flags["output_dir"] = os.path.join(round_dir, impl)
    if impl == "tf":
        from bert_ad.parallel.checkpoint_files import step_checkpoints
        return bench.worker_command(WORKER_MODULE, impl, **flags,
                                    checkpoint=step_checkpoints(paths["output"])[-1],
                                    model_flags=" ".join(paths["model_flags"]))
    # onnx_PRECISION
    return bench.worker_command(WORKER_MODULE, impl, **flags,
                                export=paths["exports"][impl.split("_")[1]])


def run_rounds(args) -> list:
    rounds = []
    for name in args.models.split(","):
        for seq in (int(s) for s in args.seqs.split(",")):
            paths = prepare(name, seq, args)
            for impl in args.ours.split(","):
                for cores in ((0, 1), (1, 0)):
                    round_dir = os.path.join(args.work_dir, "rounds", f"{name}_{seq}_{impl}")
                    shutil.rmtree(round_dir, ignore_errors=True)
                    commands = [worker_command(i, paths, seq, round_dir)
                                for i in (impl, "hf")]
                    load = os.getloadavg()[0]
                    results = bench.run_workers_side_by_side(commands, cores,
                                                             env=checkout_env())
                    rounds.append({"model": name, "seq": seq, "impls": [impl, "hf"],
                                   "cores": list(cores), "load_before": load,
                                   "load_after": os.getloadavg()[0], "results": results})
                    print(f"  {name} {seq} {impl}@cpu{cores[0]} hf@cpu{cores[1]}: "
                          + ", ".join(f"{r.get('rows_per_sec', r.get('error'))}"
                                      for r in results), file=sys.stderr, flush=True)
                    if args.json:
                        with open(args.json, "w", encoding="utf-8") as f:
                            json.dump({"machine": bench.machine_description(),
                                       "rounds": rounds}, f, indent=1)
    return rounds


def table(rounds: list) -> str:
    onednn = next((r["onednn"] for one in rounds for r in one["results"] if "onednn" in r),
                  None)
    rows, ratios = [], {}
    for one in rounds:
        ours, hf = one["results"]
        key = (one["model"], one["seq"], one["impls"][0])
        if "error" in ours or "error" in hf:
            rows.append([one["model"], one["seq"], one["impls"][0], "failed: " + str(
                ours.get("error") or hf.get("error"))[-60:]] + [""] * 7)
            continue
        ratio = ours["rows_per_sec"] / hf["model_rows_per_sec"]
        ratios.setdefault(key, []).append(ratio)
        rows.append([one["model"], one["seq"], one["impls"][0],
                     f"cpu{one['cores'][0]}, cpu{one['cores'][1]}",
                     f"{one['load_before']:.1f}-{one['load_after']:.1f}",
                     bench.fmt(ours["rows_per_sec"], 2), bench.fmt(ours["model_rows_per_sec"], 2),
                     bench.fmt(hf["model_rows_per_sec"], 2), bench.fmt(ratio, 2),
                     bench.fmt(ours["model_rows_per_sec"] / hf["model_rows_per_sec"], 2),
                     f"{ours['peak_rss_mb']:,.0f} / {hf['peak_rss_mb']:,.0f}"])
    lines = [bench.cpu_line(onednn), "", bench.markdown_table(
        ["model", "seq", "ours", "cores (ours, hf)", "load avg", "ours rows/sec (process)",
         "ours rows/sec (model)", "HF rows/sec (model)", "ours process / HF model",
         "ours model / HF model", "peak RSS MB ours / HF"], rows, align="lrllrrrrrrr"), ""]
    for key, values in sorted(ratios.items()):
        lines.append(f"median ours process / HF model, {key[0]} {key[1]} {key[2]}: "
                     f"{bench.fmt(bench.median(values), 2)}")
    return "\n".join(lines)


WORKERS = {"hf": worker_hf, "tf": worker_ours, "onnx_fp32": worker_ours,
           "onnx_int8": worker_ours}


def main(argv=None) -> int:
    parser = bench.parser_for(__doc__)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--seqs", default="128,512")
    parser.add_argument("--ours", default=",".join(OURS))
    parser.add_argument("--work_dir", default=os.path.join(
        os.environ.get("BERT_AD_CACHE") or os.path.expanduser("~/.cache/bert_ad"),
        "bench_onnx"))
    parser.add_argument("--json", default=None, help="also write the rounds here")
    parser.add_argument("--tables_from", default=None, help="print an earlier --json")
    bench.add_worker_flag(parser, WORKERS)
    for name in ("data", "vocab", "lower", "hf_dir", "output_dir", "checkpoint",
                 "model_flags", "export"):
        parser.add_argument(f"--{name}", default="", help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, default=128, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        args.variant = args.worker
        return bench.serve_worker(args, WORKERS)
    if args.tables_from:
        with open(args.tables_from, encoding="utf-8") as f:
            print(table(json.load(f)["rounds"]))
        return 0
    print(table(run_rounds(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
