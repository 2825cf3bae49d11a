"""Where one training step's time goes in each --variable_update layout: a trace of the real graph.

The classifier's training graph (bert_ad.parallel.train_graph, the one
run_classifier_mgpu.py runs) is built for 1 card and for every visible card in
both layouts, run for --warmup + --steps untimed and timed steps on synthetic
full-length rows, then for --traced steps with TensorFlow's full trace
(RunOptions.FULL_TRACE: the executor's op times, and on GPUs the kernels and
copies CUPTI saw). Each traced step is split into wall time, every moment
counted once, in the first part active then:

  compute     the towers' forward and backward ops (tower_i/...)
  all-reduce  the replicated towers' collective ops (tower_i_all_reduce/...)
  apply       averaging, clipping, the optimizer's apply (everything else of the
              update): on the CPU with parameter_server, on the towers' devices
              with replicated
  transfers   host <-> card copies (the trace's memcpy events)
  other       any other op (feeds, reads of small variables)
  idle        nothing running: Python, the session's launch, waiting

Beside each row, the scaling model's prediction for the same cards
(benchmarks/gpu_scaling_model.py) with the 1-card compute measured here as its
only measured input. On a machine without GPUs the towers are logical CPU
devices: the same graph and placement code, no PCIe and no NCCL, so the table
shows the split of the graph, not a GPU's; no prediction is printed.

    python -m benchmarks.step_split [--model base|chinese|tiny|CONFIG.json]
        [--seq 128] [--batch 32] [--cards 1,8] [--steps 10] [--traced 3]
        [--card_name "NVIDIA H200"] [--pcie_gen 5] [--interconnect pcie|nvlink]
        [--cpu_gbps 40]

scripts/gpu_smoke.sh runs it with the cards nvidia-smi reports.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time
from typing import Dict, List, Sequence, Tuple

from benchmarks import gpu_scaling_model as paper
from benchmarks.measuring import peak_rss_mb

LAYOUTS = ("parameter_server", "replicated")
PARTS = ("compute", "all-reduce", "apply", "transfers", "other")   # in priority order
TINY_CONFIG = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "configs", "tiny_bert_config.json")

_TOWER = re.compile(r"^(ConstantFolding/)?tower_\d+/")
_ALL_REDUCE = re.compile(r"^tower_\d+_all_reduce/")
_COPY_OPS = ("_Send", "_Recv", "_HostSend", "_HostRecv")
# The device of a GPU's kernels and copies in a trace (CUPTI), and of its executor.
_GPU_STREAM = re.compile(r"/device:GPU:(\d+)/stream:all$")
_GPU_MEMCPY = re.compile(r"/device:GPU:(\d+)/memcpy$")
_GPU_EXECUTOR = re.compile(r"/device:GPU:(\d+)$")


# ----------------------------------------------------------------------------
# A traced step, split
# ----------------------------------------------------------------------------

def op_type(node) -> str:
    """The op type of an executor's node stats ("name = Type(inputs)")."""
    label = node.timeline_label
    if " = " in label:
        return label.split(" = ", 1)[1].split("(", 1)[0].strip()
    return ""


def category(name: str, kind: str = "") -> str:
    """The part of the step an op belongs to, by its name (and type)."""
    name = name.split(":", 1)[0]   # a kernel's "op name:op type"
    if _ALL_REDUCE.match(name) or kind.startswith(("Collective", "Nccl")):
        return "all-reduce"
    if _TOWER.match(name):
        return "compute"
    if kind in ("_Arg", "_Retval", "NoOp", "Const", "_SOURCE"):
        return "other"
    return "apply"


def direction(label: str) -> str:
    """"down" (host -> card), "up" (card -> host) or "between cards" of a copy."""
    compact = label.replace("to", "2")
    if "H2D" in compact:
        return "down"
    if "D2H" in compact:
        return "up"
    return "between cards"


