"""--variable_update=replicated against the default layout (bert_ad/parallel/replicated.py).

* Equivalence: N replicated towers x B equal 1 tower x N*B after an applied
  step (the default layout's case is test_training's; dropout off, same saved
  start, relative difference <= 1e-5),
  with accumulation, a bias-corrected optimizer and an anchored head
  learning-rate multiplier too; every tower's copy equals tower 0's, exactly.
* Checkpoints: the replicated graph saves and restores Google's layout (the
  default layout's names, no `replica_` variable), every copy is restored
  (slots included), and a replicated run's checkpoint resumes in the default
  layout.
* Placement, built for CUDA_VISIBLE_DEVICES=3,5 without running: each copy
  and its slots on its card, the all-reduce on the cards (NCCL), nothing of
  the kind in the default layout.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from bert_ad import driver
from bert_ad.compat import IS_TF1, session_config, tf
from bert_ad.errors import UserError
from bert_ad.files import read_key_values
from bert_ad.model.heads import FEATURE_SPEC, classifier
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.tasks.base import Encoder
from helpers import (StepGraphs, assert_one_error_line, assert_same_weights,
                     assert_weights_moved, classifier_rows, run_launcher_in_process,
                     slice_rows, train_one_step, variable_values)
from toy_task import ToyRegressionTask, toy_rows

# One encoder layer: every kind of variable the equivalence covers, and each graph
# builds in about half the time of two.
CONFIG = dict(vocab_size=60, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=32, max_position_embeddings=32,
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
NUM_LABELS = 3
SEQ = 10
KERNEL = "bert/encoder/layer_0/output/dense/kernel:0"   # moved by a step
HEAD = (("^(output_weights|output_bias)$", 10.0),)
VARIABLE_OPS = {"VarHandleOp", "VariableV2"}


def make_data(rows: int, seed: int = 0) -> dict:
    return classifier_rows(rows, SEQ, CONFIG["vocab_size"], NUM_LABELS, seed)


def build(n_towers: int, mode: str = "parameter_server", accumulation: int = 1,
          optimizer: str = "adamw", multipliers: tuple = (), cards: str = ""):
    config = BertConfig(**CONFIG)
    plan = plan_devices(n_towers, cuda_visible_devices=cards, variable_update=mode)
    settings = TrainSettings(learning_rate=1e-3, num_train_steps=1000, num_warmup_steps=0,
                             optimizer=optimizer, gradient_accumulation_steps=accumulation,
                             seed=1, learning_rate_multipliers=multipliers)
    graph = build_train_graph(
        plan, FEATURE_SPEC,
        lambda f, i: classifier(Encoder(config).model(f, True), f, NUM_LABELS, True).loss,
        settings)
    return plan, graph


@pytest.fixture(scope="module")
def graphs():
    """graphs(n_towers, mode): those training graphs built once for this module."""
    graphs = StepGraphs(build)
    yield graphs
    graphs.close()


@pytest.fixture(scope="module")
def initial_checkpoint(graphs, tmp_path_factory) -> str:
    return graphs(1, "parameter_server").save_initial_weights(
        str(tmp_path_factory.mktemp("init") / "model.ckpt"))


def split(batch: dict, n_towers: int) -> list:
    rows = len(batch["label_ids"]) // n_towers
    return [slice_rows(batch, t * rows, (t + 1) * rows) for t in range(n_towers)]


def feed(graph, batch: dict) -> dict:
    out = {}
    for part, placeholders in zip(split(batch, len(graph.placeholders)), graph.placeholders):
        out.update({placeholders[k]: part[k] for k in placeholders})
    return out


def replica_differences(session) -> dict:
    """{replica variable: max |replica - tower 0's|} of every `replica_i/` variable."""
    by_name = {v.op.name: v for v in tf.global_variables()}
    replicas = [v for v in tf.local_variables() if re.match(r"replica_\d+/", v.op.name)]
    assert replicas
    values = session.run({v.op.name: (v, by_name[re.sub(r"^replica_\d+/", "", v.op.name)])
                          for v in replicas})
    return {name: float(np.max(np.abs(a.astype(np.float64) - b)))
            for name, (a, b) in values.items()}


# The default layout (parameter_server) of this equivalence is test_training's
# test_towers_equal_one_tower_with_the_whole_batch: the same config, data, graphs and
# asserts; here, the layout this file adds.
@pytest.mark.parametrize("mode", ["replicated"])
@pytest.mark.parametrize("n_towers", [2, 3])
def test_towers_equal_one_tower_with_the_whole_batch(graphs, initial_checkpoint, mode,
                                                     n_towers):
    data = make_data(4 * n_towers)
    one = graphs(1, "parameter_server").step(initial_checkpoint, [[data]])
    many = graphs(n_towers, mode).step(initial_checkpoint, [split(data, n_towers)])
    assert many.global_step == one.global_step == 1
    assert abs(many.loss - one.loss) <= 1e-5 * abs(one.loss)
    assert abs(many.grad_norm - one.grad_norm) <= 1e-5 * one.grad_norm
    assert_weights_moved(initial_checkpoint, one.weights, KERNEL)
    assert_same_weights(many.weights, one.weights)


def test_replicated_accumulation_radam_and_head_rate_equal_one_big_batch(initial_checkpoint):
    """2 towers x 2 micro-batches: per-tower accumulators, replicas' RAdam step
    counters and the anchored head pattern (matched on Google's name)."""
    data = make_data(16, seed=4)
    one = train_one_step(lambda: build(1, optimizer="radam", multipliers=HEAD),
                         initial_checkpoint, [[data]])
    many = train_one_step(
        lambda: build(2, "replicated", accumulation=2, optimizer="radam", multipliers=HEAD),
        initial_checkpoint, [split(slice_rows(data, 0, 8), 2), split(slice_rows(data, 8, 16), 2)])
    assert many.global_step == 1
    assert_same_weights(many.weights, one.weights)
    # The multiplier reached the head: without it the head moves less.
    plain = train_one_step(lambda: build(1, optimizer="radam"), initial_checkpoint, [[data]])
    start = tf.train.load_variable(initial_checkpoint, "output_bias")
    moved, moved_plain = (np.abs(w["output_bias:0"] - start).max()
                          for w in (many.weights, plain.weights))
    assert moved > 3 * moved_plain


def test_copies_stay_identical_and_restore_from_a_checkpoint_with_slots(
        initial_checkpoint, tmp_path):
    """After a default-layout step the checkpoint holds Adam moments: the
    replicated graph restores them into every copy and continues exactly as
    the default layout does; its own save is the default layout's."""
    first, second = make_data(6, seed=7), make_data(6, seed=8)
    saved = str(tmp_path / "after_one_step" / "model.ckpt")
    with tf.Graph().as_default():
        _, graph = build(1, optimizer="adam")
        default_names = sorted(v.op.name for v in tf.global_variables())
        with tf.Session() as session:
            session.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            tf.train.Saver(var_list=graph.variables).restore(session, initial_checkpoint)
            session.run(graph.train_step, feed(graph, first))
            tf.train.Saver().save(session, saved)
            session.run(graph.train_step, feed(graph, second))
            reference = variable_values(session, graph.variables)

    resaved = str(tmp_path / "replicated" / "model.ckpt")
    with tf.Graph().as_default():
        plan, graph = build(3, "replicated", optimizer="adam")
        assert sorted(v.op.name for v in tf.global_variables()) == default_names
        with tf.Session(config=session_config(plan.num_cpu_devices)) as session:
            session.run([tf.global_variables_initializer(), tf.local_variables_initializer()])
            tf.train.Saver().restore(session, saved)
            assert max(replica_differences(session).values()) > 1e-3  # not yet synced
            session.run(graph.sync_replicas)
            assert max(replica_differences(session).values()) == 0.0
            for step in range(3):
                applied, _ = session.run([graph.train_step, graph.step_after],
                                         feed(graph, second if step == 0 else
                                              make_data(6, seed=20 + step)))
                assert applied
                if step == 0:
                    continued = variable_values(session, graph.variables)
            differences = replica_differences(session)
            assert set(n.split("/")[0] for n in differences) == {"replica_1", "replica_2"}
            assert any(n.endswith("/adam_m") for n in differences)
            assert any(n == "replica_2/Adam/step" for n in differences)
            assert max(differences.values()) == 0.0, differences
            tf.train.Saver().save(session, resaved)
    assert_same_weights(continued, reference)
    names = sorted(name for name, _ in tf.train.list_variables(resaved))
    assert names == default_names
    assert tf.train.load_variable(resaved, "Adam/step") == 4


def test_a_non_finite_loss_on_one_tower_skips_every_copy(graphs, initial_checkpoint):
    two_towers = graphs(2, "replicated")
    session, graph = two_towers.session, two_towers.train
    session.run(two_towers.initialize)
    two_towers.restore.restore(session, initial_checkpoint)
    session.run(graph.sync_replicas)
    with two_towers.graph.as_default():
        everything = tf.global_variables() + [
            v for v in tf.local_variables() if v.op.name.startswith("replica_")]
    before = session.run(everything)
    values = feed(graph, make_data(8))
    values[graph.placeholders[1]["example_weights"]] = np.array([np.nan, 1, 1, 1], np.float32)
    applied, finite, step = session.run(
        [graph.train_step, graph.all_finite, graph.step_after], values)
    after = session.run(everything)
    assert not applied and not finite and step == 0
    for b, a in zip(before, after):
        np.testing.assert_array_equal(a, b)


# --- placement: built for two cards, not run -------------------------------------------

def _device(op) -> str:
    return op.device.lower().replace("/device:", "/")


def devices_of(graph, op_type: str) -> set:
    """The devices of every `op_type` node, in the graph or in a function of
    it (TF 2.x builds a cond's branches as functions)."""
    definition = graph.as_graph_def()
    nodes = list(definition.node) + [node for function in definition.library.function
                                     for node in function.node_def]
    return {_device(node) for node in nodes if node.op == op_type}


@pytest.fixture(scope="module")
def replicated_on_cards():
    graph = tf.Graph()
    with graph.as_default():
        plan, _ = build(2, "replicated", accumulation=2, cards="3,5")
    return plan, graph


def test_each_copy_its_slots_and_accumulators_live_on_its_card(replicated_on_cards):
    plan, graph = replicated_on_cards
    assert plan.describe().splitlines()[0] == (
        "device plan: 2 towers on 2 devices, --variable_update=replicated: a copy of the "
        "variables and optimizer on every tower's device, gradients all-reduced (nccl)")
    variables = {op.name: _device(op) for op in graph.get_operations()
                 if op.type in VARIABLE_OPS}
    for name in ("bert/embeddings/word_embeddings", "bert/embeddings/word_embeddings/adam_m",
                 "output_weights/adam_v", "accumulators/bert/pooler/dense/kernel",
                 "accumulators/nonfinite_losses"):
        assert variables[name] == "/gpu:0", name
        replica = re.sub(r"^(accumulators/)?", r"\1replica_1/", name)
        assert variables[replica] == "/gpu:1", replica
    on_cpu = {name for name, device in variables.items() if device == "/cpu:0"}
    assert on_cpu == {"global_step", "examples_seen"}
    assert len(variables) == 2 + 2 * (len(variables) - 2) // 2


def test_the_all_reduce_runs_on_the_cards_with_nccl(replicated_on_cards):
    _, graph = replicated_on_cards
    reduces = [op for op in graph.get_operations() if op.type.startswith("CollectiveReduce")]
    by_card = {}
    for op in reduces:
        by_card.setdefault(_device(op), []).append(op)
    assert sorted(by_card) == ["/gpu:0", "/gpu:1"]
    keys = {card: [(op.get_attr("group_key"), op.get_attr("instance_key"),
                    op.get_attr("group_size")) for op in ops]
            for card, ops in by_card.items()}
    # Twin ops: the same keys on both cards, one group of 2.
    assert sorted(keys["/gpu:0"]) == sorted(keys["/gpu:1"])
    assert {size for _, _, size in keys["/gpu:0"]} == {2}
    if not IS_TF1:
        assert {op.get_attr("communication_hint") for op in reduces} == {b"nccl"}
    # The towers' apply runs next to their copies.
    assert devices_of(graph, "ResourceApplyAdam") == {"/gpu:0", "/gpu:1"}


def test_the_default_layout_keeps_variables_and_averaging_on_the_cpu():
    graph = tf.Graph()
    with graph.as_default():
        build(2, cards="3,5")
    ops = graph.get_operations()
    assert not [op for op in ops if op.type.startswith("Collective")]
    assert {_device(op) for op in ops if op.type in VARIABLE_OPS} == {"/cpu:0"}
    assert devices_of(graph, "ResourceApplyAdam") == {"/cpu:0"}


def test_more_towers_than_cards_is_refused_for_replicated():
    with pytest.raises(UserError, match=r"--variable_update=replicated needs one tower per "
                                        r"card: --n_gpus=4 on 2 cards .* use --n_gpus=2"):
        plan_devices(4, "3,5", variable_update="replicated")
    assert plan_devices(4, "3,5").num_towers == 4  # the default layout shares cards


# --- the loop: a replicated run's checkpoint in the default layout ---------------------

def test_a_replicated_run_resumes_in_the_default_layout(tmp_path):
    train, dev = toy_rows(48, seed=1), toy_rows(12, seed=2)
    task = ToyRegressionTask({"train": train, "dev": dev})
    output_dir = str(tmp_path / "out")
    settings = dict(output_dir=output_dir, train_batch_size=4, eval_batch_size=4,
                    learning_rate=3e-3, warmup_proportion=0.0, seed=3,
                    save_checkpoints_steps=1000, log_every_n_steps=1000)
    replicated = driver.Placement(plan_devices(2, "", variable_update="replicated"))
    driver.run(task, driver.RunSettings(num_train_epochs=1, **settings), replicated,
               do_train=True, do_eval=False, do_predict=False)
    names = [name for name, _ in tf.train.list_variables(os.path.join(output_dir,
                                                                      "model.ckpt-6"))]
    assert "bert/encoder/layer_0/output/dense/kernel" in names
    assert not [n for n in names if "replica" in n or n.startswith("accumulators")]
    default = driver.Placement(plan_devices(2, ""))
    driver.run(task, driver.RunSettings(num_train_epochs=2, **settings), default,
               do_train=True, do_eval=True, do_predict=False)
    assert int(read_key_values(os.path.join(output_dir, "train_results.txt"))[
        "steps_run"]) == 6
    assert int(read_key_values(os.path.join(output_dir, "eval_results.txt"))[
        "global_step"]) == 12


# Refused at the flags, before training: in this process (the same entry point, exit code
# and error line as a fresh interpreter, see helpers.run_launcher_in_process).
def test_replicated_is_refused_with_sparse_embedding_updates(tmp_path):
    run = run_launcher_in_process(["run_classifier_mgpu.py", "--task_name=sentiment",
                        f"--output_dir={tmp_path / 'out'}", "--bert_config_file=x.json",
                        "--do_train", "--sparse_embedding_updates",
                        "--variable_update=replicated"])
    assert_one_error_line(run, "--sparse_embedding_updates does not work with "
                               "--variable_update=replicated")


def test_replicated_is_refused_in_a_cluster(tmp_path):
    run = run_launcher_in_process(["run_classifier_mgpu.py", "--task_name=sentiment",
                        f"--output_dir={tmp_path / 'out'}", "--bert_config_file=x.json",
                        "--do_train", "--variable_update=replicated",
                        "--worker_hosts=localhost:1,localhost:2", "--task_index=0"])
    assert_one_error_line(run, "--variable_update=replicated works on one machine")
    assert not os.path.exists(tmp_path / "out")
