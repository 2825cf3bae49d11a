"""Token classification on N towers: bert_ad/tasks/token_classification.py, run_ner_mgpu.py.

A tiny BERT (configs/tiny_bert_config.json, 2 layers of 32) on a tiny
synthetic NER language written here: persons, places and organisations of
one or two words among filler words, "washington" split into two WordPieces,
an out-of-vocabulary word, and "jordan", tagged a person or a place at
random, so no model is perfect. Some sentences are longer than
--max_seq_length and become several windows.

  * one step on 2 towers x B rows equals 1 tower x 2B (softmax and CRF);
  * run_ner_mgpu.py end to end (train on 2 towers -> predict -> eval):
    predict.txt lines up with the input line for line, predict_entities.jsonl
    holds its entities, eval_results.txt equals entity_metrics of predict.txt
    against the gold file; scoring again on 1 tower gives the same tags;
  * bad input is one `error:` line naming the file and line.
"""

from __future__ import annotations

import json
import logging
import os
import random
import re
import subprocess
import sys

import numpy as np
import pytest

from bert_ad.cli import ner
from bert_ad.cli.runner import parse_flags
from bert_ad.compat import tf
from bert_ad.data.batching import make_batch
from bert_ad.data.conll import read_conll
from bert_ad.data.tag_schemes import span_records
from bert_ad.data.tokenization import FullTokenizer
from bert_ad.errors import UserError
from bert_ad.files import read_key_values
from bert_ad.metrics.entities import entity_metrics
from bert_ad.model.heads import TOKEN_FEATURE_SPEC
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.tasks.base import TextEncoder
from bert_ad.tasks.token_classification import ConllFormat, TokenClassificationTask
from helpers import (Run, StepGraph, StepGraphs, assert_head_steps_at_multiplied_rate,
                     assert_same_weights, assert_weights_moved, run_launcher_in_process,
                     train_one_step)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAUNCHER = os.path.join(REPO, "run_ner_mgpu.py")
TIMEOUT = 300

# ---------------------------------------------------------------------------
# The tiny language.

ENTITIES = {"PER": ["alice", "bob", "carol", "washington"],
            "LOC": ["paris", "rome", "new york", "kuala lumpur"],
            "ORG": ["acme", "globex", "united nations"]}
FILLER = ["the", "a", "went", "to", "met", "in", "visited", "works", "for", "and",
          "said", "today", "."]
OUT_OF_VOCABULARY = "zzz"
# "washington" is two pieces: its tag sits on "wash".
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "wash", "##ington", "jordan"]
         + sorted({w for names in ENTITIES.values() for name in names
                   for w in name.split()} - {"washington"})
         + FILLER)
MAX_SEQ_LENGTH = 16   # 14 pieces a window: sentences of 20-30 words need several
TOWERS, BATCH = 2, 3


def make_sentences(count: int, seed: int, long_every: int) -> list:
    """`count` sentences of (word, tag); every long_every-th one 20-30 words."""
    rng = random.Random(seed)
    sentences = []
    for index in range(count):
        length = rng.randint(20, 30) if index % long_every == 0 else rng.randint(3, 9)
        words = []
        while len(words) < length:
            draw = rng.random()
            if draw < 0.4:
                kind = ("PER", "LOC", "ORG")[int(draw / 0.4 * 3)]
                name = rng.choice(ENTITIES[kind]).split()
                words += [(w, ("B-" if i == 0 else "I-") + kind) for i, w in enumerate(name)]
            elif draw < 0.47:
                words.append(("jordan", "B-" + rng.choice(["PER", "LOC"])))
            else:
                words.append((rng.choice(FILLER + [OUT_OF_VOCABULARY]), "O"))
        sentences.append(words)
    return sentences


def conll_text(sentences, separator: str = "\t") -> str:
    return "".join("".join(f"{w}{separator}{t}\n" for w, t in s) + "\n" for s in sentences)


def write(path: str, text: str, newline: str = "\n") -> str:
    with open(path, "w", encoding="utf-8", newline=newline) as f:
        f.write(text)
    return path