def intervals(step_stats) -> Tuple[Dict[str, List[tuple]], Dict[str, List[tuple]], bool]:
    """The step's busy intervals (start, end) in µs, by part and by copy direction.

    Returns:
      ({part: intervals}, {copy direction: intervals}, whether every GPU's kernels
      came from a device trace: without one (no CUPTI) a GPU's executor times
      are only the launches, and are used as they are.)
    """
    traced_gpus = set()
    for dev in step_stats.dev_stats:
        found = _GPU_STREAM.search(dev.device)
        if found:
            traced_gpus.add(found.group(1))
    by_part = {part: [] for part in PARTS}
    copies = {"down": [], "up": [], "between cards": []}
    executor_gpus = set()
    for dev in step_stats.dev_stats:
        stream, memcpy = _GPU_STREAM.search(dev.device), _GPU_MEMCPY.search(dev.device)
        executor = _GPU_EXECUTOR.search(dev.device)
        if executor:
            executor_gpus.add(executor.group(1))
            if executor.group(1) in traced_gpus:
                continue   # launch times; the kernels are in stream:all
        elif not (stream or memcpy) and "/device:GPU:" in dev.device:
            continue       # one stream's copy of stream:all, or a sync record
        for node in dev.node_stats:
            span = (node.all_start_micros, node.all_start_micros + node.all_end_rel_micros)
            if memcpy:
                by_part["transfers"].append(span)
                copies[direction(node.timeline_label or node.node_name)].append(span)
                continue
            kind = op_type(node)
            if kind in _COPY_OPS:
                continue   # a rendezvous: its time is waiting for the other side
            by_part[category(node.node_name, kind)].append(span)
    return by_part, copies, executor_gpus <= traced_gpus


