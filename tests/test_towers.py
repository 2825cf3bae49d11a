"""Device placement of the multi-tower graph, checked op by op (no GPU needed), and the
device plan the launchers log (built for fake card lists)."""

from __future__ import annotations

import re

import pytest

from bert_ad.model.heads import FEATURE_SPEC, classifier
from bert_ad.compat import tf
from bert_ad.errors import UserError
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.towers import (PARAMETER_SERVER_ON_GPUS, parse_cuda_visible_devices,
                                     plan_devices)
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.tasks.base import Encoder

CONFIG = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                    num_attention_heads=2, intermediate_size=32,
                    max_position_embeddings=32)
VARIABLE_OPS = {"VarHandleOp", "VariableV2"}


def test_parse_cuda_visible_devices():
    assert parse_cuda_visible_devices(None) is None
    assert parse_cuda_visible_devices("3,5") == ["3", "5"]
    assert parse_cuda_visible_devices(" 3 , 5 ,") == ["3", "5"]
    assert parse_cuda_visible_devices("") == []
    assert parse_cuda_visible_devices("-1") == []


def test_round_robin_over_visible_cards():
    plan = plan_devices(4, "3,5")
    assert plan.tower_devices == ["/gpu:0", "/gpu:1", "/gpu:0", "/gpu:1"]
    assert plan.physical_names == ["card 3", "card 5", "card 3", "card 5"]
    assert plan.num_cpu_devices == 1
    lines = plan.describe().splitlines()
    # The layout, then one line per device, naming its towers as the graph's ops are
    # named; on cards in this layout, where the model puts the step's time.
    assert lines[0] == ("device plan: 4 towers on 2 devices, "
                        "--variable_update=parameter_server: variables and optimizer on /cpu:0")
    assert lines[1:3] == ["  /gpu:0 (card 3): tower_0, tower_2 (2 towers)",
                          "  /gpu:1 (card 5): tower_1, tower_3 (2 towers)"]
    assert lines[3] == PARAMETER_SERVER_ON_GPUS
    assert lines[4].startswith("  CPU kernels: oneDNN ") and len(lines) == 5


def test_the_plan_says_where_the_model_puts_a_parameter_server_step_on_cards_only():
    on_cards = plan_devices(2, "0,1", gpus_found=2).describe().splitlines()
    assert on_cards[3] == (
        "  on GPUs the scaling model puts most of this layout's step on the host: BERT-base, "
        "seq 128 x 32, one H200: 175 ms a step, 110 ms of it the CPU's apply and 42 ms the "
        "weights' copy down, against 23 ms with --variable_update=replicated "
        "(docs/gpu_scaling.md)")
    replicated = plan_devices(2, "0,1", gpus_found=2, variable_update="replicated")
    lines = replicated.describe().splitlines()
    assert lines[0] == ("device plan: 2 towers on 2 devices, --variable_update=replicated: "
                        "a copy of the variables and optimizer on every tower's device, "
                        "gradients all-reduced (nccl)")
    assert PARAMETER_SERVER_ON_GPUS not in lines and len(lines) == 4
    # No card: logical CPU devices, the same layout named, no model line.
    for cards, found in (("", None), ("0,1", 0)):
        lines = plan_devices(2, cards, gpus_found=found, cpus=2).describe().splitlines()
        assert lines[0].startswith("device plan: 2 towers on 2 devices, "
                                   "--variable_update=parameter_server: ")
        assert PARAMETER_SERVER_ON_GPUS not in lines and len(lines) == 4


def test_cpu_towers_without_gpus():
    plan = plan_devices(3, None, gpus_found=0)
    assert plan.tower_devices == ["/cpu:0", "/cpu:1", "/cpu:2"]
    assert plan.num_cpu_devices == 3


def test_listed_cards_that_tensorflow_cannot_see_fall_back_to_cpu():
    plan = plan_devices(2, "3,5", gpus_found=0)
    assert plan.tower_devices == ["/cpu:0", "/cpu:1"]


def test_fewer_real_gpus_than_listed_uses_only_the_real_ones():
    plan = plan_devices(3, "3,5", gpus_found=1)
    assert plan.tower_devices == ["/gpu:0", "/gpu:0", "/gpu:0"]


def test_zero_towers_is_refused():
    with pytest.raises(UserError, match=r"--n_gpus=0"):
        plan_devices(0, None)


@pytest.mark.parametrize("n_towers, cards, cpus, message", [
    (100000, "", 2, r"--n_gpus=100000 asks for 100000 towers on 2 logical CPUs \(no GPU\): "
                    r"at most 8 towers per device \(16 here\)"),
    (17, "", 2, r"--n_gpus=17 asks for 17 towers on 2 logical CPUs"),
    (17, "3,5", 2, r"--n_gpus=17 asks for 17 towers on 2 GPUs: at most 8 towers per device "
                   r"\(16 here\)"),
])
def test_more_towers_than_eight_per_device_are_refused(n_towers, cards, cpus, message):
    """--n_gpus=100000 printed 100,000 plan lines and grew past 6 GB before step 1."""
    with pytest.raises(UserError, match=message) as error:
        plan_devices(n_towers, cards, cpus=cpus)
    assert "--train_batch_size or --gradient_accumulation_steps" in str(error.value)


