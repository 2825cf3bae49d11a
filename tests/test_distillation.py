"""bert-ad distill: a student learns a frozen teacher (bert_ad/tasks/distillation.py).

* The loss terms against numpy (bert_ad/model/distillation_losses.py), and
  which teacher layers a student takes (bert_ad/model/student.py).
* The training graph: N towers x B rows == 1 tower x N*B on one step (dropout
  off, 1e-5), gold and transfer rows mixed, every loss term on, for a
  classifier and a CRF token classifier; the teacher is loaded from its
  checkpoint, frozen and outside the saved variables, the student starts from
  the teacher layers it is made of (a student of every layer starts at loss 0).
* `bert-ad distill` end to end, in this process: the student folder holds
  Google's names and no teacher variable, its own bert_config.json, and
  predicts and exports like a classifier (token classifier) trained by
  `bert-ad classifier` (`bert-ad ner`).
* Every bad input of issue 46 is one `error:` line and leaves output_dir as it was.

The teachers are freshly initialised checkpoints with a head (a fine-tuned
model's layout): what the student learns does not matter here, only how.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil

import numpy as np
import pytest

from bert_ad.compat import list_checkpoint_variables, tf
from bert_ad.data import processors
from bert_ad.data.batching import concatenate, make_batch
from bert_ad.data.tokenization import FullTokenizer
from bert_ad.model.distillation_losses import (hidden_mse, soft_target_loss,
                                               token_soft_target_loss)
from bert_ad.model.heads import FEATURE_SPEC, TOKEN_FEATURE_SPEC, classifier, token_classifier
from bert_ad.model.modeling import BertConfig
from bert_ad.model.student import source_name, student_config, teacher_layers
from bert_ad.model.variable_shapes import google_variable_shapes
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.tasks.base import TextEncoder
from bert_ad.tasks.classification import ClassificationTask
from bert_ad.tasks.distillation import (DistillationLosses, DistillationTask, StudentStart,
                                        teacher_task, without_labels)
from bert_ad.tasks.token_classification import ConllFormat, TokenClassificationTask
from helpers import (SAMPLE_SENTIMENT, StepGraphs, assert_same_weights, assert_weights_moved,
                     flag_args, head_graph, run_bad_inputs_in_process,
                     run_launcher_in_process, sample_sentiment_texts, save_initial_checkpoint,
                     tiny_model, train_one_step, write_config)

TEACHER_LAYERS = 3
SEQ = 24
# A token classifier's teacher lists its tags in its own order, not the data's.
TAGS = ["O", "B-PER", "B-LOC"]
NAMES = {"B-PER": ["alice", "bob", "carol"], "B-LOC": ["paris", "rome", "oslo"]}
FILLER = ["the", "went", "to", "met", "in", "and", "today", "."]
NER_VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
             + sorted(w for words in NAMES.values() for w in words) + sorted(FILLER))


def ner_sentences(count: int, seed: int) -> list:
    """[(word, tag)] sentences of 3-12 words, names tagged B-PER / B-LOC."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        words = []
        for _ in range(rng.randint(3, 12)):
            if rng.random() < 0.3:
                tag = rng.choice(["B-PER", "B-LOC"])
                words.append((rng.choice(NAMES[tag]), tag))
            else:
                words.append((rng.choice(FILLER), "O"))
        sentences.append(words)
    return sentences


def write(path: str, text: str) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


class Setup:
    """The tiny models, their fine-tuned-looking teachers and the data."""


