"""Exact match and F1 of extractive answers: SQuAD's definitions, and CMRC2018's for Chinese.

Our own implementation of the published evaluation scripts (no copy of them):

squad (SQuAD v2.0's `evaluate-v2.0.py`; v1.1's is the same except for gold
  answers that normalise to nothing): an answer is normalised by lower-casing,
  dropping ASCII punctuation (Python's string.punctuation), dropping the
  articles a, an, the, and collapsing whitespace; its tokens are the
  normalised text split on whitespace. EM: the normalised texts are equal.
  F1: over the bag of tokens (2 x shared / (predicted + gold)). A gold answer
  that normalises to nothing is left out; a question left with none has no
  answer, and an answer of nothing scores 1 against it and anything else 0.

cmrc2018 (CMRC 2018's `cmrc2018_evaluate.py`, used for DRCD too):
  lower-case and strip; every CJK character (U+4E00-U+9FA5) is a token, and
  so is each character of its punctuation list; runs of other characters are
  split into words (the script's nltk.word_tokenize; here: numbers with their
  decimal points, runs of letters and digits, and any other visible
  character alone). F1 drops the punctuation-list characters and is the
  longest common contiguous run of tokens (precision = run / predicted,
  recall = run / gold); EM compares the texts with those characters removed.
  No-answer questions score as under squad.

Each question scores its best over the gold alternatives. `score_answers`
gives the totals in percent as the official scripts print them, overall and
split into questions with an answer (has_answer) and without (no_answer),
and, with the null odds of a v2.0 run, the best null threshold as the
official v2.0 script finds it (best_exact, best_exact_thresh, best_f1,
best_f1_thresh).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

STYLES = ("squad", "cmrc2018")

# --- squad ------------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_tokens(text: str) -> List[str]:
    return normalize_answer(text).split()


def squad_exact(gold: str, predicted: str) -> float:
    return float(normalize_answer(gold) == normalize_answer(predicted))


def squad_f1(gold: str, predicted: str) -> float:
    gold_tokens, predicted_tokens = squad_tokens(gold), squad_tokens(predicted)
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    shared = sum((collections.Counter(gold_tokens)
                  & collections.Counter(predicted_tokens)).values())
    if shared == 0:
        return 0.0
    precision, recall = shared / len(predicted_tokens), shared / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# --- cmrc2018 ---------------------------------------------------------------------------

# The script's list; its "……" entry is two characters and never equals one, so "…" stays.
CMRC_PUNCTUATION = frozenset("-:_*^/\\~`+=，。：？！“”；’《》·、「」（）－～『』")
_CJK = re.compile("[\u4e00-\u9fa5]")
_WORDS = re.compile(r"\d+(?:[.,:]\d+)*|\w+|[^\w\s]", re.UNICODE)


def cmrc_tokens(text: str, drop_punctuation: bool = True) -> List[str]:
    """CMRC2018's mixed segmentation: CJK characters alone, other runs as words."""
    tokens: List[str] = []
    run = ""
    for char in text.lower().strip():
        if drop_punctuation and char in CMRC_PUNCTUATION:
            continue
        if _CJK.match(char) or char in CMRC_PUNCTUATION:
            tokens.extend(_WORDS.findall(run))
            run = ""
            tokens.append(char)
        else:
            run += char
    tokens.extend(_WORDS.findall(run))
    return tokens


def _cmrc_plain(text: str) -> str:
    return "".join(char for char in text.lower().strip() if char not in CMRC_PUNCTUATION)


