"""Bytes each worker exchanges per applied step, and the scaling bound they imply.

Uses the real packing of bert_ad.parallel.collective (--collective_pack_mb) over the
gradients of a BERT model (Google's variable shapes, classifier head included),
and ring all-reduce's traffic: each worker sends and receives 2 (N-1)/N of the
packed bytes. The scaling-efficiency bound assumes no overlap of compute and
exchange: t_compute / (t_compute + t_exchange).

    python -m benchmarks.exchange_bytes [--config base|minilm] [--step_seconds 0.3]
"""

from __future__ import annotations

import argparse
import sys

from bert_ad.parallel.collective import pack_plan
from bert_ad.tools.weight_names import google_variable_shapes
from bert_ad.model.modeling import BertConfig

CONFIGS = {
    "base": BertConfig(vocab_size=30522),  # BERT-base: 12 x 768, 12 heads, 3072
    "chinese-base": BertConfig(vocab_size=21128),
    "minilm": BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6,
                         num_attention_heads=12, intermediate_size=1536),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="base")
    parser.add_argument("--pack_mb", type=float, default=32.0)
    parser.add_argument("--step_seconds", type=float, default=0.3,
                        help="compute time of one step on one worker (measure yours)")
    args = parser.parse_args()
    shapes = google_variable_shapes(CONFIGS[args.config])
    shapes["output_weights"] = [2, CONFIGS[args.config].hidden_size]
    shapes["output_bias"] = [2]
    sizes = []
    for shape in shapes.values():
        count = 1
        for dim in shape:
            count *= dim
        sizes.append(4 * count)  # float32 gradients (the embedding's crosses dense)
    packs = pack_plan(sizes, int(args.pack_mb * 2 ** 20))
    total = sum(sizes)
    print(f"{args.config}: {len(sizes)} gradient tensors, {total / 2 ** 20:.1f} MiB fp32, "
          f"{len(packs)} packs of <= {args.pack_mb:g} MiB")
    print()
    print("| workers | fp32 bytes per worker per step | fp16 | bound at 10 Gbit/s | "
          "25 Gbit/s | 100 Gbit/s |")
    print("|---|---|---|---|---|---|")
    for workers in (2, 4, 8, 16):
        sent = 2 * (workers - 1) / workers * total
        bounds = []
        for gbit in (10, 25, 100):
            exchange = sent * 8 / (gbit * 1e9)
            bounds.append(f"{args.step_seconds / (args.step_seconds + exchange):.2f}")
        print(f"| {workers} | {sent / 2 ** 20:.0f} MiB | {sent / 2 ** 21:.0f} MiB | "
              + " | ".join(bounds) + " |")
    print()
    print(f"(bound = t_compute / (t_compute + t_exchange), t_compute = {args.step_seconds} s "
          "per step, no overlap; fp16 halves t_exchange)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
