"""scripts/gpu_smoke.sh and benchmarks/step_split.py: a traced step split into its parts.

The split is checked on a trace shaped as TensorFlow records one on a GPU (the
executor's launches, CUPTI's kernels and copies), by hand; the model's prediction
for named cards against the model's own rows; and the script end to end on
logical CPU devices, the path CI has (the tiny model, a few steps).
"""

from __future__ import annotations

import json
import os
import sys

import pytest

from benchmarks import gpu_scaling_model as paper
from benchmarks import step_split
from helpers import TINY_CONFIG, run_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXECUTOR = "/job:localhost/replica:0/task:0/device:"


def step_stats(devices: dict):
    """A StepStats of {device: [(node name, timeline label, start µs, end µs)]}."""
    from tensorflow.core.framework import step_stats_pb2
    stats = step_stats_pb2.StepStats()
    for device, nodes in devices.items():
        dev = stats.dev_stats.add(device=device)
        for name, label, start, end in nodes:
            dev.node_stats.add(node_name=name, timeline_label=label, all_start_micros=start,
                               all_end_rel_micros=end - start)
    return stats


def parameter_server_step_on_a_card(with_kernels: bool = True):
    devices = {
        EXECUTOR + "CPU:0": [
            ("average_gradients/AddN", "average_gradients/AddN = AddN(a, b)", 100, 150),
            ("cond/ResourceApplyAdam", "cond/ResourceApplyAdam = ResourceApplyAdam(v)", 150,
             250),
            # Waiting for the card's gradients: a rendezvous, not work.
            ("tower_0/grad/_Recv", "tower_0/grad/_Recv = _Recv()", 0, 300),
        ],
        EXECUTOR + "GPU:0": [   # the executor's launches
            ("tower_0/bert/MatMul", "tower_0/bert/MatMul = MatMul(x, w)", 0, 5),
            ("tower_0/gradients/MatMul_grad", "tower_0/gradients/MatMul_grad = MatMul()", 5, 7),
        ],
    }
    if with_kernels:
        devices.update({
            "/device:GPU:0/stream:all": [
                ("tower_0/bert/MatMul:MatMul", "volta_sgemm 128x64", 10, 110),
                ("tower_0/gradients/MatMul_grad:MatMul", "volta_sgemm 64x64", 110, 130)],
            "/device:GPU:0/stream:7": [   # the same kernel, by stream
                ("tower_0/bert/MatMul:MatMul", "volta_sgemm 128x64", 10, 110)],
            "/device:GPU:0/memcpy": [
                ("edge_7_grad", "MemcpyD2H 1024 bytes", 120, 140),
                ("edge_9_weights", "MemcpyH2D 4096 bytes", 250, 290)],
        })
    return step_stats(devices)


def test_a_traced_step_on_a_card_is_split_each_moment_once():
    split = step_split.split(parameter_server_step_on_a_card())
    # Window 10..290 µs. Compute 10..130; the CPU's apply 100..250, of which 130..250
    # is not hidden behind compute; the copies 120..140 (hidden) and 250..290.
    assert split["traced"] == pytest.approx(0.280)
    assert split["compute"] == pytest.approx(0.120)
    assert split["apply"] == pytest.approx(0.120)
    assert split["transfers"] == pytest.approx(0.040)
    assert split["all-reduce"] == split["other"] == 0
    assert split["idle"] == pytest.approx(0)
    assert split["copies busy"] == {"down": pytest.approx(0.040), "up": pytest.approx(0.020),
                                    "between cards": 0}
    assert split["device traced"]


def test_without_a_kernel_trace_the_launches_are_used_and_said():
    split = step_split.split(parameter_server_step_on_a_card(with_kernels=False))
    assert not split["device traced"]
    # Launches at 0..7, the CPU's work 100..250: 143 µs between them idle.
    assert split["compute"] == pytest.approx(0.007)
    assert split["apply"] == pytest.approx(0.150)
    assert split["idle"] == pytest.approx(0.093)
    assert split["transfers"] == 0


def test_ops_are_sorted_into_the_parts_by_their_names():
    assert step_split.category("tower_3/bert/encoder/layer_0/MatMul") == "compute"
    assert step_split.category("tower_1/gradients/tower_1/bert/x_grad/MatMul:MatMul") == \
        "compute"
    assert step_split.category("tower_1_all_reduce/cross_worker_mean/CollectiveReduceV2",
                               "CollectiveReduceV2") == "all-reduce"
    assert step_split.category("replica_1/bert/pooler/dense/kernel/Read",
                               "ReadVariableOp") == "apply"
    assert step_split.category("clip_by_global_norm_1/mul_3", "Mul") == "apply"
    assert step_split.category("_arg_tower_0_input_ids_0_1", "_Arg") == "other"
    assert [step_split.direction(x) for x in ("MemcpyH2D", "MEMCPYHtoD 8 bytes",
                                              "MemcpyD2H", "MEMCPYDtoH", "MemcpyP2P")] == [
        "down", "down", "up", "up", "between cards"]


