"""Words -> WordPiece windows -> one prediction per word, from its max-context window."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from bert_ad.data.batching import make_batch
from bert_ad.data.token_features import (COLUMNS, convert_sentences, max_context_span,
                                         window_spans, words_from_windows)
from bert_ad.errors import UserError
from bert_ad.data.tokenization import FullTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "man", "went", "to",
         "store", "and", "bought", "a", "gallon", "of", "milk", "un", "##aff", "##able",
         "cat", "##s", "中", "国", "."]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
    return FullTokenizer(str(path), do_lower_case=True)


def ids(*tokens):
    return [VOCAB.index(t) for t in tokens]


def test_first_piece_carries_the_tag_other_pieces_are_masked(tokenizer):
    words = ["The", "unaffable", "cats", "\u200b", "zebra", "中国"]
    tags = ["O", "B-X", "I-X", "O", "B-Y", "B-Z"]
    labels = ["O", "B-X", "I-X", "B-Y", "B-Z"]
    features = convert_sentences([words], [tags], tokenizer, labels, 32, 8)
    example = {name: features.examples.columns[name][0] for name in COLUMNS}
    # "\u200b" has no pieces at all (a format character): it becomes [UNK] like
    # the out-of-vocabulary "zebra"; "中国" is two pieces, tagged on the first.
    assert list(example["input_ids"]) == ids(
        "[CLS]", "the", "un", "##aff", "##able", "cat", "##s", "[UNK]", "[UNK]",
        "中", "国", "[SEP]")
    assert list(example["tag_mask"]) == [0, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 0]
    assert list(example["tag_ids"]) == [0, 0, 1, 0, 0, 2, 0, 0, 3, 4, 0, 0]
    assert list(example["word_positions"]) == [1, 2, 5, 7, 8, 9]
    assert list(example["word_tag_ids"]) == [0, 1, 2, 0, 3, 4]
    assert list(example["word_mask"]) == [1] * 6
    assert list(example["segment_ids"]) == [0] * 12
    assert features.sentence_lengths == [6]
    assert len(features.windows) == 1 and features.windows[0].max_context.all()


def test_run_squad_example_bought_has_max_context_in_span_c(tokenizer):
    # run_squad.py's own example: spans of 5 tokens, stride 3.
    words = "the man went to the store and bought a gallon of milk".split()
    assert window_spans(len(words), 5, 3) == [(0, 5), (3, 5), (6, 5), (9, 3)]
    assert max_context_span(window_spans(12, 5, 3), words.index("bought")) == 2
    features = convert_sentences([words], None, tokenizer, ["O"], 7, 3)
    assert [w.first_word for w in features.windows] == [0, 3, 6, 9]
    # Scores min(left, right) + 0.01 * 5; e.g. "to" (word 3) is 1.05 in span A
    # (3 left, 1 right) and 0.05 in span B (0 left).
    assert [list(w.max_context) for w in features.windows] == [
        [True, True, True, True, False],     # the man went to | the
        [False, True, True, True, False],    # to | the store and | bought
        [False, True, True, True, False],    # and | bought a gallon | of
        [False, True, True]]                 # of | milk
    per_word = words_from_windows(features, [np.full(w.num_words, i)
                                             for i, w in enumerate(features.windows)])
    assert list(per_word[0]) == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3]


@pytest.mark.parametrize("num_pieces, max_pieces, stride", [
    (1, 5, 2), (5, 5, 2), (6, 5, 2), (7, 5, 2), (100, 10, 3), (100, 10, 10),
    (100, 10, 25), (31, 6, 1),
])
def test_window_count_and_coverage(num_pieces, max_pieces, stride):
    spans = window_spans(num_pieces, max_pieces, stride)
    step = min(stride, max_pieces)
    expected = 1 + math.ceil(max(0, num_pieces - max_pieces) / step)
    assert len(spans) == expected
    assert spans[-1][0] + spans[-1][1] == num_pieces
    assert all(length <= max_pieces for _, length in spans)
    covered = set()
    for start, length in spans:
        covered.update(range(start, start + length))
    assert covered == set(range(num_pieces))


def _random_sentences(rng, count, max_words):
    words = ["the", "unaffable", "cats", "zebra", "中", "国", "man", "a.", "\u200b",
             "gallon", "uncats"]
    return [[rng.choice(words) for _ in range(rng.randint(1, max_words))]
            for _ in range(count)]


@pytest.mark.parametrize("max_seq_length, stride", [(6, 2), (8, 3), (10, 1), (12, 20),
                                                    (64, 16)])
def test_round_trip_every_word_one_value_from_its_max_context_window(
        tokenizer, max_seq_length, stride):
    rng = random.Random(max_seq_length * 7 + stride)
    sentences = _random_sentences(rng, 23, 40)
    labels = [str(i) for i in range(40)]
    tags = [[str(i) for i in range(len(words))] for words in sentences]
    features = convert_sentences(sentences, tags, tokenizer, labels, max_seq_length, stride)
    examples = features.examples
    assert len(examples) == len(features.windows)
    assert max(examples.lengths) <= max_seq_length
    # Each window predicts (word index * 1000 + window index), so the round
    # trip shows which window every word's value came from.
    values = [np.asarray(word_tags) * 1000 + i
              for i, word_tags in enumerate(examples.columns["word_tag_ids"])]
    per_word = words_from_windows(features, values)
    assert [len(v) for v in per_word] == [len(s) for s in sentences]
    # Expected window per word, recomputed from the windows' own arrays: among
    # the windows holding the word's first piece, the largest
    # min(left, right) + 0.01 * pieces, the first one on a tie.
    best = {}
    for index, window in enumerate(features.windows):
        pieces = examples.lengths[index] - 2
        for k, position in enumerate(examples.columns["word_positions"][index]):
            left, right = position - 1, pieces - position
            score = min(left, right) + 0.01 * pieces
            key = (window.sentence, window.first_word + k)
            if key not in best or score > best[key][0]:
                best[key] = (score, index)
    for sentence, got in enumerate(per_word):
        assert list(got // 1000) == list(range(len(sentences[sentence])))
        assert list(got % 1000) == [best[(sentence, w)][1] for w in range(len(got))]
    # Probabilities [words, tags] come back the same way.
    probabilities = [np.eye(40)[np.asarray(t)] for t in examples.columns["word_tag_ids"]]
    for sentence, rows in enumerate(words_from_windows(features, probabilities)):
        assert rows.shape == (len(sentences[sentence]), 40)
        assert list(rows.argmax(1)) == list(range(len(sentences[sentence])))


def test_long_sentence_gets_several_windows_and_every_word_a_tag(tokenizer):
    words = ["unaffable"] * 10  # 3 pieces each: 30 pieces
    features = convert_sentences([words], None, tokenizer, ["O"], 10, 4)
    assert len(features.windows) == 1 + math.ceil((30 - 8) / 4)
    assert sum(int(w.max_context.sum()) for w in features.windows) == 10
    # A window can start mid-word: its first full word is the next one.
    assert [w.first_word for w in features.windows] == [0, 2, 3, 4, 6, 7, 8]


def test_window_without_a_word_start_is_dropped(tokenizer):
    # "unaffable" is 3 pieces; with 1 piece per window the middle windows hold
    # only ##aff / ##able and are dropped.
    features = convert_sentences([["unaffable", "the"]], None, tokenizer, ["O"], 3, 1)
    assert [w.first_word for w in features.windows] == [0, 1]
    assert list(words_from_windows(features, [[5], [6]])[0]) == [5, 6]


def test_windows_batch_with_make_batch(tokenizer):
    sentences = [["the", "cats"], ["unaffable", "man", "went", "to", "the", "store"]]
    features = convert_sentences(sentences, None, tokenizer, ["O"], 16, 4)
    batch = make_batch(features.examples, [0, 1], "dynamic", batch_size=3)
    assert batch["input_ids"].shape == (3, 16) and batch["word_positions"].shape == (3, 16)
    # input_mask follows input_ids ([CLS] + pieces + [SEP]), not the word columns.
    np.testing.assert_array_equal(batch["input_mask"].sum(1), [5, 10, 0])
    np.testing.assert_array_equal(batch["word_mask"].sum(1), [2, 6, 0])
    np.testing.assert_array_equal(batch["word_positions"][0], [1, 2] + [0] * 14)
    np.testing.assert_array_equal(batch["word_positions"][1], [1, 4, 5, 6, 7, 8] + [0] * 10)


def test_chinese_one_character_per_word_with_the_real_chinese_vocab(chinese_vocab):
    tokenizer = FullTokenizer(chinese_vocab, do_lower_case=True)
    words = list("中共中央总书记江泽民发表１９９８年新年讲话")
    features = convert_sentences([words], None, tokenizer, ["O"], 128, 32)
    example = features.examples.columns
    assert len(example["input_ids"][0]) == len(words) + 2
    assert list(example["word_positions"][0]) == list(range(1, len(words) + 1))
    expected = [tokenizer.vocab.get(c, tokenizer.unk_id) for c in words]
    assert list(example["input_ids"][0][1:-1]) == expected


def test_bad_settings_and_unknown_tags(tokenizer):
    with pytest.raises(UserError, match="--max_seq_length must be at least 3"):
        convert_sentences([["the"]], None, tokenizer, ["O"], 2, 1)
    with pytest.raises(UserError, match="--doc_stride must be at least 1, got 0"):
        convert_sentences([["the"]], None, tokenizer, ["O"], 8, 0)
    with pytest.raises(UserError, match="tag 'B-X' is not in the label list"):
        convert_sentences([["the"]], [["B-X"]], tokenizer, ["O"], 8, 2)
    features = convert_sentences([["the"]], None, tokenizer, ["O"], 8, 2)
    with pytest.raises(ValueError, match="2 window predictions for 1 windows"):
        words_from_windows(features, [[0], [0]])
