"""rewrite_finetune.py end to end, run as a user runs it.

Texts: the bundled data/sample_sentiment sentences and data/sample_corpus
news sentences (no download), made into rewrite rows here; a vocab of their
words and a tiny BERT (hidden 32, 2 layers). The flow: span-masked
pretraining data (create_pretraining_data --mode=rewrite), 3 pretraining
steps, then one fine-tuning run from that checkpoint on 2 CPU towers that
trains, evaluates and predicts with --rank; its files are checked line by
line against the input and recomputed here. Every run uses the launcher's entry
point in this process (helpers.run_launcher_in_process: no TensorFlow import of its
own); one bad-input run also goes through rewrite_finetune.py as a user types it
(run_bad_inputs_in_process), and must end the same. The bad-input runs must each end
with one error line naming the file and line.
"""

from __future__ import annotations

import collections
import os
import re
import shutil

import numpy as np
import pytest

from helpers import (
    REPO, Run, create_pretraining_data, flag_args, run_bad_inputs_in_process,
    run_launcher_in_process, sample_sentiment_texts, tiny_model)
from bert_ad.data import rewrite_rows
from bert_ad.tasks.rewrite import ranking_metrics
from bert_ad.data.rewrite_format import parse_row, read_rows
from bert_ad.data.rewrite_rows import PrepareSettings
from bert_ad.data.tokenization import FullTokenizer

FINETUNE = os.path.join(REPO, "rewrite_finetune.py")
PRETRAIN = os.path.join(REPO, "run_pretraining_mgpu.py")
PRETRAIN_STEPS = 3


# ---------------------------------------------------------------------------
# Running commands


def in_process(launcher: str, **flags) -> Run:
    """A launcher's command in this process (run_launcher_in_process): the same entry
    point, without a TensorFlow import per run."""
    return run_launcher_in_process([launcher] + flag_args(flags))


# ---------------------------------------------------------------------------
# Data, vocab, model


def _texts() -> list:
    texts = sample_sentiment_texts()
    with open(os.path.join(REPO, "data", "sample_corpus", "en.txt"), encoding="utf-8") as f:
        texts += [line.strip() for line in f if line.strip()]
    return texts


