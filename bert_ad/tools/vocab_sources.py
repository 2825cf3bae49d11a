"""Where each row of a transplanted vocab comes from: the source model's tokenizer.

`python -m bert_ad.vocab transplant` (bert_ad/tools/vocab.py) rebuilds
`bert/embeddings/word_embeddings` (and `cls/predictions/output_bias` when
present) row by row for the target vocab, from the source model's rows. For
each target token, the first rule that applies decides (`plan_row`):

  1. special tokens: [CLS], [SEP], [PAD], [UNK], [MASK] take the source's
     counterpart (<s>, </s>, <pad>, <unk>, <mask> for a unigram source;
     the same names for a WordPiece one)                             copied
  2. the token is a source piece                                     copied
       `##x`: the continuation piece (`x` for unigram, `##x` for WordPiece)
       a word-initial `x`, unigram: `▁x`, then `x`; for a single
         character other than an ASCII letter or digit (a CJK character,
         punctuation, a symbol) `x` first, because in running text such
         characters follow others without a space and XLM-R mostly saw them
         bare
       a word-initial `x`, WordPiece: `x`
  3. a reserved marker ([unused7], <S>, <T>: brackets around a name)  fresh
  4. the mean of the rows of the token's segmentation by the source
     tokenizer's own algorithm (Viterbi over the scores for unigram, on
     `▁x` for a word-initial token, its lone leading `▁` piece dropped; greedy
     longest match for WordPiece)                                     averaged
  5. nothing covers it (an unknown character)                         fresh

A unigram source is normalised first as its tokenizer does (the
normalization.tsv beside pieces.tsv, else NFKC).
"""

from __future__ import annotations

import re
from typing import List, NamedTuple, Optional

from bert_ad.data.basic_tokenization import strip_accents
from bert_ad.data.tokenization import (CLS, MASK, PAD, SEP, UNIGRAM_SPECIAL_PIECES, UNK,
                                       load_vocab)
from bert_ad.data.unigram import WORD_START, UnigramTokenizer, is_piece_list
from bert_ad.errors import require_file

SPECIAL_TOKENS = (CLS, SEP, PAD, UNK, MASK)
_RESERVED = re.compile(r"^(\[[^\[\]]+\]|<[^<>]+>)$")

COPIED, AVERAGED, FRESH = "copied", "averaged", "fresh"


class RowPlan(NamedTuple):
    """Where one target row comes from."""
    how: str                 # COPIED, AVERAGED or FRESH
    source_ids: List[int]    # source rows (one when copied, none when fresh)



class WordPieceSource:
    """A WordPiece vocab.txt as the source: greedy longest match first."""

    kind = "WordPiece"

    def __init__(self, path: str, do_lower_case: bool = False):
        self.path = path
        self.vocab = load_vocab(path)
        self.do_lower_case = do_lower_case
        self.pieces = list(self.vocab)

    @property
    def size(self) -> int:
        return len(self.vocab)

    def special(self, token: str) -> Optional[int]:
        return self.vocab.get(token)

    def _text(self, text: str) -> str:
        return strip_accents(text.lower()) if self.do_lower_case else text

    def piece(self, text: str, continuation: bool) -> Optional[int]:
        text = self._text(text)
        return self.vocab.get("##" + text if continuation else text)

    def segment(self, text: str, continuation: bool) -> Optional[List[int]]:
        """Greedy longest-match pieces of `text`, or None if it cannot be covered."""
        text = self._text(text)
        ids, start = [], 0
        while start < len(text):
            for end in range(len(text), start, -1):
                candidate = text[start:end]
                if start > 0 or continuation:
                    candidate = "##" + candidate
                if candidate in self.vocab:
                    ids.append(self.vocab[candidate])
                    start = end
                    break
            else:
                return None
        return ids or None


class UnigramSource:
    """A unigram piece list (pieces.tsv) as the source: Viterbi over the scores."""

    kind = "unigram"

    def __init__(self, path: str):
        self.path = path
        self.tokenizer = UnigramTokenizer.from_file(path)
        self.pieces = self.tokenizer.pieces
        self._word_start = self.tokenizer.piece_ids.get(WORD_START)

    @property
    def size(self) -> int:
        return self.tokenizer.vocab_size

    def special(self, token: str) -> Optional[int]:
        return self.tokenizer.special_id(UNIGRAM_SPECIAL_PIECES[token])

    def piece(self, text: str, continuation: bool) -> Optional[int]:
        text = self.tokenizer.normalize_chars(text)
        if not text:
            return None
        ids = self.tokenizer.piece_ids
        if continuation:
            candidates = [text]
        elif len(text) == 1 and not (text.isascii() and text.isalnum()):
            candidates = [text, WORD_START + text]
        else:
            candidates = [WORD_START + text, text]
        for candidate in candidates:
            if candidate in ids and ids[candidate] != self.tokenizer.unk_id:
                return ids[candidate]
        return None

    def segment(self, text: str, continuation: bool) -> Optional[List[int]]:
        """Viterbi pieces of `text` (as a word start unless `continuation`),
        or None if a character is unknown."""
        text = self.tokenizer.normalize_chars(text)
        if not text:
            return None
        ids = self.tokenizer.segment(text if continuation else WORD_START + text)
        if len(ids) > 1 and ids[0] == self._word_start:
            ids = ids[1:]  # the bare word-start marker says nothing about the word
        if self.tokenizer.unk_id in ids:
            return None
        return ids


def load_source(path: str, do_lower_case: bool = False):
    """The source tokenizer: a piece list (a tab on line 1) or a WordPiece vocab."""
    require_file(path, "--source_vocab")
    if is_piece_list(path):
        return UnigramSource(path)
    return WordPieceSource(path, do_lower_case)


def plan_row(source, token: str) -> RowPlan:
    """The rule of the module docstring that decides `token`'s row."""
    if token in SPECIAL_TOKENS:
        special = source.special(token)
        if special is not None:
            return RowPlan(COPIED, [special])
    continuation = token.startswith("##") and len(token) > 2
    text = token[2:] if continuation else token
    piece = source.piece(text, continuation)
    if piece is not None:
        return RowPlan(COPIED, [piece])
    if _RESERVED.match(token):
        return RowPlan(FRESH, [])
    ids = source.segment(text, continuation)
    if not ids:
        return RowPlan(FRESH, [])
    return RowPlan(AVERAGED, ids)
