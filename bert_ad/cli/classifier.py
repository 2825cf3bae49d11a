"""run_classifier_mgpu.py: fine-tune, predict and evaluate a BERT classifier on N towers.

The flags of Google's run_classifier.py plus --n_gpus and the multi-tower
ones. Order as in the predecessor: train -> predict -> eval. Outputs in
--output_dir: model.ckpt-N, labels.txt, predict.txt (one predicted label
index per input row, in input order), test_results.tsv (class
probabilities per row), eval_results.txt (`key = value`), train_results.txt.

With a cluster (docs/multi_worker.md) every worker trains on its share of
each global batch; the chief (worker 0) alone reads --init_checkpoint and
writes labels.txt, checkpoints, predictions and eval results.
"""

from __future__ import annotations

import logging

from absl import flags

from bert_ad import driver
from bert_ad.cli.flags import (check_training_flags, define_finetuning_flags,
                               export_settings_from_flags, use_export_model_files,
                               define_truncation_flags, placement_from_flags,
                               run_settings_from_flags, text_encoder_from_flags)
from bert_ad.cli.runner import run_launcher
from bert_ad.data import processors
from bert_ad.errors import fail
from bert_ad.tasks.classification import ClassificationTask

log = logging.getLogger("bert_ad")


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    # Google's run_classifier.py flags (the training ones are shared).
    flags.DEFINE_string("data_dir", None, "Folder of the task's train/dev/test files.", **d)
    flags.DEFINE_string("task_name", None, "Task: " + ", ".join(sorted(processors.TASKS)),
                        **d)
    define_finetuning_flags(fv)
    define_truncation_flags(fv)
    for key in ("train_file", "dev_file", "test_file", "delimiter", "labels"):
        flags.DEFINE_string(key, None, f"Override the task's {key}.", **d)
    for key in ("label_column", "text_a_column", "text_b_column"):
        flags.DEFINE_integer(key, None, f"Override the task's {key} (0-based).", **d)
    flags.DEFINE_bool("has_header", None, "Override: the files start with a header line.",
                      **d)


def main(f: flags.FlagValues) -> int:
    if not (f.do_train or f.do_eval or f.do_predict or f.do_export):
        fail("nothing to do: set at least one of --do_train, --do_eval, --do_predict, "
             "--do_export")
    use_export_model_files(f)
    export_settings = export_settings_from_flags(f)
    if not f.task_name:
        fail("--task_name is required")
    check_training_flags(f, "predict_batch_size")
    placement = placement_from_flags(f)
    overrides = {key: f[key].value for key in processors.OVERRIDE_KEYS
                 if f[key].value is not None}
    spec = processors.get_task(f.task_name, overrides)
    task = ClassificationTask(text_encoder_from_flags(f), spec, f.data_dir or "",
                              f.predict_file, f.truncation, f.truncation_head_fraction,
                              f.max_train_examples, f.max_eval_examples)
    settings = run_settings_from_flags(f, placement)
    log.info("%s", placement.plan.describe())
    return driver.run(task, settings, placement, f.do_train, f.do_eval, f.do_predict,
                      export_settings)


def cli(argv=None) -> None:
    """Console entry point (run_classifier_mgpu.py, bert-ad-classifier)."""
    run_launcher(define_flags, main, __doc__, argv=argv)
