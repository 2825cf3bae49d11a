"""A training step's FLOPs, this machine's matmul rate, and where a traced step's time goes.

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

import time
from typing import Iterable, Optional

from benchmarks.measuring import fmt, markdown_table


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


def _static(shape) -> Optional[list]:
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
