"""The CPU's share of a parameter_server step, measured: average N gradients, clip, fused AdamW.

What --variable_update=parameter_server asks of the CPU once per step, with the
training graph's own pieces (bert_ad.parallel.towers.average_gradients,
gradients.clip_by_global_norm, the fused AdamW of optimization.py:
ResourceApplyGradientDescent for the weight decay, then ResourceApplyAdam) on
every variable of a BERT model (Google's shapes, bert_ad.model.variable_shapes).
The gradients are variables of their own, so every byte is read from memory as
a tower's gradient would be.

Each configuration runs at 1 and 2 threads (TensorFlow's intra- and inter-op
pools), `--repeats` times; the table gives medians of the wall time, of the CPU
time of this process (what the kernels cost: a machine shared with other jobs
stretches the wall time, hardly the CPU time), the bandwidth that CPU time
streams in the word count of benchmarks/gpu_scaling_model.py, and the memory
bandwidth TensorFlow's own kernels reached at the same moments (`v += g` on two
256 MB variables, right before and after every apply): how loaded the machine was.

Then, for a server: the apply takes the slower of (the CPU-seconds one core
needs here) / (its cores) and (the bytes) / (its memory bandwidth), printed for
the H200's 16-core host at the bandwidth torch's kernels used there
(gpu_scaling_model.CPU_GBPS).

`--torch_reference` also times, the same way and in a process of its own, the
CPU apply that ../shared/measured/gpu_probe.py timed with PyTorch on that host
(docs/gpu_probe_h200.jsonl), so the two kernels can be compared on the same
cores.

    python -m benchmarks.cpu_apply_time [--model base|chinese] [--towers 1,4]
        [--threads 1,2] [--repeats 5] [--torch_reference]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import statistics
import sys
import time

from benchmarks import measuring

from benchmarks.gpu_scaling_model import (BERT_BASE, CHINESE, CLIP_AND_APPLY_WORDS,
                                          CPU_GBPS, averaging_words)

MODELS = {"base": BERT_BASE, "chinese": CHINESE}
# The bandwidth probe: v += g over this many floats per variable (256 MB each).
STREAM_FLOATS = 64 * 1024 * 1024
STREAM_WORDS = 3   # read g, read v, write v


def apply_words(towers: int) -> int:
    """fp32 words of memory traffic per weight of one apply (the model's count)."""
    return averaging_words(towers) + CLIP_AND_APPLY_WORDS


def thread_config(threads: int, num_cpu_devices: int = 1):
    """A session config whose kernels use `threads` threads (intra- and inter-op)."""
    from bert_ad.compat import session_config
    config = session_config(num_cpu_devices)
    config.intra_op_parallelism_threads = threads
    config.inter_op_parallelism_threads = threads
    return config


def build_apply(model, towers: int):
    """In the default graph: the model's variables, `towers` gradients of each (as
    variables) and the step that averages, clips and applies them.

    Returns:
      (the apply op, the number of weights)
    """
    from bert_ad.compat import tf
    from bert_ad.model.modeling import BertConfig
    from bert_ad.model.variable_shapes import google_variable_shapes
    from bert_ad.parallel.gradients import clip_by_global_norm
    from bert_ad.parallel.optimization import make_optimizer
    from bert_ad.parallel.towers import average_gradients

    shapes = google_variable_shapes(BertConfig(**model.bert_config()))
    with tf.device("/cpu:0"):
        init = tf.random_normal_initializer(stddev=0.02)
        weights = [tf.get_variable(name, shape, initializer=init)
                   for name, shape in shapes.items()]
        grads = [[tf.get_variable(f"tower_{t}/{name}", shape, initializer=init,
                                  trainable=False) for name, shape in shapes.items()]
                 for t in range(towers)]
        averaged = average_gradients([[g.read_value() for g in tower] for tower in grads])
        clipped, _ = clip_by_global_norm(averaged, 1.0)
        step = make_optimizer("adamw", 1e-5).apply_gradients(list(zip(clipped, weights)))
    weights_count = sum(int(v.shape.num_elements()) for v in weights)
    return step, weights_count


class BandwidthProbe:
    """`v += g` on two STREAM_FLOATS variables: the memory bandwidth TensorFlow's
    element-wise kernels reach now, at the session's thread count."""

    def __init__(self, floats: int = STREAM_FLOATS):
        from bert_ad.compat import tf
        with tf.device("/cpu:0"):
            init = tf.ones_initializer()
            v = tf.get_variable("probe/v", [floats], initializer=init, trainable=False)
            g = tf.get_variable("probe/g", [floats], initializer=init, trainable=False)
            self.op = v.assign_add(g, read_value=False)
        self.bytes = STREAM_WORDS * 4.0 * floats

    def gbps(self, session) -> float:
        """GB/s of one pass (the best of two: a pass is a few tens of ms)."""
        best = float("inf")
        for _ in range(2):
            start = time.perf_counter()
            session.run(self.op)
            best = min(best, time.perf_counter() - start)
        return self.bytes / best / 1e9


def timed(run) -> tuple:
    """(wall seconds, CPU seconds of this process) of run()."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure_ours(model, towers: int, threads_list, repeats: int) -> dict:
    """{threads: {"wall": [...], "cpu": [...], "stream": [...]}} of our apply."""
    from bert_ad.compat import tf
    results = {}
    with tf.Graph().as_default():
        step, weights = build_apply(model, towers)
        probe = BandwidthProbe()
        init = tf.global_variables_initializer()
        for threads in threads_list:
            with tf.Session(config=thread_config(threads)) as session:
                session.run(init)
                session.run(step)  # first run: allocations
                results[threads] = _repeat(lambda: session.run(step),
                                           lambda: probe.gbps(session), repeats)
    return {"weights": weights, "by_threads": results}


def _repeat(apply, stream, repeats: int) -> dict:
    """Each repeat: the bandwidth probe, the apply, the probe again (their mean)."""
    walls, cpus, streams = [], [], []
    for _ in range(repeats):
        before = stream()
        wall, cpu = timed(apply)
        streams.append((before + stream()) / 2)
        walls.append(wall)
        cpus.append(cpu)
    return {"wall": walls, "cpu": cpus, "stream": streams}


def measure_torch(weights: int, towers: int, threads_list, repeats: int) -> dict:
    """The same, for the PyTorch apply gpu_probe.py timed on the H200's host
    (its cpu_apply: stack + mean, norm, scale, torch.optim.AdamW(foreach=True));
    the bandwidth probe stays TensorFlow's, so both sides are held to one roof."""
    import torch

    from bert_ad.compat import tf
    w = torch.zeros(weights)
    grads = [torch.randn(weights) * 1e-3 for _ in range(towers)]
    w.grad = torch.zeros(weights)
    optimizer = torch.optim.AdamW([w], lr=1e-5, foreach=True)

    def apply():
        g = torch.stack(grads).mean(0) if towers > 1 else grads[0].clone()
        norm = g.norm()
        g.mul_(min(1.0, 1.0 / (float(norm) + 1e-6)))
        w.grad = g
        optimizer.step()

    results = {}
    with tf.Graph().as_default():
        probe = BandwidthProbe()
        init = tf.global_variables_initializer()
        for threads in threads_list:
            torch.set_num_threads(threads)
            with tf.Session(config=thread_config(threads)) as session:
                session.run(init)
                apply()  # first run: the optimizer's state
                results[threads] = _repeat(apply, lambda: probe.gbps(session), repeats)
    return {"weights": weights, "by_threads": results}


def torch_in_own_process(weights: int, towers: int, threads: str, repeats: int) -> dict:
    """measure_torch in a fresh process, so that its memory does not stack on ours
    (BERT-base: about 3 GB each)."""
    run = subprocess.run(
        [sys.executable, "-m", "benchmarks.cpu_apply_time", "--torch_worker", str(weights),
         "--towers", str(towers), "--threads", threads, "--repeats", str(repeats)],
        stdout=subprocess.PIPE, text=True, check=True)
    result = json.loads(run.stdout.splitlines()[-1])
    result["by_threads"] = {int(k): v for k, v in result["by_threads"].items()}
    return result


def summary(runs: dict, words: int, weights: int) -> dict:
    """Medians of one configuration, and the effective bandwidths they imply."""
    wall = statistics.median(runs["wall"])
    cpu = statistics.median(runs["cpu"])
    stream = statistics.median(runs["stream"])
    nbytes = words * 4.0 * weights
    return {"wall": wall, "cpu": cpu, "stream_gbps": stream,
            "gbps_per_cpu_second": nbytes / cpu / 1e9}


def host_estimate(model, towers: int, cpu_seconds: float, cores: int = 16) -> str:
    """Our apply on a server of `cores` cores whose memory gives element-wise kernels
    CPU_GBPS (the H200's host): the slower of the cores' share of the CPU-seconds one
    core needs here and the bytes over the host's bandwidth."""
    nbytes = apply_words(towers) * 4.0 * model.parameters()
    cores_ms = 1000 * cpu_seconds / cores
    memory_ms = 1000 * nbytes / (CPU_GBPS * 1e9)
    return (f"{model.name}, {towers} tower{'s' if towers > 1 else ''}, on the H200's host "
            f"({cores} cores, {CPU_GBPS:.1f} GB/s): {max(cores_ms, memory_ms):.0f} ms "
            f"(the cores alone {cores_ms:.0f} ms, its memory {memory_ms:.0f} ms)")


def machine_line() -> str:
    from bert_ad.compat.onednn import onednn_state
    from benchmarks.measuring import cpu_line
    return cpu_line(onednn_state())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="base")
    parser.add_argument("--towers", default="1,4", help="gradients averaged per step")
    parser.add_argument("--threads", default="1,2", help="TensorFlow (and torch) threads")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torch_reference", action="store_true",
                        help="also time gpu_probe.py's PyTorch apply (the H200 host's figure)")
    parser.add_argument("--torch_worker", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    model = MODELS[args.model]
    towers_list = [int(t) for t in args.towers.split(",")]
    threads_list = [int(t) for t in args.threads.split(",")]
    if (args.torch_reference or args.torch_worker is not None) and (
            importlib.util.find_spec("torch") is None):
        print("error: --torch_reference needs PyTorch (pip install torch)", file=sys.stderr)
        return 2
    if args.torch_worker is not None:
        result = measure_torch(args.torch_worker, towers_list[0], threads_list,
                               args.repeats)
        print(json.dumps(dict(result, peak_rss_mb=measuring.process_peak_rss_mb(os.getpid()))))
        return 0
    print(machine_line())
    print(f"load average (1 min) at start: {measuring.loadavg()}\n")
    header = ["model", "towers", "threads", "ours: wall s", "CPU s", "GB/s per CPU-second",
              "probe GB/s (same moments)"]
    if args.torch_reference:
        header += ["torch: wall s", "CPU s", "ours / torch (CPU time)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    peaks, one_core = [measuring.process_peak_rss_mb(os.getpid())], {}
    for towers in towers_list:
        ours = measure_ours(model, towers, threads_list, args.repeats)
        torch = (torch_in_own_process(ours["weights"], towers, args.threads, args.repeats)
                 if args.torch_reference else None)
        if torch is not None:
            peaks.append(torch["peak_rss_mb"])
        for threads, runs in ours["by_threads"].items():
            s = summary(runs, apply_words(towers), ours["weights"])
            if threads == 1:
                one_core[towers] = s["cpu"]
            row = [model.name, towers, threads, f"{s['wall']:.3f}", f"{s['cpu']:.3f}",
                   f"{s['gbps_per_cpu_second']:.1f}", f"{s['stream_gbps']:.1f}"]
            if torch is not None:
                t = summary(torch["by_threads"][threads], apply_words(towers),
                            torch["weights"])
                row += [f"{t['wall']:.3f}", f"{t['cpu']:.3f}", f"{s['cpu'] / t['cpu']:.2f}"]
            print("| " + " | ".join(str(c) for c in row) + " |")
    print()
    for towers, cpu_seconds in one_core.items():
        print(host_estimate(model, towers, cpu_seconds))
    peaks[0] = measuring.process_peak_rss_mb(os.getpid())
    print(f"\nmedians of {args.repeats} repeats; load average at the end: {measuring.loadavg()}; "
          f"peak RSS {peaks[0]:,.0f} MB"
          + (f" (torch's process {max(peaks[1:]):,.0f} MB)" if len(peaks) > 1 else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