def busy(spans: Sequence[tuple]) -> float:
    """µs covered by the union of the intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


def split(step_stats) -> dict:
    """One traced step as milliseconds of wall time per part (each moment once,
    in PARTS' order, the rest idle), the copies' busy time by direction, and
    whether the GPUs' kernels were traced."""
    by_part, copies, device_traced = intervals(step_stats)
    spans = [span for part in PARTS for span in by_part[part]]
    if not spans:
        raise ValueError("the trace holds no op")
    window = (min(s for s, _ in spans), max(e for _, e in spans))
    covered, result = [], {}
    for part in PARTS:
        # This part's time where no earlier part was running.
        before = busy(covered)
        covered = covered + by_part[part]
        result[part] = (busy(covered) - before) / 1000
    result["idle"] = (window[1] - window[0]) / 1000 - sum(result[p] for p in PARTS)
    result["traced"] = (window[1] - window[0]) / 1000
    result["copies busy"] = {d: busy(s) / 1000 for d, s in copies.items()}
    result["device traced"] = device_traced
    return result


def median_split(splits: Sequence[dict]) -> dict:
    out = {key: statistics.median(s[key] for s in splits)
           for key in PARTS + ("idle", "traced")}
    out["copies busy"] = {d: statistics.median(s["copies busy"][d] for s in splits)
                          for d in splits[0]["copies busy"]}
    out["device traced"] = all(s["device traced"] for s in splits)
    return out


# ----------------------------------------------------------------------------
# The model's prediction for the same cards
# ----------------------------------------------------------------------------

# HBM bandwidth (GB/s) by card name, for the apply on the cards (replicated).
CARD_MEMORY = (("H200", paper.H200_MEMORY), ("H100", 3350.0), ("A100", 1555.0),
               ("V100", 900.0), ("P100", 732.0))
PCIE = {3: (paper.PCIE3, paper.PCIE3, paper.RING_PCIE3),
        4: (paper.PCIE4, paper.PCIE4, paper.RING_PCIE4),
        5: (paper.PCIE5, paper.PCIE5_PAGEABLE_DOWN, paper.RING_PCIE5)}


def card_box(card_name: str, pcie_gen: int, interconnect: str, model: paper.Model,
             batch: int, seq: int, compute_seconds: float) -> paper.Machine:
    """The model's Machine for these cards, its FLOP/s set by the measured compute."""
    memory = next((gbps for key, gbps in CARD_MEMORY if key in card_name), 1555.0)
    link, down, ring = PCIE[pcie_gen]
    if interconnect == "nvlink":
        ring = (paper.NVSWITCH_H100 if re.search("H100|H200", card_name)
                else paper.NVSWITCH_A100 if "A100" in card_name else paper.NVLINK_DGX1)
    flops = model.train_flops(batch, seq) / compute_seconds
    return paper.Machine(f"{card_name}, PCIe {pcie_gen}, {interconnect}", flops,
                         0.8 * memory, link, 4, ring, down)


def predicted(layout: str, model: paper.Model, box: paper.Machine, cards: int, batch: int,
              seq: int, cpu_gbps: float) -> str:
    """The model's step for `cards` cards, its parts named, in ms."""
    if layout == "replicated":
        step = paper.replicated_step(model, box, cards, batch, seq, True)
        parts = [("compute", step.compute), ("all-reduce", step.exposed_allreduce),
                 ("apply", step.gpu_apply)]
    else:
        step = paper.parameter_server_step(model, box, cards, batch, seq, cpu_gbps, True)
        parts = [("compute", step.compute), ("up", step.exposed_up),
                 ("CPU apply", step.cpu_apply), ("down", step.exposed_down)]
    return (" + ".join(f"{name} {paper.ms(t)}" for name, t in parts)
            + f" = {paper.ms(step.total)}")


# ----------------------------------------------------------------------------
# Measuring
# ----------------------------------------------------------------------------

def model_config(name: str):
    """(BertConfig, the model's shapes) of --model."""
    from bert_ad.model.modeling import BertConfig
    if name in ("base", "chinese"):
        shapes = {"base": paper.BERT_BASE, "chinese": paper.CHINESE}[name]
        return BertConfig(**shapes.bert_config()), shapes
    path = TINY_CONFIG if name == "tiny" else name
    config = BertConfig.from_json_file(path)
    label = "the tiny model" if name == "tiny" else path
    return config, paper.Model.of_config(label, config)


def synthetic_feed(placeholders: Sequence[dict], vocab_size: int, batch: int, seq: int,
                   seed: int = 0) -> dict:
    """Full-length rows of random pieces (the split does not depend on the text)."""
    import numpy as np
    rng = np.random.RandomState(seed)
    feed = {}
    for tower in placeholders:
        feed[tower["input_ids"]] = rng.randint(5, vocab_size, (batch, seq))
        feed[tower["input_mask"]] = np.ones((batch, seq), np.int32)
        feed[tower["segment_ids"]] = np.zeros((batch, seq), np.int32)
        feed[tower["label_ids"]] = rng.randint(0, 2, (batch,))
        feed[tower["example_weights"]] = np.ones(batch, np.float32)
    return feed


def measure(config, layout: str, towers: int, batch: int, seq: int, warmup: int,
            steps: int, traced: int) -> dict:
    """The untimed, timed and traced steps of one layout on `towers` devices."""
    from bert_ad.compat import session_config, tf
    from bert_ad.compat.installed import list_gpu_count
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.parallel.towers import plan_devices
    from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
    from bert_ad.tasks.base import Encoder

    plan = plan_devices(towers, os.environ.get("CUDA_VISIBLE_DEVICES"), list_gpu_count(),
                        variable_update=layout)
    settings = TrainSettings(num_train_steps=10 ** 6, train_batch_size=batch, seed=12345)
    with tf.Graph().as_default():
        graph = build_train_graph(
            plan, FEATURE_SPEC,
            lambda f, i: classifier(Encoder(config).model(f, True), f, 2, True).loss, settings)
        init = [tf.global_variables_initializer(), tf.local_variables_initializer()]
        feed = synthetic_feed(graph.placeholders, config.vocab_size, batch, seq)
        proto = session_config(plan.num_cpu_devices,
                               collective_nccl=plan.replicated and plan.uses_gpu)
        with tf.Session(config=proto) as session:
            session.run(init)
            if graph.sync_replicas is not None:
                session.run(graph.sync_replicas)
            for _ in range(warmup):
                session.run(graph.train_step, feed)
            walls = []
            for _ in range(steps):
                start = time.perf_counter()
                session.run(graph.train_step, feed)
                walls.append(time.perf_counter() - start)
            splits = []
            for _ in range(traced):
                metadata = tf.RunMetadata()
                session.run(graph.train_step, feed, run_metadata=metadata,
                            options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE))
                splits.append(split(metadata.step_stats))
    return {"layout": layout, "towers": towers, "uses_gpu": plan.uses_gpu,
            "step": statistics.median(walls), "split": median_split(splits)}


# ----------------------------------------------------------------------------
# The table
# ----------------------------------------------------------------------------

