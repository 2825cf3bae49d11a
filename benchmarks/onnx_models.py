"""ONNX model files of one export side by side: the same random rows, calls interleaved.

    python -m benchmarks.onnx_models A/model.onnx B/model.onnx ... \
        [--shapes 32x128,32x24,1x24] [--threads 1] [--calls 6] [--single_row_calls 200]

For two recipes of the same model (int8 as quantized against fused, static
against dynamic scales): each shape's rows are random word ids (seeded), fed to
every file in turn call after call, so each file sees the same minutes. Prints
the median milliseconds a call, its ratio to the first file, and the largest
difference of any float output from the first file's, with the CPU line and
peak RSS. Inputs are our exports' (input_ids, input_mask, segment_ids, int32).
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from benchmarks import measuring


def parse_args(argv=None):
    parser = measuring.parser_for(__doc__)
    parser.add_argument("models", nargs="+", help="ONNX files (the first is the reference)")
    parser.add_argument("--shapes", default="32x128,32x24,1x24", help="ROWSxTOKENS,...")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--calls", type=int, default=6, help="timed calls a shape")
    parser.add_argument("--single_row_calls", type=int, default=200,
                        help="timed calls for shapes of one row")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import onnxruntime as ort
    sessions = []
    for path in args.models:
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = args.threads, 1
        sessions.append(ort.InferenceSession(path, options, providers=["CPUExecutionProvider"]))
    rng = np.random.default_rng(0)
    table = []
    for shape in args.shapes.split(","):
        rows, tokens = (int(n) for n in shape.split("x"))
        ids = rng.integers(1000, 20000, size=(rows, tokens)).astype(np.int32)
        feed = {"input_ids": ids, "input_mask": np.ones_like(ids),
                "segment_ids": np.zeros_like(ids)}
        answers = [session.run(None, feed) for session in sessions]   # (and warm-up)
        seconds = [[] for _ in sessions]
        for _ in range(args.single_row_calls if rows == 1 else args.calls):
            for session, times in zip(sessions, seconds):
                started = time.perf_counter()
                session.run(None, feed)
                times.append(time.perf_counter() - started)
        first = statistics.median(seconds[0])
        for path, times, outputs in zip(args.models, seconds, answers):
            difference = max((float(np.max(np.abs(a - b))) for a, b in zip(outputs, answers[0])
                              if a.dtype.kind == "f"), default=0.0)
            table.append([shape, path, f"{1000 * statistics.median(times):,.2f}",
                          f"{first / statistics.median(times):.2f}", f"{difference:.2g}"])
    print(measuring.cpu_line() + f"; ONNX Runtime {ort.__version__}, {args.threads} "
          f"intra-op thread(s); load avg {measuring.loadavg()}; "
          f"peak RSS {measuring.peak_rss_mb():.0f} MB\n")
    print(measuring.markdown_table(
        ["rows x tokens", "model", "ms a call (median)", "x the first", "largest difference"],
        table, "llrrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
