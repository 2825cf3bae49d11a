"""run_pretraining_mgpu.py: masked-LM (+ next-sentence) pretraining on N towers.

The flags of Google's run_pretraining.py plus --n_gpus and the shared training
flags. From scratch, or continued from a released checkpoint: what that
checkpoint lacks (the MLM/NSP heads, optimizer slots) starts fresh and is
listed in the log. Eval runs on held-out files (--eval_input_file) and writes
masked_lm_accuracy, masked_lm_loss, next_sentence_accuracy and
next_sentence_loss to eval_results.txt.
"""

from __future__ import annotations

import logging

from absl import flags

from bert_ad.cli import flag_groups, task_runner
from bert_ad.cli.registry import register_task
from bert_ad.errors import fail
from bert_ad.pretraining.records import expand_record_files

log = logging.getLogger("bert_ad")


def define_task_flags(fv: flags.FlagValues) -> None:
    """Pretraining's own flags (the training ones are shared)."""
    d = dict(flag_values=fv)
    flags.DEFINE_string("input_file", None,
                        "Training shards: glob, comma list or directory.", **d)
    flags.DEFINE_string("eval_input_file", None,
                        "HELD-OUT shards for --do_eval (never the training files).", **d)
    flags.DEFINE_integer("max_predictions_per_seq", 20,
                         "As given to create_pretraining_data.", **d)
    flag_groups.define(fv, ("num_train_steps", "num_warmup_steps"))
    flags.DEFINE_integer("max_eval_steps", 100, "Eval batches (global) at most.", **d)
    flags.DEFINE_enum("nsp", "auto", ["auto", "true", "false"],
                      "Next-sentence head: auto = on unless the data is MLM-only.", **d)


def check_flags(f: flags.FlagValues) -> None:
    if f.num_warmup_steps < 0 or f.num_warmup_steps > f.num_train_steps:
        fail(f"--num_warmup_steps={f.num_warmup_steps} must be between 0 and "
             f"--num_train_steps={f.num_train_steps}")


def build(f: flags.FlagValues, encoder):
    """The PretrainingTask the flags describe, on the encoder of the shared flags."""
    from bert_ad.tasks.pretraining import PretrainingTask  # TensorFlow: once run
    config = encoder.config
    if f.max_seq_length > config.max_position_embeddings:
        fail(f"--max_seq_length={f.max_seq_length} exceeds the model's "
             f"max_position_embeddings ({config.max_position_embeddings})")
    # Expanded even for eval alone, to refuse evaluating on training shards.
    train_files = (expand_record_files(f.input_file, "--input_file")
                   if f.do_train or f.input_file else [])
    eval_files = (expand_record_files(f.eval_input_file, "--eval_input_file")
                  if f.do_eval else [])
    task = PretrainingTask(encoder, train_files, eval_files, f.max_seq_length,
                           f.max_predictions_per_seq, f.nsp, f.max_eval_steps)
    log.info("objective: %s", task.describe())
    return task


COMMAND = register_task(
    "pretrain", "masked-LM (+ next-sentence) pretraining on TFRecord shards",
    define_flags=define_task_flags, build=build, check_flags=check_flags, text=False,
    actions=("do_train", "do_eval"), agreed_flags=("max_predictions_per_seq", "nsp"),
    positive_flags=("max_predictions_per_seq", "num_train_steps"),
    flag_defaults=(("learning_rate", 1e-4),), description=__doc__,
    aliases=("run_pretraining",), launcher="run_pretraining_mgpu.py",
    console_script="bert-ad-pretrain")


# The launcher's contract (run_classifier_mgpu.py-style callers and tests).
define_flags, main, cli = task_runner.launcher_functions(COMMAND)