class Setup:
    """Paths of the tiny model and data."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("ner"))
    s.vocab_file = write(os.path.join(s.root, "vocab.txt"), "\n".join(VOCAB) + "\n")
    with open(os.path.join(REPO, "configs", "tiny_bert_config.json")) as f:
        config = json.load(f)
    config.update(vocab_size=len(VOCAB), max_position_embeddings=32)
    s.config_file = write(os.path.join(s.root, "bert_config.json"), json.dumps(config))
    s.config = dict(config)
    s.data_dir = os.path.join(s.root, "data")
    os.makedirs(s.data_dir)
    s.train = make_sentences(60, seed=1, long_every=10)
    s.dev = make_sentences(13, seed=2, long_every=4)   # 13: divides by neither 3 nor 2
    write(os.path.join(s.data_dir, "train.txt"), conll_text(s.train))
    s.dev_file = write(os.path.join(s.data_dir, "dev.txt"), conll_text(s.dev))
    # The predict file of the 1-tower rescoring: tokens only, CRLF, a BOM,
    # -DOCSTART- lines and runs of blank lines, which predict.txt keeps.
    test = make_sentences(11, seed=3, long_every=3)
    lines = ["\ufeff-DOCSTART-", ""]
    for index, sentence in enumerate(test):
        lines += [w for w, _ in sentence] + [""] * (1 + index % 3)
        if index == 5:
            lines += ["-DOCSTART-", ""]
    s.tokens_only_file = write(os.path.join(s.root, "tokens_only.txt"),
                               "\n".join(lines) + "\n", newline="\r\n")
    s.flags = {"data_dir": s.data_dir, "vocab_file": s.vocab_file,
               "bert_config_file": s.config_file, "max_seq_length": MAX_SEQ_LENGTH,
               "n_gpus": TOWERS, "train_batch_size": BATCH, "eval_batch_size": BATCH,
               "predict_batch_size": BATCH, "learning_rate": 1e-3,
               "num_train_epochs": 4, "log_every_n_steps": 10, "seed": 5}
    return s


# ---------------------------------------------------------------------------
# 1. N towers x B == 1 tower x N*B, softmax and CRF.


def _task(s: Setup, use_crf: bool) -> tuple:
    """(task with its labels resolved, its train split) on the dropout-free model."""
    # One encoder layer (the launcher runs train two): every kind of variable a step
    # moves, in a graph that builds in about half the time.
    config = BertConfig(**dict(s.config, hidden_dropout_prob=0.0,
                               attention_probs_dropout_prob=0.0, num_hidden_layers=1))
    encoder = TextEncoder(config, FullTokenizer(s.vocab_file, do_lower_case=True),
                          s.vocab_file, True, MAX_SEQ_LENGTH, compute_dtype=tf.float32)
    task = TokenClassificationTask(encoder, ConllFormat(s.data_dir), doc_stride=7,
                                   use_crf=use_crf)
    train = task.read("train")
    task.labels = task.resolve_labels(train, None)
    task.check_labels(train)
    return task, train


def _build(task, n_towers: int, multipliers: tuple = ()) -> tuple:
    plan = plan_devices(n_towers, cuda_visible_devices="")
    graph = build_train_graph(
        plan, TOKEN_FEATURE_SPEC, lambda f, i: task.build_model(f, True)["loss"],
        TrainSettings(learning_rate=1e-3, num_train_steps=100, seed=1,
                      learning_rate_multipliers=multipliers))
    return plan, graph


@pytest.fixture(scope="module")
def step_graphs(setup):
    """({use_crf: (task, train split)}, their 1-tower training graphs by use_crf): each
    built once for the tests that take steps of it (the CRF's for the towers test and
    the head's learning rate; StepGraph: a step starts afresh from its checkpoint)."""
    tasks = {use_crf: _task(setup, use_crf) for use_crf in (False, True)}
    graphs = StepGraphs(lambda use_crf: _build(tasks[use_crf][0], 1))
    yield tasks, graphs
    graphs.close()


@pytest.mark.parametrize("use_crf", [False, True], ids=["softmax", "crf"])
def test_two_towers_equal_one_tower_with_the_whole_batch(step_graphs, tmp_path, use_crf):
    tasks, graphs = step_graphs
    task, train = tasks[use_crf]
    examples = task.features(train).examples
    # 4 short windows and 4 long ones (windows of long sentences among them):
    # the first tower pads to 8 pieces, the second and the single tower to 16.
    short = np.nonzero(examples.lengths <= 8)[0][:4]
    long = np.nonzero(examples.lengths > 8)[0][:4]
    rows = np.concatenate([short, long])
    halves = [short, long]
    assert [make_batch(examples, h, "dynamic")["input_ids"].shape[1] for h in halves] \
        == [8, 16]
    assert len(set(examples.lengths[rows])) > 3

    one_tower = graphs(use_crf)
    checkpoint = one_tower.save_initial_weights(str(tmp_path / "init.ckpt"))
    one = one_tower.step(checkpoint, [[make_batch(examples, rows, "dynamic")]])
    two = train_one_step(lambda: _build(task, 2), checkpoint,
                         [[make_batch(examples, h, "dynamic") for h in halves]])
    assert two.global_step == one.global_step == 1
    assert abs(two.loss - one.loss) <= 1e-5 * abs(one.loss)
    assert abs(two.grad_norm - one.grad_norm) <= 1e-5 * one.grad_norm
    assert_weights_moved(checkpoint, one.weights, "bert/encoder/layer_0/output/dense/kernel:0")
    assert_weights_moved(checkpoint, one.weights, "output_weights:0")
    if use_crf:
        assert_weights_moved(checkpoint, one.weights, "crf/transitions:0")
    assert_same_weights(two.weights, one.weights)
    # The comparison can fail: one other row, other weights.
    other = one_tower.step(checkpoint,
                           [[make_batch(examples, np.append(rows[:-1], rows[-1] + 1),
                                        "dynamic")]])
    with pytest.raises(AssertionError):
        assert_same_weights(other.weights, one.weights)
    # The loss is the mean over windows of each window's negative log-likelihood:
    # at the start about log(tags) per word for a softmax (weights near 0).
    words = sum(int(examples.columns["word_mask"][r].sum()) for r in rows)
    assert one.loss == pytest.approx(words / len(rows) * np.log(len(task.labels)), rel=0.1)


def test_the_head_learns_at_the_multiplied_rate(setup, step_graphs, tmp_path):
    """--head_learning_rate_multiplier: the task asks the optimizer for factor x the
    learning rate on the head (output layer, CRF transitions); every encoder
    variable takes the same step as without it."""
    task, train = _task(setup, use_crf=True)
    task.head_learning_rate_multiplier = 10.0
    batch = [[make_batch(task.features(train).examples, [0, 1, 2, 3], "dynamic")]]
    # Without the multipliers: the CRF graph of the towers test (the same model and
    # settings); with them, a graph of the task's learning_rate_multipliers().
    _, graphs = step_graphs
    with StepGraph(lambda: _build(
            task, 1, tuple(task.learning_rate_multipliers().items()))) as faster:
        assert_head_steps_at_multiplied_rate(
            graphs(True), faster, batch,
            ["output_weights:0", "output_bias:0", "crf/transitions:0"], 10.0,
            str(tmp_path / "init.ckpt"))


# ---------------------------------------------------------------------------
# 2. The command line, end to end.


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    env["CUDA_VISIBLE_DEVICES"] = "-1"
    return env


def flag_args(flags: dict) -> list:
    return [f"--{k}" if v is True else f"--{k}={v}" for k, v in flags.items()
            if v is not None]


def run_cli(flags: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, LAUNCHER] + flag_args(flags), cwd=REPO,
                          env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=TIMEOUT)


