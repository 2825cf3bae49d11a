"""A served batch in one padded call, one row a call, or cut into calls of similar length.

    python -m benchmarks.batch_calls --export_dir EXPORT --rows ROWS.tsv \
        [--batch_rows 8,16,32] [--batches 150] [--threads 1] [--repeats 2]

What `bert-ad serve`'s batcher does with the rows it takes together
(bert_ad/inference/batching.py): EXPORT is an ONNX export (ours, any task
whose rows are texts); ROWS.tsv a file of `label<TAB>text` lines (the
movie-review sentences: bert-ad data prepare movie_reviews). Random batches of
--batch_rows texts are drawn once, sorted by length as the batcher sorts them,
and each is scored every way in turn (interleaved, so each way sees the same
minutes):

  one call      padded to the batch's longest row (the batcher before)
  one row a call
  cut at N      calls_by_length with a call's overhead set to N tokens
  cut, fitted   calls_by_length with the overhead CallCost fits to this
                model's own call times (what the server uses once warm)

Prints rows/sec of each way and its ratio to one call, with the CPU line and
peak RSS. No TensorFlow is imported.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from benchmarks import measuring


def parse_args(argv=None) -> argparse.Namespace:
    parser = measuring.parser_for(__doc__)
    parser.add_argument("--export_dir", required=True, help="an ONNX export (model.onnx)")
    parser.add_argument("--rows", required=True, help="label<TAB>text lines")
    parser.add_argument("--batch_rows", default="8,16,32")
    parser.add_argument("--batches", type=int, default=150)
    parser.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--fixed_overheads", default="8,17,64")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from bert_ad.inference.batching import CallCost, calls_by_length
    from bert_ad.inference.exported_model import ExportedModel
    from bert_ad.inference.predictions import ServeOptions, predictions_for

    # The server's own path: its featurizer, padding and scorer.
    exported = ExportedModel.open(args.export_dir, "--export_dir")
    predictions = predictions_for(exported, ServeOptions())
    scorer = exported.open_scorer(threads=args.threads)
    with open(args.rows, encoding="utf-8") as f:
        texts = [line.rstrip("\n").split("\t", 1)[-1] for line in f if line.strip()]
    rows = [row for text in texts
            for row in predictions.featurize([predictions.parse(text)]).rows()]

    def call(part) -> int:
        """Score `part` in one call, as the batcher does; its padded tokens."""
        batch = predictions.batch_of(part)
        scorer.run([batch])
        return int(batch["input_ids"].size)

    rng = np.random.default_rng(0)
    results = []
    for batch_rows in (int(n) for n in args.batch_rows.split(",")):
        batches = [sorted((rows[i] for i in rng.choice(len(rows), batch_rows, replace=False)),
                          key=lambda row: len(row["input_ids"]))
                   for _ in range(args.batches)]
        cost = CallCost()
        for batch in batches[:20]:   # warm up, and the times a server would fit
            for part in (batch[:1], batch):
                started = time.perf_counter()
                tokens = call(part)
                cost.observe(tokens, time.perf_counter() - started)
        fitted = cost.overhead_tokens()
        ways = {"one call": lambda batch: call(batch),
                "one row a call": lambda batch: [call([row]) for row in batch]}
        cuts = [(f"cut at {n:.0f} tokens", n)
                for n in (float(text) for text in args.fixed_overheads.split(","))]
        for name, overhead in cuts + [(f"cut, fitted ({fitted:.0f} tokens)", fitted)]:
            ways[name] = (lambda o: lambda batch: [
                call(batch[a:b]) for a, b in calls_by_length(
                    [len(row["input_ids"]) for row in batch], o)])(overhead)
        seconds = {name: 0.0 for name in ways}
        for _ in range(args.repeats):
            for batch in batches:
                for name, way in ways.items():
                    started = time.perf_counter()
                    way(batch)
                    seconds[name] += time.perf_counter() - started
        scored = args.repeats * len(batches) * batch_rows
        for name in ways:
            results.append([batch_rows, name, measuring.fmt(scored / seconds[name]),
                            f"{seconds['one call'] / seconds[name]:.2f}"])
    print(measuring.cpu_line() + f"; ONNX Runtime, {args.threads} intra-op thread(s); "
          f"load avg {measuring.loadavg()}; peak RSS {measuring.peak_rss_mb():.0f} MB")
    print(f"export: {args.export_dir}; {len(rows)} texts, {args.batches} random batches a "
          f"size, {args.repeats} rounds, every way interleaved batch by batch\n")
    print(measuring.markdown_table(["rows a batch", "way", "rows/sec", "x one call"], results,
                                   "rlrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
