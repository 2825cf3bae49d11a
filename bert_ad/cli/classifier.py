"""run_classifier_mgpu.py: fine-tune, predict and evaluate a BERT classifier on N towers.

The flags of Google's run_classifier.py plus --n_gpus and the multi-tower
ones. Order as in the predecessor: train -> predict -> eval. Outputs in
--output_dir: model.ckpt-N, labels.txt, predict.txt (one predicted label
index per input row, in input order), test_results.tsv (class
probabilities per row), eval_results.txt (`key = value`), train_results.txt.

--regression (one number a row, e.g. --task_name=sts-b, which implies it) and
--multi_label (labels joined by --multi_label_separator) change the head;
--long_text=windows scores long texts from overlapping windows
(docs/long_text.md). --eval_every_steps scores the dev set while training
and --keep_best_checkpoint keeps the best in output_dir/best/.

With a cluster (docs/multi_worker.md) every worker trains on its share of
each global batch; the chief (worker 0) alone reads --init_checkpoint and
writes labels.txt, checkpoints, predictions and eval results.
"""

from __future__ import annotations

import logging

from absl import flags

from bert_ad.choices import POOLINGS, WINDOW_POOLINGS
from bert_ad.cli import flag_groups, task_runner
from bert_ad.cli.registry import register_task
from bert_ad.data import processors, task_specs
from bert_ad.data.features import WindowSettings, check_window_settings
from bert_ad.errors import fail

log = logging.getLogger("bert_ad")


# The classifier's flags every worker of a cluster must agree on.
AGREED_FLAGS = ("task_name", "head_learning_rate_multiplier", "labels", "label_column",
                "regression", "multi_label", "multi_label_separator", "long_text",
                "window_stride", "max_windows", "window_pooling", "pooling")


def define_task_flags(fv: flags.FlagValues) -> None:
    """The classifier's own flags (the training and fine-tuning ones are shared)."""
    d = dict(flag_values=fv)
    # Google's run_classifier.py flags.
    flags.DEFINE_string("data_dir", None, "Folder of the task's train/dev/test files.", **d)
    flags.DEFINE_string("task_name", None, "Task: " + ", ".join(sorted(task_specs.TASKS)),
                        **d)
    flag_groups.define_groups(fv, ("truncation",))
    for key in ("train_file", "dev_file", "test_file", "delimiter", "labels"):
        flags.DEFINE_string(key, None, f"Override the task's {key}.", **d)
    for key in ("label_column", "text_a_column", "text_b_column"):
        flags.DEFINE_integer(key, None, f"Override the task's {key} (0-based).", **d)
    flags.DEFINE_bool("has_header", None, "Override: the files start with a header line.",
                      **d)
    flags.DEFINE_bool("skip_header", False,
                      "The files start with a header line (`label<TAB>sentence`): skip it, "
                      "as Google's processors do for their tasks (= --has_header=true). "
                      "Without it a first row that looks like a header is refused.", **d)
    define_target_flags(fv)
    define_long_text_flags(fv)


WINDOW_FLAGS = ("window_stride", "max_windows", "window_pooling")


def define_target_flags(fv: flags.FlagValues) -> None:
    """What the label column holds: one label, several labels, or a number."""
    d = dict(flag_values=fv)
    flags.DEFINE_bool("regression", False,
                      "The label column holds a number (STS-B, ratings): one output, "
                      "squared error; predict.txt holds the value. --task_name=sts-b "
                      "implies it.", **d)
    flags.DEFINE_bool("multi_label", False,
                      "A row may carry several labels, joined by --multi_label_separator "
                      "(an empty cell: none of them): a sigmoid per label, binary "
                      "cross-entropy; predict.txt holds the predicted label indices "
                      "joined by the separator.", **d)
    flags.DEFINE_string("multi_label_separator", "|",
                        "Joins a row's labels in the label column (--multi_label).", **d)
    flags.DEFINE_float("multi_label_threshold", 0.5,
                       "--multi_label: a label is predicted at this probability or more.",
                       **d)


def define_long_text_flags(fv: flags.FlagValues) -> None:
    """Truncation (--truncation) or windows for texts longer than max_seq_length."""
    d = dict(flag_values=fv)
    flags.DEFINE_enum("long_text", "truncate", ["truncate", "windows"],
                      "A text longer than max_seq_length: truncate it (--truncation) or "
                      "cut it into overlapping windows whose logits are pooled "
                      "(docs/long_text.md).", **d)
    flags.DEFINE_integer("window_stride", None,
                         "--long_text=windows: pieces between window starts, less than "
                         "max_seq_length - 2 (default: half of that).", **d)
    flags.DEFINE_integer("max_windows", 16,
                         "--long_text=windows: at most N windows a text, evenly spread "
                         "from first to last (0: all).", **d)
    flags.DEFINE_enum("window_pooling", "mean", list(WINDOW_POOLINGS),
                      "--long_text=windows: a text's logits from its windows': mean, max, "
                      "or attention (a learnt softmax weighting of the windows).", **d)
    flags.DEFINE_enum("pooling", "cls", list(POOLINGS),
                      "How a text becomes one vector for the head: cls (Google's pooler, "
                      "dense + tanh over [CLS]) or mean (the last layer averaged over the "
                      "real tokens: for models trained as sentence encoders, such as the "
                      "Chinese model of scripts/fetch_chinese_model.sh, which have no "
                      "pooler). Scoring and export must use the training's value.", **d)
    flag_groups.define(fv, ("head_learning_rate_multiplier",))


