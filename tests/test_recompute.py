"""--recompute_activations: each encoder layer recomputed in the backward pass.

* One layer: the recomputed layer's output and gradients (its input and every
  variable) equal the plain layer's with the same dropout masks (dropout on,
  the same seed), and the masks are really drawn from the seed.
* A training step with recomputation equals the plain one (dropout off, the
  same saved start), on 2 towers in both variable layouts (one tower's path is
  tower 0's).
* The graph: each tower builds every layer's forward ops a second time, for
  the backward pass, on its own card (built for CUDA_VISIBLE_DEVICES=3,5).
* The flag reaches the run: a launcher trains with it and says so.
"""

from __future__ import annotations

import logging
import os
import re

import numpy as np
import pytest

from bert_ad.cli import classifier as classifier_cli
from bert_ad.compat import tf
from bert_ad.model.heads import FEATURE_SPEC, classifier
from bert_ad.model.modeling import (BertConfig, SeededDropout, TokenLayout,
                                    attention_bias_from_mask, recomputed_layer,
                                    transformer_layer)
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.tasks.base import Encoder
from helpers import (SAMPLE_SENTIMENT, StepGraph, assert_same_weights, classifier_rows,
                     run_main, slice_rows, tiny_model, train_one_step)

CONFIG = dict(vocab_size=60, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=32, max_position_embeddings=32,
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
NUM_LABELS = 3
SEQ = 10


def _relative(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


def _one_layer(dropout: float, seed_value, other_seed=None, plain_only: bool = False):
    """Plain and recomputed layer on the same input, variables and seed: their
    outputs and the gradients of a weighted sum of them, evaluated; with `other_seed`
    also the plain output under that seed (the same graph, the seed fed), as
    "plain_other_seed"; `plain_only`: the plain output alone."""
    config = BertConfig(**dict(CONFIG, hidden_dropout_prob=dropout,
                               attention_probs_dropout_prob=dropout))
    rng = np.random.RandomState(0)
    mask = np.ones((3, SEQ), np.int32)
    mask[1, 6:] = 0
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        layout = TokenLayout(tf.constant(mask), 3, SEQ)
        bias = attention_bias_from_mask(tf.constant(mask))
        x = tf.constant(rng.randn(int(mask.sum()), 16).astype(np.float32))
        seed = tf.placeholder_with_default(tf.constant(seed_value, tf.int32), [2])
        weights = tf.constant(rng.randn(int(mask.sum()), 16).astype(np.float32))
        with tf.variable_scope("layer_0"):
            plain = transformer_layer(x, bias, config, dropout, dropout, layout,
                                      SeededDropout(seed))
        fetch = {"plain": plain}
        if not plain_only:
            with tf.variable_scope("layer_0", reuse=True):
                recomputed = recomputed_layer(x, bias, config, dropout, dropout, layout, seed)
            variables = tf.trainable_variables()
            assert len(variables) == 16
            fetch["recomputed"] = recomputed
            fetch["grads"] = {name: tf.gradients(tf.reduce_sum(y * weights), [x] + variables)
                              for name, y in (("plain", plain), ("recomputed", recomputed))}
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            out = session.run(fetch)
            if other_seed is not None:
                out["plain_other_seed"] = session.run(plain, {seed: other_seed})
            return out


def test_a_recomputed_layer_has_the_plain_layers_output_and_gradients_with_dropout():
    out = _one_layer(0.3, [7, 11], other_seed=[7, 12])
    assert _relative(out["recomputed"], out["plain"]) <= 1e-6
    for got, expected in zip(out["grads"]["recomputed"], out["grads"]["plain"]):
        assert _relative(got, expected) <= 1e-5
    # The masks come from the seed: another seed, another output; no dropout,
    # another. (The residual input dominates a fresh layer's output, so the
    # differences are small, yet a thousand times float32's rounding.)
    assert _relative(out["plain_other_seed"], out["plain"]) > 1e-3
    assert _relative(_one_layer(0.0, [7, 11], plain_only=True)["plain"], out["plain"]) > 1e-3


def make_data(rows: int) -> dict:
    return classifier_rows(rows, SEQ, CONFIG["vocab_size"], NUM_LABELS, 0)


def build(n_towers: int, recompute: bool, mode: str = "parameter_server", cards: str = ""):
    config = BertConfig(**CONFIG)
    plan = plan_devices(n_towers, cuda_visible_devices=cards, variable_update=mode)
    settings = TrainSettings(learning_rate=1e-3, num_train_steps=1000, num_warmup_steps=0,
                             seed=1, recompute_activations=recompute)
    graph = build_train_graph(
        plan, FEATURE_SPEC,
        lambda f, i: classifier(Encoder(config).model(f, True), f, NUM_LABELS, True).loss,
        settings)
    return plan, graph


@pytest.fixture(scope="module")
def initial_checkpoint_and_plain_step(tmp_path_factory) -> tuple:
    """The starting weights, and the plain 1-tower step on make_data(8) from them (one
    graph for both, the reference of every recomputed step)."""
    with StepGraph(lambda: build(1, False)) as plain:
        checkpoint = plain.save_initial_weights(
            str(tmp_path_factory.mktemp("init") / "model.ckpt"))
        return checkpoint, plain.step(checkpoint, [[make_data(8)]])


# One tower takes the code path of tower 0 of two (build_towers calls the same tower
# function under each device; the averaging of one tower is the identity): the
# recomputed 1-tower case adds no path of its own, so two towers in each layout.
@pytest.mark.parametrize("n_towers, mode", [(2, "parameter_server"), (2, "replicated")])
def test_a_recomputed_training_step_equals_the_plain_one(initial_checkpoint_and_plain_step,
                                                         n_towers, mode):
    initial_checkpoint, plain = initial_checkpoint_and_plain_step
    data = make_data(8)
    rows = 8 // n_towers
    recomputed = train_one_step(
        lambda: build(n_towers, True, mode), initial_checkpoint,
        [[slice_rows(data, t * rows, (t + 1) * rows) for t in range(n_towers)]])
    assert recomputed.global_step == plain.global_step == 1
    assert abs(recomputed.loss - plain.loss) <= 1e-5 * abs(plain.loss)
    assert abs(recomputed.grad_norm - plain.grad_norm) <= 1e-5 * plain.grad_norm
    assert_same_weights(recomputed.weights, plain.weights)


def _device(op) -> str:
    return op.device.lower().replace("/device:", "/")


@pytest.mark.parametrize("recompute", [False, True])
def test_each_tower_recomputes_its_layers_on_its_card(recompute):
    graph = tf.Graph()
    with graph.as_default():
        build(2, recompute, cards="3,5")
    softmax = [op for op in graph.get_operations() if op.type == "Softmax"]
    by_tower = {}
    for op in softmax:
        tower = int(re.match(r"tower_(\d+)/", op.name).group(1))
        assert _device(op) == f"/gpu:{tower}", (op.name, op.device)
        by_tower[tower] = by_tower.get(tower, 0) + 1
    # One attention softmax per layer, and its copy for the backward pass.
    layers = CONFIG["num_hidden_layers"]
    assert by_tower == {0: layers * (2 if recompute else 1), 1: layers * (2 if recompute else 1)}
    if recompute:
        # The copy waits for the layer output's gradient (or it would run,
        # and be held, during the forward pass).
        waits = [op for op in graph.get_operations()
                 if op.type == "Identity" and op.control_inputs
                 and "gradients" in op.name and op.name.startswith("tower_")]
        assert len(waits) == 2 * layers, [op.name for op in waits]


def test_the_flag_trains_and_says_so(tmp_path, caplog):
    # One layer and one tower: what is checked is that the flag reaches the run (the
    # recomputation itself is checked above, on 2 layers and 2 towers).
    model = tiny_model(str(tmp_path / "model"), num_hidden_layers=1)
    output_dir = str(tmp_path / "out")
    caplog.set_level(logging.INFO, logger="bert_ad")
    flags = dict(task_name="sentiment", data_dir=SAMPLE_SENTIMENT, vocab_file=model.vocab_file,
                 bert_config_file=model.config_file, max_seq_length=32, train_batch_size=4,
                 num_train_epochs=1, n_gpus=1, do_train=True, recompute_activations=True,
                 output_dir=output_dir)
    assert run_main(classifier_cli, flags) == 0
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("--recompute_activations: each encoder layer") for m in messages)
    with open(os.path.join(output_dir, "train_results.txt"), encoding="utf-8") as f:
        assert "global_step" in f.read()
