"""What the benchmark scripts share: FLOP counting, matmul peak, tables, workers.

FLOPs of one BERT classifier training step (multiply-add = 2 FLOPs; only
matrix multiplications are counted, the usual convention for "model FLOPs":
layer norm, softmax, GELU, dropout and the optimizer's element-wise update
are left out). For a model with L layers, hidden size H, intermediate size I
and C labels, and a sequence of n tokens:

    forward, per layer:   2 * (4*H*H + 2*H*I) * n     Q, K, V, output; FFN in, out
                        + 4 * H * n * n               Q K^T and probs V (all heads)
    forward, per sequence: 2*H*H + 2*H*C              pooler ([CLS] only), classifier
    training = 3 * forward                            backward = 2 * forward (input
                                                      and weight gradients)

so, summed over the sequences of a step,

    training FLOPs = 6 * P * tokens + 12 * L * H * sum(n^2)
                     + 6 * (H*H + H*C) * sequences,   P = L * (4*H*H + 2*H*I)

where P is the number of weights in the encoder's matrix multiplications (the
embedding lookup is a gather, no FLOPs). "Useful" FLOPs use each example's
real length n; "executed" FLOPs use the padded length the step really ran.
`graph_matmul_flops` counts the same thing from a built graph, op by op, which
is how the formula is tested.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Iterable, Sequence

from bert_ad.cpu_features import cpu_flags


def encoder_matmul_params(config) -> int:
    """Weights in the encoder's matrix multiplications: L * (4 H^2 + 2 H I)."""
    h, i = config.hidden_size, config.intermediate_size
    return config.num_hidden_layers * (4 * h * h + 2 * h * i)


def forward_flops(config, lengths: Iterable[int], num_labels: int) -> int:
    """Matmul FLOPs of one classifier forward pass over sequences of `lengths`.

    Args:
      config: a BertConfig (hidden_size, intermediate_size, num_hidden_layers).
      lengths: tokens per sequence (real or padded, as the caller wants).
      num_labels: classifier outputs C.

    Returns:
      FLOPs as an int (2 per multiply-add).
    """
    lengths = [int(n) for n in lengths]
    h, layers = config.hidden_size, config.num_hidden_layers
    per_token = 2 * encoder_matmul_params(config)
    attention = 4 * layers * h * sum(n * n for n in lengths)
    head = (2 * h * h + 2 * h * num_labels) * len(lengths)
    return per_token * sum(lengths) + attention + head


def training_flops(config, lengths: Iterable[int], num_labels: int) -> int:
    """Matmul FLOPs of one training step (forward + backward) = 3 * forward."""
    return 3 * forward_flops(config, lengths, num_labels)


def _static(shape) -> list | None:
    dims = shape.as_list() if shape.dims is not None else None
    if dims is None or any(d is None for d in dims):
        return None
    return dims


def graph_matmul_flops(graph) -> int:
    """2*m*n*k summed over every MatMul / BatchMatMul op of `graph`.

    Every such op must have fully static input shapes (build the graph with
    fixed-shape placeholders); this is the independent count the formula
    above is checked against.

    Raises:
      ValueError: a matmul op with an unknown dimension.
    """
    total = 0
    for op in graph.get_operations():
        if op.type == "MatMul":
            a, b = (_static(t.shape) for t in op.inputs[:2])
            if a is None or b is None:
                raise ValueError(f"{op.name}: matmul with a dynamic shape")
            m, k = (a[1], a[0]) if op.get_attr("transpose_a") else (a[0], a[1])
            n = b[0] if op.get_attr("transpose_b") else b[1]
            total += 2 * m * n * k
        elif op.type in ("BatchMatMul", "BatchMatMulV2", "BatchMatMulV3"):
            a, b = (_static(t.shape) for t in op.inputs[:2])
            if a is None or b is None:
                raise ValueError(f"{op.name}: matmul with a dynamic shape")
            m, k = (a[-1], a[-2]) if op.get_attr("adj_x") else (a[-2], a[-1])
            n = b[-2] if op.get_attr("adj_y") else b[-1]
            batch = 1
            for d in (a[:-2] if len(a) >= len(b) else b[:-2]):
                batch *= d
            total += 2 * batch * m * n * k
    return total


# ----------------------------------------------------------------------------
# A traced step: where its time goes
# ----------------------------------------------------------------------------

