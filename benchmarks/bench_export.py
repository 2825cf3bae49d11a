"""Scoring speed of an export vs in-process predict, and fp16's difference to fp32.

    python -m benchmarks.bench_export --output_dir FT_DIR --data_dir MR_DIR [--rounds 3]

FT_DIR is a fine-tuned classifier's output_dir (model.ckpt-N, labels.txt),
e.g. MiniLM fine-tuned on the movie reviews (docs/serving.md has the
commands); MR_DIR/test.tsv is scored. The script exports the newest
checkpoint (saved_model fp32, frozen_graph fp32, saved_model fp16) into a
scratch folder with run_classifier_mgpu.py --do_export, then measures, each
configuration in a fresh worker process, rounds alternating their order:

  checkpoint     bert_ad.parallel.scoring.Scorer, what --do_predict runs
  saved_model    bert_ad.serving.tf_scorer.ExportScorer, what --predict_from_export
  frozen_graph   runs (same batches: dynamic padding, length-sorted, 1 tower)
  saved_model fp16

Figures: rows/sec over one pass of the file once the scorer is built (after
3 warm-up batches), rows per CPU-second, the seconds to build or load the
graph and weights, and the max abs difference of each configuration's
probabilities to the checkpoint's. Every worker reports whether oneDNN is on.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from benchmarks import measuring
from benchmarks.measuring import CLASSIFIER, checkout_env, loadavg

# Each configuration is `python -m WORKER_MODULE --worker CONFIGURATION ...`.
WORKER_MODULE = "benchmarks.bench_export"

WARMUP_BATCHES = 3
CONFIGURATIONS = ("checkpoint", "saved_model", "frozen_graph", "saved_model_fp16")
EXPORTS = {"saved_model": ("saved_model", "fp32"), "frozen_graph": ("frozen_graph", "fp32"),
           "saved_model_fp16": ("saved_model", "fp16")}


def worker(args) -> dict:
    from bert_ad.compat import TF_VERSION, session_config
    from bert_ad.data import processors
    from bert_ad.data.batching import inference_batches, make_batch
    from bert_ad.data.features import FeatureSettings, convert_examples
    from bert_ad.data.tokenization import make_tokenizer
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.model.modeling import BertConfig
    from bert_ad.parallel.checkpoints import latest_checkpoint
    from bert_ad.parallel.scoring import Scorer
    from bert_ad.parallel.towers import plan_from_environment
    from bert_ad.inference.layout import read_metadata
    from bert_ad.serving.tf_scorer import ExportScorer
    from bert_ad.tasks.base import Encoder

    spec = processors.get_task("sentiment")
    examples = processors.read_examples(spec, args.data_dir, "test")[:args.rows]
    labels = processors.load_label_list(os.path.join(args.output_dir, "labels.txt"))
    tokenizer = make_tokenizer(args.vocab_file, True)
    features = convert_examples(examples, tokenizer,
                                FeatureSettings(args.seq, "head", 0.25, labels))
    plan = plan_from_environment(1)
    config_proto = session_config(plan.num_cpu_devices)

    start = time.perf_counter()
    if args.worker == "checkpoint":
        config = BertConfig.from_json_file(args.bert_config_file)

        def tower(placeholders, i):  # the classifier task's scoring tower
            bert = Encoder(config).model(placeholders, False)
            return {"probabilities": classifier(bert, placeholders, len(labels),
                                                False).probabilities}

        scorer = Scorer(plan, FEATURE_SPEC, tower, latest_checkpoint(args.output_dir),
                        config_proto)
    else:
        export_dir = os.path.join(args.exports, args.worker)
        scorer = ExportScorer(export_dir, read_metadata(export_dir), config_proto)
    load_seconds = time.perf_counter() - start
    probabilities = [None] * len(features)
    with scorer:
        batches = list(inference_batches(features, args.batch, 1))
        for tower_indices, rows in batches[:WARMUP_BATCHES]:
            scorer.run([make_batch(features, i, "dynamic", batch_size=rows)
                        for i in tower_indices])
        start, cpu_start = time.perf_counter(), time.process_time()
        for tower_indices, rows in batches:
            (indices,) = tower_indices
            (values,) = scorer.run([make_batch(features, indices, "dynamic",
                                               batch_size=rows)])
            for row, index in enumerate(indices):
                probabilities[int(index)] = values["probabilities"][row].tolist()
        steady = time.perf_counter() - start
        steady_cpu = time.process_time() - cpu_start
    return {"configuration": args.worker, "rows": len(features),
            "rows_per_sec": len(features) / steady,
            "rows_per_cpu_sec": len(features) / steady_cpu, "load_sec": load_seconds,
            "probabilities": probabilities, "tensorflow": TF_VERSION,
            "onednn": measuring.onednn_state(), "loadavg": loadavg()}


def export_all(args, exports_dir: str) -> None:
    """The three exports of the newest checkpoint, with the launcher."""
    for name, (fmt, precision) in EXPORTS.items():
        command = [sys.executable, CLASSIFIER,
                   "--task_name=sentiment", f"--output_dir={args.output_dir}",
                   f"--vocab_file={args.vocab_file}",
                   f"--bert_config_file={args.bert_config_file}",
                   f"--max_seq_length={args.seq}", "--do_export",
                   f"--export_dir={os.path.join(exports_dir, name)}",
                   f"--export_format={fmt}", f"--export_precision={precision}"]
        subprocess.run(command, check=True, env=dict(os.environ, **checkout_env()),
                       stdout=subprocess.DEVNULL)


def main(argv=None) -> int:
    parser = measuring.parser_for(__doc__)
    parser.add_argument("--output_dir", required=True, help="fine-tuned classifier")
    parser.add_argument("--data_dir", required=True, help="folder with test.tsv")
    parser.add_argument("--vocab_file", default=None, help="default: MiniLM's")
    parser.add_argument("--bert_config_file", default=None, help="default: MiniLM's")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=64, help="max_seq_length")
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS))
    parser.add_argument("--rows", type=int, default=None, help="first N rows only")
    parser.add_argument("--json", default=None, help="write every result here")
    measuring.add_worker_flag(parser, CONFIGURATIONS)
    parser.add_argument("--exports", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    from bert_ad.resources.assets import cache_dir
    model_dir = os.path.join(cache_dir(), "minilm_google")
    args.vocab_file = args.vocab_file or os.path.join(model_dir, "vocab.txt")
    args.bert_config_file = args.bert_config_file or os.path.join(model_dir,
                                                                  "bert_config.json")
    if args.worker:
        return measuring.serve_worker(args, {name: worker for name in CONFIGURATIONS})
    plan = args.configurations.split(",")
    info = measuring.machine_description()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_export_") as exports:
        export_all(args, exports)
        for round_index in range(args.rounds):
            for name in (plan if round_index % 2 == 0 else plan[::-1]):
                command = measuring.worker_command(
                    WORKER_MODULE, name, exports=exports, output_dir=args.output_dir,
                    data_dir=args.data_dir, vocab_file=args.vocab_file,
                    bert_config_file=args.bert_config_file, batch=args.batch, seq=args.seq,
                    rows=args.rows)
                result = measuring.run_worker(command)
                results.setdefault(name, []).append(result)
                print(f"  {name:18s} {result['rows_per_sec']:7.1f} rows/sec "
                      f"(load {result['loadavg']}, oneDNN {result['onednn']})",
                      file=sys.stderr, flush=True)
    import numpy as np
    reference = np.array(results["checkpoint"][0]["probabilities"]) \
        if "checkpoint" in results else None
    first = next(iter(results.values()))[0]
    info.update(tensorflow=first["tensorflow"], onednn=first["onednn"])
    print(measuring.machine_table(info))
    print("\n" + measuring.cpu_line(first["onednn"]))
    print(f"\n### Scoring {first['rows']} rows of {args.data_dir}/test.tsv, batch "
          f"{args.batch}, max_seq_length {args.seq} (median of {args.rounds} rounds)\n")
    rows = []
    for name in plan:
        runs = results[name]
        difference = "-"
        if reference is not None:
            worst = max(np.abs(np.array(r["probabilities"]) - reference).max() for r in runs)
            difference = f"{worst:.2e}"
        rows.append([name, measuring.fmt(measuring.median([r["rows_per_sec"] for r in runs])),
                     measuring.fmt(measuring.median([r["rows_per_cpu_sec"] for r in runs])),
                     measuring.fmt(measuring.median([r["load_sec"] for r in runs]), 2),
                     difference])
    print(measuring.markdown_table(["scorer", "rows/sec", "rows/CPU-sec",
                                    "build or load, s", "max abs diff to checkpoint"],
                                   rows, "lrrrr"))
    if args.json:
        measuring.write_json(args.json, {"machine": info, "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