class Setup:
    """Paths and common flags."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("rewrite_cli"))
    texts = _texts()
    raw = os.path.join(s.root, "texts.txt")
    with open(raw, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in texts))
    # A wide initialisation: rows get clearly different scores after a few steps.
    model = tiny_model(s.root, texts, initializer_range=1.0)
    s.vocab_file, s.config_file = model.vocab_file, model.config_file
    s.tokenizer = FullTokenizer(s.vocab_file, do_lower_case=True)
    s.data_dir = os.path.join(s.root, "data")
    rewrite_rows.prepare([raw], s.data_dir, s.tokenizer, PrepareSettings(
        negatives=2, dev_fraction=0.25, slots_per_text=2, seed=3))
    s.dev_file = os.path.join(s.data_dir, "dev.tsv")
    s.flags = dict(data_dir=s.data_dir, vocab_file=s.vocab_file,
                   bert_config_file=s.config_file, max_seq_length=64,
                   train_batch_size=4, eval_batch_size=5, predict_batch_size=5,
                   learning_rate=1e-3, num_train_epochs=1, log_every_n_steps=1,
                   save_checkpoints_steps=100)
    return s


@pytest.fixture(scope="module")
def pretrained(setup) -> str:
    """3 steps of span-masked pretraining on the training rows."""
    shards = os.path.join(setup.root, "span.tfrecord")
    assert create_pretraining_data([
        "create_pretraining_data.py", "--mode=rewrite",
        f"--input_file={os.path.join(setup.data_dir, 'train.tsv')}",
        f"--vocab_file={setup.vocab_file}", f"--output_file={shards}",
        "--max_seq_length=64", "--max_predictions_per_seq=20", "--dupe_factor=1"]) == 0
    output_dir = os.path.join(setup.root, "pretrained")
    in_process(PRETRAIN, input_file=shards, bert_config_file=setup.config_file,
               output_dir=output_dir, do_train=True, max_seq_length=64,
               max_predictions_per_seq=20, num_train_steps=PRETRAIN_STEPS,
               num_warmup_steps=1, train_batch_size=4, learning_rate=1e-3).check()
    return os.path.join(output_dir, f"model.ckpt-{PRETRAIN_STEPS}")


@pytest.fixture(scope="module")
def trained(setup, pretrained):
    """Fine-tune from the pretrained checkpoint on 2 towers; eval; predict --rank."""
    output_dir = os.path.join(setup.root, "trained")
    run = in_process(FINETUNE, **dict(setup.flags, output_dir=output_dir,
                                      init_checkpoint=pretrained, n_gpus=2, do_train=True,
                                      do_eval=True, do_predict=True, rank=True)).check()
    return output_dir, run


def read_lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().split("\n")[:-1]


def read_predict(output_dir: str):
    """(probabilities [n], the row columns after them [n])."""
    probabilities, columns = [], []
    for line in read_lines(os.path.join(output_dir, "predict.txt")):
        value, rest = line.split("\t", 1)
        assert re.fullmatch(r"[01]\.\d{6}", value), line
        probabilities.append(float(value))
        columns.append(rest)
    return np.array(probabilities), columns


# ---------------------------------------------------------------------------
# Outputs


def test_training_starts_from_the_pretrained_encoder(trained, pretrained):
    _, run = trained
    assert f"init_checkpoint {pretrained}: loaded" in run.stderr, run.stderr
    assert "freshly initialised (2): output_weights, output_bias" in run.stderr
    # The span-MLM and next-sentence heads are not part of the classifier.
    assert re.search(r"in the checkpoint but unused \(\d+\): cls/", run.stderr)


def test_predict_txt_is_the_probability_then_the_row(setup, trained):
    output_dir, run = trained
    probabilities, columns = read_predict(output_dir)
    assert columns == [line for line in read_lines(setup.dev_file) if line.strip()]
    assert np.ptp(probabilities) > 1e-3       # rows are told apart
    rows = read_rows(setup.dev_file)
    assert f"predict: scoring {len(rows)} rows" in run.stderr


def test_ranked_txt_sorts_each_slot(setup, trained):
    output_dir, _ = trained
    probabilities, columns = read_predict(output_dir)
    slots = collections.OrderedDict()
    for p, line in zip(probabilities, columns):
        fields = line.split("\t")
        slots.setdefault((fields[1], fields[3]), []).append((p, line))
    expected = []
    for number, members in enumerate(slots.values(), start=1):
        ordered = sorted(members, key=lambda m: -m[0])
        expected += [f"{number}\t{rank}\t{p:.6f}\t{line}"
                     for rank, (p, line) in enumerate(ordered, start=1)]
    assert read_lines(os.path.join(output_dir, "ranked.txt")) == expected
    assert len(slots) == len({r.slot_key for r in read_rows(setup.dev_file)}) > 5


def _reference_ranking(probabilities, columns) -> dict:
    slots = collections.defaultdict(list)
    for p, line in zip(probabilities, columns):
        label, index, _, text = line.split("\t")
        slots[(index, text)].append((p, label))
    top1, reciprocal, chance = [], [], []
    for members in slots.values():
        positive = [p for p, label in members if label == "1"]
        assert len(positive) == 1
        # The label-1 row's own rank; ties count against it.
        rank = sum(1 for p, _ in members if p >= positive[0])
        top1.append(rank == 1)
        reciprocal.append(1 / rank)
        chance.append(1 / len(members))
    return {"eval_top1": np.mean(top1), "eval_mrr": np.mean(reciprocal),
            "chance_top1": np.mean(chance), "ranked_slots": len(slots)}


def test_eval_results_hold_the_ranking(trained):
    output_dir, run = trained
    with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
        results = dict(line.rstrip("\n").split(" = ") for line in f)
    probabilities, columns = read_predict(output_dir)
    # predict.txt has 6 decimals: compare where rounding cannot flip a rank.
    for key, value in _reference_ranking(probabilities, columns).items():
        assert float(results[key]) == pytest.approx(value, abs=1e-6), key
    labels = np.array([int(line.split("\t")[0]) for line in columns])
    assert float(results["eval_accuracy"]) == pytest.approx(
        np.mean((probabilities > 0.5) == (labels == 1)), abs=1e-6)
    assert float(results["chance_top1"]) == pytest.approx(1 / 3)
    assert float(results["chance_mrr"]) == pytest.approx((1 + 1 / 2 + 1 / 3) / 3)
    assert int(results["global_step"]) > PRETRAIN_STEPS
    assert re.search(r"eval: original segment ranked first in [\d.]+% of \d+ slots "
                     r"\(chance 33\.3%\)", run.stderr)


def test_scoring_without_labels_on_one_tower_gives_the_same_scores(setup, trained):
    trained_dir, _ = trained
    unlabelled = os.path.join(setup.root, "unlabelled.tsv")
    lines = [line.split("\t", 1)[1] for line in read_lines(setup.dev_file)]
    with open(unlabelled, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in reversed(lines)))
    output_dir = os.path.join(setup.root, "unlabelled_out")
    in_process(FINETUNE, **dict(setup.flags, output_dir=output_dir,
                                init_checkpoint=trained_dir, do_predict=True,
                                predict_file=unlabelled, n_gpus=1)).check()
    probabilities, columns = read_predict(output_dir)
    reference, _ = read_predict(trained_dir)
    assert columns == lines[::-1]
    np.testing.assert_allclose(probabilities, reference[::-1], atol=2e-6)
    assert not os.path.exists(os.path.join(output_dir, "ranked.txt"))


# ---------------------------------------------------------------------------
# Ranking metrics


def test_ranking_metrics_by_hand():
    text = "a, [SLOT], c"
    rows = [parse_row([label, "1", candidate, text], "x") for label, candidate in
            [("0", "p"), ("1", "q"), ("0", "r")]]
    other = "[SLOT], d!"
    rows += [parse_row([label, "0", candidate, other], "x") for label, candidate in
             [("1", "s"), ("0", "t")]]
    # Slot 1: the original is 2nd of 3; slot 2: tied with a negative -> 2nd of 2.
    metrics = ranking_metrics(rows, np.array([0.9, 0.5, 0.1, 0.4, 0.4]))
    assert metrics == pytest.approx({"eval_top1": 0.0, "eval_mrr": 0.5,
                                     "chance_top1": (1 / 3 + 1 / 2) / 2,
                                     "chance_mrr": ((1 + 1 / 2 + 1 / 3) / 3 + 0.75) / 2,
                                     "ranked_slots": 2})
    metrics = ranking_metrics(rows, np.array([0.1, 0.5, 0.2, 0.4, 0.3]))
    assert metrics["eval_top1"] == 1.0 and metrics["eval_mrr"] == 1.0


# ---------------------------------------------------------------------------
# Bad input: exit 2, one error line naming the file and line, nothing written.


def _bad_cases(s: Setup, trained_dir: str) -> dict:
    root = os.path.join(s.root, "bad")
    cases = {}
    train_lines = read_lines(os.path.join(s.data_dir, "train.tsv"))
    dev_lines = read_lines(s.dev_file)

    def data_dir(name, train=None, dev=None):
        directory = os.path.join(root, name, "data")
        os.makedirs(directory)
        for split, lines in (("train", train or train_lines), ("dev", dev or dev_lines)):
            with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in lines))
        return directory

    def output_dir(name, copy=False):
        path = os.path.join(root, name, "out")
        if copy:
            shutil.copytree(trained_dir, path)
        return path

    def add(name, expected, out, **flags):
        cases[name] = ([FINETUNE] + flag_args(dict(s.flags, output_dir=out, **flags)), out,
                       expected)

    lines = list(train_lines)
    lines[4] = "\t".join(lines[4].split("\t")[:3])
    directory = data_dir("missing_column", train=lines)
    add("missing_column", [f"{directory}/train.tsv line 5: expected 4 tab-separated "
                           "columns"], output_dir("missing_column"),
        data_dir=directory, do_train=True)

    lines = list(dev_lines)
    lines[2] = "\t".join(lines[2].split("\t")[:3] + [" "])
    directory = data_dir("empty_text", dev=lines)
    add("empty_text", [f"{directory}/dev.tsv line 3: empty text_with_slot"],
        output_dir("empty_text", copy=True), data_dir=directory, do_eval=True)
    # The same file must stop a train+eval run before it trains.
    add("empty_text_before_training", [f"{directory}/dev.tsv line 3"],
        output_dir("empty_text_before_training"), data_dir=directory, do_train=True,
        do_eval=True)

    fields = dev_lines[1].split("\t")
    lines = list(dev_lines)
    lines[1] = "\t".join(fields[:1] + ["9"] + fields[2:])
    predict_file = os.path.join(root, "no_such_slot.tsv")
    with open(predict_file, "w", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    add("slot_index_does_not_exist",
        [f"{predict_file} line 2: segment_index 9 does not exist: the text has"],
        output_dir("slot_index_does_not_exist", copy=True), do_predict=True,
        predict_file=predict_file, init_checkpoint=trained_dir)

    lines = [line for line in train_lines if line.startswith("1\t")]
    directory = data_dir("only_positives", train=lines)
    add("only_positives", [f"{directory}/train.tsv has only label 1 rows"],
        output_dir("only_positives"), data_dir=directory, do_train=True)

    add("rank_without_predict", ["--rank", "--do_predict"],
        output_dir("rank_without_predict", copy=True), do_eval=True, rank=True)
    flags_without_data = dict(do_train=True, data_dir="")
    add("no_data_dir", ["--data_dir is required"], output_dir("no_data_dir"),
        **flags_without_data)
    return cases


BAD_CASES = ["missing_column", "empty_text", "empty_text_before_training",
             "slot_index_does_not_exist", "only_positives", "rank_without_predict",
             "no_data_dir"]


@pytest.fixture(scope="module")
def bad_runs(setup, trained):
    return run_bad_inputs_in_process(_bad_cases(setup, trained[0]), BAD_CASES,
                                     through_launcher="empty_text_before_training")


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_error_line(bad_runs, case):
    bad_runs[case].assert_refused()


def test_fine_tuning_from_a_pretraining_checkpoint_starts_at_step_1(trained):
    _, run = trained
    steps = re.findall(r"step (\d+)/\d+ ", run.stderr)
    assert steps and steps[0] == "1", run.stderr


@pytest.mark.parametrize("launcher", ["rewrite_finetune.py", "run_classifier_mgpu.py"])
def test_a_non_chief_worker_with_nothing_to_train_leaves_the_scoring_to_the_chief(
        setup, trained, tmp_path, launcher):
    """Both fine-tuning launchers answer alike (exit 0, a log line), from one driver."""
    output_dir = str(tmp_path / "out")
    flags = dict(setup.flags, output_dir=output_dir, do_predict=True, do_eval=True,
                 worker_hosts="127.0.0.1:1,127.0.0.1:2", task_index=1)
    if launcher == "run_classifier_mgpu.py":
        flags.update(task_name="sentiment",
                     data_dir=os.path.join(REPO, "data", "sample_sentiment"))
    run = in_process(os.path.join(REPO, launcher), **flags)
    assert run.returncode == 0, run.describe()
    assert "worker 1: nothing to train; predict and eval are the chief's" in run.stderr
    assert not os.path.exists(output_dir)