def test_eight_towers_per_device_are_planned_one_line_per_device():
    assert plan_devices(16, "", cpus=2).num_towers == 16
    plan = plan_devices(16, "3,5", cpus=2)
    lines = plan.describe().splitlines()
    assert len(lines) == 1 + 2 + 1 + 1
    assert lines[1] == ("  /gpu:0 (card 3): tower_0, tower_2, tower_4, tower_6, tower_8, "
                        "tower_10, tower_12, tower_14 (8 towers)")
    assert plan_devices(1, "", cpus=2).describe().splitlines()[1] == \
        "  /cpu:0 (logical CPU 0): tower_0"


def test_the_plans_figures_are_the_models_one_card_h200_step():
    from benchmarks import gpu_scaling_model as paper
    box = paper.machine("H200 PCIe5 (measured), tf32")
    ps = paper.parameter_server_step(paper.BERT_BASE, box, 1, 32, 128, paper.CPU_GBPS, True)
    replicated = paper.replicated_step(paper.BERT_BASE, box, 1, 32, 128, True)
    assert re.findall(r"(\d+) ms", PARAMETER_SERVER_ON_GPUS) == [
        f"{1000 * t:.0f}" for t in (ps.total, ps.cpu_apply, ps.exposed_down, replicated.total)]
    assert ps.cpu_apply > ps.exposed_down > ps.compute   # "most of the step on the host"


def _device(op) -> str:
    return op.device.lower().replace("/device:", "/")


@pytest.fixture(scope="module")
def placed_graph():
    """The training graph for CUDA_VISIBLE_DEVICES=3,5 and n_gpus=4, built, not run."""
    graph = tf.Graph()
    with graph.as_default():
        plan = plan_devices(4, "3,5")
        settings = TrainSettings(num_train_steps=10, gradient_accumulation_steps=2)
        build_train_graph(plan, FEATURE_SPEC,
                          lambda f, i: classifier(Encoder(CONFIG).model(f, True), f, 2,
                                                 True).loss, settings)
    return graph


def test_tower_ops_run_on_their_card(placed_graph):
    expected = {0: "/gpu:0", 1: "/gpu:1", 2: "/gpu:0", 3: "/gpu:1"}
    checked = {t: 0 for t in expected}
    for op in placed_graph.get_operations():
        match = re.match(r"tower_(\d+)/bert/encoder/", op.name)
        # Variable reads are placed by TensorFlow with the variable (the CPU);
        # what they read is what travels to the tower.
        if not match or op.type == "ReadVariableOp":
            continue
        tower = int(match.group(1))
        assert _device(op) == expected[tower], (op.name, op.device)
        checked[tower] += 1
    assert all(count > 50 for count in checked.values()), checked


def test_tower_gradients_are_colocated_with_their_forward_ops(placed_graph):
    matmul_grads = [op for op in placed_graph.get_operations()
                    if re.match(r"tower_3/gradients/tower_3/bert/encoder/.*MatMul_grad/MatMul",
                                op.name)]
    assert matmul_grads
    for op in matmul_grads:
        forward = placed_graph.get_operation_by_name(
            op.colocation_groups()[0].decode()[len("loc:@"):])
        assert forward.name.startswith("tower_3/")
        assert _device(forward) == "/gpu:1"


def test_variables_slots_and_accumulators_live_on_the_cpu(placed_graph):
    variables = [op for op in placed_graph.get_operations() if op.type in VARIABLE_OPS]
    names = {op.name for op in variables}
    assert "bert/embeddings/word_embeddings" in names
    assert "bert/embeddings/word_embeddings/adam_m" in names
    assert "accumulators/bert/pooler/dense/kernel" in names
    assert "output_weights/adam_v" in names
    for op in variables:
        assert _device(op) == "/cpu:0", (op.name, op.device)


def test_averaging_and_apply_run_on_the_cpu(placed_graph):
    ops = placed_graph.get_operations()
    averaging = [op for op in ops if op.name.startswith("average_gradients/")]
    assert averaging
    applying = [op for op in ops if op.type in ("AssignVariableOp", "AssignAddVariableOp",
                                                "AssignSubVariableOp")
                and not op.name.startswith("tower_")]
    assert len(applying) > 20
    for op in averaging + applying:
        if op.colocation_groups() == [f"loc:@{op.name}".encode()]:
            assert _device(op) == "/cpu:0", (op.name, op.device)
