"""Where an ONNX model's time goes: ONNX Runtime's own per-node profile, by kind of op.

    python -m benchmarks.onnx_op_profile NAME=A/model.onnx NAME=B/model.onnx ... \
        [--shapes 32x128,32x24] [--threads 1] [--calls 8] [--json docs/X.json]

Each model is loaded with SessionOptions.enable_profiling; the same seeded random
rows are scored `--warmup` times (not counted) and `--calls` times, and the
profile's node events of the counted calls are summed by op type and by kind
(int8 matmuls, float matmuls, quantize / dequantize, layer norm, activation,
softmax, embedding lookup, the rest). Prints, per shape, each model's
milliseconds a call (the profile's model_run, median) and each kind's share and
milliseconds, then the op types; the CPU line (its vector ISA, whether oneDNN is
on: not in ONNX Runtime's CPU provider) and peak RSS. One intra-op thread by
default, so a node's time is its cost, not its share of a thread pool.

Inputs: our exports' (input_ids, input_mask, segment_ids, int32) or optimum's
(input_ids, attention_mask, token_type_ids, int64), by the model's input names.
"""

from __future__ import annotations

import collections
import json
import os
import statistics
import sys
import tempfile
from typing import Dict, List

import numpy as np

from benchmarks import measuring

KINDS = (
    ("int8 matmul", {"MatMulInteger", "MatMulIntegerToFloat", "QAttention", "QGemm",
                     "QLinearMatMul", "DynamicQuantizeMatMul", "MatMulInteger16"}),
    ("float matmul", {"MatMul", "Gemm", "FusedMatMul", "Attention", "MultiHeadAttention",
                      "FusedGemm"}),
    ("quantize / dequantize", {"QuantizeLinear", "DequantizeLinear",
                               "DynamicQuantizeLinear"}),
    ("layer norm", {"LayerNormalization", "SkipLayerNormalization",
                    "SimplifiedLayerNormalization", "SkipSimplifiedLayerNormalization"}),
    ("activation (GELU)", {"Gelu", "BiasGelu", "FastGelu", "Erf", "QuickGelu"}),
    ("softmax", {"Softmax"}),
    ("embedding lookup", {"Gather", "EmbedLayerNormalization"}),
)


def kind_of(op_type: str) -> str:
    for kind, op_types in KINDS:
        if op_type in op_types:
            return kind
    return "the rest (add, mul, reshape, transpose, ...)"


def parse_args(argv=None):
    parser = measuring.parser_for(__doc__)
    parser.add_argument("models", nargs="+", help="NAME=path/model.onnx")
    parser.add_argument("--shapes", default="32x128,32x24", help="ROWSxTOKENS,...")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--json", default="", help="also write the figures here")
    return parser.parse_args(argv)


def feed_for(session, ids: np.ndarray) -> Dict[str, np.ndarray]:
    """The rows in the model's own input names and integer type."""
    feed = {}
    for given in session.get_inputs():
        dtype = np.int64 if "int64" in given.type else np.int32
        if given.name == "input_ids":
            feed[given.name] = ids.astype(dtype)
        elif given.name in ("input_mask", "attention_mask"):
            feed[given.name] = np.ones(ids.shape, dtype)
        elif given.name in ("segment_ids", "token_type_ids"):
            feed[given.name] = np.zeros(ids.shape, dtype)
        else:
            raise SystemExit(f"error: {given.name} is an input this benchmark does not know")
    return feed


def profile(path: str, ids: np.ndarray, threads: int, warmup: int, calls: int) -> dict:
    """{"ms_a_call", "op_ms": {op type: ms a call}} from ONNX Runtime's profile."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as folder:
        options.profile_file_prefix = os.path.join(folder, "profile")
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        feed = feed_for(session, ids)
        for _ in range(warmup + calls):
            session.run(None, feed)
        with open(session.end_profiling(), encoding="utf-8") as f:
            events = json.load(f)
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    counted = runs[warmup:]
    start = counted[0]["ts"]
    op_us: Dict[str, float] = collections.defaultdict(float)
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") \
                and event["ts"] >= start:
            op_us[event["args"]["op_name"]] += event["dur"]
    return {"ms_a_call": statistics.median(e["dur"] for e in counted) / 1000,
            "op_ms": {op: us / 1000 / len(counted) for op, us in op_us.items()}}


def kinds_table(shape: str, results: Dict[str, dict]) -> List[list]:
    rows = []
    names = list(results)
    kinds = [kind for kind, _ in KINDS] + [kind_of("")]
    by_kind = {name: collections.defaultdict(float) for name in names}
    for name in names:
        for op, ms in results[name]["op_ms"].items():
            by_kind[name][kind_of(op)] += ms
    nodes = {name: sum(results[name]["op_ms"].values()) for name in names}
    for kind in kinds:
        if not any(by_kind[name][kind] for name in names):
            continue
        row = [shape, kind]
        for name in names:
            ms = by_kind[name][kind]
            row.append(f"{ms:.2f} ({100 * ms / nodes[name]:.0f}%)" if ms else "-")
        rows.append(row)
    rows.append([shape, "**a call (model_run, median)**"] +
                [f"**{results[name]['ms_a_call']:.2f}**" for name in names])
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    import onnxruntime as ort
    models = dict(item.split("=", 1) for item in args.models)
    rng = np.random.default_rng(0)
    figures, kinds, ops = {}, [], []
    for shape in args.shapes.split(","):
        rows, tokens = (int(n) for n in shape.split("x"))
        ids = rng.integers(1000, 20000, size=(rows, tokens))
        results = {name: profile(path, ids, args.threads, args.warmup, args.calls)
                   for name, path in models.items()}
        figures[shape] = results
        kinds += kinds_table(shape, results)
        every_op = sorted({op for r in results.values() for op in r["op_ms"]},
                          key=lambda op: -max(r["op_ms"].get(op, 0) for r in results.values()))
        for op in every_op:
            ops.append([shape, op, kind_of(op)] +
                       [f"{results[name]['op_ms'][op]:.3f}" if op in results[name]["op_ms"]
                        else "-" for name in models])
    print(measuring.cpu_line() + f"; ONNX Runtime {ort.__version__} (CPU provider, its MLAS "
          f"kernels; oneDNN not used), {args.threads} intra-op thread(s); "
          f"{args.calls} profiled calls after {args.warmup}; load avg "
          f"{measuring.loadavg()}; peak RSS {measuring.peak_rss_mb():.0f} MB\n")
    print("ms a call by kind of op (share of the nodes' time):\n")
    print(measuring.markdown_table(["rows x tokens", "kind"] + list(models), kinds,
                                   "ll" + "r" * len(models)))
    print("\nms a call by op type:\n")
    print(measuring.markdown_table(["rows x tokens", "op type", "kind"] + list(models), ops,
                                   "lll" + "r" * len(models)))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cpu": measuring.cpu_line(), "threads": args.threads,
                       "models": models, "figures": figures}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
