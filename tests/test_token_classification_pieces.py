"""Token classification with a unigram piece list: sentences segmented whole.

A tiny BERT on a tiny Chinese NER language, one character per token, with a
hand-made piece list in which every name (北京, 江泽民, 新华社, ...) and some
filler words are one piece: the characters of a name read the same piece
and must still be tagged B-X, I-X, ... (bert_ad/data/token_pieces.py,
bert_ad/model/heads.py `output_offset_embeddings`). 华盛顿 is a person or a
place at random, so no model is perfect; fullwidth digits and a Latin word
inside the Chinese, and sentences longer than a window.

  * one step on 2 towers x B rows equals 1 tower x 2B (softmax and CRF), and
    the offset vectors take part in it;
  * a tower's softmax without the offset vectors gives the characters of one
    piece one tag; with them, training learns B- then I- inside a piece;
  * run_ner_mgpu.py end to end on 2 towers: predict.txt has one line per input
    line and one tag per token, eval_results.txt is entity_metrics of it;
  * its CRF model exported (SavedModel, and ONNX where the lane has the tools:
    word positions, masks and offsets are the export's inputs) predicts the
    checkpoint's predict.txt from the export alone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import re

import numpy as np
import pytest

from bert_ad.compat import tf
from bert_ad.data.batching import make_batch
from bert_ad.data.conll import read_conll
from bert_ad.data.tokenization import PieceListTokenizer
from bert_ad.files import read_key_values
from bert_ad.metrics.entities import entity_metrics
from bert_ad.model.heads import PIECE_TOKEN_FEATURE_SPEC, token_classifier
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.tasks.base import Encoder, TextEncoder
from bert_ad.tasks.token_classification import (HEAD_VARIABLES, ConllFormat,
                                                TokenClassificationTask)
from bert_ad.cli import ner as ner_cli
from helpers import (REPO, TINY_CONFIG, assert_same_weights, assert_weights_moved,
                     StepGraph, flag_args, run_launcher_in_process, run_main, run_many,
                     train_one_step)

W = "\u2581"
ENTITIES = {"PER": ["江泽民", "李鹏", "张三"], "LOC": ["北京", "上海", "中国", "香港"],
            "ORG": ["新华社", "国务院"]}
AMBIGUOUS = "华盛顿"  # PER or LOC at random
FILLER = ["在", "了", "的", "说", "是", "访问", "会见", "今天", "发表", "讲话", "和", "，",
          "。", "１９９８年", " IBM "]
NAMES = [name for names in ENTITIES.values() for name in names] + [AMBIGUOUS]
# Every name and multi-character filler word is one piece (no ▁ before it: inside
# running Chinese text a word starts without one); every character one piece too.
WORDS = NAMES + ["访问", "会见", "今天", "发表", "讲话", "1998", W + "IBM"]
CHARS = sorted({c for word in NAMES + FILLER for c in word if c.strip()} - set("１９８")
               | set("198"))
PIECES = (["<s>", "<pad>", "</s>", "<unk>", W] + WORDS + CHARS + ["<mask>"])
SCORES = [0.0] * 4 + [-4.0] + [-2.0] * len(WORDS) + [-3.0] * len(CHARS) + [0.0]
NORMALIZATION = {0xFF11: 0x31, 0xFF19: 0x39, 0xFF18: 0x38}  # as e5's map: fullwidth -> ASCII
MAX_SEQ_LENGTH = 12   # 10 pieces a window
TOWERS, BATCH = 2, 3


def make_sentences(count: int, seed: int, long_every: int) -> list:
    """`count` sentences of (character, tag); every long_every-th one 25-40 characters.
    A Latin word (IBM) is one token."""
    rng = random.Random(seed)
    sentences = []
    for index in range(count):
        length = rng.randint(25, 40) if index % long_every == 0 else rng.randint(4, 12)
        tokens = []
        while len(tokens) < length:
            draw = rng.random()
            if draw < 0.4:
                kind = ("PER", "LOC", "ORG")[int(draw / 0.4 * 3)]
                name, kind = rng.choice(ENTITIES[kind]), kind
            elif draw < 0.47:
                name, kind = AMBIGUOUS, rng.choice(["PER", "LOC"])
            else:
                word = rng.choice(FILLER)
                tokens += ([(word.strip(), "O")] if word.strip() == "IBM"
                           else [(c, "O") for c in word])
                continue
            tokens += [(c, ("B-" if i == 0 else "I-") + kind) for i, c in enumerate(name)]
        sentences.append(tokens)
    return sentences


def conll_text(sentences) -> str:
    return "".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n" for s in sentences)


def write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class Setup:
    """Paths of the tiny model and data."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("ner_pieces"))
    s.vocab_file = write(os.path.join(s.root, "pieces.tsv"), "".join(
        f"{p}\t{score}\n" for p, score in zip(PIECES, SCORES)))
    write(os.path.join(s.root, "normalization.tsv"), "".join(
        f"{a:04X}\t{b:04X}\n" for a, b in NORMALIZATION.items()))
    with open(TINY_CONFIG) as f:
        config = json.load(f)
    config.update(vocab_size=len(PIECES), max_position_embeddings=32)
    s.config = dict(config)
    s.config_file = write(os.path.join(s.root, "bert_config.json"), json.dumps(config))
    s.data_dir = os.path.join(s.root, "data")
    os.makedirs(s.data_dir)
    s.train = make_sentences(60, seed=1, long_every=10)
    s.dev = make_sentences(13, seed=2, long_every=4)
    write(os.path.join(s.data_dir, "train.txt"), conll_text(s.train))
    s.dev_file = write(os.path.join(s.data_dir, "dev.txt"), conll_text(s.dev))
    s.flags = {"data_dir": s.data_dir, "vocab_file": s.vocab_file,
               "bert_config_file": s.config_file, "max_seq_length": MAX_SEQ_LENGTH,
               "n_gpus": TOWERS, "train_batch_size": BATCH, "eval_batch_size": BATCH,
               "predict_batch_size": BATCH, "learning_rate": 1e-3,
               "num_train_epochs": 6, "log_every_n_steps": 10, "seed": 5}
    return s