def test_the_prediction_for_named_cards_is_the_models_row_for_them():
    # An H200 on PCIe 5 whose 1-card compute is the one the model derives from the
    # measured step: the prediction must be the model's "H200 PCIe5" row.
    row = paper.machine("H200 PCIe5 (measured), tf32")
    compute = row.compute(paper.BERT_BASE, 32, 128)
    box = step_split.card_box("NVIDIA H200 NVL", 5, "pcie", paper.BERT_BASE, 32, 128, compute)
    for cards in (1, 2, 8):
        for layout in step_split.LAYOUTS:
            if layout == "replicated":
                expected = paper.replicated_step(paper.BERT_BASE, row, cards, 32, 128, True)
            else:
                expected = paper.parameter_server_step(paper.BERT_BASE, row, cards, 32, 128,
                                                       paper.CPU_GBPS, True)
            text = step_split.predicted(layout, paper.BERT_BASE, box, cards, 32, 128,
                                        paper.CPU_GBPS)
            assert text.endswith(f"= {paper.ms(expected.total)}"), (layout, cards, text)
    assert step_split.predicted("parameter_server", paper.BERT_BASE, box, 1, 32, 128,
                                paper.CPU_GBPS) == (
        "compute 22.0 + up 0.7 + CPU apply 110.1 + down 41.7 = 174.5")
    # NVLink on Hopper cards: the NVSwitch ring's bandwidth.
    nvlink = step_split.card_box("NVIDIA H100 80GB HBM3", 5, "nvlink", paper.BERT_BASE, 32,
                                 128, compute)
    assert nvlink.allreduce_busbw == paper.NVSWITCH_H100 and nvlink.gpu_memory_gbps == 0.8 * 3350


def test_gpu_smoke_without_a_gpu_runs_the_logical_device_path_and_prints_the_table(tmp_path):
    # The script's own flags come first and extra ones after them win (argparse): the tiny
    # config with one layer and a 100-word vocab, one untimed and one timed step. What is
    # checked below is the table's shape and its sums, which depend on neither; the four
    # graphs' building is most of the run (a third less CPU with one layer).
    with open(TINY_CONFIG) as f:
        config = dict(json.load(f), num_hidden_layers=1, vocab_size=100)
    smaller = tmp_path / "one_layer_config.json"
    smaller.write_text(json.dumps(config))
    run = run_command(["bash", os.path.join(REPO, "scripts", "gpu_smoke.sh"),
                       "--model", str(smaller), "--warmup", "1", "--steps", "1"],
                      PYTHON=sys.executable, BERT_AD_CACHE=str(tmp_path / "cache"))
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    assert lines[0] == ("gpu_smoke: TensorFlow sees no GPU here (CUDA_VISIBLE_DEVICES=-1): the "
                        "logical-device path, towers on logical CPU devices; no GPU is measured")
    assert lines[1].startswith("CPU: ") and "TensorFlow oneDNN" in lines[1]
    assert "no GPU: the towers run on logical CPU devices" in run.stdout
    header = "| " + " | ".join(step_split.HEADER) + " |"
    start = lines.index(header)
    rows = [line.strip("| ").split(" | ") for line in lines[start + 2:start + 6]]
    assert [(r[0], r[1]) for r in rows] == [
        ("parameter_server", "1"), ("parameter_server", "2"), ("replicated", "1"),
        ("replicated", "2")]
    for layout, towers, step, rate, traced, compute, all_reduce, apply, transfers, rest, \
            model in rows:
        where = "CPU" if layout == "parameter_server" else "towers' devices"
        assert apply.endswith(f" ({where})")
        assert float(step) > 0 and float(rate) == pytest.approx(
            int(towers) * 4 / (float(step) / 1000), rel=0.01)
        assert float(compute) > 0 and float(apply.split()[0]) > 0
        # Logical devices share memory: no copies; no prediction without cards.
        assert transfers == "-" and model == "-"
        assert (all_reduce == "-") == (layout == "parameter_server")
        parts = [compute, apply.split()[0], rest] + ([all_reduce] if all_reduce != "-" else [])
        # Each moment of the traced step counted once (one decimal each).
        assert sum(float(p) for p in parts) == pytest.approx(float(traced), abs=0.2)
    assert "peak RSS" in lines[start + 7]   # every table names the machine and its memory
    assert not (tmp_path / "cache").exists()   # nothing fetched
