"""bf16 against fp32, ours and Hugging Face's, on the accuracy study's quick part.

    python -m studies.precision_study                    # seeds 1-5, ours and HF
    python -m studies.precision_study --seeds 1,2,3 --impls ours
    python -m studies.precision_study --report_only      # the tables from the runs file

Does `--precision=bf16` (activations in bfloat16; weights, Adam moments and
checkpoints float32) train to the same accuracy as float32, and what does it
gain? Every run fine-tunes the real MiniLM-L6 on the movie-review sentences as
the accuracy study's quick part does (studies/accuracy_study.py: the first
800 training rows, 1 tower x 16, AdamW, learning rate 5e-5, 2 epochs,
max_seq_length 64, dynamic padding) and scores the whole dev and test sets:

  ours      run_classifier_mgpu.py, --precision=fp32 and --precision=bf16
            (through accuracy_study.run_one: the same command the study runs);
  hf        transformers' BertForSequenceClassification on PyTorch CPU, the
            encoder converted from the same checkpoint (bert_ad.convert google2hf),
            the same token ids (bert_ad's tokenizer), batch, epochs and learning
            rate, torch's AdamW (weight decay 0.01 off biases and LayerNorm) on
            transformers' linear warmup schedule, as a Hugging Face user trains;
            bf16 is its forward (and scoring) under
            torch.autocast("cpu", dtype=torch.bfloat16).

One fresh process per run. The answer to "same accuracy?" is the paired
difference bf16 - fp32 per seed (same data order, same initial head) against
the spread of fp32 over seeds. Speed and memory (examples/sec of training,
the process's peak RSS) mean something only on a CPU that multiplies bfloat16
(AVX512_BF16 or AMX): elsewhere oneDNN and PyTorch convert to float32 around
every matmul. The tables' CPU line names the ISA. The arithmetic that decides
accuracy (inputs rounded to bfloat16, float32 accumulation) is the same on
either kind of CPU, so the accuracy columns carry over.

Records go to docs/precision_runs.jsonl (one JSON object a run, resumable as
the accuracy study's); the tables print to stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Dict, List, Sequence

from benchmarks import measuring
from bert_ad.resources.assets import cache_dir  # (no TensorFlow import)
from benchmarks.measuring import REPO, append_run, hf_dir_for, load_runs
from studies import accuracy_study as study

WORKER_MODULE = "studies.precision_study"
PRECISIONS = ("fp32", "bf16")
IMPLS = ("ours", "hf")
WARMUP_PROPORTION = 0.1      # run_classifier_mgpu.py's default
WEIGHT_DECAY, CLIP_NORM = 0.01, 1.0
DATASET = "movie_reviews"
DEFAULT_RUNS = os.path.join(REPO, "docs", "precision_runs.jsonl")


def ours_spec(seed: int, precision: str) -> study.RunSpec:
    """The accuracy study's quick one-tower AdamW run, at `precision`."""
    return study.make_spec(DATASET, 1, 1, "adamw", "none", seed,
                           study.QUICK_MAX_TRAIN_EXAMPLES)._replace(precision=precision)


def run_key(record: dict) -> tuple:
    return record["impl"], record["precision"], record["seed"]


# --- Hugging Face's run (a worker process: PyTorch only) --------------------------------------

def encoded_split(data_dir: str, split: str, tokenizer, labels: List[str],
                  limit: int | None) -> tuple:
    """(token ids per row, label index per row) of one split, as our classifier
    encodes it (head truncation to max_seq_length)."""
    from bert_ad.data import features, processors
    examples = processors.read_examples(processors.get_task("sentiment"), data_dir, split)
    examples = examples[:limit] if limit else examples
    settings = features.FeatureSettings(study.MAX_SEQ_LENGTH, label_list=labels)
    ids = [features.encode_example(e, tokenizer, settings)[0] for e in examples]
    return ids, [labels.index(e.label) for e in examples]


def padded(rows: Sequence[Sequence[int]]):
    """input_ids and attention_mask of a batch, padded to its longest row."""
    import torch
    length = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), length, dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = 1
    return {"input_ids": ids, "attention_mask": mask}