def _task(s: Setup, use_crf: bool) -> tuple:
    # One encoder layer (the launcher runs train two): every kind of variable a step
    # moves, in a graph that builds in about half the time.
    config = BertConfig(**dict(s.config, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0, num_hidden_layers=1))
    tokenizer = PieceListTokenizer(s.vocab_file)
    encoder = TextEncoder(config, tokenizer, s.vocab_file, False, MAX_SEQ_LENGTH,
                          compute_dtype=tf.float32)
    task = TokenClassificationTask(encoder, ConllFormat(s.data_dir), doc_stride=5,
                                   use_crf=use_crf)
    train = task.read("train")
    task.labels = task.resolve_labels(train, None)
    return task, train


def test_names_are_one_piece_and_windows_hold_more_words_than_pieces(setup):
    task, train = _task(setup, use_crf=False)
    assert task.segmentation == "sentence"
    assert task.feature_spec == PIECE_TOKEN_FEATURE_SPEC
    examples = task.features(train).examples
    words = sum(len(s) for s in setup.train)
    pieces = sum(len(ids) - 2 for ids in examples.columns["input_ids"])
    # Whole names are pieces: far fewer pieces than characters, even counting the
    # pieces windows repeat.
    assert pieces < 0.75 * words
    offsets = np.concatenate(examples.columns["word_offsets"])
    assert offsets.max() == 3   # the fourth character of １９９８ (one piece, 1998)
    assert any(len(p) > len(ids) for p, ids in zip(examples.columns["word_positions"],
                                                   examples.columns["input_ids"]))
    assert re.fullmatch(HEAD_VARIABLES, "output_offset_embeddings")