def run_in_this_process(flags: dict) -> Run:
    """run_cli's run through the same entry point in this process
    (helpers.run_launcher_in_process), without a TensorFlow import."""
    return run_launcher_in_process([LAUNCHER] + flag_args(flags))


def require_ok(run):
    assert run.returncode == 0, run.stderr[-4000:]
    return run


def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def read_results(path: str) -> dict:
    results = {}
    for line in read_lines(path):
        match = re.fullmatch(r"(\S+) = (\S+)", line)
        assert match, line
        results[match.group(1)] = match.group(2)
    return results


def predicted_sentences(path: str) -> list:
    """[(token, tag)] per sentence of a predict.txt."""
    return [list(zip(s.tokens, s.tags)) for s in read_conll(path).sentences]


@pytest.fixture(scope="module")
def trained(setup):
    """Train on 2 towers, predict and evaluate dev, softmax and CRF, through
    run_ner_mgpu.py's entry point in this process (no TensorFlow import a run; the
    launcher as a user types it, a new process, is test_the_command_line_prints_...)."""
    runs = {}
    for name, crf in (("softmax", None), ("crf", True)):
        flags = dict(setup.flags, output_dir=os.path.join(setup.root, name),
                     do_train=True, do_predict=True, do_eval=True,
                     predict_file=setup.dev_file, use_crf=crf)
        runs[name] = (flags["output_dir"], require_ok(run_in_this_process(flags)))
    return runs


