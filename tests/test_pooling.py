"""The classifier's --pooling=mean and --head_learning_rate_multiplier.

Mean pooling against a numpy forward pass of the same weights (probabilities of
real sample rows, padding in the batch); the head's multiplied step against the
plain step; the command line end to end (no pooler in the checkpoint, scoring
on another tower count gives the same predictions, a bad value is one line).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from bert_ad.compat import tf
from bert_ad.data import processors
from bert_ad.data.batching import make_batch
from bert_ad.data.features import convert_examples
from bert_ad.data.tokenization import make_tokenizer
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.train_graph import feature_placeholders
from bert_ad.tasks.base import TextEncoder
from bert_ad.tasks.classification import ClassificationTask
from bert_ad.tools import weight_names
from helpers import (REPO, assert_head_learns_at_multiplied_rate, assert_one_error_line,
                     flag_args, run_launcher_in_process, tiny_model)
from numpy_reference import numpy_bert

LAUNCHER = os.path.join(REPO, "run_classifier_mgpu.py")
SAMPLE = os.path.join(REPO, "data", "sample_sentiment")
MAX_SEQ = 48


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return tiny_model(str(tmp_path_factory.mktemp("pooling")), hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)


def make_task(model, pooling="mean", multiplier=1.0):
    encoder = TextEncoder(BertConfig.from_json_file(model.config_file),
                          make_tokenizer(model.vocab_file, True, ""), model.vocab_file, True,
                          MAX_SEQ, compute_dtype=tf.float32)
    task = ClassificationTask(encoder, processors.get_task("sentiment"), SAMPLE,
                              pooling=pooling, head_learning_rate_multiplier=multiplier)
    task.labels = ["0", "1"]
    return task


def _examples(task, split):
    return convert_examples(task.read(split).rows, task.encoder.tokenizer,
                            task.feature_settings())


def test_mean_pooled_probabilities_match_numpy(model):
    task = make_task(model)
    examples = _examples(task, "dev")
    rows = np.argsort(examples.lengths)[[0, 1, -2, -1]]     # short and long: padding
    batch = make_batch(examples, rows, "dynamic")
    assert (batch["input_mask"] == 0).any()
    with tf.Graph().as_default():
        tf.set_random_seed(3)
        placeholders = feature_placeholders(task.feature_spec, 0)
        outputs = task.build_model(placeholders, is_training=False)
        names = [v.op.name for v in tf.global_variables()]
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            probabilities = session.run(outputs["probabilities"],
                                        {placeholders[k]: batch[k] for k in placeholders})
            values = session.run({v.op.name: v for v in tf.global_variables()})
    assert not [n for n in names if "pooler" in n]
    encoder = {weight_names.google_to_hf_name(n): (v.T if weight_names.is_kernel(n) else v)
               for n, v in values.items() if n.startswith("bert/")}
    config = task.encoder.config
    sequence, _ = numpy_bert(encoder, config.num_hidden_layers, config.num_attention_heads,
                             batch["input_ids"], batch["input_mask"], batch["segment_ids"])
    mask = batch["input_mask"][:, :, None]
    pooled = (sequence * mask).sum(axis=1) / mask.sum(axis=1)
    logits = pooled @ values["output_weights"].T.astype(np.float64) + values["output_bias"]
    want = np.exp(logits - logits.max(axis=1, keepdims=True))
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(probabilities, want, atol=1e-5)
    # The output layer (stddev 0.02) must not make every row alike: the check has teeth.
    assert np.ptp(want[:, 0]) > 1e-4


def test_the_head_learns_at_the_multiplied_rate(model, tmp_path):
    """The output layer takes 10x the plain step; every encoder variable the same step."""
    task = make_task(model, multiplier=10.0)
    batch = [[make_batch(_examples(task, "train"), np.arange(8), "dynamic")]]
    assert_head_learns_at_multiplied_rate(task, task.feature_spec, batch,
                                          ["output_weights:0", "output_bias:0"], 10.0,
                                          str(tmp_path / "init.ckpt"))
    assert make_task(model).learning_rate_multipliers() == {}


def _flags(model, output_dir, **changes):
    flags = {"task_name": "sentiment", "data_dir": SAMPLE, "vocab_file": model.vocab_file,
             "bert_config_file": model.config_file, "max_seq_length": MAX_SEQ,
             "train_batch_size": 4, "predict_batch_size": 8, "learning_rate": 1e-3,
             "max_train_examples": 32, "num_train_epochs": 1, "pooling": "mean",
             "head_learning_rate_multiplier": 10, "output_dir": output_dir}
    flags.update(changes)
    return flags


def test_cli_trains_and_scores_with_mean_pooling(model, tmp_path):
    # The launcher's entry point in this process, as in the tests below
    # (test_classifier_cli.py runs it as a user types it).
    trained = str(tmp_path / "trained")
    run_launcher_in_process([LAUNCHER] + flag_args(_flags(
        model, trained, do_train=True, n_gpus=2, do_predict=True))).check()
    variables = [name for name, _ in tf.train.list_variables(trained)]
    assert "output_weights" in variables and "bert/encoder/layer_0/output/dense/kernel" \
        in variables
    assert not [n for n in variables if "pooler" in n]
    rescored = str(tmp_path / "rescored")
    run_launcher_in_process([LAUNCHER] + flag_args(_flags(
        model, rescored, do_predict=True, n_gpus=1, init_checkpoint=trained,
        labels="0,1"))).check()

    def predictions(directory):
        with open(os.path.join(directory, "test_results.tsv"), encoding="utf-8") as f:
            return np.array([[float(v) for v in line.split("\t")] for line in f])

    first, again = predictions(trained), predictions(rescored)
    with open(os.path.join(SAMPLE, "test.tsv"), encoding="utf-8") as f:
        assert len(first) == sum(1 for _ in f)
    np.testing.assert_allclose(first, again, atol=1e-5)


@pytest.mark.parametrize("change, expected", [
    ({"pooling": "max"}, ("--pooling", "cls", "mean")),
    ({"head_learning_rate_multiplier": 0},
     ("--head_learning_rate_multiplier=0.0 must be positive",))], ids=["pooling", "multiplier"])
def test_bad_flags_are_one_error_line(model, tmp_path, change, expected):
    run = run_launcher_in_process([LAUNCHER] + flag_args(_flags(
        model, str(tmp_path / "out"), do_train=True, **change)))
    assert_one_error_line(run, *expected)
    assert not os.path.exists(tmp_path / "out")