def worker_hf(settings: dict) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench_train
    import numpy as np
    import torch
    import transformers
    from transformers import BertForSequenceClassification, get_linear_schedule_with_warmup

    from bert_ad.data import processors
    from bert_ad.data.tokenization import make_tokenizer
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(settings["seed"])
    bf16 = settings["precision"] == "bf16"
    data_dir, model_dir = settings["data_dir"], settings["model_dir"]
    tokenizer = make_tokenizer(os.path.join(model_dir, "vocab.txt"), True)
    train_examples = processors.read_examples(processors.get_task("sentiment"), data_dir,
                                              "train")[:study.QUICK_MAX_TRAIN_EXAMPLES]
    labels = processors.label_list(processors.get_task("sentiment"), train_examples)
    train_ids, train_labels = encoded_split(data_dir, "train", tokenizer, labels,
                                            study.QUICK_MAX_TRAIN_EXAMPLES)
    model = BertForSequenceClassification.from_pretrained(settings["hf_dir"],
                                                          num_labels=len(labels))
    optimizer = measuring.hf_adamw(model, study.LEARNING_RATE, WEIGHT_DECAY)
    batch = study.PER_TOWER_BATCH
    steps = len(train_ids) * study.EPOCHS // batch
    scheduler = get_linear_schedule_with_warmup(optimizer, int(steps * WARMUP_PROPORTION),
                                                steps)
    rng = np.random.RandomState(settings["seed"])
    order = np.concatenate([rng.permutation(len(train_ids)) for _ in range(study.EPOCHS)])
    model.train()
    started = time.perf_counter()
    for step in range(steps):
        rows = order[step * batch:(step + 1) * batch]
        inputs = padded([train_ids[i] for i in rows])
        inputs["labels"] = torch.tensor([train_labels[i] for i in rows])
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(**inputs).loss
        measuring.hf_apply_update(model, optimizer, loss, CLIP_NORM, scheduler)
    train_seconds = time.perf_counter() - started
    if "tensorflow" in sys.modules:  # its thread pools would have shared the cores
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    model.eval()
    scores = {}
    for split in ("dev", "test"):
        ids, truth = encoded_split(data_dir, split, tokenizer, labels, None)
        predicted = []
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                    enabled=bf16):
            for first in range(0, len(ids), 32):
                logits = model(**padded(ids[first:first + 32])).logits
                predicted.extend(logits.float().argmax(-1).tolist())
        scores[f"{split}_accuracy"] = float(np.mean(np.array(predicted) == np.array(truth)))
        scores[f"{split}_examples"] = len(truth)
    return dict(scores, status="ok", steps=steps, train_seconds=train_seconds,
                examples_per_sec=steps * batch / train_seconds, final_loss=float(loss),
                peak_rss_mb=round(measuring.peak_rss_mb()),
                torch=torch.__version__, transformers=transformers.__version__)


# --- running -------------------------------------------------------------------------------

def run_ours(seed: int, precision: str, args) -> dict:
    spec = ours_spec(seed, precision)
    record = study.run_one(spec, sys.executable, args.model_dir,
                           os.path.join(args.data_root, DATASET), args.output_root)
    with open(os.path.join(args.output_root, spec.name, "log.txt"), encoding="utf-8") as f:
        onednn = measuring.logged_onednn_state(f.read())    # for the table's CPU line
    return dict(record, impl="ours", onednn=onednn)


def run_hf(seed: int, precision: str, args) -> dict:
    settings = {"seed": seed, "precision": precision, "model_dir": args.model_dir,
                "hf_dir": args.hf_dir, "data_dir": os.path.join(args.data_root, DATASET)}
    command = measuring.worker_command(WORKER_MODULE, json.dumps(settings))
    started = time.time()
    try:
        result = measuring.run_worker(command)
    except RuntimeError as e:
        result = {"status": "failed", "error": str(e)[-2000:]}
    return dict(result, impl="hf", seed=seed, precision=precision,
                wall_seconds=round(time.time() - started, 1))


# --- the report ----------------------------------------------------------------------------

def paired_differences(records: Sequence[dict], impl: str, key: str) -> List[float]:
    """bf16 - fp32 of `key`, per seed that has both runs of `impl`."""
    by_run = {(r["precision"], r["seed"]): r[key] for r in records
              if r["impl"] == impl and r["status"] == "ok"}
    return [by_run[("bf16", seed)] - by_run[("fp32", seed)]
            for seed in sorted({s for _, s in by_run})
            if ("bf16", seed) in by_run and ("fp32", seed) in by_run]