def _save_teacher(folder: str, config_file: str, build, labels) -> str:
    os.makedirs(folder)
    save_initial_checkpoint(os.path.join(folder, "model.ckpt-3"),
                            BertConfig.from_json_file(config_file), build, seed=3)
    write(os.path.join(folder, "labels.txt"), "".join(x + "\n" for x in labels))
    return folder


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("distill"))
    # A classifier teacher on the sample sentiment words (wide init: outputs
    # far from uniform, so the soft targets say something).
    model = tiny_model(os.path.join(s.root, "model"), num_hidden_layers=TEACHER_LAYERS,
                       initializer_range=0.2)
    s.vocab_file, s.config_file = model.vocab_file, model.config_file
    s.classifier_teacher = _save_teacher(
        os.path.join(s.root, "teacher"), s.config_file,
        lambda c: head_graph(c, FEATURE_SPEC, False,
                             lambda bert, f: classifier(bert, f, 2, False)), ["0", "1"])
    s.transfer_file = write(os.path.join(s.root, "transfer.txt"), "".join(
        text + "\n" for text in sample_sentiment_texts(["test"])[:10]))
    # A CRF token classifier teacher on a tiny tagged language.
    ner = os.path.join(s.root, "ner")
    os.makedirs(os.path.join(ner, "data"))
    s.ner_vocab = write(os.path.join(ner, "vocab.txt"), "\n".join(NER_VOCAB) + "\n")
    s.ner_config = write_config(os.path.join(ner, "bert_config.json"), len(NER_VOCAB),
                                num_hidden_layers=TEACHER_LAYERS, initializer_range=0.2,
                                max_position_embeddings=32)
    s.ner_data = os.path.join(ner, "data")
    for name, count, seed in (("train.txt", 24, 1), ("dev.txt", 7, 2), ("test.txt", 5, 3)):
        write(os.path.join(s.ner_data, name), "".join(
            "".join(f"{w}\t{t}\n" for w, t in sentence) + "\n"
            for sentence in ner_sentences(count, seed)))
    s.ner_transfer = write(os.path.join(ner, "transfer.txt"), "".join(
        " ".join(w for w, _ in sentence) + "\n" for sentence in ner_sentences(8, 4)))
    s.ner_teacher = _save_teacher(
        os.path.join(ner, "teacher"), s.ner_config,
        lambda c: head_graph(c, TOKEN_FEATURE_SPEC, False, lambda bert, f: token_classifier(
            bert, f, len(TAGS), False, use_crf=True)), TAGS)
    return s


# --- the loss terms and the layer map -----------------------------------------------------

def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _evaluate(tensors):
    with tf.Session() as session:
        return session.run(tensors)


def test_loss_terms_match_numpy():
    rng = np.random.RandomState(0)
    student, teacher = rng.randn(5, 4).astype(np.float32), 3 * rng.randn(5, 4).astype(
        np.float32)
    T = 2.5

    def kl(t, s):
        pt = np.exp(_log_softmax(t))
        return (pt * (_log_softmax(t) - _log_softmax(s))).sum(-1)

    def sigmoid(x):
        return 1 / (1 + np.exp(-x))

    pt, ps = sigmoid(teacher / T), sigmoid(student / T)
    bernoulli_kl = (pt * np.log(pt / ps) + (1 - pt) * np.log((1 - pt) / (1 - ps))).mean(-1)
    words_s, words_t = rng.randn(3, 6, 4).astype(np.float32), rng.randn(3, 6, 4).astype(
        np.float32)
    word_mask = np.array([[1] * 6, [1] * 2 + [0] * 4, [1] * 4 + [0] * 2], np.int32)
    layers_s = [rng.randn(3, 6, 8).astype(np.float32) for _ in range(2)]
    layers_t = [rng.randn(3, 6, 8).astype(np.float32) for _ in range(2)]
    tokens = word_mask.sum(1)
    expected_hidden = np.mean([(((a - b) ** 2).mean(-1) * word_mask).sum(1) / tokens
                               for a, b in zip(layers_s, layers_t)], axis=0)
    with tf.Graph().as_default():
        got = _evaluate({
            "softmax": soft_target_loss(student, teacher, "softmax", T),
            "sigmoid": soft_target_loss(student, teacher, "sigmoid", T),
            "mse": soft_target_loss(student[:, :1], teacher[:, :1], "mse", T),
            "tokens": token_soft_target_loss(words_s, words_t, word_mask, T),
            "hidden": hidden_mse(layers_s, layers_t, word_mask),
            "same": soft_target_loss(teacher, teacher, "softmax", T)})
    np.testing.assert_allclose(got["softmax"], T * T * kl(teacher / T, student / T), rtol=1e-5)
    np.testing.assert_allclose(got["sigmoid"], T * T * bernoulli_kl, rtol=1e-4)
    np.testing.assert_allclose(got["mse"], (student[:, 0] - teacher[:, 0]) ** 2, rtol=1e-6)
    np.testing.assert_allclose(
        got["tokens"], T * T * (kl(words_t / T, words_s / T) * word_mask).sum(1), rtol=1e-5)
    np.testing.assert_allclose(got["hidden"], expected_hidden, rtol=1e-5)
    np.testing.assert_allclose(got["same"], 0.0, atol=1e-6)


