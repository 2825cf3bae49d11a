"""run_squad_mgpu.py: extractive question answering (SQuAD v1.1/v2.0, CMRC2018, DRCD) on N towers.

Google's run_squad.py flags (--train_file, --predict_file, --do_train,
--do_predict, --max_seq_length 384, --doc_stride 128, --max_query_length 64,
--n_best_size 20, --max_answer_length 30, --version_2_with_negative,
--null_score_diff_threshold (or `auto`: the dev file's best-F1 threshold),
--do_lower_case) plus the classifier's model and
training flags (--n_gpus, accumulation, precision, resume, multi-worker,
--eval_every_steps with --keep_best_checkpoint, --do_export). Order: train
-> export -> predict -> eval.

Files are SQuAD json as published; CMRC2018 and DRCD files as they are. The
vocab is a WordPiece vocab.txt or a unigram piece list (pieces.tsv of
multilingual-e5); answers map between characters and pieces exactly, Chinese
included. Every context is cut into windows (--doc_stride) dealt across the
towers; a span is answered from the window where it has the most context.

--do_eval scores --dev_file, by default the --predict_file (scored once for
both when --do_predict is set too), with exact match and F1: SQuAD's
normalisation for English, CMRC2018's for Chinese (--answer_metric=auto picks
by the contexts). Outputs in --output_dir: predictions.json,
nbest_predictions.json, null_odds.json (v2.0), eval_results.txt,
train_results.txt, model.ckpt-N (docs/squad.md).
"""

from __future__ import annotations

import logging
import math

from absl import flags

from bert_ad.cli import flag_groups, task_runner
from bert_ad.cli.registry import register_task
from bert_ad.data.squad_features import SquadWindowSettings
from bert_ad.errors import fail
from bert_ad.metrics.squad import STYLES
from bert_ad.answers.squad import AnswerSettings

# The flags every worker of a cluster must agree on (how questions become training
# windows; the files' paths may differ from machine to machine).
log = logging.getLogger("bert_ad")

AGREED_FLAGS = ("doc_stride", "max_query_length", "version_2_with_negative",
                "head_learning_rate_multiplier")
# max_seq_length: Google's run_squad.py default (the shared flag's is 128).
# optimizer: bias-corrected Adam. On People's Daily MRC (10,000 questions, 368 steps)
# Google's AdamWeightDecay, whose missing bias correction makes the early steps several
# times larger, never learned to answer (F1 72.8 = answering nothing) where bias-corrected
# Adam reached 84.8 and Hugging Face's AdamW 86.5 (docs/squad.md). --optimizer=adamw
# gives Google's update.
# head_learning_rate_multiplier: the fresh span head at 100x the rate (NER's default too).
# At Google's single rate its weights stay small for hundreds of steps, every logit sits
# near one bound, and the null odds of answers the model is sure of stay near 0: at
# threshold 0 it answered 48 of every 100 answerable questions' F1 (83.4 overall, best
# threshold 91.6); at 30x, 86.8 (93.1 overall, best 94.0) on the same 368 steps (issue
# 43). At 30x, 2,000 questions (154 steps) were still too few for one seed of two to
# learn to answer (F1 72.4 at threshold 0, 83.4 at its best); at 100x both seeds answer,
# within 1.5 of their best at 0 on 2 towers (90.5 / 92.6; best 90.7 / 94.0), and 10,000
# questions score as at 30x or better (docs/squad.md "The span head at 100x", issue 56).
FLAG_DEFAULTS = (("max_seq_length", 384), ("optimizer", "adam"),
                 ("head_learning_rate_multiplier", 100.0))


class ThresholdParser(flags.ArgumentParser):
    """--null_score_diff_threshold: a number (Google's flag, a float) or `auto`."""

    syntactic_help = "a number, or auto"

    def parse(self, argument):
        if isinstance(argument, str) and argument.strip().lower() == "auto":
            return "auto"
        try:
            return float(argument)
        except (TypeError, ValueError):
            raise ValueError(f"{argument!r} is not a number or auto") from None

    def flag_type(self) -> str:
        return "float or auto"


def define_task_flags(fv: flags.FlagValues) -> None:
    """Question answering's own flags (the training and fine-tuning ones are shared)."""
    d = dict(flag_values=fv)
    flags.DEFINE_string("train_file", None, "SQuAD json for training (--do_train).", **d)
    flags.DEFINE_string("dev_file", None,
                        "SQuAD json with answers that --do_eval and --eval_every_steps "
                        "score (default: --predict_file).", **d)
    flags.DEFINE_integer("doc_stride", 128,
                         "Pieces between the starts of a long context's windows.", **d)
    flags.DEFINE_integer("max_query_length", 64,
                         "Longest question in pieces; longer ones are cut (and counted "
                         "in the log).", **d)
    flags.DEFINE_integer("n_best_size", 20,
                         "Start and end candidates per window, and answers kept in "
                         "nbest_predictions.json.", **d)
    flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in pieces.", **d)
    flag_groups.define(fv, ("head_learning_rate_multiplier",), dict(FLAG_DEFAULTS),
                       notes={"head_learning_rate_multiplier": "the span head, "
                              "cls/squad/; see docs/squad.md"})
    flags.DEFINE_bool("version_2_with_negative", False,
                      "SQuAD v2.0: questions may have no answer (is_impossible).", **d)
    flags.DEFINE(ThresholdParser(), "null_score_diff_threshold", 0.0,
                 "v2.0: answer \"\" when the null score exceeds the best span's by more "
                 "than this; auto: the threshold of the dev file's best F1 (needs "
                 "--do_eval), recorded beside the checkpoint and in the export. Not "
                 "given: the best-F1 threshold of the --dev_file a run reads (--do_eval, "
                 "--eval_every_steps), else with --do_train of up to 2,000 training "
                 "questions (said in the log; never of the predict file, whose F1 "
                 "--do_eval reports); else the threshold recorded for the checkpoint or in "
                 "the export scored with, else 0.",
                 serializer=flags.ArgumentSerializer(), **d)
    flags.DEFINE_enum("answer_metric", "auto", ["auto"] + list(STYLES),
                      "Exact match and F1 as SQuAD's evaluation (squad: English "
                      "normalisation) or CMRC2018's (cmrc2018: each Chinese character a "
                      "token); auto: cmrc2018 when most contexts hold Chinese.", **d)


