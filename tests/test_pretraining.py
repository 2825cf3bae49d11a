"""run_pretraining_mgpu.py: Google's head names, multi-tower training, held-out eval."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest

from bert_ad.compat import tf
from bert_ad.model.modeling import BertConfig
from helpers import (
    REPO, Run, assert_one_error_line, run_launcher, run_launcher_in_process,
    save_initial_checkpoint, tree_digest)
from bert_ad.files import read_key_values
from bert_ad.pretraining.records import decode_record, stack_batch
from bert_ad.tasks.base import Encoder
from bert_ad.tasks.pretraining import FEATURE_SPEC, pretraining_tower

CONFIG = dict(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=32, max_position_embeddings=32)
SEQ, PREDICTIONS = 16, 3


def write_records(path: str, count: int, seed: int, nsp: bool = True) -> None:
    """Records in create_pretraining_data.py's format with an easy pattern to
    learn: the hidden token is always id 7."""
    rng = np.random.RandomState(seed)
    with tf.io.TFRecordWriter(path) as writer:
        for _ in range(count):
            length = rng.randint(8, SEQ + 1)
            ids = np.zeros(SEQ, np.int64)
            ids[:length] = (np.arange(length) + rng.randint(5, 40)) % 60 + 4
            positions = np.sort(rng.choice(np.arange(1, length - 1), PREDICTIONS, False))
            ids[positions] = 7
            labels = ids[positions].copy()
            ids[positions] = 3  # [MASK]
            segments = np.zeros(SEQ, np.int64)
            if nsp:
                segments[length // 2:length] = 1
            feature = {
                "input_ids": ids, "input_mask": (np.arange(SEQ) < length).astype(np.int64),
                "segment_ids": segments, "masked_lm_positions": positions,
                "masked_lm_ids": labels,
                "next_sentence_labels": [int(nsp and rng.rand() < 0.5)],
            }
            example = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=list(v)))
                       for k, v in feature.items()}
            example["masked_lm_weights"] = tf.train.Feature(
                float_list=tf.train.FloatList(value=[1.0] * PREDICTIONS))
            writer.write(tf.train.Example(
                features=tf.train.Features(feature=example)).SerializeToString())


LAUNCHER = os.path.join(REPO, "run_pretraining_mgpu.py")


def run_as_typed(args: list) -> Run:
    """The launcher in a fresh interpreter, as a user types it (one test keeps it honest)."""
    return run_launcher([LAUNCHER] + args, timeout=600)


def run(args: list) -> Run:
    """The launcher's command in this process (run_launcher_in_process): the same entry
    point, exit code and output, without a TensorFlow import per run."""
    return run_launcher_in_process([LAUNCHER] + args)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    (root / "train").mkdir()
    write_records(str(root / "train" / "shard-0.tfrecord"), 40, seed=1)
    write_records(str(root / "train" / "shard-1.tfrecord"), 40, seed=2)
    write_records(str(root / "heldout.tfrecord"), 13, seed=3)
    config = root / "bert_config.json"
    config.write_text(json.dumps(CONFIG))
    (root / "small_vocab.json").write_text(json.dumps(dict(CONFIG, vocab_size=40)))
    return root


def common(workspace, output: str) -> list:
    return [f"--bert_config_file={workspace / 'bert_config.json'}",
            f"--output_dir={output}", f"--max_seq_length={SEQ}",
            f"--max_predictions_per_seq={PREDICTIONS}", "--n_gpus=2",
            "--train_batch_size=4", "--eval_batch_size=4", "--learning_rate=1e-3",
            "--num_warmup_steps=2", "--log_every_n_steps=5"]


def test_head_variables_have_googles_names():
    with tf.Graph().as_default():
        features = {name: tf.placeholder(dtype, shape) for name, (dtype, shape)
                    in FEATURE_SPEC.items()}
        pretraining_tower(Encoder(BertConfig(**CONFIG)).model(features, True), features,
                          use_nsp=True)
        names = {v.name.split(":")[0]: v.shape.as_list() for v in tf.global_variables()}
    assert names["cls/predictions/transform/dense/kernel"] == [16, 16]
    assert names["cls/predictions/transform/LayerNorm/gamma"] == [16]
    assert names["cls/predictions/output_bias"] == [64]
    assert names["cls/seq_relationship/output_weights"] == [2, 16]
    assert names["cls/seq_relationship/output_bias"] == [2]
    # The output embedding is the input one (tied), not a new variable.
    assert not [n for n in names if n.startswith("cls/") and "embedding" in n]


def test_stack_batch_trims_to_longest_row_and_pads_rows(workspace):
    records = list(tf.io.tf_record_iterator(str(workspace / "heldout.tfrecord")))[:3]
    examples = [decode_record(r) for r in records]
    batch = stack_batch(examples, rows=4)
    longest = max(int(e["input_mask"].sum()) for e in examples)
    assert batch["input_ids"].shape[1] == min(SEQ, -(-longest // 8) * 8)
    assert batch["masked_lm_positions"].shape == (4, PREDICTIONS)
    np.testing.assert_array_equal(batch["example_weights"], [1, 1, 1, 0])
    assert batch["masked_lm_weights"][3].sum() == 0


def test_train_then_eval_on_held_out_data(workspace, tmp_path):
    output = str(tmp_path / "out")
    result = run_as_typed(common(workspace, output) + [
        f"--input_file={workspace / 'train'}",
        f"--eval_input_file={workspace / 'heldout.tfrecord'}",
        "--do_train", "--do_eval", "--num_train_steps=30", "--save_checkpoints_steps=10",
        "--optimizer=lamb", "--learning_rate=1e-2"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "objective: masked LM + next sentence" in result.stderr
    assert os.path.exists(os.path.join(output, "model.ckpt-30.index"))
    lines = open(os.path.join(output, "eval_results.txt")).read().splitlines()
    metrics = dict(line.split(" = ") for line in lines)
    assert sorted(metrics) == ["eval_examples", "global_step", "masked_lm_accuracy",
                               "masked_lm_loss", "next_sentence_accuracy",
                               "next_sentence_loss"]
    assert metrics["eval_examples"] == "13"  # every held-out record exactly once
    assert metrics["global_step"] == "30"
    lines = open(os.path.join(output, "train_results.txt")).read().splitlines()
    trained = dict(line.split(" = ") for line in lines)
    assert (trained["global_step"], trained["steps_run"]) == ("30", "30")
    assert float(trained["learning_rate"]) == pytest.approx(1e-2)
    assert int(trained["examples_seen"]) == 30 * int(trained["global_batch"])
    # The untrained loss is about ln(64) = 4.16: the model learned.
    assert float(metrics["masked_lm_loss"]) < 3.9
    assert float(metrics["masked_lm_accuracy"]) > 0.9  # id 7 found (chance: 1/64)
    saved = dict(tf.train.list_variables(os.path.join(output, "model.ckpt-30")))
    assert "cls/predictions/output_bias" in saved
    assert "bert/encoder/layer_0/output/dense/kernel/adam_m" in saved


@pytest.fixture(scope="module")
def continued_run(workspace, tmp_path_factory) -> tuple:
    """One short run from a released checkpoint without heads, with --lr_scaling=sqrt on
    2 towers: (its Run, its output folder). Two facts of one run, two tests below."""
    root = tmp_path_factory.mktemp("continued")
    released = save_initial_checkpoint(str(root / "released" / "bert_model.ckpt"),
                                       BertConfig(**CONFIG))
    output = str(root / "out")
    result = run(common(workspace, output) + [
        f"--input_file={workspace / 'train'}", f"--init_checkpoint={released}",
        "--do_train", "--num_train_steps=2", "--lr_scaling=sqrt"])
    return result, output


def test_continued_pretraining_from_a_checkpoint_without_heads(continued_run):
    result, _ = continued_run
    assert result.returncode == 0, result.stderr[-3000:]
    assert "freshly initialised (7): cls/predictions/transform/dense/kernel" in result.stderr
    assert "cls/seq_relationship/output_weights" in result.stderr


def test_mlm_only_data_turns_the_next_sentence_head_off(workspace, tmp_path):
    path = str(tmp_path / "mlm.tfrecord")
    write_records(path, 16, seed=5, nsp=False)
    output = str(tmp_path / "out")
    # One tower: the objective does not depend on the tower count.
    args = [a for a in common(workspace, output) if a != "--n_gpus=2"] + ["--n_gpus=1"]
    result = run(args + [f"--input_file={path}", "--do_train", "--num_train_steps=2"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "objective: masked LM only" in result.stderr
    saved = dict(tf.train.list_variables(os.path.join(output, "model.ckpt-2")))
    assert not [n for n in saved if n.startswith("cls/seq_relationship")]


@pytest.mark.parametrize("extra, message", [
    (["--do_eval", "--input_file={train}", "--eval_input_file={train}/shard-0.tfrecord"],
     "--eval_input_file shares"),
    (["--do_train", "--input_file={root}/nothing-*.tfrecord"], "--input_file: no file matches"),
    (["--input_file={train}"], "nothing to do"),
    (["--do_train", "--input_file={train}", "--bert_config_file={root}/small_vocab.json"],
     "but --bert_config_file has vocab_size=40"),
    (["--do_train", "--input_file={train}", "--max_seq_length=24"],
     "sequences of 16 tokens but --max_seq_length=24"),
])
def test_bad_input_is_one_clear_line(workspace, tmp_path, extra, message):
    output = tmp_path / "out"
    output.mkdir()
    (output / "keep.txt").write_text("user data")
    args = common(workspace, str(output)) + [
        a.format(train=workspace / "train", root=workspace) for a in extra]
    if "--max_seq_length=24" in args:
        args.remove(f"--max_seq_length={SEQ}")
    before = tree_digest(str(output))
    result = run(args + ["--num_train_steps=2"])
    assert_one_error_line(result, "error: ", message)
    assert tree_digest(str(output)) == before, result.describe()
    assert (output / "keep.txt").read_text() == "user data"


def test_lr_scaling_applies_to_pretraining_and_is_reported(continued_run):
    result, output = continued_run
    assert result.returncode == 0, result.stderr[-3000:]
    trained = read_key_values(os.path.join(output, "train_results.txt"))
    # 2 towers x 4 = global batch 8, twice one tower's 4: the rate times sqrt(2).
    assert int(trained["global_batch"]) == 8
    assert float(trained["learning_rate"]) == pytest.approx(1e-3 * 2 ** 0.5, rel=1e-6)
    assert "learning rate 0.00141421" in result.stderr


def test_resuming_the_record_stream_costs_the_same_at_any_step(tmp_path, monkeypatch):
    """Resume at step 10,000 reads and decodes only the records it feeds."""
    from bert_ad.pretraining import records
    path = str(tmp_path / "shard.tfrecord")
    write_records(path, 500, seed=9)
    batches = records.RecordBatches([path], SEQ)
    decoded = []
    real_decode = records.decode_record
    monkeypatch.setattr(records, "decode_record",
                        lambda data, where="": decoded.append(where) or real_decode(data, where))

    def first_batch(step):
        decoded.clear()
        started = time.perf_counter()
        stream = batches.training(per_tower=4, towers=2, workers=1, worker_index=0,
                                  seed=3, start_example=step * 8)
        batch = next(stream)
        stream.close()
        return batch, time.perf_counter() - started, len(decoded)

    _, early_seconds, early_decoded = first_batch(10)
    late, late_seconds, late_decoded = first_batch(10_000)
    assert early_decoded == late_decoded == 8   # one global batch, nothing skipped by parsing
    assert late_seconds < 5 * early_seconds + 0.05
    # The same stream position as reading from the start: record 80,000 of the
    # stream is record 80,000 % 500 of epoch 160.
    stream = records.record_stream([500], seed=3, start_example=0)
    epoch_start = records.record_stream([500], seed=3, start_example=10_000 * 8)
    skipped = [next(stream) for _ in range(10_000 * 8 + 8)][-8:]
    assert [next(epoch_start) for _ in range(8)] == skipped
    assert late[0]["input_ids"].shape[0] == 4


def test_a_cut_short_or_foreign_shard_is_refused_before_training(workspace, tmp_path):
    good = (workspace / "heldout.tfrecord").read_bytes()
    (tmp_path / "cut.tfrecord").write_bytes(good[:len(good) - 10])
    (tmp_path / "text.tfrecord").write_text("not a TFRecord file at all\n" * 10)
    for name, message in (("cut.tfrecord", "record 13 (byte"),
                          ("text.tfrecord", "not a TFRecord file")):
        output = tmp_path / f"out-{name}"
        result = run(common(workspace, str(output)) + [
            f"--input_file={tmp_path / name}", "--do_train", "--num_train_steps=2"])
        last = assert_one_error_line(result, message)
        assert last.startswith(f"error: {tmp_path / name}: record"), last
        assert not output.exists() or not os.listdir(output)
