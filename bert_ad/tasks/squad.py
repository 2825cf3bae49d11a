"""Extractive question answering (SQuAD v1.1/v2.0, CMRC2018, DRCD): run_squad on the driver.

Rows are the questions of a SQuAD-layout json file (bert_ad/data/squad_json.py);
each becomes one or more windows `[CLS] question [SEP] context [SEP]`
(bert_ad/data/squad_features.py), and the windows are what the driver
trains on and scores, dealt across the towers like any rows. The head gives
each piece a start and an end logit (bert_ad/model/span_head.py, Google's
`cls/squad/...` variables); answers are searched over a question's windows
afterwards (bert_ad/answers/squad.py). Results in output_dir, named
as Google's:

  predictions.json        {question id: answer text} for every question of
                          the predict file ("" = no answer, v2.0)
  nbest_predictions.json  {id: [{text, probability, start_logit, end_logit}]}
  null_odds.json          (v2.0) {id: null score - best span score}
  eval_results.txt        exact match and F1 in percent (bert_ad/metrics/squad.py),
                          overall (eval_exact_match, eval_f1) and for questions
                          with an answer / without (eval_has_answer_*,
                          eval_no_answer_*); v2.0: the threshold answered
                          with (eval_null_score_diff_threshold) and, as the
                          official v2.0 script, eval_best_exact, eval_best_f1
                          and their thresholds (eval_best_f1_thresh); eval_loss
                          (per window), eval_windows, global_step

v2.0's --null_score_diff_threshold is a number, or `auto`: the best-F1
threshold of the dev file (`chooses_on_dev`: the driver scores the dev file
before it exports and predicts, and records the choice in output_dir and in
every export's export.json, bert_ad/evaluation.py).

Without the flag, a run that trains or reads a --dev_file chooses the threshold
where F1 is best: on the --dev_file, else on training questions (`choice_data`),
never on the predict file, whose F1 --do_eval reports.

--do_eval scores --dev_file, by default the --predict_file: when the two are
the same file, read once, the driver scores it once for both
(bert_ad/driver.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Dict, Optional

import numpy as np

from bert_ad.data.squad_features import (SQUAD_FEATURES, SquadFeatures, SquadWindowSettings,
                                         check_texts_have_pieces, convert_questions)
from bert_ad.data.squad_json import SquadFile, read_squad_file
from bert_ad.errors import fail
from bert_ad.metrics.squad import STYLES, detect_style, find_best_thresh, score_answers
from bert_ad.model.feature_specs import SPAN_FEATURE_SPEC
from bert_ad.tasks.base import (Batches, SplitData, Task, TextEncoder,
                               check_head_learning_rate_multiplier, head_learning_rates,
                               serving_features)
from bert_ad.answers.squad import AnswerSettings, Answers, answers_from_logits

log = logging.getLogger("bert_ad")

# The span head's fresh variables (--head_learning_rate_multiplier).
HEAD_VARIABLES = "^cls/squad/.*$"

PREDICTIONS, NBEST, NULL_ODDS = "predictions.json", "nbest_predictions.json", "null_odds.json"
# A run without a dev file chooses its null threshold on at most this many training
# questions (scoring them costs about a minute on two CPU cores, seconds on a GPU).
CHOICE_QUESTIONS = 2000
THRESHOLD = "null_score_diff_threshold"
# Where the threshold comes from: the flag's default (a record of the checkpoint or the
# export may replace it), the flag given, `auto` (the dev file's best F1), or "chosen": the
# flag not given in a run that trains or reads a --dev_file (the best F1 of the --dev_file,
# else of training questions; never of the predict file standing in as the dev file).
THRESHOLD_SOURCES = ("default", "flag", "auto", "chosen")
# The warning's margin: dev F1 this far below the best threshold's.
THRESHOLD_WARNING_POINTS = 2.0


@dataclasses.dataclass
class SquadSplit(SplitData):
    """A split read from one SQuAD file: its questions are the rows.

    Attributes:
      squad: the whole file (contexts).
      features: its windows, built once by `batches` and reused to turn the
        scored windows into answers.
    """
    squad: Optional[SquadFile] = None
    features: Optional[SquadFeatures] = None


@dataclasses.dataclass(frozen=True)
class SquadFiles:
    """--train_file, --predict_file and --dev_file (default: the predict file)."""
    train_file: str = ""
    predict_file: str = ""
    dev_file: str = ""

    def path(self, split: str) -> str:
        if split == "train":
            return self.train_file
        if split == "predict":
            return self.predict_file
        return self.dev_file or self.predict_file


class SquadTask(Task):
    """Start and end logits per piece; answers searched over each question's windows.

    Args:
      encoder: the model and tokenizer (WordPiece or a unigram piece list).
      files: where the splits are.
      windows: max_seq_length, --doc_stride, --max_query_length.
      answers: --n_best_size, --max_answer_length, v2.0 and its threshold.
      threshold_source: one of THRESHOLD_SOURCES: "auto" chooses the
        threshold on the dev file (`with_dev_choice`), "chosen" on a
        --dev_file, else on training questions (`choice_data`); "default"
        takes a recorded one (`with_answer_settings`); "flag" keeps `answers`'.
      answer_metric: "auto" (cmrc2018 for Chinese contexts, else squad) or one
        of bert_ad.metrics.squad.STYLES.
      max_train_examples, max_eval_examples: only the first N questions.
      head_learning_rate_multiplier: the span head (HEAD_VARIABLES) learns at this
        many times the encoder's rate (1: Google's).
    """

    name = "squad"
    main_metric = "eval_f1"
    feature_spec = SPAN_FEATURE_SPEC

    def __init__(self, encoder: TextEncoder, files: SquadFiles, windows: SquadWindowSettings,
                 answers: AnswerSettings, answer_metric: str = "auto",
                 max_train_examples: Optional[int] = None,
                 max_eval_examples: Optional[int] = None, threshold_source: str = "default",
                 head_learning_rate_multiplier: float = 1.0):
        if answer_metric not in ("auto",) + STYLES:
            raise ValueError(f"answer_metric must be auto or one of {STYLES}")
        if threshold_source not in THRESHOLD_SOURCES:
            raise ValueError(f"threshold_source must be one of {THRESHOLD_SOURCES}")
        windows.check()
        self.encoder = encoder
        self.files = files
        self.windows = windows
        self.answers = answers
        self.answer_metric = answer_metric
        self.limits = {"train": max_train_examples, "dev": max_eval_examples}
        self.threshold_source = threshold_source
        self.head_learning_rate_multiplier = check_head_learning_rate_multiplier(
            head_learning_rate_multiplier)
        self.chooses_on_dev = (threshold_source in ("auto", "chosen")
                               and answers.version_2_with_negative)
        self._files: Dict[str, SquadFile] = {}
        self._splits: Dict[tuple, SquadSplit] = {}

    # --- inputs -----------------------------------------------------------------

    def read(self, split: str) -> SquadSplit:
        """The questions of a split's file, checked; train and dev need answers.

        The dev and predict splits of one file are one SquadSplit (the same
        object), which the driver scores once for both.
        """
        path = self.files.path(split)
        if not path:
            flag = {"train": "--train_file", "predict": "--predict_file"}.get(
                split, "--dev_file (or --do_predict with --predict_file)")
            fail(f"no file to {'train on' if split == 'train' else 'score'}: set {flag}")
        limit = self.limits.get(split)
        key = ("train" if split == "train" else "score", path, limit)
        if key in self._splits:
            data = self._splits[key]
        else:
            if path not in self._files:
                squad = read_squad_file(path, self.answers.version_2_with_negative,
                                        require_answers=False)
                check_texts_have_pieces(squad, self.encoder.tokenizer)
                self._files[path] = squad
            squad = self._files[path]
            questions = squad.questions[:limit] if limit is not None else squad.questions
            data = SquadSplit(split, questions, path, squad=squad)
            self._splits[key] = data
        if split != "predict":
            unanswered = [q for q in data.rows if not q.has_answers]
            if unanswered:
                fail(f"{path}: question {unanswered[0].id!r} has no 'answers' (or an empty "
                     "list without is_impossible); "
                     f"{'training' if split == 'train' else 'evaluation'} needs the answers "
                     "of every question")
        return data

    def batches(self, data: SquadSplit) -> Batches:
        return self.encoder.batches(self.features(data).examples)

    def features(self, data: SquadSplit) -> SquadFeatures:
        """The windows of `data` (built on first use)."""
        if data.features is None:
            training = data.split == "train"
            data.features = self.encoder.cached(
                data, {"task": "squad", "windows": self.windows, "training": training,
                       "version_2": self.answers.version_2_with_negative,
                       "tokenizer": type(self.encoder.tokenizer).__name__},
                lambda: convert_questions(data.rows, data.squad.contexts,
                                          self.encoder.tokenizer, self.windows, training,
                                          data.source),
                SQUAD_FEATURES)
            features = data.features
            log.info("%s: %d questions -> %d windows of at most %d pieces (doc_stride %d); "
                     "%d questions longer than --max_query_length=%d were cut to it%s",
                     data.split, len(data), len(features.windows),
                     self.windows.max_seq_length, self.windows.doc_stride,
                     features.truncated_questions, self.windows.max_query_length,
                     f"; {features.answers_outside} training windows hold no whole answer "
                     "(target [CLS])" if training else "")
        return data.features

    # --- model ------------------------------------------------------------------

    def build_model(self, features, is_training):
        from bert_ad.model.span_head import span_head  # graph code: tasks/base.py
        out = span_head(self.encoder.model(features, is_training), features)
        return {"loss": out.loss, "per_example_loss": out.per_example_loss,
                "start_logits": out.start_logits, "end_logits": out.end_logits}

    def learning_rate_multipliers(self) -> Dict[str, float]:
        return head_learning_rates(HEAD_VARIABLES, self.head_learning_rate_multiplier)

    def serving_outputs(self, features):
        """`start_logits` and `end_logits` [batch, seq] float32 of each row
        `[CLS] question [SEP] context [SEP]` (padding at -10000); docs/serving.md
        turns them into an answer."""
        from bert_ad.model.span_head import span_logits
        complete = serving_features(features, self.feature_spec)
        start, end = span_logits(self.encoder.model(complete, False), complete)
        return {"start_logits": start, "end_logits": end}

    # --- the null threshold -------------------------------------------------------

    def serving_settings(self) -> Dict[str, object]:
        """SQuAD v2.0 or v1.1: whether "" is an answer is part of the model's meaning
        (a served v2.0 model answers "" with no serve flag)."""
        return {"version_2_with_negative": bool(self.answers.version_2_with_negative)}

    def answer_settings(self) -> Dict[str, object]:
        if not self.answers.version_2_with_negative:
            return {}
        return {THRESHOLD: self.answers.null_score_diff_threshold}

    def _with_threshold(self, threshold: float, source: str) -> "SquadTask":
        return self._replaced(answers=dataclasses.replace(
            self.answers, null_score_diff_threshold=float(threshold)), threshold_source=source,
            chooses_on_dev=False)

    def with_dev_choice(self, data: SquadSplit, outputs: Dict[str, np.ndarray]
                        ) -> "SquadTask":
        """--null_score_diff_threshold=auto: the threshold of the dev file's best F1."""
        answers = self.answers_of(data, outputs)
        golds = {q.id: [a.text for a in q.answers] for q in data.rows}
        best, threshold = find_best_thresh(golds, answers.best_spans, answers.null_odds,
                                           self.style(data), which=1)
        log.info("--null_score_diff_threshold=auto: %.6f, the best F1 (%.2f) of %s",
                 threshold, best, data.source)
        return self._with_threshold(threshold, "flag")

    def choice_data(self, dev: Optional[SquadSplit], train: Optional[SquadSplit]
                    ) -> Optional[SquadSplit]:
        """Without --dev_file the dev split is the predict file, whose F1 --do_eval
        reports: a threshold chosen there would report that file's best F1 as its F1
        (0.2-0.4 points above a held-out choice on People's Daily MRC, docs/squad.md). So
        the default ("chosen") chooses on the training questions then; only `auto`, asked
        for, chooses on the predict file."""
        if not self.files.dev_file and self.threshold_source == "chosen":
            dev = None
        return super().choice_data(dev, train)

    def choice_rows(self, train: SquadSplit) -> SquadSplit:
        """Up to CHOICE_QUESTIONS of the training questions, evenly spaced through the
        file: where a run without a dev file chooses its threshold (issue 56: on People's
        Daily MRC the threshold of the training questions' best F1 answered the test
        questions within 0.07-0.43 F1 of their own best, where Google's 0 lost up to 13
        points; at the head's 100x within 0.16-0.43 on 1 and 2 towers; docs/squad.md).
        Their own split name keeps their windows apart from a dev read of the same file in
        the feature cache."""
        questions = train.rows
        count = min(len(questions), CHOICE_QUESTIONS)
        picked = [questions[i * len(questions) // count] for i in range(count)]
        log.info("--null_score_diff_threshold not given and no dev file: it is chosen on "
                 "%d of the %d training questions of %s (evenly spaced), where F1 is best "
                 "(not on the predict file, whose F1 --do_eval reports); give a --dev_file "
                 "of held-out questions (with --do_eval) to choose it there, or a number "
                 "(e.g. 0, Google's) to keep it fixed", count, len(questions), train.source)
        return SquadSplit("choice", picked, train.source, squad=train.squad)

    def with_answer_settings(self, values, where: str) -> "SquadTask":
        """The threshold recorded `where` (the checkpoint's choice, an export's
        export.json), unless --null_score_diff_threshold was given."""
        if THRESHOLD not in values or not self.answers.version_2_with_negative:
            return self
        recorded = float(values[THRESHOLD])
        if self.threshold_source != "default":
            if recorded != self.answers.null_score_diff_threshold:
                log.info("answering with --null_score_diff_threshold=%g, not the %g %s "
                         "records", self.answers.null_score_diff_threshold, recorded, where)
            return self
        log.info("answering with --null_score_diff_threshold=%.6f, recorded in %s",
                 recorded, where)
        return self._with_threshold(recorded, "flag")

    # --- results ----------------------------------------------------------------

    def answers_of(self, data: SquadSplit, outputs: Dict[str, np.ndarray]) -> Answers:
        return answers_from_logits(data.rows, data.squad.contexts, self.features(data),
                                   list(outputs["start_logits"]), list(outputs["end_logits"]),
                                   self.answers)

    def style(self, data: SquadSplit) -> str:
        if self.answer_metric != "auto":
            return self.answer_metric
        return detect_style(data.squad.contexts)

    def metrics(self, data: SquadSplit, outputs: Dict[str, np.ndarray]) -> dict:
        answers = self.answers_of(data, outputs)
        golds = {q.id: [a.text for a in q.answers] for q in data.rows}
        version_2 = self.answers.version_2_with_negative
        figures = score_answers(golds, answers.predictions, self.style(data),
                                answers.null_odds if version_2 else None,
                                answers.best_spans if version_2 else None)
        metrics = {"eval_" + name: value for name, value in figures.items()}
        if version_2:
            metrics["eval_" + THRESHOLD] = float(self.answers.null_score_diff_threshold)
        metrics["eval_loss"] = float(np.mean(outputs["per_example_loss"])) \
            if len(outputs.get("per_example_loss", ())) else 0.0
        metrics["eval_windows"] = len(self.features(data).windows)
        metrics["eval_answer_metric"] = self.style(data)
        return metrics

    def prediction_file_names(self):
        return (PREDICTIONS, NBEST) + ((NULL_ODDS,) if self.answers.version_2_with_negative
                                       else ())

    def prediction_files(self, data: SquadSplit, outputs: Dict[str, np.ndarray]):
        answers = self.answers_of(data, outputs)
        files = {PREDICTIONS: _json_lines(answers.predictions),
                 NBEST: _json_lines(answers.nbest)}
        if self.answers.version_2_with_negative:
            files[NULL_ODDS] = _json_lines(answers.null_odds)
        return files

    def describe_metrics(self, metrics) -> str:
        line = (f"exact match {metrics['eval_exact_match']:.2f}  F1 {metrics['eval_f1']:.2f}"
                f"  ({metrics['eval_questions']} questions, {metrics['eval_answer_metric']} "
                f"answers, step {metrics['global_step']})")
        for prefix, what in (("has_answer_", "with an answer"), ("no_answer_", "without")):
            if metrics.get(f"eval_{prefix}questions"):
                line += (f"\n{what}: exact match {metrics[f'eval_{prefix}exact_match']:.2f}  "
                         f"F1 {metrics[f'eval_{prefix}f1']:.2f}  "
                         f"({metrics[f'eval_{prefix}questions']} questions)")
        if "eval_best_f1" in metrics:
            line += (f"\nat --null_score_diff_threshold={metrics['eval_' + THRESHOLD]:.6g}; "
                     f"best exact match {metrics['eval_best_exact']:.2f} at "
                     f"{metrics['eval_best_exact_thresh']:.6f}, best F1 "
                     f"{metrics['eval_best_f1']:.2f} at {metrics['eval_best_f1_thresh']:.6f}")
        return line

    def metric_warnings(self, metrics) -> list:
        """Dev F1 more than THRESHOLD_WARNING_POINTS below the best threshold's."""
        if "eval_best_f1" not in metrics:
            return []
        f1, best = metrics["eval_f1"], metrics["eval_best_f1"]
        if best - f1 <= THRESHOLD_WARNING_POINTS:
            return []
        return [f"F1 {f1:.2f} at --null_score_diff_threshold="
                f"{metrics['eval_' + THRESHOLD]:.6g} is {best - f1:.2f} points below "
                f"{best:.2f} at --null_score_diff_threshold="
                f"{metrics['eval_best_f1_thresh']:.6f}, the dev file's best; answer with "
                "that, or with --null_score_diff_threshold=auto to choose it on the dev "
                "file"]


def _json_lines(values) -> list:
    """A result file's lines: Google's json.dump(indent=4), UTF-8 as it is."""
    return json.dumps(values, indent=4, ensure_ascii=False).split("\n")