@pytest.fixture(scope="module")
def rescored(setup, trained):
    """The softmax checkpoint scored again on 1 tower: dev, and a tokens-only file."""
    trained_dir = trained["softmax"][0]
    runs = {}
    for name, predict_file in (("dev_one_tower", setup.dev_file),
                               ("tokens_only", setup.tokens_only_file)):
        flags = dict(setup.flags, output_dir=os.path.join(setup.root, name),
                     init_checkpoint=trained_dir, do_predict=True,
                     predict_file=predict_file, n_gpus=1, predict_batch_size=5,
                     labels=",".join(read_lines(os.path.join(trained_dir, "labels.txt"))))
        runs[name] = (flags["output_dir"], require_ok(run_in_this_process(flags)))
    return runs


def _windows_logged(stderr: str, split: str) -> tuple:
    """(windows, sentences split) from the `<split>: N sentences -> W windows` log line."""
    match = re.search(split + r": (\d+) sentences -> (\d+) windows .*\((\d+) sentences split",
                      stderr)
    assert match, stderr[-3000:]
    return int(match.group(2)), int(match.group(3))


@pytest.mark.parametrize("head", ["softmax", "crf"])
def test_predict_txt_lines_up_with_the_input(setup, trained, head):
    output_dir, run = trained[head]
    windows, split = _windows_logged(run.stderr, "predict")
    # Long sentences became several windows; neither the 13 sentences nor the
    # windows divide by the global batch of 2 towers x 3.
    assert split >= 3 and windows % (TOWERS * BATCH) and 13 % (TOWERS * BATCH)
    gold = read_lines(setup.dev_file)
    predicted = read_lines(os.path.join(output_dir, "predict.txt"))
    assert len(predicted) == len(gold)
    for gold_line, line in zip(gold, predicted):
        if not gold_line:
            assert line == ""
        else:
            assert line.split("\t")[0] == gold_line.split("\t")[0]
            assert re.fullmatch(r"(O|[BI]-(PER|LOC|ORG))", line.split("\t")[1]), line


@pytest.mark.parametrize("head", ["softmax", "crf"])
def test_eval_results_are_the_entity_metrics_of_predict_txt(setup, trained, head):
    output_dir, _ = trained[head]
    results = read_results(os.path.join(output_dir, "eval_results.txt"))
    predicted = [[t for _, t in s] for s in predicted_sentences(
        os.path.join(output_dir, "predict.txt"))]
    gold = [[t for _, t in s] for s in setup.dev]
    expected = entity_metrics(gold, predicted, types=["LOC", "ORG", "PER"])
    for key, value in expected.items():
        assert float(results[key]) == pytest.approx(value, abs=1e-6), key
    for key in ("eval_loss", "global_step", "eval_sentences", "eval_windows"):
        assert key in results
    assert int(results["eval_sentences"]) == 13
    # It learnt the lexicon, and the random "jordan" keeps it from perfection,
    # so the comparison above involved wrong tags too.
    assert 0.6 < expected["eval_f1"] < 1.0, expected
    train_results = read_results(os.path.join(output_dir, "train_results.txt"))
    assert results["global_step"] == train_results["global_step"]


