"""A sentence's tokens -> its pieces, and the piece each token reads.

Token classification gets text already cut into tokens (a CoNLL file: one
token a line) and must give each token one tag. How the tokens become pieces
depends on the vocabulary:

  * WordPiece (and SentencePiece .model files): token by token, as Google's
    BERT NER recipes do (`word_pieces`). WordPiece never joins characters
    across a space or a CJK character, so a token's pieces are the ones the
    running text would get, and a token reads its first piece.
  * Unigram piece lists (multilingual-e5's `pieces.tsv`): the sentence as a
    whole (`sentence_pieces`). Token by token, every Chinese character would
    be a word of its own, `▁` + the character: most characters have no `▁X`
    piece, so 92% of them get a lone `▁` piece before them, sequences are
    nearly twice as long, and the model sees a segmentation it never saw in
    pretraining. Instead the tokens are joined as the text was written (see
    `joined_text`), segmented once, and each token reads the first piece
    that covers one of its characters (bert_ad/data/piece_offsets.py gives
    every piece its characters). A piece may cover several tokens (`中国`
    for `中`, `国`): they read the same piece; a token covering several
    pieces reads its first, like a WordPiece word.

`SentencePieces.first_piece` never decreases along the sentence (tokens read
pieces in text order), so the tokens whose piece is in a window are
consecutive (bert_ad/data/token_features.py relies on it). `offsets` says
which of the tokens reading one piece a token is (0, 1, 2, ...): the head
adds a learned vector for it (bert_ad/model/heads.py), so tokens sharing a
piece can still get different tags (`B-LOC`, `I-LOC`).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_ad.data.basic_tokenization import is_chinese_char
from bert_ad.data.piece_offsets import piece_spans
from bert_ad.data.tokenization import UNK, PieceListTokenizer

# Characters written without spaces between them in Chinese and Japanese text, besides
# the CJK ideographs (Google's ranges, `is_chinese_char`): (first, last) code points.
_UNSPACED_RANGES = (
    (0x00B7, 0x00B7),  # middle dot between the parts of a transliterated name (诺罗敦·西哈努克)
    (0x00D7, 0x00D7),  # multiplication sign
    (0x2010, 0x2027),  # General Punctuation: dashes, quotes “ ” ‘ ’, ellipsis … (not the
    (0x2030, 0x205E),  # spaces, separators and format characters around them); per mille
    (0x2100, 0x214F),  # letterlike symbols: ℃
    (0x25A0, 0x25FF),  # geometric shapes: ● ○ (○ also stands for zero: 一九○○)
    (0x3000, 0x30FF),  # CJK symbols and punctuation 。、《》, hiragana, katakana
    (0x3100, 0x312F),  # bopomofo
    (0xFF00, 0xFFEF),  # halfwidth and fullwidth forms: ，：（）１９ＡＢ
)


def written_without_space(char: str) -> bool:
    """True for a character that CJK text puts right next to its neighbours."""
    code = ord(char)
    return is_chinese_char(code) or any(first <= code <= last
                                        for first, last in _UNSPACED_RANGES)


def segments_whole_sentences(tokenizer) -> bool:
    """Whether `sentence_pieces` segments a sentence as a whole (a unigram piece
    list) rather than token by token."""
    return isinstance(tokenizer, PieceListTokenizer)


@dataclasses.dataclass
class SentencePieces:
    """The pieces of one sentence and the piece each token reads.

    Attributes:
      pieces: the sentence's pieces, in order.
      first_piece: [tokens] int64, index in `pieces` of the piece each token
        reads; never decreases, may repeat (tokens sharing a piece).
    """
    pieces: List[str]
    first_piece: np.ndarray

    @property
    def offsets(self) -> np.ndarray:
        """[tokens] int32: 0 for the first token reading its piece, 1 for the
        next token reading the same piece, and so on."""
        return piece_offsets(self.first_piece)


def piece_offsets(first_piece: np.ndarray) -> np.ndarray:
    """For each token, how many tokens before it read the same piece."""
    first_piece = np.asarray(first_piece)
    offsets = np.zeros(len(first_piece), np.int32)
    for index in range(1, len(first_piece)):
        if first_piece[index] == first_piece[index - 1]:
            offsets[index] = offsets[index - 1] + 1
    return offsets


def word_pieces(words: Sequence[str], tokenizer, cache: Optional[Dict[str, List[str]]] = None
                ) -> List[List[str]]:
    """The pieces of each word on its own; [UNK] for a word the tokenizer drops
    entirely.

    Args:
      words: the words of one sentence.
      tokenizer: anything with tokenize(text) -> pieces (FullTokenizer).
      cache: word -> pieces, shared across sentences to tokenize each distinct
        word once.
    """
    cache = {} if cache is None else cache
    pieces = []
    for word in words:
        found = cache.get(word)
        if found is None:
            found = list(tokenizer.tokenize(word)) or [UNK]
            cache[word] = found
        pieces.append(found)
    return pieces


def joined_text(tokens: Sequence[str]) -> Tuple[str, np.ndarray, np.ndarray]:
    """The tokens as running text, and where each token is in it.

    Tokens are joined the way the text was written: nothing between two tokens
    when both touching characters are CJK ideographs, CJK or fullwidth
    punctuation, fullwidth forms, kana or the punctuation Chinese text uses
    (`written_without_space`: "中" "国" -> "中国", "１９" "９８" -> "１９９８"),
    one space otherwise ("用" "IBM" "电脑" -> "用 IBM 电脑"; English tokens are
    space-separated words, so English segments exactly as token by token).

    Returns:
      (text, starts, ends): token i is text[starts[i]:ends[i]].
    """
    parts: List[str] = []
    starts = np.zeros(len(tokens), np.int64)
    ends = np.zeros(len(tokens), np.int64)
    position = 0
    for index, token in enumerate(tokens):
        if index and not (tokens[index - 1] and token
                          and written_without_space(tokens[index - 1][-1])
                          and written_without_space(token[0])):
            parts.append(" ")
            position += 1
        starts[index] = position
        parts.append(token)
        position += len(token)
        ends[index] = position
    return "".join(parts), starts, ends


def sentence_pieces(tokens: Sequence[str], tokenizer,
                    cache: Optional[Dict[str, List[str]]] = None) -> SentencePieces:
    """The pieces of a sentence's tokens and the piece each token reads.

    Token by token for WordPiece and SentencePiece (`word_pieces`, `cache` as
    there); a piece list segments the sentence as a whole (module docstring).
    """
    if not segments_whole_sentences(tokenizer):
        per_word = word_pieces(tokens, tokenizer, cache)
        first = np.cumsum([0] + [len(p) for p in per_word[:-1]]).astype(np.int64)
        return SentencePieces([piece for word in per_word for piece in word], first)
    text, token_starts, token_ends = joined_text(tokens)
    spans = piece_spans(tokenizer, text)
    return align_tokens(spans.pieces, spans.starts, spans.ends, token_starts, token_ends)


def align_tokens(pieces: Sequence[str], piece_starts: np.ndarray, piece_ends: np.ndarray,
                 token_starts: np.ndarray, token_ends: np.ndarray) -> SentencePieces:
    """Each token's piece by character offsets: the first piece whose characters
    overlap the token's.

    Pieces come in text order with non-decreasing [start, end) spans (a lone
    `▁` has an empty one and overlaps nothing). A token that no piece overlaps
    gave no piece at all (a character the normalisation deletes or turns into
    a space, such as U+200B): it gets an [UNK] piece of its own where it
    stands, as `word_pieces` gives it, so every token reads a piece.
    """
    piece_starts, piece_ends = np.asarray(piece_starts), np.asarray(piece_ends)
    # The first piece ending after the token's start; it overlaps the token
    # when it also starts before the token's end.
    candidates = np.searchsorted(piece_ends, token_starts, side="right")
    unknown_before: Dict[int, int] = {}  # piece index -> [UNK]s inserted before it
    reads: List[Tuple[int, int]] = []    # per token: (piece index, -1) or (piece index, k-th [UNK])
    for token, candidate in enumerate(candidates):
        candidate = int(candidate)
        if candidate < len(pieces) and piece_starts[candidate] < token_ends[token]:
            reads.append((candidate, -1))
        else:
            count = unknown_before.get(candidate, 0)
            unknown_before[candidate] = count + 1
            reads.append((candidate, count))
    out: List[str] = []
    position = {}  # piece index -> its index in `out`
    unknown_start = {}  # piece index -> index in `out` of the first [UNK] before it
    for index in range(len(pieces) + 1):
        if index in unknown_before:
            unknown_start[index] = len(out)
            out.extend([UNK] * unknown_before[index])
        if index < len(pieces):
            position[index] = len(out)
            out.append(pieces[index])
    first = [position[piece] if k < 0 else unknown_start[piece] + k for piece, k in reads]
    return SentencePieces(out, np.array(first, np.int64))