def longest_common_run(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest contiguous run of tokens in both (the script's find_lcs)."""
    best = 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            if x == y:
                current[j] = previous[j - 1] + 1
                best = max(best, current[j])
        previous = current
    return best


def cmrc_exact(gold: str, predicted: str) -> float:
    if not cmrc_tokens(gold) or not predicted.strip():
        return float(not cmrc_tokens(gold) and not predicted.strip())
    return float(_cmrc_plain(gold) == _cmrc_plain(predicted))


def cmrc_f1(gold: str, predicted: str) -> float:
    gold_tokens, predicted_tokens = cmrc_tokens(gold), cmrc_tokens(predicted)
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    run = longest_common_run(gold_tokens, predicted_tokens)
    if run == 0:
        return 0.0
    precision, recall = run / len(predicted_tokens), run / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


# --- per question and in total -------------------------------------------------------------

Scorer = Callable[[str, str], float]
SCORERS: Dict[str, Tuple[Scorer, Scorer, Callable[[str], List[str]]]] = {
    "squad": (squad_exact, squad_f1, squad_tokens),
    "cmrc2018": (cmrc_exact, cmrc_f1, cmrc_tokens),
}


def gold_answers(answers: Sequence[str], style: str) -> List[str]:
    """The alternatives that count: those with tokens; [""] (no answer) if none has."""
    tokens = SCORERS[style][2]
    kept = [answer for answer in answers if tokens(answer)]
    return kept or [""]


def question_scores(answers: Sequence[str], predicted: str, style: str
                    ) -> Tuple[float, float]:
    """(EM, F1) of one prediction: the best over the gold alternatives."""
    exact, f1, _ = SCORERS[style]
    golds = gold_answers(answers, style)
    return max(exact(g, predicted) for g in golds), max(f1(g, predicted) for g in golds)


def detect_style(contexts: Sequence[str]) -> str:
    """cmrc2018 when at least half the contexts hold a CJK character, else squad."""
    chinese = sum(1 for context in contexts if _CJK.search(context))
    return "cmrc2018" if contexts and 2 * chinese >= len(contexts) else "squad"


def score_answers(golds: Mapping[str, Sequence[str]], predictions: Mapping[str, str],
                  style: str, null_odds: Optional[Mapping[str, float]] = None,
                  best_answers: Optional[Mapping[str, str]] = None) -> Dict[str, object]:
    """EM and F1 in percent, overall and for questions with and without an answer.

    Args:
      golds: question id -> its gold answer texts ([] for no answer).
      predictions: question id -> the predicted text ("" for no answer).
      style: one of STYLES.
      null_odds, best_answers: a v2.0 run's null score minus its best span's,
        and that best span's text, per question: they add, as the official
        v2.0 script, the best thresholds (answer "" where the null odds exceed
        it) for exact match and for F1 and the figures they give
        (`find_best_thresh`).
    Returns:
      {exact_match, f1, questions, has_answer_exact_match, has_answer_f1,
       has_answer_questions, no_answer_... (when present), best_exact,
       best_exact_thresh, best_f1, best_f1_thresh (with null_odds)}.
    """
    scores = {qid: question_scores(golds[qid], predictions.get(qid, ""), style)
              for qid in golds}
    has_answer = {qid: gold_answers(golds[qid], style) != [""] for qid in golds}
    results: Dict[str, object] = {}

    def total(prefix: str, ids: List[str]) -> None:
        if ids:
            results[prefix + "exact_match"] = 100.0 * sum(scores[q][0] for q in ids) / len(ids)
            results[prefix + "f1"] = 100.0 * sum(scores[q][1] for q in ids) / len(ids)
        results[prefix + "questions"] = len(ids)

    total("", list(golds))
    total("has_answer_", [q for q in golds if has_answer[q]])
    if not all(has_answer.values()):
        total("no_answer_", [q for q in golds if not has_answer[q]])
    if null_odds is not None and best_answers is not None:
        for index, name in ((0, "exact"), (1, "f1")):
            best, threshold = find_best_thresh(golds, best_answers, null_odds, style, index)
            results[f"best_{name}"] = best
            results[f"best_{name}_thresh"] = threshold
    return results


def find_best_thresh(golds: Mapping[str, Sequence[str]], best_answers: Mapping[str, str],
                     null_odds: Mapping[str, float], style: str, which: int
                     ) -> Tuple[float, float]:
    """(best score in percent, its threshold): the official v2.0 script's find_best_thresh.

    A question is answered "" when its null odds exceed the threshold, else with
    its best span. Starting from every question answered "" (the unanswerable
    ones right), questions are answered in order of rising null odds, and the
    threshold is the odds of the last one answered where the total is highest.
    `which`: 0 exact match, 1 F1.

    Three differences from the script, each so that the threshold reaches the
    score reported with it: the questions are answered with their best span
    (`best_answers`), not with a run's predictions.json, where the run's own
    threshold has already answered some ""; questions with equal null odds are
    answered together (one threshold answers all of them; the script takes them
    one by one in file order and can report a total between two of them); and
    when answering nothing is best, the threshold is 1 below the lowest null
    odds (the script reports 0.0, which may answer some).
    """
    has_answer = {qid: gold_answers(golds[qid], style) != [""] for qid in golds}
    ids = sorted(golds, key=lambda q: null_odds[q])
    current = best = float(sum(not has_answer[q] for q in ids))
    threshold = null_odds[ids[0]] - 1.0 if ids else 0.0
    for position, qid in enumerate(ids):
        if has_answer[qid]:
            current += question_scores(golds[qid], best_answers[qid], style)[which]
        elif best_answers[qid]:
            current -= 1.0     # an unanswerable question answered with a span
        last_of_equals = (position + 1 == len(ids)
                          or null_odds[ids[position + 1]] != null_odds[qid])
        if last_of_equals and current > best:
            best, threshold = current, null_odds[qid]
    return 100.0 * best / max(len(ids), 1), float(threshold)