@pytest.mark.parametrize("use_crf", [False, True], ids=["softmax", "crf"])
def test_two_towers_equal_one_tower_with_the_whole_batch(setup, tmp_path, request, use_crf):
    task, train = _task(setup, use_crf)
    examples = task.features(train).examples
    short = np.nonzero(examples.lengths <= 8)[0][:4]
    long = np.nonzero(examples.lengths > 8)[0][:4]
    rows = np.concatenate([short, long])
    halves = [short, long]
    batches = [make_batch(examples, h, "dynamic") for h in halves]
    assert [b["input_ids"].shape[1] for b in batches] == [8, 16]
    # The word columns of a window are longer than its pieces.
    assert any(b["word_positions"].shape[1] > b["input_ids"].shape[1] for b in batches)

    def build(n_towers):
        plan = plan_devices(n_towers, cuda_visible_devices="")
        graph = build_train_graph(
            plan, task.feature_spec, lambda f, i: task.build_model(f, True)["loss"],
            TrainSettings(learning_rate=1e-3, num_train_steps=100, seed=1))
        return plan, graph

    one_tower = StepGraph(lambda: build(1))
    request.addfinalizer(one_tower.close)
    checkpoint = one_tower.save_initial_weights(str(tmp_path / "init.ckpt"))
    one = one_tower.step(checkpoint, [[make_batch(examples, rows, "dynamic")]])
    two = train_one_step(lambda: build(2), checkpoint, [batches])
    assert abs(two.loss - one.loss) <= 1e-5 * abs(one.loss)
    assert abs(two.grad_norm - one.grad_norm) <= 1e-5 * one.grad_norm
    assert_weights_moved(checkpoint, one.weights, "bert/encoder/layer_0/output/dense/kernel:0")
    # The rows of the offsets in the batch moved (from zero), the others did not.
    used = np.unique(np.concatenate([examples.columns["word_offsets"][r] for r in rows]))
    assert used.max() >= 2
    offsets = one.weights["output_offset_embeddings:0"]
    assert np.abs(offsets[:used.max()]).min() > 0 and not offsets[used.max():].any()
    assert_same_weights(two.weights, one.weights)
    other = one_tower.step(checkpoint,
                           [[make_batch(examples, np.append(rows[:-1], rows[-1] + 1),
                                        "dynamic")]])
    with pytest.raises(AssertionError):
        assert_same_weights(other.weights, one.weights)


def test_without_offset_vectors_a_softmax_tags_a_piece_once(setup):
    """Why the offset vectors: the characters of one piece read one vector, so a
    plain softmax cannot tell 北 (B-LOC) from 京 (I-LOC); the offset vector can."""
    task, train = _task(setup, use_crf=False)
    examples = task.features(train).examples
    batch = make_batch(examples, list(range(6)), "dynamic")
    config = task.encoder.config
    predicted = {}
    for piece_offsets in (False, True):
        with tf.Graph().as_default():
            tf.set_random_seed(3)
            features = {name: tf.constant(batch[name]) for name in PIECE_TOKEN_FEATURE_SPEC}
            out = token_classifier(Encoder(config).model(features, False), features,
                                   len(task.labels), False, piece_offsets=piece_offsets)
            with tf.Session() as session:
                session.run(tf.global_variables_initializer())
                if piece_offsets:  # as if trained: offset k pushes towards tag k
                    table = tf.trainable_variables("output_offset_embeddings")[0]
                    session.run(table.assign(np.random.RandomState(0).normal(
                        0, 10, table.shape.as_list()).astype(np.float32)))
                logits = session.run(out.logits)
        predicted[piece_offsets] = logits
    positions, mask = batch["word_positions"], batch["word_mask"].astype(bool)
    offsets = batch["word_offsets"]
    shared = mask & (offsets > 0)
    assert shared.sum() > 10
    rows, words = np.nonzero(shared)
    # Without: a word at offset k has exactly the logits of the word k places before it.
    plain = predicted[False]
    np.testing.assert_array_equal(plain[rows, words], plain[rows, words - offsets[rows, words]])
    assert (positions[rows, words] == positions[rows, words - offsets[rows, words]]).all()
    with_offsets = predicted[True]
    assert np.abs(with_offsets[rows, words]
                  - with_offsets[rows, words - offsets[rows, words]]).min() > 1e-3