def check_flags(f: flags.FlagValues) -> None:
    if not f.task_name:
        fail("--task_name is required")
    if f.skip_header and f.has_header is False:
        fail("--skip_header and --has_header=false contradict each other: give one")
    # (Found when the first text was cut, after labels.txt and cache/ were written.)
    if not 0.0 <= f.truncation_head_fraction <= 1.0:
        fail(f"--truncation_head_fraction={f.truncation_head_fraction} must be between 0 "
             "and 1: the share of the budget head+tail keeps from the start")


def build(f: flags.FlagValues, encoder):
    """The ClassificationTask the flags describe (its inputs checked)."""
    from bert_ad.tasks.classification import ClassificationTask  # TensorFlow: once run
    overrides = {key: f[key].value for key in processors.OVERRIDE_KEYS
                 if f[key].value is not None}
    if f.skip_header:
        overrides["has_header"] = True
    spec = processors.get_task(f.task_name, overrides)
    target = target_from_flags(f, spec)
    windows = windows_from_flags(f)
    return ClassificationTask(
        encoder=encoder, spec=spec, data_dir=f.data_dir or "", predict_file=f.predict_file,
        truncation=f.truncation, head_fraction=f.truncation_head_fraction,
        max_train_examples=f.max_train_examples, max_eval_examples=f.max_eval_examples,
        target=target, label_separator=f.multi_label_separator,
        threshold=f.multi_label_threshold, windows=windows, window_pooling=f.window_pooling,
        pooling=f.pooling, head_learning_rate_multiplier=f.head_learning_rate_multiplier,
        # Whether the first line is a header was said: trust it.
        detect_header="has_header" not in overrides)


def target_from_flags(f: flags.FlagValues, spec: task_specs.TaskSpec) -> str:
    """single_label, multi_label or regression, from the flags and the task."""
    if f.regression and f.multi_label:
        fail("--regression and --multi_label exclude each other: a row holds a number "
             "or labels")
    if spec.target == "regression" and f.multi_label:
        fail(f"--task_name={f.task_name} is a regression task; --multi_label does not "
             "apply")
    if (f.regression or f.multi_label) and spec.labels is not None \
            and not f["labels"].present:
        fail(f"--task_name={f.task_name} has a fixed label list: "
             f"--{'regression' if f.regression else 'multi_label'} needs a task without "
             "one (tsv, csv, ...)")
    if f.regression and f["labels"].present:
        fail("--labels lists labels, but --regression predicts a number: leave one out")
    if not f.multi_label_separator or f.multi_label_separator.isspace():
        fail("--multi_label_separator must be a visible character or string, e.g. '|'")
    if not 0.0 < f.multi_label_threshold < 1.0:
        fail(f"--multi_label_threshold={f.multi_label_threshold} must be between 0 and 1")
    if f.regression or spec.target == "regression":
        return "regression"
    return "multi_label" if f.multi_label else "single_label"


def windows_from_flags(f: flags.FlagValues):
    """WindowSettings of --long_text=windows (checked), else None."""
    if f.long_text != "windows":
        for name in WINDOW_FLAGS:
            if f[name].present:
                fail(f"--{name} is for --long_text=windows: set it too, or leave "
                     f"--{name} out")
        return None
    stride = f.window_stride if f.window_stride is not None else (f.max_seq_length - 2) // 2
    windows = WindowSettings(stride=stride, max_windows=f.max_windows)
    check_window_settings(f.max_seq_length, windows)
    return windows


COMMAND = register_task(
    "classifier", "fine-tune, predict and evaluate a text classifier (Google's run_classifier)",
    define_flags=define_task_flags, build=build, check_flags=check_flags,
    agreed_flags=AGREED_FLAGS, positive_flags=("predict_batch_size",), description=__doc__,
    aliases=("run_classifier",), launcher="run_classifier_mgpu.py",
    console_script="bert-ad-classifier")


# The launcher's contract (run_classifier_mgpu.py-style callers and tests).
define_flags, main, cli = task_runner.launcher_functions(COMMAND)