def test_predict_entities_jsonl_holds_the_entities_of_predict_txt(setup, trained):
    output_dir, _ = trained["softmax"]
    sentences = predicted_sentences(os.path.join(output_dir, "predict.txt"))
    records = [json.loads(line) for line in
               read_lines(os.path.join(output_dir, "predict_entities.jsonl"))]
    assert len(records) == len(sentences) == 13
    found = 0
    first_lines = [s.line_numbers[0] for s in read_conll(setup.dev_file).sentences]
    for index, (record, sentence) in enumerate(zip(records, sentences)):
        tokens, tags = [w for w, _ in sentence], [t for _, t in sentence]
        assert record == {"sentence": index, "line": first_lines[index],
                          "entities": span_records(tokens, tags, " ")}
        found += len(record["entities"])
        for entity in record["entities"]:
            assert entity["text"] == " ".join(tokens[entity["start"]:entity["end"]])
    assert found > 20


def test_crf_learns_transitions(trained):
    """The CRF's transitions moved far from their init, the right way: O -> I-X
    (never seen) below B-X -> I-X."""
    output_dir, _ = trained["crf"]
    checkpoint = tf.train.latest_checkpoint(output_dir)
    transitions = tf.train.load_variable(checkpoint, "crf/transitions")
    labels = read_lines(os.path.join(output_dir, "labels.txt"))
    assert transitions.shape == (len(labels), len(labels))
    # Initialised with stddev 0.02; --head_learning_rate_multiplier (default 100)
    # lets them move in a fine-tuning run's few steps.
    assert np.abs(transitions).max() > 0.5
    outside = labels.index("O")
    for kind in ("LOC", "ORG"):   # the types with two-word names
        inside = labels.index(f"I-{kind}")
        assert transitions[outside, inside] < transitions[labels.index(f"B-{kind}"), inside]


def test_scoring_again_on_one_tower_gives_the_same_tags(trained, rescored):
    two_towers = read_lines(os.path.join(trained["softmax"][0], "predict.txt"))
    one_tower = read_lines(os.path.join(rescored["dev_one_tower"][0], "predict.txt"))
    assert one_tower == two_towers


def test_a_tokens_only_file_with_crlf_and_docstart_lines_up(setup, rescored):
    output_dir, run = rescored["tokens_only"]
    assert _windows_logged(run.stderr, "predict")[1] >= 3
    with open(setup.tokens_only_file, encoding="utf-8-sig", newline="") as f:
        source = f.read().split("\r\n")[:-1]
    predicted = read_lines(os.path.join(output_dir, "predict.txt"))
    assert len(predicted) == len(source)
    for source_line, line in zip(source, predicted):
        if source_line in ("", "-DOCSTART-"):
            assert line == source_line
        else:
            token, tag = line.split(" ")   # the input has no tab: a space
            assert token == source_line and tag in ("O", "B-PER", "I-PER", "B-LOC",
                                                    "I-LOC", "B-ORG", "I-ORG")


# ---------------------------------------------------------------------------
# 3. Bad input: one line naming the file and line, nothing written.


def run_in_process(setup, output_dir: str, **changes) -> None:
    flags = dict(setup.flags, output_dir=output_dir, do_train=True, do_eval=True,
                 do_predict=True)
    flags.update(changes)
    f = parse_flags(ner.define_flags, ["run_ner_mgpu.py"] + flag_args(flags), "",
                    ner.__doc__)
    ner.main(f)


GOOD_TRAIN = "alice\tB-PER\nwent\tO\nto\tO\nparis\tB-LOC\n\nacme\tB-ORG\nsaid\tO\n\n"
GOOD_DEV = "bob\tB-PER\nin\tO\nrome\tB-LOC\n\n"


