"""Batch-scoring throughput (rows/sec) of run_classifier_mgpu.py --do_predict.

    python -m benchmarks.bench_predict            # full: 4,000 rows, 3 rounds
    python -m benchmarks.bench_predict --quick    # 1,000 rows, 1 round, batch 32 only
    python -m benchmarks.bench_predict --compare  # ours (oneDNN on / off, padding kept) vs HF

Scores the real movie-review sentences (train + dev + test, 4,000 rows) with
the real MiniLM-L6 plus a classifier head, at max_seq_length 64, on 1 and 2
towers, --predict_batch_size 8 (the CLI default) and 32 per tower, dynamic
and max_length padding. Each configuration is a fresh worker process; rounds
alternate their order and the tables give medians.

Two figures per configuration, both through bert_ad.parallel.scoring (the code
`--do_predict` runs):
  end to end   `run_inference` once: graph build, checkpoint restore, scoring;
  steady state  a `Scorer` already built and restored, timed over one pass of
                `inference_batches` + `make_batch` + `Scorer.run` (after 3
                warm-up batches), i.e. what a long predict file approaches.

--compare scores the same rows, 1 tower x --batch, dynamic padding, with our
default (oneDNN on on x86), with TF_ENABLE_ONEDNN_OPTS=0, with the padding
kept in the dense layers (--noremove_padding), and with Hugging
Face transformers on PyTorch CPU (BertForSequenceClassification in eval mode
under torch.inference_mode, its tokenizer, DataCollatorWithPadding per batch
in input order: what Trainer.predict does), and prints the ratios. Every
table names the CPU, its vector ISA and whether oneDNN was on.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from benchmarks import measuring
from benchmarks.measuring import loadavg

# Each configuration is `python -m WORKER_MODULE --worker ...` (measuring.worker_command).
WORKER_MODULE = "benchmarks.bench_predict"
WARMUP_BATCHES = 3


def read_rows(data_dir: str, limit: int):
    """Examples of train.tsv, dev.tsv, test.tsv (in that order), at most `limit`."""
    from bert_ad.data import processors
    task = processors.get_task("sentiment")
    examples = []
    for split in ("train", "dev", "test"):
        examples += processors.read_examples(task, data_dir, split)
    labels = processors.label_list(task, examples)
    return examples[:limit], labels


def make_checkpoint(model_dir: str, config, num_labels: int, output_dir: str) -> str:
    """MiniLM's weights plus a fresh classifier head, saved as one checkpoint
    (what a fine-tuned run leaves; the head's values do not change the speed)."""
    from bert_ad.parallel.checkpoints import WarmStart
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.compat import tf
    from bert_ad.parallel.train_graph import feature_placeholders
    from bert_ad.tasks.base import Encoder
    with tf.Graph().as_default():
        features = feature_placeholders(FEATURE_SPEC, 0)
        classifier(Encoder(config).model(features, False), features, num_labels, False)
        warm = WarmStart(os.path.join(model_dir, "bert_model.ckpt"), tf.global_variables())
        saver = tf.train.Saver(tf.global_variables())
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            warm.restore(session)
            return saver.save(session, os.path.join(output_dir, "model.ckpt"))


def worker(args, remove_padding: bool = True) -> dict:
    from bert_ad.data.batching import inference_batches, make_batch
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.compat import session_config
    from bert_ad.data.features import FeatureSettings, convert_examples
    from bert_ad.parallel.scoring import Scorer, run_inference
    from bert_ad.model.modeling import BertConfig
    from bert_ad.data.tokenization import make_tokenizer
    from bert_ad.parallel.towers import plan_from_environment
    from bert_ad.tasks.base import Encoder

    examples, labels = read_rows(args.data_dir, args.rows)
    config = BertConfig.from_json_file(os.path.join(args.model_dir, "bert_config.json"))
    tokenizer = make_tokenizer(os.path.join(args.model_dir, "vocab.txt"), True)
    features = convert_examples(examples, tokenizer,
                                FeatureSettings(args.seq, "head", 0.25, labels))
    plan = plan_from_environment(args.towers)
    config_proto = session_config(plan.num_cpu_devices)
    padding = "dynamic" if args.padding == "dynamic" else args.seq

    def tower(placeholders, i):  # the classification task's scoring tower
        bert = Encoder(config, remove_padding=remove_padding).model(placeholders, False)
        out = classifier(bert, placeholders, len(labels), False)
        return {"probabilities": out.probabilities, "loss": out.per_example_loss}

    with tempfile.TemporaryDirectory(prefix="bench_predict_") as tmp:
        checkpoint = make_checkpoint(args.model_dir, config, len(labels), tmp)
        start = time.perf_counter()
        results = run_inference(plan, FEATURE_SPEC, tower, checkpoint, features,
                                args.batch, padding, config_proto)
        end_to_end = time.perf_counter() - start

        start = time.perf_counter()
        with Scorer(plan, FEATURE_SPEC, tower, checkpoint, config_proto) as scorer:
            setup = time.perf_counter() - start
            batches = list(inference_batches(features, args.batch, plan.num_towers))
            for tower_indices, rows in batches[:WARMUP_BATCHES]:
                scorer.run([make_batch(features, i, padding, batch_size=rows)
                            for i in tower_indices])
            start, cpu_start = time.perf_counter(), time.process_time()
            for tower_indices, rows in batches:
                scorer.run([make_batch(features, i, padding, batch_size=rows)
                            for i in tower_indices])
            steady = time.perf_counter() - start
            steady_cpu = time.process_time() - cpu_start
    rows = len(features)
    return {"towers": args.towers, "batch": args.batch, "padding": args.padding,
            "seq": args.seq, "rows": rows,
            "rows_per_sec": rows / steady, "rows_per_cpu_sec": rows / steady_cpu,
            "end_to_end_rows_per_sec": rows / end_to_end, "setup_sec": setup,
            "scored_rows": int(results["probabilities"].shape[0]),
            "onednn": measuring.onednn_state(), "loadavg": loadavg()}


def worker_hf(args) -> dict:
    """Hugging Face inference on the same rows (steady state, after 3 warm-up batches)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers
    from transformers import (AutoTokenizer, BertForSequenceClassification,
                              DataCollatorWithPadding)
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    hf_dir = args.hf_dir or measuring.default_hf_dir()
    examples, labels = read_rows(args.data_dir, args.rows)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    encoded = tokenizer([e.text_a for e in examples], truncation=True,
                        max_length=args.seq)
    rows = [{key: encoded[key][i] for key in encoded} for i in range(len(examples))]
    collator = DataCollatorWithPadding(tokenizer, padding="longest")
    model = BertForSequenceClassification.from_pretrained(hf_dir, num_labels=len(labels))
    model.eval()
    batches = [rows[i:i + args.batch] for i in range(0, len(rows), args.batch)]
    scored = 0
    with torch.inference_mode():
        for batch in batches[:WARMUP_BATCHES]:
            model(**collator(batch))
        start, cpu_start = time.perf_counter(), time.process_time()
        for batch in batches:
            scored += int(model(**collator(batch)).logits.shape[0])
        steady = time.perf_counter() - start
        steady_cpu = time.process_time() - cpu_start
    if "tensorflow" in sys.modules:  # its thread pools would share the cores
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    return {"towers": 1, "batch": args.batch, "padding": "dynamic", "seq": args.seq,
            "rows": len(rows), "rows_per_sec": len(rows) / steady,
            "rows_per_cpu_sec": len(rows) / steady_cpu, "scored_rows": scored,
            "torch": torch.__version__, "mkldnn": torch.backends.mkldnn.is_available(),
            "loadavg": loadavg()}


# --compare: (label, worker, environment)
# ours_padded: --noremove_padding (dense layers over the padded batch).
COMPARISONS = (("ours, default (oneDNN on, padding removed)", "ours", {}),
               ("ours, oneDNN off", "ours", {"TF_ENABLE_ONEDNN_OPTS": "0"}),
               ("ours, oneDNN on, ISA capped at AVX2", "ours",
                {"TF_ENABLE_ONEDNN_OPTS": "1", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
               ("ours, padding kept in the dense layers (--noremove_padding)",
                "ours_padded", {}),
               ("ours, oneDNN off + padding kept (the old default)", "ours_padded",
                {"TF_ENABLE_ONEDNN_OPTS": "0"}),
               ("HF transformers, PyTorch CPU", "hf", {}))


def worker_command(args, impl: str, towers: int, batch: int, padding: str) -> list:
    return measuring.worker_command(
        WORKER_MODULE, impl, towers=towers, batch=batch, padding=padding, rows=args.rows,
        seq=args.seq, model_dir=args.model_dir, data_dir=args.data_dir, hf_dir=args.hf_dir)


def run_compare(args) -> int:
    """Ours (oneDNN on / off / capped) and HF, side by side, with ratios."""
    results = {}
    for round_index in range(args.repeats):
        for label, impl, env in (COMPARISONS if round_index % 2 == 0
                                 else COMPARISONS[::-1]):
            result = measuring.run_worker(worker_command(args, impl, 1, args.batch, "dynamic"),
                                          env=env)
            if result["scored_rows"] != args.rows:
                raise RuntimeError(f"{label} scored {result['scored_rows']} rows of "
                                   f"{args.rows}")
            results.setdefault(label, []).append(result)
            print(f"  {label}: {result['rows_per_sec']:7.1f} rows/sec (load "
                  f"{result['loadavg']})", file=sys.stderr, flush=True)
    default, hf = COMPARISONS[0][0], COMPARISONS[-1][0]
    print(f"\n### Batch scoring side by side: {args.rows} rows, max_seq_length {args.seq}, "
          f"1 x {args.batch}, dynamic padding ({args.repeats} round(s))\n")
    print(measuring.cpu_line(results[default][0]["onednn"]) + "\n")
    rows = []
    for label, impl, env in COMPARISONS:
        runs = results[label]
        rows.append([label, " ".join(f"{k}={v}" for k, v in env.items()) or "-",
                     runs[0]["onednn"].split(" ")[0] if impl != "hf" else "-",
                     measuring.fmt(measuring.median([r["rows_per_sec"] for r in runs])),
                     measuring.fmt(measuring.median([r["rows_per_cpu_sec"] for r in runs])),
                     measuring.paired_ratio(runs, results[hf], "rows_per_sec"),
                     measuring.paired_ratio(runs, results[default], "rows_per_sec")])
    print(measuring.markdown_table(["scorer", "environment", "oneDNN", "rows/sec (steady)",
                                    "rows/CPU-sec", "/ HF", "/ our default"], rows, "lllrrrr"))
    print("\nRatios: median (range) over rounds of runs made back to back. Target: "
          "ours / HF >= 1.5. Ours groups rows by length (and restores their order), "
          "HF scores them in input order as Trainer.predict does.")
    return 0


def configurations(args) -> list:
    if args.quick:
        return [(towers, 32, "dynamic") for towers in (1, 2)]
    return [(towers, batch, padding) for padding in ("dynamic", "max_length")
            for batch in (8, 32) for towers in (1, 2)]


def main(argv=None) -> int:
    parser = measuring.parser_for(__doc__)
    measuring.add_minilm_flags(parser)
    measuring.add_round_flags(parser, quick="1,000 rows, 1 round, batch 32 only",
                              json_file=False)
    parser.add_argument("--rows", type=int, default=None,
                        help="rows to score (default 4000, quick 1000)")
    parser.add_argument("--seq", type=int, default=64, help="max_seq_length")
    parser.add_argument("--compare", action="store_true",
                        help="ours (oneDNN on / off / capped at AVX2, padding kept) vs HF "
                             "inference, 1 tower x --batch")
    measuring.add_worker_flag(parser, ("ours", "ours_padded", "hf"))
    parser.add_argument("--towers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=32, help="batch per tower (--compare)")
    parser.add_argument("--padding", default="dynamic", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rows = args.rows or (1000 if args.quick else 4000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.worker:
        return measuring.serve_worker(args, {
            "ours": worker, "hf": worker_hf,
            "ours_padded": lambda a: worker(a, remove_padding=False)})
    if measuring.missing_inputs(args, "test.tsv"):
        return 2
    print(measuring.machine_table())
    if args.compare:
        return run_compare(args)
    results = {}
    plan = configurations(args)
    for round_index in range(args.repeats):
        for towers, batch, padding in (plan if round_index % 2 == 0 else plan[::-1]):
            result = measuring.run_worker(worker_command(args, "ours", towers, batch, padding))
            if result["scored_rows"] != args.rows:
                raise RuntimeError(f"scored {result['scored_rows']} rows of {args.rows}")
            results.setdefault((towers, batch, padding), []).append(result)
            print(f"  {towers} x {batch:2d} {padding:10s}: {result['rows_per_sec']:7.1f} "
                  f"rows/sec (load {result['loadavg']})", file=sys.stderr, flush=True)

    def med(key, field):
        return measuring.median([r[field] for r in results[key]])

    print(f"\n### Batch scoring, max_seq_length {args.seq}, {args.rows} rows "
          f"(median of {args.repeats} rounds)\n")
    print(measuring.cpu_line(next(iter(results.values()))[0]["onednn"]) + "\n")
    rows = []
    for key in plan:
        towers, batch, padding = key
        rows.append([towers, batch, padding, measuring.fmt(med(key, "rows_per_sec")),
                     measuring.fmt(med(key, "rows_per_cpu_sec")),
                     measuring.fmt(med(key, "end_to_end_rows_per_sec")),
                     measuring.fmt(med(key, "setup_sec"), 1)])
    print(measuring.markdown_table(
        ["towers", "batch per tower", "padding", "rows/sec (steady)",
         "rows/CPU-sec", "rows/sec end to end", "graph build + restore s"],
        rows, "rrlrrrr"))
    print("\nsteady: a built Scorer over one pass of the rows; end to end: "
          "run_inference including graph build and checkpoint restore.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
