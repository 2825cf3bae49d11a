"""Exact match and F1 of bert_ad/metrics/squad.py against examples worked by hand.

SQuAD's definitions (English normalisation, bag-of-tokens F1, no-answer
questions) and CMRC2018's (each CJK character a token, its punctuation list
dropped, F1 over the longest common contiguous run), the best over gold
alternatives, the totals in percent split into questions with and without an
answer, and the best null threshold of a v2.0 run.
"""

from __future__ import annotations

import pytest

from bert_ad.metrics.squad import (cmrc_exact, cmrc_f1, cmrc_tokens, detect_style,
                                   find_best_thresh, longest_common_run, normalize_answer,
                                   question_scores, score_answers, squad_exact, squad_f1)


def test_squad_normalisation_drops_case_punctuation_articles_and_extra_spaces():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear and THE plum.") == "apple pear and plum"
    # Articles only as whole words ("theatre" keeps its "the"); punctuation outside
    # ASCII (string.punctuation) stays, and the article between it goes.
    assert normalize_answer("Theatre «A»") == "theatre « »"


def test_squad_exact_match_and_f1_worked_by_hand():
    assert squad_exact("Denver Broncos", "the denver broncos.") == 1.0
    assert squad_exact("Denver Broncos", "Denver Broncos won") == 0.0
    # gold [denver, broncos], predicted [denver, broncos, won]: shared 2,
    # precision 2/3, recall 1, F1 = 2 * 2/3 / (5/3) = 0.8.
    assert squad_f1("the Denver Broncos", "Denver Broncos won") == pytest.approx(0.8)
    # Tokens count with multiplicity: gold [red, red, blue], predicted
    # [red, blue, blue, green]: shared min(2,1) + min(1,2) = 2, precision 2/4,
    # recall 2/3, F1 = 2 * (1/2)(2/3) / (7/6) = 4/7.
    assert squad_f1("red red blue", "red blue blue green") == pytest.approx(4 / 7)
    assert squad_f1("Paris", "London") == 0.0


def test_a_question_scores_its_best_alternative():
    # vs "Fleming": precision 1/3, recall 1 -> 0.5; vs "Alexander Fleming": 2/3, 1 -> 0.8.
    assert question_scores(["Fleming", "Alexander Fleming"], "Sir Alexander Fleming",
                           "squad") == pytest.approx((0.0, 0.8))
    assert question_scores(["Fleming", "Alexander Fleming"], "fleming", "squad") == (1.0, 1.0)


def test_no_answer_questions_score_the_empty_answer():
    assert question_scores([], "", "squad") == (1.0, 1.0)
    assert question_scores([], "Denver", "squad") == (0.0, 0.0)
    assert question_scores(["Denver"], "", "squad") == (0.0, 0.0)
    # A gold answer that normalises to nothing does not count: no answer is left.
    assert question_scores(["the"], "", "squad") == (1.0, 1.0)
    assert question_scores([], "", "cmrc2018") == (1.0, 1.0)
    assert question_scores([], "上海", "cmrc2018") == (0.0, 0.0)


def test_cmrc_segmentation_makes_each_chinese_character_a_token():
    assert cmrc_tokens("2016年，大熊猫降级") == ["2016", "年", "大", "熊", "猫", "降", "级"]
    assert cmrc_tokens("约6.3千公里") == ["约", "6.3", "千", "公", "里"]
    # Its punctuation list is dropped wherever it is, without cutting a run.
    assert cmrc_tokens("Super-Bowl 50") == ["superbowl", "50"]
    assert cmrc_tokens("《长江》", drop_punctuation=False) == ["《", "长", "江", "》"]


def test_cmrc_f1_is_the_longest_common_run_worked_by_hand():
    # gold [约, 72, 万, 平, 方, 米] (6), predicted [72, 万, 平, 方, 米, 的, 面, 积] (8):
    # common run "72 万 平 方 米" = 5, precision 5/8, recall 5/6, F1 = 5/7.
    assert cmrc_f1("约72万平方米", "72万平方米的面积") == pytest.approx(5 / 7)
    # A run, not a bag: [长, 江, 流, 域] vs [江, 长, 流, 域] share the run 流域 (2):
    # precision = recall = 1/2 (a bag of tokens would give 1).
    assert longest_common_run(list("长江流域"), list("江长流域")) == 2
    assert cmrc_f1("长江流域", "江长流域") == pytest.approx(0.5)
    assert cmrc_f1("紫禁城", "故宫") == 0.0


def test_cmrc_exact_match_drops_its_punctuation_and_case_only():
    assert cmrc_exact("上海", "上海。") == 1.0
    assert cmrc_exact("Shanghai", " shanghai ") == 1.0
    assert cmrc_exact("A.B", "AB") == 0.0         # "." is not on its list
    assert cmrc_exact("1420年", "1420") == 0.0


