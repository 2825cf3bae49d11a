"""benchmarks/gpu_scaling_model.py: its sizes and FLOPs against the real model's variables,
its H200 rows against the parts measured on that card.

The model's parameter count must be the sum of every variable BertModel creates
(bert_ad.model.variable_shapes, which tests/test_convert.py holds to the graph),
and its FLOPs per token the sum over the encoder's real kernels (2 x rows x cols
each) plus attention; the published figures it is checked against are read back.
Given the H200's measured parts (docs/gpu_probe_h200.jsonl, read here on its own),
the model must give them back; docs/gpu_scaling.md must quote its tables as it
prints them. benchmarks/cpu_apply_time.py must time our graph's apply.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

from benchmarks import gpu_scaling_model as paper
from bert_ad.model.modeling import BertConfig
from bert_ad.model.variable_shapes import google_variable_shapes

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def config_of(model: paper.Model) -> BertConfig:
    return BertConfig(**model.bert_config())


def measured(kind: str) -> list:
    with open(os.path.join(REPO, "docs", "gpu_probe_h200.jsonl"), encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["kind"] == kind]


@pytest.mark.parametrize("model", [paper.BERT_BASE, paper.BERT_LARGE, paper.CHINESE])
def test_parameters_are_the_real_variables(model):
    shapes = google_variable_shapes(config_of(model))
    assert model.parameters() == sum(int(np.prod(s)) for s in shapes.values())
    assert model.word_embeddings() == int(np.prod(shapes["bert/embeddings/word_embeddings"]))
    layer = [s for name, s in shapes.items() if name.startswith("bert/encoder/layer_0/")]
    assert model.layer_parameters() == sum(int(np.prod(s)) for s in layer)


def test_the_sizes_the_issue_names():
    assert round(4 * paper.BERT_BASE.parameters() / 1e6) == 438      # "440 MB"
    # docs/chinese_model.md's trimmed checkpoint (no pooler), plus the fresh pooler.
    hidden = paper.CHINESE.hidden
    assert paper.CHINESE.parameters() == 44968704 + hidden * hidden + hidden


@pytest.mark.parametrize("seq", [128, 512])
def test_flops_are_the_encoder_kernels_plus_attention(seq):
    model = paper.BERT_BASE
    shapes = google_variable_shapes(config_of(model))
    kernels = [s for name, s in shapes.items()
               if name.startswith("bert/encoder/") and name.endswith("/kernel")]
    assert len(kernels) == 6 * model.layers
    dense = sum(2 * rows * cols for rows, cols in kernels)
    attention = model.layers * 2 * (2 * seq * model.hidden)   # scores and mixing
    assert model.train_flops(12, seq) == pytest.approx(3 * 12 * seq * (dense + attention))


def test_the_published_speedups_are_the_published_throughputs():
    published = {(m, p): eight / one for m, p, _, one, eight in paper.SQUAD_EIGHT_GPUS}
    # NVIDIA's README prints these (its FP32 / mixed-precision columns swapped).
    assert round(published[("32GB", "fp32")], 2) == 7.62
    assert round(published[("32GB", "amp")], 2) == 6.17


def test_a_models_shapes_round_trip_through_its_config():
    for model in (paper.BERT_BASE, paper.CHINESE):
        again = paper.Model.of_config(model.name, config_of(model))
        assert again.parameters() == model.parameters()
        assert (again.layers, again.hidden, again.vocab) == (model.layers, model.hidden,
                                                            model.vocab)


@pytest.mark.parametrize("mode", ["tf32", "bf16"])
def test_the_model_gives_back_the_measured_h200_steps(mode):
    box = paper.machine(f"H200 PCIe5 (measured), {mode}")
    models = {"bert-base": paper.BERT_BASE, "e5-small-trimmed": paper.CHINESE}
    steps = [r for r in measured("train") if r["mode"] == mode]
    assert len(steps) == 4   # two models x two shapes
    for record in steps:
        model = models[record["model"]]
        one_card = paper.replicated_step(model, box, 1, record["batch"], record["seq"], True)
        # One card, variables on it: forward, backward and the apply, as measured.
        assert one_card.exposed_allreduce == 0
        assert 1000 * one_card.total == pytest.approx(record["step_ms"], rel=1e-12)
        assert one_card.compute < one_card.total


def test_the_model_gives_back_the_measured_h200_copies():
    copies = {r["pinned"]: r for r in measured("copy") if r["mb"] == 438}
    nbytes = 438 * 1024 * 1024   # the probe's "mb" are MiB of fp32
    # Up: the gradients land in pinned buffers; down: the weights leave pageable ones.
    assert 1000 * nbytes / (paper.PCIE5 * 1e9) == pytest.approx(copies[True]["d2h_ms"])
    assert 1000 * nbytes / (paper.PCIE5_PAGEABLE_DOWN * 1e9) == pytest.approx(
        copies[False]["h2d_ms"])
    box = paper.machine("H200 PCIe5 (measured), tf32")
    step = paper.parameter_server_step(paper.BERT_BASE, box, 1, 32, 128, paper.CPU_GBPS, True)
    moved = paper.parameter_server_bytes(paper.BERT_BASE, 32, 128)
    assert step.exposed_down == pytest.approx(moved / nbytes * copies[False]["h2d_ms"] / 1000)


def test_the_cpu_bandwidth_is_torchs_on_the_h200_host_by_the_words_its_code_moves():
    apply = {(r["model"], r["towers"], r["threads"]): r for r in measured("cpu_apply")}
    # gpu_probe.py's apply, one tower: clone (2) + norm (1) + scale (2) + AdamW(foreach):
    # decay 2, lerp 3, mul 2, addcmul 3, sqrt 2, div 2, add 2, addcdiv 4.
    assert paper.torch_apply_words(1) == 2 + 1 + 2 + 20 == 25
    # Eight: stack (8 reads, 8 writes) and mean (8 reads, 1 write) instead of the clone.
    assert paper.torch_apply_words(8) == 16 + 9 + 1 + 2 + 20
    one = apply[("bert-base", 1, 16)]
    assert paper.CPU_GBPS == round(25 * 4 * 109.5e6 / (one["ms"] / 1000) / 1e9, 1) == 51.7
    # Our apply of BERT-base on that host, one tower: 13 words a weight at that bandwidth.
    assert 1000 * paper.cpu_apply_seconds(paper.BERT_BASE, paper.CPU_GBPS) == pytest.approx(
        13 * 4 * paper.BERT_BASE.parameters() / (paper.CPU_GBPS * 1e6))


def test_the_docs_quote_the_models_tables_as_it_prints_them(capsys):
    assert paper.main([]) == 0
    printed = capsys.readouterr().out
    with open(os.path.join(REPO, "docs", "gpu_scaling.md"), encoding="utf-8") as f:
        docs = f.read()
    lines = [line for line in printed.splitlines() if line.startswith(("* ", "| "))]
    assert len(lines) > 90
    for line in lines:
        assert line in docs, line


def test_cpu_apply_time_times_our_graphs_apply_of_every_variable():
    from benchmarks import cpu_apply_time
    from bert_ad.compat import tf
    tiny = paper.Model("tiny", 1, 8, 16, 20, positions=16)
    shapes = google_variable_shapes(config_of(tiny))
    with tf.Graph().as_default() as graph:
        step, weights = cpu_apply_time.build_apply(tiny, towers=3)
        ops = graph.get_operations()
        variables = tf.trainable_variables()
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            before = session.run(variables)
            session.run(step)
            after = session.run(variables)
    assert weights == tiny.parameters() == sum(int(np.prod(s)) for s in shapes.values())
    # Three towers' gradients of each variable averaged, then one fused Adam pass each,
    # after the weight decay of the names Google decays (not LayerNorm, not biases).
    averaged = [op for op in ops if op.type == "AddN" and op.name.startswith("average_")]
    assert len(averaged) == len(shapes) and {len(op.inputs) for op in averaged} == {3}
    assert len([op for op in ops if op.type == "ResourceApplyAdam"]) == len(shapes)
    decayed = [name for name in shapes if not re.search("LayerNorm|bias", name)]
    assert len([op for op in ops if op.type == "ResourceApplyGradientDescent"]) == len(decayed)
    assert all(not np.array_equal(b, a) for b, a in zip(before, after))
    # On the H200's host: the slower of the cores' share and the memory's time.
    assert cpu_apply_time.host_estimate(paper.BERT_BASE, 1, 0.165) == (
        "BERT-base, 1 tower, on the H200's host (16 cores, 51.7 GB/s): 110 ms (the cores "
        "alone 10 ms, its memory 110 ms)")