def traced_op_micros(step_stats, category) -> dict:
    """Op time of a traced session.run (RunMetadata.step_stats), summed three ways.

    Args:
      step_stats: `RunMetadata.step_stats` of a run with FULL_TRACE.
      category: op name -> the label it is summed under (the caller's split of
        the step).

    Returns:
      {"by_category", "by_type", "by_node"}: {label: microseconds}, each op's
      time summed over the threads that ran ops at once (so the total exceeds
      the step's wall time on several cores).
    """
    tables = {"by_category": {}, "by_type": {}, "by_node": {}}
    for device in step_stats.dev_stats:
        for node in device.node_stats:
            name = node.node_name.split(":")[0]
            if name in ("_SOURCE", "_SINK"):
                continue
            label = node.timeline_label
            op_type = label.split("(")[0].split("=")[-1].strip() if "=" in label else name
            for table, key in (("by_category", category(name)), ("by_type", op_type),
                               ("by_node", name)):
                tables[table][key] = tables[table].get(key, 0) + node.all_end_rel_micros
    return tables


def op_time_table(title: str, micros: dict, top: int = 15) -> str:
    """The `top` largest entries of {label: microseconds} as a markdown table with
    each one's share of the whole."""
    total = float(sum(micros.values())) or 1.0
    rows = sorted(micros.items(), key=lambda kv: -kv[1])[:top]
    return markdown_table([title, "ms (summed over threads)", "share"],
                          [[k, fmt(v / 1e3), fmt(100 * v / total) + "%"] for k, v in rows])


# ----------------------------------------------------------------------------
# This machine's matmul rate
# ----------------------------------------------------------------------------

def _best_times(run, repeats: int) -> tuple:
    """(best wall seconds, best process-CPU seconds) of `repeats` calls of run()."""
    wall = cpu = float("inf")
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        run()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - cpu_start)
    return wall, max(cpu, 1e-9)


def _rates(flops: float, times: tuple) -> dict:
    return {"flops_per_sec": flops / times[0], "flops_per_cpu_sec": flops / times[1]}


def measure_numpy_matmul(n: int = 2048, repeats: int = 5) -> dict:
    """Best rate of an n x n x n float32 numpy matmul over `repeats` runs.

    Returns:
      {"flops_per_sec": by the wall clock, "flops_per_cpu_sec": per second of
      CPU time the process used (all threads), which a busy machine lowers
      less than the wall-clock rate}.
    """
    import numpy as np
    rng = np.random.RandomState(0)
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    np.matmul(a, b)  # warm-up: thread pool, page faults
    return _rates(2.0 * n ** 3, _best_times(lambda: np.matmul(a, b), repeats))


def measure_tf_matmul(m: int = 2048, k: int = 2048, n: int = 2048, repeats: int = 5,
                      session_config=None) -> dict:
    """Best rate of a float32 [m, k] x [k, n] TensorFlow matmul on /cpu:0.

    Runs in its own graph and session (the TF intra/inter-op thread pools are
    the process's, as for training); the product is not fetched, so no copy
    to Python is timed. Returns the same dict as `measure_numpy_matmul`.
    """
    from bert_ad.compat import tf
    with tf.Graph().as_default():
        with tf.device("/cpu:0"):
            a = tf.Variable(tf.random.normal([m, k], seed=1))
            b = tf.Variable(tf.random.normal([k, n], seed=2))
            product = tf.matmul(a, b)
        with tf.Session(config=session_config) as session:
            session.run(tf.global_variables_initializer())
            session.run(product.op)
            times = _best_times(lambda: session.run(product.op), repeats)
    return _rates(2.0 * m * k * n, times)


# ----------------------------------------------------------------------------
# Tables, statistics, machine, workers
# ----------------------------------------------------------------------------

