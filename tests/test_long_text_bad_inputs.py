"""Bad input to the flags of multi-label, regression, windows and the best checkpoint.

Each case runs run_classifier_mgpu.py as a user does and must be refused with
exit 2, exactly one `error:` line naming the file and line or the flag, no
traceback, and its output folder byte for byte as it was
(helpers.run_bad_inputs).
"""

from __future__ import annotations

import os
import shutil

import pytest

from helpers import REPO, SAMPLE_SENTIMENT, flag_args, run_bad_inputs_in_process, tiny_model

LAUNCHER = os.path.join(REPO, "run_classifier_mgpu.py")


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def _cases(root: str) -> dict:
    model = tiny_model(os.path.join(root, "model"))
    texts = [line.split("\t", 1)[1] for line in
             open(os.path.join(SAMPLE_SENTIMENT, "train.tsv"), encoding="utf-8")
             if line.strip()]
    cases = {}

    def data(name: str, train_labels, dev_labels=None) -> str:
        directory = os.path.join(root, "data_" + name)
        _write(os.path.join(directory, "train.tsv"),
               "".join(f"{label}\t{text}" for label, text in zip(train_labels, texts)))
        if dev_labels is not None:
            _write(os.path.join(directory, "dev.tsv"),
                   "".join(f"{label}\t{text}" for label, text in zip(dev_labels, texts)))
        return directory

    def case(name, expected, data_dir, **changes):
        output_dir = os.path.join(root, "out", name)
        _write(os.path.join(output_dir, "notes.txt"), "the user's own file\n")
        flags = {"task_name": "tsv", "data_dir": data_dir, "vocab_file": model.vocab_file,
                 "bert_config_file": model.config_file, "output_dir": output_dir,
                 "max_seq_length": 32, "train_batch_size": 4, "num_train_epochs": 1,
                 "do_train": True}
        flags.update(changes)
        cases[name] = ([LAUNCHER] + flag_args(flags), output_dir, expected)

    multi = ["pos|long", "neg", "pos", "neg|long"] * 10
    dev = os.path.join(root, "data_multi_unknown", "dev.tsv")
    case("multi_label_unknown_label", [f"{dev} line 3: label 'short' is not one of "
                                       "['long', 'neg', 'pos']"],
         data("multi_unknown", multi, ["pos", "neg|long", "pos|short", "neg"] * 5),
         multi_label=True, do_eval=True)
    case("multi_label_empty_label", ["line 2: an empty label in 'neg||long'",
                                     "--multi_label_separator='|'"],
         data("multi_empty", ["pos", "neg||long"] + multi), multi_label=True)
    numbers = ["0.5", "1.25", "-3", "2"] * 10
    train = os.path.join(root, "data_regression_text", "train.tsv")
    case("regression_target_not_a_number",
         [f"{train} line 7: regression target 'four' is not a number"],
         data("regression_text", numbers[:6] + ["four"] + numbers[7:]), regression=True)
    case("regression_and_multi_label", ["--regression and --multi_label"],
         data("both", numbers), regression=True, multi_label=True)
    case("regression_with_labels", ["--labels", "--regression"], data("labels", numbers),
         regression=True, labels="0,1")
    case("threshold_one", ["--multi_label_threshold=1.0"], data("threshold", multi),
         multi_label=True, multi_label_threshold=1.0)
    plain = data("plain", ["0", "1"] * 20, ["0", "1"] * 8)
    case("window_stride_equals_window", ["--window_stride=30", "less than a window's 30 "
                                         "pieces", "--max_seq_length=32"],
         plain, long_text="windows", window_stride=30)
    case("window_stride_above_window", ["--window_stride=64"], plain, long_text="windows",
         window_stride=64)
    case("window_flag_without_windows", ["--window_pooling is for --long_text=windows"],
         plain, window_pooling="max")
    case("keep_best_without_evaluation", ["--keep_best_checkpoint", "--eval_every_steps=N",
                                          "dev set"], plain, keep_best_checkpoint=True)
    no_dev = data("no_dev", ["0", "1"] * 20)
    case("keep_best_without_a_dev_file", [os.path.join(no_dev, "dev.tsv"), "does not exist",
                                          "--keep_best_checkpoint"],
         no_dev, eval_every_steps=2, keep_best_checkpoint=True)
    case("eval_every_steps_without_training", ["--eval_every_steps=2", "--do_train"], plain,
         eval_every_steps=2, do_train=None, do_eval=True)
    case("patience_negative", ["--early_stopping_patience=-1"], plain, eval_every_steps=2,
         early_stopping_patience=-1)
    case("use_best_without_best", ["--use_best_checkpoint", "holds no checkpoint"], plain,
         do_train=None, do_predict=True, use_best_checkpoint=True,
         predict_file=os.path.join(plain, "dev.tsv"))
    return cases


CASE_NAMES = [
    "multi_label_unknown_label", "multi_label_empty_label", "regression_target_not_a_number",
    "regression_and_multi_label", "regression_with_labels", "threshold_one",
    "window_stride_equals_window", "window_stride_above_window",
    "window_flag_without_windows", "keep_best_without_evaluation",
    "keep_best_without_a_dev_file", "eval_every_steps_without_training", "patience_negative",
    "use_best_without_best"]


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("long_text_bad_inputs"))
    shutil.rmtree(os.path.join(root, "out"), ignore_errors=True)
    return run_bad_inputs_in_process(_cases(root), CASE_NAMES,
                                     through_launcher="keep_best_without_a_dev_file")


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_is_one_error_line_and_changes_nothing(bad_runs, case):
    bad_runs[case].assert_refused()
