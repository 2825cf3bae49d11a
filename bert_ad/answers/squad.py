"""From the windows' start and end logits to each question's answer (Google's write_predictions).

For every question, over all of its windows (scored on any towers, in any
batches):

  1. candidates: the --n_best_size highest start logits and end logits of a
     window (among its real positions) paired up; a pair counts when both
     are context pieces of that window, the start is one of the pieces the
     window has the most context for (bert_ad/data/squad_features.py), the
     end is not before the start and the span is at most
     --max_answer_length pieces. Should no pair of the top n count, every
     pair of the window is tried (Google would answer the text "empty");
  2. they are ranked by start + end logit and the first --n_best_size
     distinct texts kept; a span's text is the context's own characters from
     its first piece's first character to its last piece's last one;
  3. version 2.0: the null score is the lowest start[0] + end[0] ([CLS]) of
     the question's windows; it joins the n-best as the answer "", and the
     question is answered "" when null score - best span's score exceeds
     --null_score_diff_threshold (null_odds.json holds that difference);
  4. probabilities: a softmax over the n-best's scores.

A question without windows (a context of nothing the tokenizer keeps) is
answered "".
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_ad.data.squad_features import SquadFeatures
from bert_ad.data.squad_json import Question


@dataclasses.dataclass(frozen=True)
class AnswerSettings:
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2_with_negative: bool = False
    null_score_diff_threshold: float = 0.0


@dataclasses.dataclass
class Answers:
    """Per question id: the answer, the n-best list ({text, probability,
    start_logit, end_logit}), the best non-null text, (v2.0) the null odds,
    and where the answer is in its context (`offsets`: characters [start,
    end), None for the answer "")."""
    predictions: Dict[str, str]
    nbest: Dict[str, List[dict]]
    best_spans: Dict[str, str]
    null_odds: Dict[str, float]
    offsets: Dict[str, Optional[Tuple[int, int]]] = dataclasses.field(default_factory=dict)


def _top(logits: np.ndarray, n: int) -> np.ndarray:
    return np.argsort(-logits, kind="stable")[:n]


def _window_candidates(start: np.ndarray, end: np.ndarray, offset: int,
                       max_context: np.ndarray, settings: AnswerSettings,
                       every_pair: bool = False) -> List[tuple]:
    """(score, start logit, end logit, start piece, end piece) of a window's valid
    spans, in Google's order (start rank, then end rank); pieces counted from
    the window's first context piece."""
    length = offset + len(max_context) + 1        # [CLS] question [SEP] context [SEP]
    n = length if every_pair else settings.n_best_size
    starts, ends = _top(start[:length], n), _top(end[:length], n)
    s, e = np.meshgrid(starts, ends, indexing="ij")
    s, e = s.reshape(-1), e.reshape(-1)
    context = len(max_context)
    valid = ((s >= offset) & (s < offset + context) & (e >= offset) & (e < offset + context)
             & (e >= s) & (e - s + 1 <= settings.max_answer_length))
    s, e = s[valid], e[valid]
    s, e = s[max_context[s - offset]], e[max_context[s - offset]]
    return [(float(start[i] + end[j]), float(start[i]), float(end[j]), i - offset, j - offset)
            for i, j in zip(s, e)]


def _softmax(scores: Sequence[float]) -> List[float]:
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [value / total for value in exps]


def answers_from_logits(questions: Sequence[Question], contexts: Sequence[str],
                        features: SquadFeatures, start_logits: Sequence,
                        end_logits: Sequence, settings: AnswerSettings) -> Answers:
    """Every question's answer from its windows' logits (see the module docstring).

    Args:
      questions, contexts: the split's rows and their file's contexts.
      features: the windows the logits belong to, in the same order.
      start_logits, end_logits: per window, [positions] (padded rows are fine).
    """
    windows = features.windows
    if not len(start_logits) == len(end_logits) == len(windows):
        raise ValueError(f"{len(start_logits)} scored rows for {len(windows)} windows")
    of_question = collections.defaultdict(list)
    for index, question in enumerate(windows.question):
        of_question[int(question)].append(index)
    result = Answers({}, {}, {}, {})
    for index, question in enumerate(questions):
        context = contexts[question.context]
        char_starts = features.context_starts[question.context]
        char_ends = features.context_ends[question.context]
        candidates, null = [], None
        for w in of_question.get(index, []):
            start = np.asarray(start_logits[w], np.float64)
            end = np.asarray(end_logits[w], np.float64)
            offset, first = int(windows.doc_offset[w]), int(windows.piece_start[w])
            found = _window_candidates(start, end, offset, windows.max_context[w], settings)
            if not found:
                found = _window_candidates(start, end, offset, windows.max_context[w],
                                           settings, every_pair=True)
            candidates.extend((c[0], c[1], c[2], first + c[3], first + c[4]) for c in found)
            if null is None or start[0] + end[0] < null[0]:
                null = (float(start[0] + end[0]), float(start[0]), float(end[0]))
        if settings.version_2_with_negative and null is not None:
            candidates.append((null[0], null[1], null[2], -1, -1))  # the answer ""
        candidates.sort(key=lambda c: -c[0])  # stable: Google's order among equals
        nbest, seen = [], set()
        for _score, start_logit, end_logit, first, last in candidates:
            if len(nbest) >= settings.n_best_size:
                break
            text = context[char_starts[first]:char_ends[last]].strip() if first >= 0 else ""
            if text in seen:
                continue
            seen.add(text)
            nbest.append({"text": text, "start_logit": start_logit, "end_logit": end_logit})
        if settings.version_2_with_negative and null is not None and "" not in seen:
            nbest.append({"text": "", "start_logit": null[1], "end_logit": null[2]})
        # The best span, even when the null answer and n_best_size leave it out of nbest.
        best_span = next(({"text": context[char_starts[c[3]]:char_ends[c[4]]].strip(),
                           "start_logit": c[1], "end_logit": c[2],
                           "offsets": _stripped_span(context, char_starts[c[3]],
                                                     char_ends[c[4]])}
                          for c in candidates if c[3] >= 0), None)
        if not nbest:
            nbest = [{"text": "", "start_logit": 0.0, "end_logit": 0.0}]
        for entry, probability in zip(nbest, _softmax(
                [e["start_logit"] + e["end_logit"] for e in nbest])):
            entry["probability"] = probability
        result.nbest[question.id] = [{k: e[k] for k in ("text", "probability", "start_logit",
                                                         "end_logit")} for e in nbest]
        result.best_spans[question.id] = best_span["text"] if best_span else ""
        answer = result.best_spans[question.id]
        if settings.version_2_with_negative:
            odds = (null[0] - best_span["start_logit"] - best_span["end_logit"]
                    if null is not None and best_span is not None else 0.0)
            result.null_odds[question.id] = odds
            if best_span is None or odds > settings.null_score_diff_threshold:
                answer = ""
        result.predictions[question.id] = answer
        result.offsets[question.id] = best_span["offsets"] if answer else None
    return result


def _stripped_span(text: str, start: int, end: int) -> Tuple[int, int]:
    """[start, end) of text[start:end].strip() in `text`."""
    part = text[start:end]
    start += len(part) - len(part.lstrip())
    return int(start), int(start + len(part.strip()))
