"""--remove_padding: the encoder's position-wise layers on the real tokens only.

The same outputs on real tokens as the padded graph, zeros at padded positions,
the same training step (dropout off), fewer rows through every dense layer,
and off under --use_xla.
"""
from __future__ import annotations

import numpy as np
import pytest
from absl import flags

from bert_ad.cli import flag_groups
from bert_ad.cli.builders import remove_padding_from_flags
from bert_ad.compat import tf
from bert_ad.model.heads import FEATURE_SPEC, classifier
from bert_ad.model.modeling import BertConfig, BertModel
from bert_ad.tasks.base import Encoder
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from helpers import assert_same_weights, assert_weights_moved, save_initial_weights, \
    train_one_step

CONFIG = dict(vocab_size=40, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
              intermediate_size=32, max_position_embeddings=32,
              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def padded_batch(seed: int = 0) -> dict:
    """4 rows of lengths 3, 9, 5 and 12 padded to 12, two segments in the last."""
    rng = np.random.RandomState(seed)
    lengths = [3, 9, 5, 12]
    ids = np.zeros([4, 12], np.int32)
    mask = np.zeros([4, 12], np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.randint(1, CONFIG["vocab_size"], length)
        mask[row, :length] = 1
    types = np.zeros([4, 12], np.int32)
    types[3, 6:] = 1
    return {"input_ids": ids, "input_mask": mask, "segment_ids": types,
            "label_ids": np.array([0, 1, 1, 0], np.int32),
            "example_weights": np.ones([4], np.float32)}


def test_real_tokens_get_the_padded_graphs_outputs():
    batch = padded_batch()
    config = BertConfig.from_dict(dict(CONFIG))
    with tf.Graph().as_default():
        tf.set_random_seed(2)
        inputs = [tf.constant(batch[k]) for k in ("input_ids", "input_mask", "segment_ids")]
        outputs = {}
        for remove in (False, True):
            with tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
                model = BertModel(config, False, *inputs, remove_padding=remove)
            outputs[remove] = (model.get_all_encoder_layers(), model.get_pooled_output())
        dense_inputs = sorted({op.inputs[0].shape.as_list()[0] is None
                               for op in tf.get_default_graph().get_operations()
                               if op.type == "MatMul"})
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            padded, removed = session.run(outputs[False]), session.run(outputs[True])
    real = batch["input_mask"] == 1
    for layer, (want, got) in enumerate(zip(padded[0], removed[0])):
        np.testing.assert_allclose(got[real], want[real], atol=2e-5, err_msg=f"layer {layer}")
        assert np.all(got[~real] == 0.0), layer
        assert np.abs(want[~real]).max() > 0.1      # the padded graph computes them
    np.testing.assert_allclose(removed[1], padded[1], atol=2e-5)
    # The padded graph's matmuls have the static 4 * 12 rows; the other a token count.
    assert dense_inputs == [False, True]


def test_a_training_step_is_the_same(tmp_path):
    batch = [[padded_batch(1)]]
    config = BertConfig.from_dict(dict(CONFIG))

    def build(remove_padding):
        def loss(features, _):
            bert = Encoder(config, remove_padding=remove_padding).model(features, True)
            return classifier(bert, features, 2, True).loss

        def graph():
            plan = plan_devices(1, cuda_visible_devices="")
            return plan, build_train_graph(plan, FEATURE_SPEC, loss, TrainSettings(
                learning_rate=1e-2, num_train_steps=10, seed=1))
        return graph

    checkpoint = save_initial_weights(build(False), str(tmp_path / "init.ckpt"))
    padded = train_one_step(build(False), checkpoint, batch)
    removed = train_one_step(build(True), checkpoint, batch)
    assert_weights_moved(checkpoint, padded.weights)
    assert removed.loss == pytest.approx(padded.loss, abs=1e-6)
    assert removed.grad_norm == pytest.approx(padded.grad_norm, rel=1e-5)
    assert_same_weights(removed.weights, padded.weights)


@pytest.mark.parametrize("argv, expected", [
    ([], True), (["--use_xla"], False), (["--noremove_padding"], False),
    (["--use_xla", "--remove_padding"], False)])
def test_the_flag_and_xla(argv, expected):
    values = flags.FlagValues()
    flag_groups.define_groups(values, ("speed",))
    values(["prog"] + argv)
    assert remove_padding_from_flags(values) is expected
