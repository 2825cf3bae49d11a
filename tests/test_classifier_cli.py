"""End-to-end tests of run_classifier_mgpu.py, run as a user runs it.

Every run uses a tiny BERT (hidden 32, 2 layers) with a vocab of the words
of data/sample_sentiment (helpers.tiny_model), on 1 or 3 logical CPU towers, so the
file needs no downloads and no GPU. One training run (module fixture) is
shared: its checkpoints are scored again with other tower counts and input
orders, copied into output dirs for the bad-input cases, and cut back to an
intermediate checkpoint for the resume test. Every run (training, scoring again,
resuming, bad input but one) runs the launcher's entry point in this process
(helpers.run_launcher_in_process), without a TensorFlow import each; one bad-input
case also runs as a user types it (a fresh interpreter through the root launcher)
and must end the same way.
"""

from __future__ import annotations

import os
import re
import shutil

import numpy as np
import pytest

from helpers import (
    REPO, SAMPLE_SENTIMENT as SAMPLE, Run, flag_args, run_bad_inputs_in_process,
    run_launcher_in_process, run_many, tiny_model, write_config)

LAUNCHER = os.path.join(REPO, "run_classifier_mgpu.py")
ROWS = 13          # divides neither by the batch size (4) nor by the towers (3)
TOWERS = 3
BATCH = 4
# 40 training rows, global batch 3 x 4 = 12, 2 epochs: int(40 / 12 * 2) = 6 steps.
STEPS = 6
EXAMPLES_SEEN = STEPS * TOWERS * BATCH


# ---------------------------------------------------------------------------
# Running the CLI.


def run_cli_in_process(args: list) -> Run:
    """The launcher's command in this process (run_launcher_in_process): the same entry
    point, without a TensorFlow import per run."""
    return run_launcher_in_process([LAUNCHER] + list(args))


# ---------------------------------------------------------------------------
# Files.


def read_rows(path: str) -> list:
    """[(label, text)] of a label<TAB>text file."""
    with open(path, encoding="utf-8") as f:
        return [tuple(line.rstrip("\n").split("\t")) for line in f if line.strip()]


def write_rows(path: str, rows) -> str:
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join("\t".join(row) + "\n" for row in rows))
    return path


def read_predictions(output_dir: str):
    """(predict.txt as [n] ints, test_results.tsv as [n, labels] floats)."""
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        predicted = [line.rstrip("\n") for line in f]
    with open(os.path.join(output_dir, "test_results.tsv"), encoding="utf-8") as f:
        probabilities = [line.rstrip("\n").split("\t") for line in f]
    for line in predicted:
        assert re.fullmatch(r"\d+", line), f"predict.txt line {line!r} is not a label index"
    return (np.array([int(x) for x in predicted]),
            np.array([[float(x) for x in row] for row in probabilities]))


def read_results(output_dir: str, name: str = "eval_results.txt") -> dict:
    """{key: value} of a `key = value` results file; every line must be one."""
    results = {}
    with open(os.path.join(output_dir, name), encoding="utf-8") as f:
        for line in f:
            match = re.fullmatch(r"(\S+) = (\S+)", line.rstrip("\n"))
            assert match, f"{name} line {line!r} is not `key = value`"
            results[match.group(1)] = match.group(2)
    return results


def copy_output_dir(source: str, target: str) -> str:
    shutil.copytree(source, target)
    return target


# ---------------------------------------------------------------------------
# The tiny model and data.


# A wide initialisation gives every row clearly different probabilities
# after a few steps, so a reordering of rows cannot go unnoticed.
WIDE_INIT = 1.0


