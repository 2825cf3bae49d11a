"""A text's pieces with the characters of the original text each one covers.

Extractive question answering predicts pieces and must answer with the
context's own characters; Chinese has no spaces to fall back on (Google's
run_squad maps answers through whitespace-separated words, which makes a
Chinese paragraph one word). So each piece gets its span [start, end) in the
original text, from the tokenizer's own steps replayed character by
character:

  * WordPiece (FullTokenizer): cleaning, CJK characters as words, whitespace
    splitting, lower-casing and accent stripping (per character), punctuation
    splitting, then WordPiece; a piece covers the characters it came from, an
    [UNK] its whole word;
  * unigram piece lists (PieceListTokenizer, multilingual-e5): the
    normalisation map per character, `▁` before every word, Viterbi; a `▁`
    piece standing alone covers nothing (an empty span where its word starts).

The pieces are exactly the tokenizer's (`tokenizer.tokenize(text)`;
tests/test_squad_features.py checks it on English and Chinese text), with
two documented exceptions where one character's normalisation depends on its
neighbours: a word whose lower-casing differs from its characters' (a final
Greek sigma) keeps its pieces but each covers the whole word; and a piece
list without normalization.tsv (Unicode NFKC) normalises each character on
its own, which differs from NFKC of the whole text only where a combining
mark composes with the character before it.
"""

from __future__ import annotations

import dataclasses
from typing import List, Tuple

import numpy as np

# Google's character classes, as the tokenizers apply them (offsets must agree).
from bert_ad.data.basic_tokenization import (_is_control, _is_punctuation, _is_whitespace,
                                             is_chinese_char, strip_accents, to_text)
from bert_ad.data.tokenization import UNK, FullTokenizer, PieceListTokenizer
from bert_ad.data.unigram import WORD_START
from bert_ad.errors import fail

# A character of the normalised text and the span of original characters it came from.
Char = Tuple[str, int, int]


@dataclasses.dataclass
class PieceSpans:
    """pieces[i] came from text[starts[i]:ends[i]] (an empty span: a lone `▁`)."""
    pieces: List[str]
    starts: np.ndarray  # [pieces] int64
    ends: np.ndarray    # [pieces] int64

    def __len__(self) -> int:
        return len(self.pieces)


def piece_spans(tokenizer, text: str) -> PieceSpans:
    """The pieces of `text` and the characters each covers.

    Raises:
      UserError: a tokenizer that cannot say where its pieces come from
        (SentencePiece .model files).
    """
    text = to_text(text)
    if isinstance(tokenizer, FullTokenizer):
        spans = _wordpiece_spans(tokenizer, text)
    elif isinstance(tokenizer, PieceListTokenizer):
        spans = _unigram_spans(tokenizer, text)
    else:
        fail("question answering maps answers to pieces through character offsets, which "
             f"{type(tokenizer).__name__} does not give; use a WordPiece vocab.txt or a "
             "unigram piece list (pieces.tsv) as --vocab_file")
    pieces = [piece for piece, _, _ in spans]
    return PieceSpans(pieces, np.array([s for _, s, _ in spans], np.int64),
                      np.array([e for _, _, e in spans], np.int64))


# --- WordPiece -------------------------------------------------------------------------

def _basic_words(text: str, do_lower_case: bool) -> List[List[Char]]:
    """FullTokenizer.basic_tokenize's words, each character with its origin span."""
    words: List[List[Char]] = []
    current: List[Tuple[str, int]] = []

    def flush():
        if current:
            words.extend(_split_punctuation(_normalise_word(current, do_lower_case)))
            current.clear()

    for index, char in enumerate(text):
        if char == "\x00" or char == "\ufffd" or _is_control(char):
            continue
        if _is_whitespace(char):
            flush()
        elif is_chinese_char(ord(char)):
            flush()
            current.append((char, index))
            flush()
        else:
            current.append((char, index))
    flush()
    return [word for word in words if word]


def _normalise_word(chars: List[Tuple[str, int]], do_lower_case: bool) -> List[Char]:
    """Lower-case and strip accents character by character (Google does it per word:
    where that differs, every character covers the whole word)."""
    if not do_lower_case:
        return [(char, index, index + 1) for char, index in chars]
    normalised = [(out, index, index + 1) for char, index in chars
                  for out in strip_accents(char.lower())]
    word = "".join(char for char, _ in chars)
    if "".join(char for char, _, _ in normalised) == strip_accents(word.lower()):
        return normalised
    first, last = chars[0][1], chars[-1][1] + 1
    return [(out, first, last) for out in strip_accents(word.lower())]


def _split_punctuation(word: List[Char]) -> List[List[Char]]:
    out: List[List[Char]] = []
    current: List[Char] = []
    for char in word:
        if _is_punctuation(char[0]):
            if current:
                out.append(current)
                current = []
            out.append([char])
        else:
            current.append(char)
    if current:
        out.append(current)
    return out


def _wordpiece_spans(tokenizer: FullTokenizer, text: str) -> List[Tuple[str, int, int]]:
    spans = []
    for word in _basic_words(text, tokenizer.do_lower_case):
        pieces = tokenizer.wordpiece_tokenize("".join(char for char, _, _ in word))
        if pieces == [UNK]:  # a word WordPiece cannot cover: [UNK] stands for all of it
            spans.append((UNK, word[0][1], word[-1][2]))
            continue
        position = 0
        for index, piece in enumerate(pieces):
            length = len(piece) - (2 if index > 0 else 0)  # "##" marks a continuation
            chars = word[position:position + length]
            spans.append((piece, min(c[1] for c in chars), max(c[2] for c in chars)))
            position += length
    return spans


# --- unigram piece lists ------------------------------------------------------------------

def _unigram_spans(tokenizer: PieceListTokenizer, text: str) -> List[Tuple[str, int, int]]:
    unigram = tokenizer.unigram
    chars: List[Char] = []
    for index, char in enumerate(text):
        if tokenizer.do_lower_case:
            char = char.lower()
        chars.extend((out, index, index + 1) for out in unigram.normalize_chars(char))
    # Words as UnigramTokenizer.normalize cuts them: after the map only " " separates
    # (it turned tabs and line breaks into spaces); NFKC keeps them, so any whitespace.
    table = unigram.normalization is not None
    normalised: List[Char] = []
    word: List[Char] = []
    for char in chars + [(" ", len(text), len(text))]:
        if char[0] == " " if table else char[0].isspace():
            if word:
                normalised.append((WORD_START, word[0][1], word[0][1]))  # covers nothing
                normalised.extend(word)
                word = []
        else:
            word.append(char)
    ids = unigram.segment("".join(char for char, _, _ in normalised))
    spans = []
    position = 0
    for piece_id in ids:
        length = 1 if piece_id == unigram.unk_id else len(unigram.pieces[piece_id])
        covered = [c for c in normalised[position:position + length] if c[2] > c[1]]
        where = normalised[position][1]
        spans.append((unigram.pieces[piece_id],
                      min((c[1] for c in covered), default=where),
                      max((c[2] for c in covered), default=where)))
        position += length
    return spans