@pytest.fixture(scope="module")
def trained(setup):
    """Train on 2 towers (softmax and CRF), predict and evaluate dev, through
    run_ner_mgpu.py's entry point in this process (test_token_classification.py runs
    the launcher as a user types it, a new process, on bad input)."""
    jobs = {}
    for name, crf in (("softmax", None), ("crf", True)):
        flags = dict(setup.flags, output_dir=os.path.join(setup.root, name),
                     do_train=True, do_predict=True, do_eval=True,
                     predict_file=setup.dev_file, use_crf=crf)
        jobs[name] = [os.path.join(REPO, "run_ner_mgpu.py")] + flag_args(flags)
    runs = run_many(jobs, parallel=1, run=run_launcher_in_process)
    for run in runs.values():
        assert run.returncode == 0, run.describe()
    return {name: (os.path.join(setup.root, name), run) for name, run in runs.items()}


def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


@pytest.mark.parametrize("head", ["softmax", "crf"])
def test_one_tag_per_token_and_names_tagged_inside_their_piece(setup, trained, head):
    output_dir, run = trained[head]
    assert re.search(r"predict: 13 sentences -> \d+ windows", run.stderr), run.stderr[-2000:]
    gold = read_lines(setup.dev_file)
    predicted = read_lines(os.path.join(output_dir, "predict.txt"))
    assert len(predicted) == len(gold)
    for gold_line, line in zip(gold, predicted):
        if not gold_line:
            assert line == ""
        else:
            token, tag = line.split("\t")
            assert token == gold_line.split("\t")[0]
            assert re.fullmatch(r"O|[BI]-(PER|LOC|ORG)", tag), line
    sentences = read_conll(os.path.join(output_dir, "predict.txt")).sentences
    predicted_tags = [s.tags for s in sentences]
    gold_tags = [[t for _, t in s] for s in setup.dev]
    results = read_key_values(os.path.join(output_dir, "eval_results.txt"))
    expected = entity_metrics(gold_tags, predicted_tags, types=["LOC", "ORG", "PER"])
    for key, value in expected.items():
        assert float(results[key]) == pytest.approx(value, abs=1e-6), key
    # It learnt the names although their characters share one piece: an entity is
    # found only if its first character is B- and the others I- (华盛顿 keeps it
    # from perfection).
    assert 0.6 < expected["eval_f1"] < 1.0, expected
    inside = [tag for tags, gold in zip(predicted_tags, gold_tags)
              for tag, g in zip(tags, gold) if g.startswith("I-")]
    assert sum(t.startswith("I-") for t in inside) > 0.8 * len(inside)


@pytest.mark.parametrize("fmt", ["saved_model", "onnx"])
def test_a_crf_export_of_a_piece_list_model_predicts_the_checkpoints_tags(setup, trained,
                                                                          tmp_path, fmt):
    if fmt == "onnx" and not all(importlib.util.find_spec(name)
                                 for name in ("onnx", "onnxruntime", "tf2onnx")):
        pytest.skip('onnx, onnxruntime and tf2onnx are not installed in this lane (pip '
                    'install "bert_ad[onnx]": Python 3.8+ with TensorFlow 2.x)')
    output_dir, _ = trained["crf"]
    export_dir = str(tmp_path / "export")
    assert run_main(ner_cli, dict(setup.flags, output_dir=output_dir, use_crf=True, n_gpus=1,
                                  do_export=True, export_dir=export_dir,
                                  export_format=fmt)) == 0
    scored = str(tmp_path / "scored")
    assert run_main(ner_cli, {"data_dir": setup.data_dir, "predict_file": setup.dev_file,
                              "predict_from_export": export_dir, "do_predict": True,
                              "predict_batch_size": BATCH, "output_dir": scored}) == 0
    for name in ("predict.txt", "predict_entities.jsonl"):
        assert read_lines(os.path.join(scored, name)) == read_lines(
            os.path.join(output_dir, name)), name