def report(records: Sequence[dict], cpu: str) -> str:
    ok = [r for r in records if r["status"] == "ok"]
    groups: Dict[tuple, List[dict]] = {}
    for r in ok:
        groups.setdefault((r["impl"], r["precision"]), []).append(r)
    order = [(i, p) for i in IMPLS for p in PRECISIONS if (i, p) in groups]
    speed = {key: measuring.median([r["examples_per_sec"] for r in groups[key]]) for key in order}
    names = {"ours": "ours (run_classifier_mgpu.py)", "hf": "Hugging Face (PyTorch)"}
    precision_names = {("ours", "bf16"): "bf16 (--precision=bf16)",
                       ("hf", "bf16"): "bf16 (torch.autocast)"}
    rows = []
    for impl, precision in order:
        runs = groups[(impl, precision)]
        rows.append([names[impl], precision_names.get((impl, precision), precision),
                     len(runs),
                     study.fmt_pct(study.mean_sd([r["dev_accuracy"] for r in runs])),
                     study.fmt_pct(study.mean_sd([r["test_accuracy"] for r in runs])),
                     " / ".join(f"{100 * r['test_accuracy']:.2f}"
                                for r in sorted(runs, key=lambda r: r["seed"])),
                     measuring.fmt(speed[(impl, precision)]),
                     measuring.fmt(speed[(impl, precision)] / speed[(impl, "fp32")], 2)
                     if (impl, "fp32") in speed else "",
                     measuring.fmt(measuring.median([r["peak_rss_mb"] for r in runs]), 0)])
    out = [cpu, "", measuring.markdown_table(
        ["implementation", "precision", "seeds", "dev acc %", "test acc %",
         "test acc % per seed", "train ex/s (median)", "vs its fp32", "peak RSS MB"], rows,
        align="llrrrrrrr")]
    lines = []
    for impl in IMPLS:
        for key, name in (("dev_accuracy", "dev"), ("test_accuracy", "test")):
            diffs = paired_differences(ok, impl, key)
            fp32 = [r[key] for r in groups.get((impl, "fp32"), [])]
            if len(diffs) >= 2 and len(fp32) >= 2:
                mean, sd = study.mean_sd(diffs)
                lines.append(f"- {names[impl]}, {name}: bf16 - fp32 per seed "
                             f"{100 * mean:+.2f} ± {100 * sd:.2f} points over {len(diffs)} "
                             f"seeds; fp32's spread over seeds ± "
                             f"{100 * study.mean_sd(fp32)[1]:.2f}")
    failed = [r for r in records if r["status"] != "ok"]
    lines += [f"- failed: {r['impl']} {r['precision']} seed {r['seed']}: {r.get('error', '')}"
              for r in failed]
    return "\n".join(out + ([""] + lines if lines else []))


# --- main ----------------------------------------------------------------------------------

def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="1,2,3,4,5")
    parser.add_argument("--impls", default="ours,hf", help="comma-separated: ours, hf")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--cache", default=cache_dir(),
                        help="downloads and data sets (BERT_AD_CACHE)")
    parser.add_argument("--output_root", default=os.path.join("output", "precision"),
                        help="run folders and the converted Hugging Face model")
    parser.add_argument("--runs", default=DEFAULT_RUNS, help="JSON-lines record of the runs")
    parser.add_argument("--report_only", action="store_true")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.seeds = [int(s) for s in args.seeds.split(",") if s]
    args.impls = [i for i in args.impls.split(",") if i]
    args.precisions = [p for p in args.precisions.split(",") if p]
    for flag, values, allowed in (("--impls", args.impls, IMPLS),
                                  ("--precisions", args.precisions, PRECISIONS)):
        for value in values:
            if value not in allowed:
                parser.error(f"{flag}: {value!r} is not one of {', '.join(allowed)}")
    # What accuracy_study.prepare_inputs reads.
    args.model, args.datasets = "minilm", [DATASET]
    args.model_dir = os.path.join(args.cache, study.MODELS["minilm"].cache_name)
    args.data_root = os.path.join(args.cache, "data")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        measuring.emit_result(worker_hf(json.loads(args.worker)))
        return 0
    if not args.report_only:
        study.prepare_inputs(args)
        if "hf" in args.impls:
            args.hf_dir = hf_dir_for(args.model_dir, args.output_root, "minilm")
        done = {run_key(r) for r in load_runs(args.runs)}
        todo = [(impl, precision, seed) for seed in args.seeds for impl in args.impls
                for precision in args.precisions if (impl, precision, seed) not in done]
        print(f"{len(todo)} run(s) to do, {len(done)} already in {args.runs}", flush=True)
        for i, (impl, precision, seed) in enumerate(todo, 1):
            record = (run_ours if impl == "ours" else run_hf)(seed, precision, args)
            append_run(args.runs, dict(record, cpu=measuring.cpu_line()))
            result = (f"dev {record['dev_accuracy']:.4f} test {record['test_accuracy']:.4f} "
                      f"{record['examples_per_sec']:.1f} ex/s"
                      if record["status"] == "ok" else f"FAILED: {record.get('error')}")
            print(f"[{i}/{len(todo)}] {impl} {precision} seed {seed}: {result}", flush=True)
    records = load_runs(args.runs)
    # One table a machine: speed compares only within a CPU.
    for cpu in sorted({r.get("cpu", "") for r in records}):
        mine = [r for r in records if r.get("cpu", "") == cpu]
        onednn = sorted({r["onednn"] for r in mine if r.get("onednn")})
        line = (cpu or "CPU: ?") + (f"; TensorFlow oneDNN {' / '.join(onednn)}"
                                    if onednn else "")
        print(report(mine, line))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