@pytest.mark.parametrize("files, message", [
    ({"train.txt": "alice\tB-PER\nwent\tO\n\nto\nparis\tB-LOC\n"},
     r"train.txt line 4: token 'to' has no tag"),
    ({"train.txt": GOOD_TRAIN.replace("went\tO", "went\tX-LOC")},
     r"train.txt line 2: tag 'X-LOC' is not a BIO tag"),
    ({"dev.txt": GOOD_DEV.replace("in\tO", "in\tS-LOC")},
     r"dev.txt line 2: tag 'S-LOC' is not a BIO tag"),
    ({"dev.txt": ""}, r"dev.txt is empty"),
    ({"test.txt": "\n-DOCSTART- -X- O\n\n\n"}, r"test.txt has no sentence"),
    ({"train.txt": GOOD_TRAIN.replace("to\tO", "to\tTO\tO")},
     r"train.txt line 3: 3 columns, but line 1 has 2"),
])
def test_bad_input_is_one_line_naming_file_and_line(setup, tmp_path, files, message):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name, text in dict({"train.txt": GOOD_TRAIN, "dev.txt": GOOD_DEV,
                            "test.txt": GOOD_DEV}, **files).items():
        (data_dir / name).write_text(text, encoding="utf-8")
    output_dir = tmp_path / "out"
    with pytest.raises(UserError, match=message) as raised:
        run_in_process(setup, str(output_dir), data_dir=str(data_dir))
    assert "\n" not in str(raised.value)
    assert not output_dir.exists()


def test_gold_tags_training_never_saw_are_scored_and_said_once(setup, tmp_path, caplog):
    """Issue 31 #16: the advice "add it to --labels" was refused in turn (labels.txt
    is fixed once trained). Now a dev file's unseen tags are scored (their
    entities count as missed, with figures of their own) and named in one
    warning; a predict file's gold tags are not used at all."""
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    dev = GOOD_DEV.replace("bob\tB-PER", "bob\tB-MISC")
    for name, text in {"train.txt": GOOD_TRAIN, "dev.txt": dev,
                       "test.txt": "x\tO\n\n" + dev}.items():
        (data_dir / name).write_text(text, encoding="utf-8")
    output_dir = tmp_path / "out"
    caplog.set_level(logging.INFO, logger="bert_ad")
    # One tower: what is checked here does not depend on the towers (2 towers are
    # trained by `trained`), and a 1-tower graph builds in about half the time.
    run_in_process(setup, str(output_dir), data_dir=str(data_dir), n_gpus=1)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [f"warning: {data_dir / 'dev.txt'} has tags never seen in training: "
                        "B-MISC (1 tokens); the model cannot predict them, so their "
                        "entities count as missed in eval_results.txt (retrain with them in "
                        "the training file, or --labels when training, to learn them)"]
    results = read_key_values(str(output_dir / "eval_results.txt"))
    # The MISC entity is in the figures: one of two gold entities, never found.
    assert float(results["eval_MISC_recall"]) == 0.0
    assert int(results["eval_MISC_support"]) == 1
    assert float(results["eval_recall"]) <= 0.5
    with open(output_dir / "predict.txt", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == len(("x\tO\n\n" + dev).splitlines())


def test_the_command_line_prints_one_error_line_and_exits_2(setup, tmp_path):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "train.txt").write_text(GOOD_TRAIN, encoding="utf-8")
    (data_dir / "dev.txt").write_text(GOOD_DEV.replace("in\tO", "in\tO\tO"),
                                      encoding="utf-8")
    run = run_cli(dict(setup.flags, data_dir=str(data_dir), do_train=True, do_eval=True,
                       output_dir=str(tmp_path / "out")))
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: {data_dir / 'dev.txt'} line 2: 3 columns, but line 1 has 2; "
                      "every token line needs the same columns"], run.stderr[-2000:]
    assert "Traceback" not in run.stderr
    assert not (tmp_path / "out").exists()