def row(result: dict, batch: int, prediction: str) -> list:
    s = result["split"]
    apply_where = "CPU" if result["layout"] == "parameter_server" else (
        "cards" if result["uses_gpu"] else "towers' devices")
    copies = s["copies busy"]
    # Logical CPU devices share memory: nothing is copied. The default layout has
    # no all-reduce.
    transfers = (f"{s['transfers']:.1f} (busy: down {copies['down']:.1f}, up "
                 f"{copies['up']:.1f})" if result["uses_gpu"] else "-")
    all_reduce = f"{s['all-reduce']:.1f}" if result["layout"] == "replicated" else "-"
    return [result["layout"], result["towers"], f"{1000 * result['step']:.1f}",
            f"{result['towers'] * batch / result['step']:.1f}",
            f"{s['traced']:.1f}", f"{s['compute']:.1f}", all_reduce,
            f"{s['apply']:.1f} ({apply_where})", transfers,
            f"{s['other'] + s['idle']:.1f}", prediction]


HEADER = ["layout", "towers", "step ms (median)", "examples/sec", "traced step ms",
          "compute", "all-reduce", "apply", "transfers", "other + idle",
          "the model, ms"]


def markdown(rows: Sequence[Sequence]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def machine_lines(args, uses_gpu: bool) -> List[str]:
    from bert_ad.compat import TF_VERSION
    from bert_ad.compat.installed import tensorflow_build
    from bert_ad.compat.onednn import onednn_state
    from benchmarks.measuring import cpu_line
    lines = [cpu_line(onednn_state()),
             f"TensorFlow {TF_VERSION} ({tensorflow_build()}); load average "
             + " / ".join(f"{x:.1f}" for x in os.getloadavg())]
    if uses_gpu:
        lines.append(f"cards: {args.card_name}, PCIe gen {args.pcie_gen}, interconnect "
                     f"{args.interconnect}")
    else:
        lines.append("no GPU: the towers run on logical CPU devices (the same graph and "
                     "placement as on cards; no PCIe, no NCCL, no prediction)")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="base",
                        help="base, chinese (the trimmed e5-small), tiny, or a "
                             "bert_config.json")
    parser.add_argument("--seq", type=int, default=128, help="max_seq_length")
    parser.add_argument("--batch", type=int, default=32, help="examples per tower")
    parser.add_argument("--cards", default="1", help="tower counts, e.g. 1,8")
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps (median)")
    parser.add_argument("--traced", type=int, default=3, help="traced steps (median)")
    parser.add_argument("--card_name", default="unknown card")
    parser.add_argument("--pcie_gen", type=int, choices=sorted(PCIE), default=4)
    parser.add_argument("--interconnect", choices=["pcie", "nvlink"], default="pcie")
    parser.add_argument("--cpu_gbps", type=float, default=40.0,
                        help="the model's CPU bandwidth (benchmarks/gpu_scaling_model.py)")
    args = parser.parse_args(argv)
    config, shapes = model_config(args.model)
    counts = [int(c) for c in args.cards.split(",")]
    results = [measure(config, layout, towers, args.batch, args.seq, args.warmup,
                       args.steps, args.traced)
               for layout in args.layouts.split(",") for towers in counts]
    uses_gpu = results[0]["uses_gpu"]
    box = None
    if uses_gpu:
        one_card = [r for r in results if r["towers"] == 1] or results[:1]
        compute = min(r["split"]["compute"] for r in one_card) / 1000
        box = card_box(args.card_name, args.pcie_gen, args.interconnect, shapes,
                       args.batch, args.seq, compute)
    print("\n".join(machine_lines(args, uses_gpu)))
    print(f"\n### One training step by layout: {shapes.name}, seq {args.seq} x batch "
          f"{args.batch} per tower, fp32 (TF32 matmuls on Ampere and later cards)\n")
    rows = [row(r, args.batch, predicted(r["layout"], shapes, box, r["towers"], args.batch,
                                         args.seq, args.cpu_gbps) if box else "-")
            for r in results]
    print(markdown(rows))
    notes = [f"ms per step; the parts split the median of {args.traced} traced step(s) "
             "(tracing adds time), each moment counted once in the order of the columns; "
             f"peak RSS {peak_rss_mb():,.0f} MB."]
    if uses_gpu and not all(r["split"]["device traced"] for r in results):
        notes.append("No kernel trace (CUPTI not loaded): GPU times are the executor's "
                     "launches, so compute reads low and idle high.")
    if uses_gpu:
        notes.append(f"The model: {args.cpu_gbps:g} GB/s for the CPU's apply; its "
                     "compute is the 1-card compute measured above.")
    print("\n" + "\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
