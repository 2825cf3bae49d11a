"""Batch-scoring throughput (rows/sec) of run_classifier_mgpu.py --do_predict.

    python scripts/bench_predict.py            # full: 4,000 rows, 3 rounds
    python scripts/bench_predict.py --quick    # 1,000 rows, 1 round, batch 32 only

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
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from bert_ad.tools import benchmarking as bench  # noqa: E402  (no TensorFlow import)
from bert_ad.tools.assets import cache_dir  # noqa: E402  (no TensorFlow import)

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
    with tf.Graph().as_default():
        classifier(config, feature_placeholders(FEATURE_SPEC, 0), num_labels, False)
        warm = WarmStart(os.path.join(model_dir, "bert_model.ckpt"), tf.global_variables())
        saver = tf.train.Saver(tf.global_variables())
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            warm.restore(session)
            return saver.save(session, os.path.join(output_dir, "model.ckpt"))


def worker(args) -> dict:
    from bert_ad.data.batching import inference_batches, make_batch
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.compat import session_config
    from bert_ad.data.features import FeatureSettings, convert_examples
    from bert_ad.parallel.scoring import Scorer, run_inference
    from bert_ad.model.modeling import BertConfig
    from bert_ad.data.tokenization import make_tokenizer
    from bert_ad.parallel.towers import plan_from_environment

    examples, labels = read_rows(args.data_dir, args.rows)
    config = BertConfig.from_json_file(os.path.join(args.model_dir, "bert_config.json"))
    tokenizer = make_tokenizer(os.path.join(args.model_dir, "vocab.txt"), True)
    features = convert_examples(examples, tokenizer,
                                FeatureSettings(args.seq, "head", 0.25, labels))
    plan = plan_from_environment(args.towers)
    config_proto = session_config(plan.num_cpu_devices)
    padding = "dynamic" if args.padding == "dynamic" else args.seq

    def tower(placeholders, i):  # the classification task's scoring tower
        out = classifier(config, placeholders, len(labels), False)
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
            "loadavg": f"{os.getloadavg()[0]:.1f}"}


def configurations(args) -> list:
    if args.quick:
        return [(towers, 32, "dynamic") for towers in (1, 2)]
    return [(towers, batch, padding) for padding in ("dynamic", "max_length")
            for batch in (8, 32) for towers in (1, 2)]


def main(argv=None) -> int:
    cache = cache_dir()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_dir", default=os.path.join(cache, "minilm_google"))
    parser.add_argument("--data_dir", default=os.path.join(cache, "data", "movie_reviews"))
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--rows", type=int, default=None,
                        help="rows to score (default 4000, quick 1000)")
    parser.add_argument("--seq", type=int, default=64, help="max_seq_length")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--towers", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, default=32, help=argparse.SUPPRESS)
    parser.add_argument("--padding", default="dynamic", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rows = args.rows or (1000 if args.quick else 4000)
    args.repeats = args.repeats or (1 if args.quick else 3)
    if args.worker:
        bench.emit_result(worker(args))
        return 0
    for path in (os.path.join(args.model_dir, "bert_model.ckpt.index"),
                 os.path.join(args.data_dir, "test.tsv")):
        if not os.path.exists(path):
            print(f"error: {path} not found (run scripts/fetch_minilm.sh and "
                  "scripts/prepare_data.py movie_reviews)", file=sys.stderr)
            return 2

    info = bench.machine_description()
    print("### Machine\n")
    print(bench.markdown_table(["", ""], [[k, v] for k, v in info.items()], "ll"))
    results = {}
    plan = configurations(args)
    for round_index in range(args.repeats):
        for towers, batch, padding in (plan if round_index % 2 == 0 else plan[::-1]):
            command = [sys.executable, os.path.abspath(__file__), "--worker",
                       "--towers", str(towers), "--batch", str(batch), "--padding",
                       padding, "--rows", str(args.rows), "--seq", str(args.seq),
                       "--model_dir", args.model_dir, "--data_dir", args.data_dir]
            result = bench.run_worker(command, env={"PYTHONPATH": REPO})
            if result["scored_rows"] != args.rows:
                raise RuntimeError(f"scored {result['scored_rows']} rows of {args.rows}")
            results.setdefault((towers, batch, padding), []).append(result)
            print(f"  {towers} x {batch:2d} {padding:10s}: {result['rows_per_sec']:7.1f} "
                  f"rows/sec (load {result['loadavg']})", file=sys.stderr, flush=True)

    def med(key, field):
        return bench.median([r[field] for r in results[key]])

    print(f"\n### Batch scoring, max_seq_length {args.seq}, {args.rows} rows "
          f"(median of {args.repeats} rounds)\n")
    rows = []
    for key in plan:
        towers, batch, padding = key
        rows.append([towers, batch, padding, bench.fmt(med(key, "rows_per_sec")),
                     bench.fmt(med(key, "rows_per_cpu_sec")),
                     bench.fmt(med(key, "end_to_end_rows_per_sec")),
                     bench.fmt(med(key, "setup_sec"), 1)])
    print(bench.markdown_table(
        ["towers", "batch per tower", "padding", "rows/sec (steady)",
         "rows/CPU-sec", "rows/sec end to end", "graph build + restore s"],
        rows, "rrlrrrr"))
    print("\nsteady: a built Scorer over one pass of the rows; end to end: "
          "run_inference including graph build and checkpoint restore.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