def test_totals_in_percent_split_by_answer_and_the_best_threshold():
    golds = {"q1": ["Denver Broncos"], "q2": ["the Denver Broncos"], "q3": []}
    predictions = {"q1": "Denver Broncos", "q2": "Denver Broncos won", "q3": ""}
    # q1 (1, 1), q2 (0, 0.8), q3 no answer, answered "": (1, 1).
    results = score_answers(golds, predictions, "squad")
    assert results["exact_match"] == pytest.approx(200 / 3)
    assert results["f1"] == pytest.approx(280 / 3)
    assert results["questions"] == 3
    assert (results["has_answer_exact_match"], results["has_answer_f1"]) == \
        pytest.approx((50.0, 90.0))
    assert results["has_answer_questions"] == 2
    assert (results["no_answer_exact_match"], results["no_answer_f1"],
            results["no_answer_questions"]) == (100.0, 100.0, 1)
    assert "best_f1" not in results
    # Null odds q1 -5, q2 1, q3 2, best spans as predicted but q3's "x" (wrong).
    # All answered "": 1 right (q3). Answering in order of the odds: q1 +1 (EM and
    # F1) -> 2 at -5; q2 +0 EM, +0.8 F1 -> F1 2.8 at 1; q3 -1.
    best = score_answers(golds, predictions, "squad", {"q1": -5.0, "q2": 1.0, "q3": 2.0},
                         {"q1": "Denver Broncos", "q2": "Denver Broncos won", "q3": "x"})
    assert (best["best_exact"], best["best_exact_thresh"]) == pytest.approx((200 / 3, -5.0))
    assert (best["best_f1"], best["best_f1_thresh"]) == pytest.approx((280 / 3, 1.0))
    # Answered questions only: no no_answer figures.
    assert "no_answer_questions" not in score_answers({"q1": ["a b"]}, {"q1": "b"}, "squad")


# The official v2.0 script's find_best_thresh, worked by hand: question id -> (gold
# answers, best span, null odds). Six questions, three unanswerable (d, f, g).
WORKED = {
    "a": (["Alexander Fleming"], "Fleming", -2.0),    # EM 0, F1 2/3 (P 1, R 1/2)
    "g": ([], "", 0.0),                               # no window: nothing to answer
    "c": (["Santa Clara"], "Santa Clara", 0.5),       # EM 1, F1 1
    "d": ([], "Levi's Stadium", 0.5),                 # a span where there is none: -1
    "e": (["the Denver Broncos"], "Denver Broncos won", 2.0),  # EM 0, F1 0.8
    "f": ([], "Denver", 3.0),                         # -1
}


def test_the_best_threshold_worked_by_hand_with_ties():
    golds = {q: gold for q, (gold, _, _) in WORKED.items()}
    best_answers = {q: span for q, (_, span, _) in WORKED.items()}
    null_odds = {q: odds for q, (_, _, odds) in WORKED.items()}
    # Every question answered "": 3 of 6 right (d, f, g). Answered in order of their
    # null odds, the running totals (EM / F1) after each threshold:
    #   -2.0 (a):       3 / 3 + 2/3
    #    0.0 (g):       3 / 3 + 2/3      (answered "", as before)
    #    0.5 (c and d): 3 / 3 + 2/3      (c +1, d -1: one threshold answers both)
    #    2.0 (e):       3 / 4 + 7/15     (F1 +0.8)
    #    3.0 (f):       2 / 3 + 7/15
    # EM never beats answering nothing: 3/6, at a threshold below every odds (1
    # below the lowest). F1 is best at 2.0: (4 + 7/15) / 6.
    assert find_best_thresh(golds, best_answers, null_odds, "squad", 0) == \
        pytest.approx((50.0, -3.0))
    assert find_best_thresh(golds, best_answers, null_odds, "squad", 1) == \
        pytest.approx((100 * (4 + 7 / 15) / 6, 2.0))
    # (The official script takes c and d one at a time and reports EM 4/6 and F1
    # (4 + 2/3)/6 at 0.5, after c but before d: no threshold answers c without d.)
    results = score_answers(golds, {q: "" for q in golds}, "squad", null_odds, best_answers)
    assert (results["best_exact"], results["best_exact_thresh"]) == pytest.approx((50.0, -3.0))
    assert (results["best_f1"], results["best_f1_thresh"]) == \
        pytest.approx((100 * (4 + 7 / 15) / 6, 2.0))
    # Each threshold gives its figure when the questions are answered with it.
    for name in ("exact", "f1"):
        threshold = results[f"best_{name}_thresh"]
        answered = {q: best_answers[q] if null_odds[q] <= threshold else "" for q in golds}
        figure = "exact_match" if name == "exact" else "f1"
        assert score_answers(golds, answered, "squad")[figure] == \
            pytest.approx(results[f"best_{name}"])


def test_the_style_follows_the_contexts_language():
    assert detect_style(["The river.", "长江是中国第一长河。"]) == "cmrc2018"
    assert detect_style(["The river.", "A city.", "北京"]) == "squad"
