"""Warm-starting from --init_checkpoint: by name, with a report, shape errors up front."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from bert_ad.parallel.checkpoints import (WarmStart, latest_checkpoint, require_variables,
                                          resolve_checkpoint, set_aside_newer,
                                          step_checkpoints)
from bert_ad.model.heads import FEATURE_SPEC, classifier
from bert_ad.compat import tf
from bert_ad.errors import UserError
from bert_ad.model.modeling import BertConfig, BertModel
from bert_ad.tasks.base import Encoder
from bert_ad.parallel.train_graph import feature_placeholders

SMALL = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
             intermediate_size=32, max_position_embeddings=32)


def save_encoder(path: str, vocab_size: int = 40) -> dict:
    """A checkpoint with only the BERT encoder plus an MLM-like extra variable."""
    with tf.Graph().as_default():
        ids = tf.placeholder(tf.int32, [None, None])
        BertModel(BertConfig(vocab_size=vocab_size, **SMALL), False, ids)
        tf.get_variable("cls/predictions/output_bias", [vocab_size])
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, path)
            variables = tf.global_variables()
            return dict(zip([v.op.name for v in variables], session.run(variables)))


def classifier_graph(vocab_size: int = 40):
    features = feature_placeholders(FEATURE_SPEC, 0)
    bert = Encoder(BertConfig(vocab_size=vocab_size, **SMALL)).model(features, False)
    classifier(bert, features, 3, False)


def test_loads_by_name_and_reports_new_and_unused(tmp_path, caplog):
    prefix = str(tmp_path / "bert_model.ckpt")
    saved = save_encoder(prefix)
    with tf.Graph().as_default():
        classifier_graph()
        warm = WarmStart(prefix)
        with caplog.at_level(logging.INFO, logger="bert_ad"):
            warm.log_summary()
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            warm.restore(session)
            table = session.run(tf.global_variables("bert/embeddings/word_embeddings")[0])
    np.testing.assert_array_equal(table, saved["bert/embeddings/word_embeddings"])
    assert sorted(warm.new) == ["output_bias", "output_weights"]
    assert warm.unused == ["cls/predictions/output_bias"]
    assert len(warm.assignment) == len(saved) - 1
    assert f"loaded {len(saved) - 1} variables" in caplog.text
    assert "freshly initialised (2): output_weights, output_bias" in caplog.text


def test_vocab_size_mismatch_names_variable_and_both_shapes(tmp_path):
    prefix = str(tmp_path / "bert_model.ckpt")
    save_encoder(prefix, vocab_size=40)
    with tf.Graph().as_default():
        classifier_graph(vocab_size=44)
        with pytest.raises(UserError) as error:
            WarmStart(prefix)
    message = str(error.value)
    assert "bert/embeddings/word_embeddings" in message
    assert "[40, 16] in the checkpoint but [44, 16] in the model" in message
    assert "vocab_size" in message


def test_resolve_checkpoint_prefix_directory_and_errors(tmp_path):
    prefix = str(tmp_path / "bert_model.ckpt")
    save_encoder(prefix)
    assert resolve_checkpoint(prefix) == prefix
    assert resolve_checkpoint(str(tmp_path)) == prefix
    with pytest.raises(UserError, match=r"--init_checkpoint=.*nope is not a checkpoint"):
        resolve_checkpoint(str(tmp_path / "nope"))
    # Any file of the checkpoint names it: the prefix is what TensorFlow wants.
    for suffix in (".index", ".data-00000-of-00001", ".meta"):
        assert resolve_checkpoint(prefix + suffix) == prefix
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match=r"is a directory without a checkpoint"):
        resolve_checkpoint(str(empty))


def test_checkpoints_are_ordered_by_step_number(tmp_path):
    for step in (9, 10, 100, 25):
        (tmp_path / f"model.ckpt-{step}.index").write_text("")
    assert [os.path.basename(p) for p in step_checkpoints(str(tmp_path))] == [
        "model.ckpt-9", "model.ckpt-10", "model.ckpt-25", "model.ckpt-100"]
    assert latest_checkpoint(str(tmp_path / "missing")) is None


@pytest.mark.parametrize("damage", ["cut_short", "data_missing", "index_garbage"])
def test_a_broken_newest_checkpoint_falls_back_to_the_newest_readable(tmp_path, damage,
                                                                       caplog):
    for step in (10, 20, 30):
        save_encoder(str(tmp_path / f"model.ckpt-{step}"))
    newest = tmp_path / "model.ckpt-30.data-00000-of-00001"
    if damage == "cut_short":
        newest.write_bytes(newest.read_bytes()[:100])
    elif damage == "data_missing":
        newest.unlink()
    else:
        (tmp_path / "model.ckpt-30.index").write_bytes(b"not an index")
    before = sorted(os.listdir(str(tmp_path)))
    with caplog.at_level("WARNING", logger="bert_ad"):
        assert latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-20")
    assert "model.ckpt-30" in caplog.text and "older checkpoint" in caplog.text
    assert sorted(os.listdir(str(tmp_path))) == before  # nothing deleted
    # As --init_checkpoint, the broken one is one line naming it.
    with pytest.raises(UserError, match=r"--init_checkpoint=.*model.ckpt-30: .*"):
        resolve_checkpoint(str(tmp_path / "model.ckpt-30"))
    # A resumed run sets it aside under another name, out of the way of its saves.
    moved = set_aside_newer(str(tmp_path), str(tmp_path / "model.ckpt-20"))
    assert moved and all(name.startswith("model.ckpt-30.broken-1.") for name in moved)
    assert [os.path.basename(p) for p in step_checkpoints(str(tmp_path))] == [
        "model.ckpt-10", "model.ckpt-20"]


def test_require_variables_refuses_another_model(tmp_path):
    prefix = str(tmp_path / "bert_model.ckpt")
    save_encoder(prefix)
    with tf.Graph().as_default():
        classifier_graph()
        with pytest.raises(UserError, match=r"is not of this model \(it lacks output_weights\)"):
            require_variables(prefix, tf.global_variables())