class Setup:
    """Paths and flags of the tiny model and data."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    root = str(tmp_path_factory.mktemp("classifier_cli"))
    s = Setup()
    s.root = root
    model = tiny_model(root, initializer_range=WIDE_INIT)
    s.vocab_file, s.config_file = model.vocab_file, model.config_file
    s.vocab_size = model.vocab_size

    s.data_dir = os.path.join(root, "data")
    os.makedirs(s.data_dir)
    shutil.copy(os.path.join(SAMPLE, "train.tsv"), s.data_dir)
    dev_rows = read_rows(os.path.join(SAMPLE, "dev.tsv"))[:ROWS]
    s.dev_file = write_rows(os.path.join(s.data_dir, "dev.tsv"), dev_rows)
    write_rows(os.path.join(s.data_dir, "test.tsv"),
               read_rows(os.path.join(SAMPLE, "test.tsv"))[:ROWS])
    s.dev_labels = np.array([int(label) for label, _ in dev_rows])
    s.reversed_file = write_rows(os.path.join(root, "dev_reversed.tsv"), dev_rows[::-1])

    s.flags = {
        "task_name": "sentiment", "data_dir": s.data_dir,
        "vocab_file": s.vocab_file, "bert_config_file": s.config_file,
        "max_seq_length": 64, "n_gpus": TOWERS, "train_batch_size": BATCH,
        "eval_batch_size": BATCH, "predict_batch_size": BATCH,
        "learning_rate": 1e-3, "num_train_epochs": 2, "save_checkpoints_steps": 2,
        "log_every_n_steps": 1,
        # sqrt from one tower's batch (--lr_reference_batch=0): train_results checks it.
        "lr_scaling": "sqrt",
    }
    return s


def training_flags(s: Setup, output_dir: str) -> dict:
    return dict(s.flags, output_dir=output_dir, do_train=True)


def scoring_flags(s: Setup, output_dir: str, trained: str, **changes) -> dict:
    """Predict-only flags on a fresh output_dir with the trained checkpoint."""
    flags = dict(s.flags, output_dir=output_dir, do_predict=True,
                 predict_file=s.dev_file, init_checkpoint=trained, labels="0,1")
    flags.update(changes)
    return flags


@pytest.fixture(scope="module")
def trained(setup):
    """Train 6 steps on 3 towers, then predict and evaluate the 13-row dev file."""
    output_dir = os.path.join(setup.root, "trained")
    flags = dict(training_flags(setup, output_dir), do_predict=True, do_eval=True,
                 predict_file=setup.dev_file)
    run = run_cli_in_process(flag_args(flags)).check()
    return output_dir, run


@pytest.fixture(scope="module")
def scored(setup, trained):
    """The trained checkpoint scored again: reversed rows, 1 tower, via --flagfile."""
    trained_dir, _ = trained
    root = setup.root
    flagfile = os.path.join(root, "predict.flags")
    flags = scoring_flags(setup, os.path.join(root, "unused"), trained_dir)
    del flags["output_dir"]
    with open(flagfile, "w", encoding="utf-8") as f:
        f.write("# the same run as the trained fixture's predict step\n")
        f.write("".join(arg + "\n" for arg in flag_args(flags)))
    jobs = {
        "reversed": flag_args(scoring_flags(setup, os.path.join(root, "reversed"),
                                            trained_dir,
                                            predict_file=setup.reversed_file)),
        "one_tower": flag_args(scoring_flags(setup, os.path.join(root, "one_tower"),
                                             trained_dir, n_gpus=1)),
        "flagfile": [f"--flagfile={flagfile}",
                     f"--output_dir={os.path.join(root, 'flagfile')}"],
    }
    runs = run_many({name: [LAUNCHER] + args for name, args in jobs.items()}, parallel=1,
                    run=run_launcher_in_process)
    for run in runs.values():
        run.check()
    return {name: os.path.join(root, name) for name in jobs}


# ---------------------------------------------------------------------------
# 1. predict.txt / test_results.tsv: one line per row, input order, batch-independent.


def check_prediction_files(output_dir: str, num_labels: int = 2):
    predicted, probabilities = read_predictions(output_dir)
    assert predicted.shape == (ROWS,)
    assert probabilities.shape == (ROWS, num_labels)
    assert np.all((predicted >= 0) & (predicted < num_labels))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-4)
    np.testing.assert_array_equal(predicted, probabilities.argmax(axis=1))
    return predicted, probabilities


def test_predict_writes_one_line_per_input_row(trained):
    output_dir, run = trained
    _, probabilities = check_prediction_files(output_dir)
    # The order checks below can only fail if rows score differently.
    assert np.ptp(probabilities[:, 0]) > 1e-3, probabilities
    assert f"predict: scoring {ROWS} rows" in run.stderr


def test_predict_keeps_input_order(trained, scored):
    predicted, probabilities = check_prediction_files(trained[0])
    reversed_predicted, reversed_probabilities = check_prediction_files(
        scored["reversed"])
    np.testing.assert_array_equal(reversed_predicted, predicted[::-1])
    np.testing.assert_allclose(reversed_probabilities, probabilities[::-1], atol=1e-5)


def test_predict_does_not_depend_on_tower_count(trained, scored):
    _, three_towers = check_prediction_files(trained[0])
    _, one_tower = check_prediction_files(scored["one_tower"])
    np.testing.assert_allclose(one_tower, three_towers, atol=1e-5)


# ---------------------------------------------------------------------------
# 2. eval_results.txt


def test_eval_results_match_predictions(setup, trained):
    output_dir, _ = trained
    results = read_results(output_dir)
    for key in ("eval_accuracy", "eval_loss", "global_step", "eval_macro_f1",
                "precision_0", "recall_0", "f1_0", "precision_1", "recall_1", "f1_1"):
        assert key in results, f"eval_results.txt lacks {key}: {results}"
    assert int(results["global_step"]) == STEPS
    predicted, probabilities = read_predictions(output_dir)
    labels = setup.dev_labels
    assert float(results["eval_accuracy"]) == pytest.approx(
        np.mean(predicted == labels), abs=1e-6)
    f1s = []
    for c in (0, 1):
        hits = np.sum((predicted == c) & (labels == c))
        precision = hits / max(np.sum(predicted == c), 1)
        recall = hits / max(np.sum(labels == c), 1)
        f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
        f1s.append(f1)
        assert float(results[f"precision_{c}"]) == pytest.approx(precision, abs=1e-6)
        assert float(results[f"recall_{c}"]) == pytest.approx(recall, abs=1e-6)
        assert float(results[f"f1_{c}"]) == pytest.approx(f1, abs=1e-6)
    assert float(results["eval_macro_f1"]) == pytest.approx(np.mean(f1s), abs=1e-6)
    loss = -np.mean(np.log(probabilities[np.arange(ROWS), labels]))
    assert float(results["eval_loss"]) == pytest.approx(loss, abs=1e-4)
    assert int(results["eval_predicted_labels"]) == len(np.unique(predicted))
    collapsed = len(np.unique(predicted)) == 1 and np.any(predicted != labels)
    assert ("the model collapsed to one class" in trained[1].stderr) == collapsed


def test_train_results_describe_the_run(trained):
    output_dir, run = trained
    results = read_results(output_dir, "train_results.txt")
    assert int(results["global_step"]) == STEPS
    assert int(results["steps_run"]) == STEPS
    assert int(results["examples_seen"]) == EXAMPLES_SEEN
    assert int(results["global_batch"]) == TOWERS * BATCH
    # --lr_scaling=sqrt from one tower's batch (the default reference): 1e-3 * sqrt(3 towers).
    assert float(results["learning_rate"]) == pytest.approx(1e-3 * 3 ** 0.5, rel=1e-7)
    assert int(results["skipped_steps"]) == 0
    seconds = float(results["train_seconds"])
    assert seconds > 0
    assert float(results["train_examples_per_sec"]) == pytest.approx(
        EXAMPLES_SEEN / seconds, rel=1e-4)
    logged = re.findall(rf"step {STEPS}/{STEPS}\s+loss (\S+)", run.stderr)
    assert logged, run.stderr[-2000:]
    assert float(results["final_loss"]) == pytest.approx(float(logged[-1]), abs=1e-4)


# ---------------------------------------------------------------------------
# 4. --flagfile


def test_flagfile_gives_the_same_run(trained, scored):
    for name in ("predict.txt", "test_results.tsv"):
        with open(os.path.join(trained[0], name)) as f:
            expected = f.read()
        with open(os.path.join(scored["flagfile"], name)) as f:
            assert f.read() == expected, name


# ---------------------------------------------------------------------------
# 5. Resume from an intermediate checkpoint.


def _done_line(stderr: str) -> str:
    found = re.findall(r"training done: global step \d+, \d+ examples seen", stderr)
    assert len(found) == 1, stderr
    return found[0]


def test_resume_ends_where_the_uninterrupted_run_ends(setup, trained):
    from bert_ad.compat import tf
    reference_dir, reference = trained
    assert _done_line(reference.stderr) == (
        f"training done: global step {STEPS}, {EXAMPLES_SEEN} examples seen")
    # "Interrupt" after the step-4 checkpoint: the final checkpoint and the
    # checkpoint state file never got written.
    output_dir = copy_output_dir(reference_dir, os.path.join(setup.root, "resumed"))
    for name in os.listdir(output_dir):
        if name.startswith(f"model.ckpt-{STEPS}.") or name == "checkpoint":
            os.remove(os.path.join(output_dir, name))
    run = run_cli_in_process(flag_args(training_flags(setup, output_dir))).check()
    assert re.search(r"resuming from \S*model\.ckpt-4\b", run.stderr), run.stderr
    steps = re.findall(r"step (\d+)/(\d+) ", run.stderr)
    assert steps == [("5", str(STEPS)), (str(STEPS), str(STEPS))], run.stderr
    assert _done_line(run.stderr) == _done_line(reference.stderr)

    final = os.path.join(output_dir, f"model.ckpt-{STEPS}")
    reference_final = os.path.join(reference_dir, f"model.ckpt-{STEPS}")
    assert tf.train.latest_checkpoint(output_dir) == final
    assert tf.train.load_variable(final, "global_step") == STEPS
    assert tf.train.load_variable(reference_final, "global_step") == STEPS
    assert (sorted(tf.train.list_variables(final))
            == sorted(tf.train.list_variables(reference_final)))


# ---------------------------------------------------------------------------
# 3. Bad input: exit 2, one `error:` line naming the file/line/flag, nothing written.


def _bad_cases(s: Setup, trained_dir: str) -> dict:
    """{case: (args, output_dir, substrings the error line must hold)}."""
    root = os.path.join(s.root, "bad")
    os.makedirs(root)
    cases = {}

    def trained_copy(name):
        return copy_output_dir(trained_dir, os.path.join(root, name, "out"))

    def data_dir(name, train=None, dev=None):
        directory = os.path.join(root, name, "data")
        os.makedirs(directory)
        for split, rows in (("train", train), ("dev", dev)):
            source = os.path.join(s.data_dir, f"{split}.tsv")
            if rows is None:
                shutil.copy(source, directory)
            else:
                write_rows(os.path.join(directory, f"{split}.tsv"), rows)
        return directory

    def add(name, output_dir, expected, **flags):
        merged = dict(s.flags, output_dir=output_dir)
        merged.update(flags)
        cases[name] = ([LAUNCHER] + flag_args(merged), output_dir, expected)

    train_rows = read_rows(os.path.join(s.data_dir, "train.tsv"))
    dev_rows = read_rows(s.dev_file)

    missing = os.path.join(root, "missing_data_file", "no_such_dir")
    add("missing_data_file", trained_copy("missing_data_file"),
        [os.path.join(missing, "train.tsv"), "--train_file"],
        do_train=True, data_dir=missing)

    rows = list(train_rows)
    rows[3] = rows[3] + ("extra",)
    directory = data_dir("wrong_columns", train=rows)
    add("wrong_columns", os.path.join(root, "wrong_columns", "out"),
        [os.path.join(directory, "train.tsv") + " line 4", "expected 2"],
        do_train=True, data_dir=directory)

    directory = data_dir("empty_train", train=[])
    add("empty_train", os.path.join(root, "empty_train", "out"),
        [os.path.join(directory, "train.tsv"), "no examples"],
        do_train=True, data_dir=directory)

    rows = list(dev_rows)
    rows[2] = ("7",) + rows[2][1:]
    directory = data_dir("unknown_label", dev=rows)
    add("unknown_label", trained_copy("unknown_label"),
        [os.path.join(directory, "dev.tsv") + " line 3", "'7'"],
        do_eval=True, data_dir=directory)
    # The same bad dev file must stop a train+eval run before it trains.
    empty = os.path.join(root, "unknown_label_before_training", "out")
    os.makedirs(empty)
    add("unknown_label_before_training", empty,
        [os.path.join(directory, "dev.tsv") + " line 3", "'7'"],
        do_train=True, do_eval=True, data_dir=directory)

    add("unknown_task", trained_copy("unknown_task"), ["--task_name", "no_such_task"],
        do_predict=True, task_name="no_such_task")
    add("no_towers", trained_copy("no_towers"), ["--n_gpus=0"], do_train=True, n_gpus=0)
    add("max_seq_length", trained_copy("max_seq_length"), ["--max_seq_length=600"],
        do_train=True, max_seq_length=600)
    prefix = os.path.join(root, "no_such_checkpoint", "model.ckpt")
    add("missing_init_checkpoint", os.path.join(root, "missing_init_checkpoint", "out"),
        ["--init_checkpoint=" + prefix], do_train=True, init_checkpoint=prefix)
    wider = write_config(os.path.join(root, "wider_config.json"), s.vocab_size,
                         initializer_range=WIDE_INIT, hidden_size=64, intermediate_size=128)
    output_dir = trained_copy("other_model_shape")
    add("other_model_shape", output_dir,
        # (the folder's record says what it holds before a checkpoint is read)
        [output_dir, "is another model than the model folder --output_dir", "hidden_size=64"],
        do_train=True, bert_config_file=wider)
    config = os.path.join(root, "no_such_config.json")
    add("missing_bert_config", trained_copy("missing_bert_config"),
        ["bert_config_file", config], do_predict=True, bert_config_file=config)
    small = write_config(os.path.join(root, "small_vocab_config.json"), 50,
                         initializer_range=WIDE_INIT)
    add("vocab_too_large", trained_copy("vocab_too_large"),
        ["--bert_config_file", "is another model than the model folder", "vocab_size=50"],
        do_predict=True, bert_config_file=small)
    add("nothing_to_do", trained_copy("nothing_to_do"),
        ["--do_train", "--do_eval", "--do_predict"])
    predict_file = os.path.join(root, "no_such_predict.tsv")
    add("missing_predict_file", trained_copy("missing_predict_file"),
        ["--predict_file", predict_file], do_predict=True, predict_file=predict_file)
    empty = os.path.join(root, "no_checkpoint", "out")
    os.makedirs(empty)
    add("no_checkpoint_to_score", empty, ["no checkpoint", "--init_checkpoint"],
        do_predict=True, labels="0,1")
    add("bad_flag_value", trained_copy("bad_flag_value"), ["--n_gpus"],
        do_train=True, n_gpus="two")
    add("negative_lr_reference_batch", trained_copy("negative_lr_reference_batch"),
        ["--lr_reference_batch=-4", "0 for --train_batch_size"],
        do_train=True, lr_reference_batch=-4)
    return cases


BAD_CASES = ["missing_data_file", "wrong_columns", "empty_train", "unknown_label",
             "unknown_label_before_training", "unknown_task", "no_towers",
             "max_seq_length", "missing_init_checkpoint", "other_model_shape",
             "missing_bert_config", "vocab_too_large", "nothing_to_do",
             "missing_predict_file", "no_checkpoint_to_score", "bad_flag_value",
             "negative_lr_reference_batch"]


@pytest.fixture(scope="module")
def bad_runs(setup, trained):
    return run_bad_inputs_in_process(_bad_cases(setup, trained[0]), BAD_CASES,
                                     through_launcher="other_model_shape")


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_error_line_and_changes_nothing(bad_runs, case):
    bad_runs[case].assert_refused()