def markdown_table(headers: Sequence[str], rows: Sequence[Sequence],
                   align: str | None = None) -> str:
    """A GitHub markdown table; cells are str()-ed, columns padded to width.

    Args:
      headers: column titles.
      rows: one sequence of cells per row, as many as headers.
      align: one character per column, "l" or "r" (default: first column
        left, the others right).

    Returns:
      The table, one line per row, without a trailing newline.
    """
    cells = [[str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(headers):
            raise ValueError(f"row {row} has {len(row)} cells, expected {len(headers)}")
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        padded = [v.ljust(w) if a == "l" else v.rjust(w)
                  for v, w, a in zip(values, widths, align)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join((":" + "-" * (w + 1)) if a == "l" else ("-" * (w + 1) + ":")
                          for w, a in zip(widths, align)) + "|"
    return "\n".join([line(headers), rule] + [line(r) for r in cells])


def median(values: Sequence[float]) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def fmt(value: float, digits: int = 1) -> str:
    """`value` with `digits` decimals; NaN (not measured) as "-"."""
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# The SIMD extensions that decide which CPU kernels TensorFlow and PyTorch run
# (names as /proc/cpuinfo spells them).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni",
             "avx512_bf16", "amx_tile")


def cpu_isa(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The vector ISA of this CPU that matters for the kernels, e.g. "avx avx2 fma".

    Args:
      cpuinfo: the file to read (Linux's /proc/cpuinfo).
    Returns:
      The ISA_FLAGS this CPU has, space-separated, or "unknown" (no flags line).
    """
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return "unknown"
    return " ".join(name for name in ISA_FLAGS if name in flags) or "none of " + ", ".join(
        ISA_FLAGS)


def logged_onednn_state(log_text: str) -> str:
    """The oneDNN state a launcher's start-up log names (its device plan's line)."""
    found = re.search(r"CPU kernels: oneDNN (.*)", log_text)
    return found.group(1).strip() if found else "not logged"


def vector_class(isa: str) -> str:
    """The widest vector class in a cpu_isa() string: "AMX", "AVX-512", "AVX2", ..."""
    for flag, name in (("amx_tile", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"),
                       ("avx", "AVX"), ("sse4_2", "SSE4.2")):
        if flag in isa.split():
            return name
    return "unknown"


def onednn_state() -> str:
    """Whether this process's TensorFlow runs oneDNN, and why (imports TensorFlow)."""
    from bert_ad.compat import onednn_state as state
    return state()


def cpu_line(onednn: str | None = None) -> str:
    """One line for every benchmark table: CPU model, vector ISA, oneDNN state.

    Args:
      onednn: the oneDNN state a worker reported (onednn_state()); None
        leaves it out (a process that did not import TensorFlow).
    """
    isa = cpu_isa()
    line = f"CPU: {cpu_model()}, {os.cpu_count()} cores, {vector_class(isa)} ({isa})"
    return line + (f"; TensorFlow oneDNN {onednn}" if onednn else "")


def machine_description() -> dict:
    """nproc, CPU model and ISA, load average, Python and library versions."""
    info = {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "isa": cpu_isa(),
            "python": platform.python_version(), "platform": platform.platform()}
    try:
        info["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        info["loadavg"] = "unknown"
    for module in ("numpy", "tensorflow", "torch", "transformers"):
        info[module] = _version_without_import(module)
    return info


def _version_without_import(module: str) -> str:
    """A package's version from its metadata (importing TF or torch here would
    start their thread pools in the driver process)."""
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7
        try:
            import importlib_metadata as metadata  # type: ignore
        except ImportError:
            return "unknown"
    names = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow_cpu",
                            "tensorflow-gpu")}.get(module, (module,))
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return "not installed"


RESULT_PREFIX = "BENCH_RESULT "


def emit_result(result: dict) -> None:
    """Print a worker's result as the one line the driver looks for."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_worker(command: Sequence[str], env: dict | None = None,
               timeout: float | None = None) -> dict:
    """Run a worker process and return the result it emitted.

    Each measurement runs in a fresh process, so TensorFlow's and PyTorch's
    thread pools never compete inside one process and a measurement starts
    from the same state whatever ran before it.

    Raises:
      RuntimeError: the worker failed or printed no result (its output tail
        is in the message).
    """
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=full_env, timeout=timeout)
    return _emitted_result(command, proc.returncode, proc.stdout)


def _emitted_result(command: Sequence[str], returncode: int, output: str) -> dict:
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    tail = "\n".join(output.splitlines()[-20:])
    raise RuntimeError(f"worker {' '.join(command)} exited {returncode} "
                       f"without a result:\n{tail}")


def run_workers_side_by_side(commands: Sequence[Sequence[str]], cores: Sequence[int],
                             env: dict | None = None) -> list:
    """Run the workers at the same time, worker i pinned to CPU core cores[i].

    A virtual machine's speed can drift by 1.7x between minutes
    (docs/benchmarks.md): two workers one after the other compare two
    different minutes, two side by side share them. Each gets one core of its
    own, so neither slows the other beyond what cores of one machine share
    (memory bandwidth, caches). Run it again with the cores swapped.

    Returns:
      Each worker's result, or {"error": its output tail} for one that emitted none.
    """
    if len(commands) != len(cores):
        raise ValueError(f"{len(commands)} commands for {len(cores)} cores")
    full_env = dict(os.environ)
    full_env.update(env or {})
    running = []
    for command, core in zip(commands, cores):
        # The output to a file, not a pipe: an unread pipe would stall its worker.
        output = tempfile.TemporaryFile("w+", encoding="utf-8")
        running.append((command, output, subprocess.Popen(
            list(command), stdout=output, stderr=subprocess.STDOUT, text=True, env=full_env,
            preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}))))
    results = []
    for command, output, process in running:
        returncode = process.wait()
        output.seek(0)
        try:
            results.append(_emitted_result(command, returncode, output.read()))
        except RuntimeError as e:
            results.append({"error": str(e)[-600:]})
        output.close()
    return results