def check_flags(f: flags.FlagValues) -> None:
    if f.do_train and not f.train_file:
        fail("--do_train needs --train_file (a SQuAD json file)")
    if f.train_file and not f.do_train:
        fail(f"--train_file={f.train_file} is only read with --do_train; add --do_train, "
             "or leave --train_file out")
    if f.do_predict and not f.predict_file:
        fail("--do_predict needs --predict_file (a SQuAD json file)")
    # An int8 export measures itself on the dev file too (docs/serving.md).
    int8_export = f.do_export and f.export_precision == "int8"
    scores_dev = f.do_eval or f.eval_every_steps or int8_export
    if scores_dev and not (f.dev_file or (f.do_predict and f.predict_file)):
        fail("--do_eval, --eval_every_steps and --export_precision=int8 score --dev_file "
             "(default: --predict_file with --do_predict): set one of them")
    if f.dev_file and not scores_dev:
        fail(f"--dev_file={f.dev_file} is only read with --do_eval, --eval_every_steps or "
             "--export_precision=int8")
    if f["null_score_diff_threshold"].present and not f.version_2_with_negative:
        fail("--null_score_diff_threshold is for SQuAD v2.0: set --version_2_with_negative "
             "too")
    if f.null_score_diff_threshold == "auto":
        if not f.do_eval:
            fail("--null_score_diff_threshold=auto chooses the threshold on the dev file: "
                 "set --do_eval (it scores --dev_file, default the --predict_file)")
        if f.predict_from_export:
            fail("--null_score_diff_threshold=auto chooses the threshold for the checkpoint "
                 f"--do_eval scores, not for --predict_from_export={f.predict_from_export} "
                 "(which answers with the threshold its export.json records): leave "
                 "--null_score_diff_threshold out, or give a number")
    elif not math.isfinite(f.null_score_diff_threshold):
        fail(f"--null_score_diff_threshold={f.null_score_diff_threshold} must be a finite "
             "number")
    window_settings(f).check()


def chooses_threshold(f: flags.FlagValues) -> bool:
    """SQuAD v2.0 trained, or reading a --dev_file, with no --null_score_diff_threshold:
    the threshold is chosen where F1 is best, said in the log: on the --dev_file when the
    run reads one (--do_eval, --eval_every_steps), else on the training questions
    (SquadTask.choice_data). Google's 0 left half the answerable questions of a
    2,000-question training run unanswered (docs/squad.md, issue 56). Never on the predict
    file standing in as the dev file: --do_eval reports its F1, which would then be its
    best threshold's (only `auto`, asked for, chooses there)."""
    reads_dev_file = bool(f.dev_file) and (f.do_eval or bool(f.eval_every_steps))
    chosen = (f.version_2_with_negative and (reads_dev_file or f.do_train)
              and not f.predict_from_export and not f["null_score_diff_threshold"].present)
    if chosen and reads_dev_file:
        log.info("--null_score_diff_threshold not given: it is chosen on the dev file "
                 "(%s), where F1 is best, recorded beside the checkpoint and in an export; "
                 "give a number (e.g. 0, Google's) to keep it fixed", f.dev_file)
    return chosen


def window_settings(f: flags.FlagValues) -> SquadWindowSettings:
    return SquadWindowSettings(f.max_seq_length, f.doc_stride, f.max_query_length)


def build(f: flags.FlagValues, encoder):
    """The SquadTask the flags describe."""
    from bert_ad.tasks.squad import SquadFiles, SquadTask  # TensorFlow: once run
    files = SquadFiles(f.train_file or "", f.predict_file or "", f.dev_file or "")
    source = ("auto" if f.null_score_diff_threshold == "auto"
              else "chosen" if chooses_threshold(f)
              else "flag" if f["null_score_diff_threshold"].present else "default")
    answers = AnswerSettings(f.n_best_size, f.max_answer_length, f.version_2_with_negative,
                             0.0 if source in ("auto", "chosen")
                             else f.null_score_diff_threshold)
    return SquadTask(encoder, files, window_settings(f), answers, f.answer_metric,
                     f.max_train_examples, f.max_eval_examples, threshold_source=source,
                     head_learning_rate_multiplier=f.head_learning_rate_multiplier)


COMMAND = register_task(
    "squad", "extractive question answering: SQuAD v1.1/v2.0, CMRC2018, DRCD (run_squad)",
    define_flags=define_task_flags, build=build, check_flags=check_flags,
    agreed_flags=AGREED_FLAGS, flag_defaults=FLAG_DEFAULTS, description=__doc__,
    positive_flags=("predict_batch_size", "doc_stride", "max_query_length", "n_best_size",
                    "max_answer_length"),
    aliases=("run_squad",), launcher="run_squad_mgpu.py", console_script="bert-ad-squad")


# The launcher's contract (run_classifier_mgpu.py-style callers and tests).
define_flags, main, cli = task_runner.launcher_functions(COMMAND)