def test_which_teacher_layers_a_student_takes():
    assert teacher_layers(3, 12, "spread") == (0, 6, 11)
    assert teacher_layers(4, 12, "spread") == (0, 4, 7, 11)
    assert teacher_layers(3, 12, "first") == (0, 1, 2)
    assert teacher_layers(12, 12, "spread") == tuple(range(12))
    assert teacher_layers(1, 12, "spread") == (0,)
    assert source_name("bert/encoder/layer_2/output/dense/kernel", (0, 6, 11)) == \
        "bert/encoder/layer_11/output/dense/kernel"
    for name in ("bert/embeddings/word_embeddings", "bert/pooler/dense/kernel",
                 "output_weights", "crf/transitions"):
        assert source_name(name, (0, 6, 11)) == name
    assert source_name("bert/encoder/layer_2/output/dense/kernel", None) == \
        "bert/encoder/layer_2/output/dense/kernel"


# --- the training graph -----------------------------------------------------------------

def _teacher_checkpoint(folder: str) -> str:
    return os.path.join(folder, "model.ckpt-3")


def distill_task(s: Setup, kind: str, losses: DistillationLosses, layers: int,
                 selection: str = "spread") -> tuple:
    """(DistillationTask built as `bert-ad distill` builds it, dropout off; the
    student's training rows: gold and transfer windows / texts)."""
    config_file, vocab = ((s.config_file, s.vocab_file) if kind == "classifier"
                          else (s.ner_config, s.ner_vocab))
    config = BertConfig(**dict(BertConfig.from_json_file(config_file).to_dict(),
                               hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
    encoder = TextEncoder(config, FullTokenizer(vocab, True), vocab, True, SEQ,
                          compute_dtype=tf.float32)
    student_encoder = dataclasses.replace(encoder, config=student_config(config, layers))
    if kind == "classifier":
        labels = ["0", "1"]
        student = ClassificationTask(student_encoder, processors.get_task("sentiment"),
                                     SAMPLE_SENTIMENT).with_labels(labels)
    else:
        labels = TAGS
        student = TokenClassificationTask(student_encoder, ConllFormat(s.ner_data),
                                          doc_stride=8, use_crf=True).with_labels(labels)
    folder = s.classifier_teacher if kind == "classifier" else s.ner_teacher
    layer_map = teacher_layers(layers, TEACHER_LAYERS, selection)
    task = DistillationTask(
        student, teacher_task(student, encoder, use_crf=True).with_labels(labels),
        _teacher_checkpoint(folder), labels, "labels.txt",
        StudentStart(_teacher_checkpoint(folder), layer_map), losses, layer_map)
    task = task.with_labels(labels)
    gold = student.batches(student.read("train")).examples
    return task, concatenate(gold, without_labels(gold))


LOSSES = DistillationLosses(temperature=2.0, soft_weight=1.0, hard_weight=0.5,
                            hidden_weight=0.3)


def _build(task, n_towers: int) -> tuple:
    plan = plan_devices(n_towers, cuda_visible_devices="")
    return plan, build_train_graph(
        plan, task.feature_spec, lambda f, i: task.build_model(f, True)["loss"],
        TrainSettings(learning_rate=1e-3, num_train_steps=100, seed=1))


@pytest.fixture(scope="module")
def distill_graphs(setup):
    """(the tasks of LOSSES and a 2-layer student {kind: (task, examples)}, their
    training graphs by (kind, towers)): each graph built once for the tests that use it
    (StepGraphs: a step starts afresh from its checkpoint, as a new graph would)."""
    tasks = {kind: distill_task(setup, kind, LOSSES, layers=2) for kind in ("classifier", "ner")}
    graphs = StepGraphs(lambda kind, n_towers: _build(tasks[kind][0], n_towers))
    yield tasks, graphs
    graphs.close()


@pytest.mark.parametrize("kind", ["classifier", "ner"])
def test_towers_equal_one_tower_with_the_whole_batch(distill_graphs, tmp_path, kind):
    tasks, graphs = distill_graphs
    task, examples = tasks[kind]
    gold_rows = len(examples) // 2
    # Each tower holds gold rows and transfer rows (no gold label), unevenly.
    halves = [np.array([0, 1, 2, gold_rows + 3]), np.array([4, gold_rows, gold_rows + 1,
                                                             gold_rows + 2])]

    # The 1-tower graph built once for the initial weights and its step.
    one_tower = graphs(kind, 1)
    checkpoint = one_tower.save_initial_weights(str(tmp_path / "init.ckpt"))
    one = one_tower.step(checkpoint,
                         [[make_batch(examples, np.concatenate(halves), "dynamic")]])
    two = train_one_step(lambda: _build(task, 2), checkpoint,
                         [[make_batch(examples, h, "dynamic") for h in halves]])
    assert one.loss > 0.01
    assert abs(two.loss - one.loss) <= 1e-5 * one.loss
    assert abs(two.grad_norm - one.grad_norm) <= 1e-5 * one.grad_norm
    assert_weights_moved(checkpoint, one.weights)
    assert_same_weights(two.weights, one.weights)
    assert not [name for name in one.weights if "teacher" in name]


def _state(graph, train, batches: dict, fetch_names, session, initialize) -> dict:
    """The loss of each of `batches` ({name: batch}) and the values of some variables
    of `graph` (its TrainGraph `train`), as training starts: `initialize` (every
    variable's initializer) run in `session` first."""
    with graph.as_default():
        every = {v.op.name: v for v in tf.global_variables() + tf.local_variables()}
        state = {"global": [v.op.name for v in tf.global_variables()],
                 "trainable": [v.op.name for v in tf.trainable_variables()],
                 "local": [v.op.name for v in tf.local_variables()]}
    session.run(initialize)
    for name, batch in batches.items():
        feed = {train.placeholders[0][k]: batch[k] for k in train.placeholders[0]}
        state[name] = float(session.run(train.loss, feed))
    state.update(session.run({name: every[name] for name in fetch_names}))
    return state


def _initial_state(task, batches: dict, fetch_names) -> dict:
    """The loss of each of `batches` ({name: batch}) and the values of some variables,
    as training starts."""
    with tf.Graph().as_default() as graph:
        plan = plan_devices(1, cuda_visible_devices="")
        train = build_train_graph(plan, task.feature_spec,
                                  lambda f, i: task.build_model(f, True)["loss"],
                                  TrainSettings(learning_rate=1e-3, num_train_steps=10))
        initialize = [tf.global_variables_initializer(), tf.local_variables_initializer()]
        with tf.Session() as session:
            return _state(graph, train, batches, fetch_names, session, initialize)


def test_the_teacher_is_frozen_and_loaded_and_the_student_starts_from_its_layers(
        setup, distill_graphs):
    every_term = DistillationLosses(soft_weight=1.0, hard_weight=1.0, hidden_weight=1.0)
    checkpoint = _teacher_checkpoint(setup.classifier_teacher)
    kernel = "bert/encoder/layer_{}/output/dense/kernel"
    # The 2-layer student of the towers test (LOSSES: every term on too), its graph
    # built once for both tests.
    tasks, graphs = distill_graphs
    _, examples = tasks["classifier"]
    gold_rows = len(examples) // 2
    gold = make_batch(examples, np.arange(8), "dynamic")
    transfer = make_batch(examples, gold_rows + np.arange(8), "dynamic")  # the same texts
    one_tower = graphs("classifier", 1)
    state = _state(one_tower.graph, one_tower.train, {"gold": gold}, [
        "teacher/output_weights", kernel.format(1), "teacher/" + kernel.format(2)],
        one_tower.session, one_tower.initialize)
    assert not [name for name in state["global"] + state["trainable"] if "teacher" in name]
    assert "teacher/bert/encoder/layer_2/output/dense/kernel" in state["local"]
    assert kernel.format(2) not in state["global"]     # a student of 2 layers
    np.testing.assert_array_equal(state["teacher/output_weights"],
                                  tf.train.load_variable(checkpoint, "output_weights"))
    teacher_last = tf.train.load_variable(checkpoint, kernel.format(2))
    np.testing.assert_array_equal(state["teacher/" + kernel.format(2)], teacher_last)
    # spread: the student's layer 1 is the teacher's last (2 of 3: layers 0 and 2).
    np.testing.assert_array_equal(state[kernel.format(1)], teacher_last)
    assert state["gold"] > 1e-3
    # A student of every teacher layer is the teacher: from the teacher's outputs and
    # layers it has nothing to learn at the start; the gold labels' loss is all there
    # is, and rows without a gold label (transfer text) have none.
    whole, _ = distill_task(setup, "classifier", every_term, layers=TEACHER_LAYERS,
                            selection="first")
    hard_only, _ = distill_task(setup, "classifier", DistillationLosses(
        soft_weight=0.0, hard_weight=1.0), layers=TEACHER_LAYERS, selection="first")
    losses = _initial_state(whole, {"gold": gold, "transfer": transfer}, [])
    assert losses["transfer"] < 1e-6
    assert losses["gold"] > 1e-3
    assert losses["gold"] == pytest.approx(
        _initial_state(hard_only, {"gold": gold}, [])["gold"], rel=1e-5)


# --- bert-ad distill end to end ---------------------------------------------------------

def _variables(checkpoint: str) -> dict:
    return {name: shape for name, shape in list_checkpoint_variables(checkpoint)
            if not name.endswith(("/adam_m", "/adam_v")) and name not in (
                "global_step", "examples_seen")}


def _lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def classifier_flags(s: Setup, output_dir: str, **changes) -> dict:
    flags = {"task_name": "sentiment", "data_dir": SAMPLE_SENTIMENT,
             "vocab_file": s.vocab_file, "bert_config_file": s.config_file,
             "max_seq_length": SEQ, "train_batch_size": 4, "eval_batch_size": 4,
             "predict_batch_size": 4, "learning_rate": 1e-3, "num_train_epochs": 1,
             "output_dir": output_dir, "teacher_dir": s.classifier_teacher,
             "student_layers": 2, "do_train": True}
    flags.update(changes)
    return flags


def ner_flags(s: Setup, output_dir: str, **changes) -> dict:
    flags = {"data_dir": s.ner_data, "vocab_file": s.ner_vocab, "bert_config_file": s.ner_config,
             "max_seq_length": 16, "train_batch_size": 4, "eval_batch_size": 4,
             "predict_batch_size": 4, "learning_rate": 1e-3, "num_train_epochs": 1,
             "output_dir": output_dir, "teacher_dir": s.ner_teacher, "student_layers": 2,
             "do_train": True}
    flags.update(changes)
    return flags


@pytest.fixture(scope="module")
def distilled(setup):
    """A classifier and a token classifier distilled on 2 towers with transfer text,
    each then scored by the student's own command on a copy of its folder."""
    out = {}
    for kind, flags, command in (
            ("classifier", classifier_flags(setup, os.path.join(setup.root, "student"),
                                            transfer_file=setup.transfer_file),
             "run_classifier_mgpu.py"),
            ("ner", ner_flags(setup, os.path.join(setup.root, "ner_student"),
                              transfer_file=setup.ner_transfer), "run_ner_mgpu.py")):
        output_dir = flags["output_dir"]
        flags.update(n_gpus=2, hidden_weight=0.5, do_eval=True, do_predict=True,
                     do_export=True, export_dir=os.path.join(setup.root, kind + "_export"))
        run = run_launcher_in_process(["distill_mgpu.py"] + flag_args(flags))
        assert run.returncode == 0, run.describe()
        rescored = output_dir + "_rescored"
        shutil.copytree(output_dir, rescored, ignore=shutil.ignore_patterns(
            "predict*", "eval_results*", "export"))
        own = {key: flags[key] for key in ("data_dir", "vocab_file", "max_seq_length",
                                           "predict_batch_size", "task_name") if key in flags}
        again = run_launcher_in_process([command] + flag_args(dict(
            own, output_dir=rescored, do_predict=True,
            bert_config_file=os.path.join(output_dir, "bert_config.json"))))
        assert again.returncode == 0, again.describe()
        out[kind] = (output_dir, rescored, flags, run)
    return out


@pytest.mark.parametrize("kind", ["classifier", "ner"])
def test_the_student_folder_is_an_ordinary_fine_tuned_model(setup, distilled, kind):
    output_dir, rescored, flags, run = distilled[kind]
    teacher_config = BertConfig.from_json_file(flags["bert_config_file"])
    with open(os.path.join(output_dir, "bert_config.json")) as f:
        assert json.load(f) == dict(teacher_config.to_dict(), num_hidden_layers=2)
    checkpoint = tf.train.latest_checkpoint(output_dir)
    saved = _variables(checkpoint)
    expected = dict(google_variable_shapes(student_config(teacher_config, 2)))
    labels = ["0", "1"] if kind == "classifier" else TAGS
    expected.update(output_weights=[len(labels), 32], output_bias=[len(labels)])
    if kind == "ner":
        expected["crf/transitions"] = [len(TAGS), len(TAGS)]
    assert saved == expected
    assert _lines(os.path.join(output_dir, "labels.txt")) == labels  # the teacher's order
    record = json.load(open(os.path.join(output_dir, "distillation.json")))
    assert record["student_start"] == "layers 0, 2 of the teacher's 3"
    assert "labelled rows and" in run.stderr   # the transfer text was read
    # Scored by `bert-ad classifier` / `bert-ad ner`: the same predictions.
    for name in ("predict.txt",) + (("test_results.tsv",) if kind == "classifier" else ()):
        assert _lines(os.path.join(rescored, name)) == _lines(os.path.join(output_dir, name))
    test_file = ("test.tsv" if kind == "classifier" else "test.txt")
    rows = (len(_lines(os.path.join(SAMPLE_SENTIMENT, test_file))) if kind == "classifier"
            else len(_lines(os.path.join(setup.ner_data, test_file))))
    assert len(_lines(os.path.join(output_dir, "predict.txt"))) == rows
    export = json.load(open(os.path.join(flags["export_dir"], "assets.extra", "export.json")))
    assert export["task"] == ("classifier" if kind == "classifier" else "token_classification")
    with open(os.path.join(flags["export_dir"], "assets.extra", "bert_config.json")) as f:
        assert json.load(f)["num_hidden_layers"] == 2
    assert os.path.isfile(os.path.join(output_dir, "eval_results.txt"))


# --- bad input ----------------------------------------------------------------------------

BAD_CASES = ("teacher_without_checkpoint", "teacher_of_another_task",
             "pretrained_teacher", "student_layers_0", "student_layers_above_teacher",
             "hidden_size_with_hidden_weight", "labels_differ", "init_checkpoint",
             "transfer_pair_for_single_text")


def _bad_cases(s: Setup) -> dict:
    root = os.path.join(s.root, "bad")
    empty = os.path.join(root, "empty_teacher")
    os.makedirs(empty)
    write(os.path.join(empty, "labels.txt"), "0\n1\n")
    pretrained = save_initial_checkpoint(os.path.join(root, "pretrained", "bert_model.ckpt"),
                                         BertConfig.from_json_file(s.config_file), seed=1)
    narrow = write_config(os.path.join(root, "narrow.json"),
                          BertConfig.from_json_file(s.config_file).vocab_size, hidden_size=16,
                          num_attention_heads=2)
    labels_dir = os.path.join(root, "three_labels")
    os.makedirs(labels_dir)
    shutil.copy(os.path.join(SAMPLE_SENTIMENT, "dev.tsv"), labels_dir)
    train = _lines(os.path.join(SAMPLE_SENTIMENT, "train.tsv"))
    train[6] = "2\t" + train[6].split("\t", 1)[1]
    write(os.path.join(labels_dir, "train.tsv"), "".join(line + "\n" for line in train))
    pairs = write(os.path.join(root, "pairs.txt"), "a good film\tquite so\n")
    cases = {}

    def add(name, expected, **changes):
        output_dir = os.path.join(root, name)
        flags = classifier_flags(s, output_dir, **changes)
        cases[name] = (["distill_mgpu.py"] + flag_args(flags), output_dir, expected)

    add("teacher_without_checkpoint", [f"--teacher_dir={empty} holds no model.ckpt-N"],
        teacher_dir=empty)
    add("teacher_of_another_task",
        [f"--teacher_dir={s.ner_teacher} holds a fine-tuned token classifier",
         "crf/transitions", "--teacher_task=ner"],
        teacher_dir=s.ner_teacher, teacher_task="classifier")
    add("pretrained_teacher", ["a checkpoint without a task head (output_weights)",
                               "fine-tune it first"],
        teacher_dir=None, teacher_checkpoint=pretrained)
    add("student_layers_0", ["--student_layers=0 must be at least 1"], student_layers=0)
    add("student_layers_above_teacher",
        [f"--student_layers=4 must be between 1 and the teacher's {TEACHER_LAYERS} layers"],
        student_layers=4)
    add("hidden_size_with_hidden_weight",
        ["--hidden_weight=1.0 matches the student's layers", "hidden_size=16",
         "the teacher 32"],
        student_layers=None, student_config_file=narrow, hidden_weight=1.0)
    add("labels_differ", ["train.tsv line 7: label '2' is not one of the teacher's labels",
                          "labels.txt"],
        data_dir=labels_dir)
    add("init_checkpoint", ["--init_checkpoint=", "does not apply to distill"],
        init_checkpoint=pretrained)
    add("transfer_pair_for_single_text",
        [f"--transfer_file={pairs} line 1 holds a tab"], transfer_file=pairs)
    return cases


@pytest.fixture(scope="module")
def bad_runs(setup):
    return run_bad_inputs_in_process(_bad_cases(setup), BAD_CASES,
                                     through_launcher="teacher_without_checkpoint")


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_error_line_and_changes_nothing(bad_runs, case):
    bad_runs[case].assert_refused()

