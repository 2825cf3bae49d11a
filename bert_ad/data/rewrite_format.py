"""The text-rewrite row format: segments, slots, reading rows, a row as model input.

An ad text is cut into segments at the punctuation in SEGMENT_PUNCTUATION
(。！!？?，,：:); the punctuation and the spaces around a segment stay in the
text, outside the segment. A Latin comma or colon between two digits
("1,000", "10:30") does not cut. A text without punctuation is one segment.

A slot is one segment blanked out: the segment is replaced by one SLOT
marker ("[SLOT]") per token of the segment (tokens of the tokenizer the
data was prepared with), so the slot keeps its size:

  这款耳机，音质很好，戴着舒服。   segments 这款耳机 / 音质很好 / 戴着舒服
  segment 1 blanked:             这款耳机，[SLOT][SLOT][SLOT][SLOT]，戴着舒服。

Rows (UTF-8, tab-separated, one per line):

  label<TAB>segment_index<TAB>candidate<TAB>text_with_slot

label 1: the candidate is the segment that was blanked; label 0: a negative,
a segment of another text. segment_index counts the segments of
text_with_slot from 0 (the slot run is a segment of its own, so the index is
the same as in the original text) and must point at the slot. Files to score
may leave the label out (3 columns). `read_rows` reads and checks a file of
them; bert_ad/data/rewrite_rows.py makes such files from raw texts.

Model input (fine-tuning, `encode_row`):

  [CLS] candidate [SEP] before [MASK] x N after [SEP]

with N = min(slot size, number of candidate tokens): a candidate shorter
than the slot gets as many masks as it has tokens, a longer one only as many
as the slot has. The candidate keeps at most (max_seq_length - 3) // 2
tokens; the context is cut from its far ends so the tokens next to the slot
stay (`fit_context`).

Span-masked pretraining (`create_pretraining_data.py --mode=rewrite`,
`write_span_instances` in bert_ad/pretraining/rewrite_spans.py): each row becomes

  [CLS] candidate [SEP] before candidate after [SEP]

where the candidate's tokens inside the text are one masked span: every
position of it is predicted, and each shows [MASK] 80% of the time, itself
10% and a random vocab entry 10% (Google's rule, bert_ad.pretraining.masking). The
next-sentence label follows Google's convention, 0 = "B goes with A" (a
label-1 row: the candidate is the text's own segment) and 1 = "random" (a
label-0 row), which is the opposite of the fine-tuning label. Rows that
cannot form a span are skipped and counted in a summary line: an empty
candidate (or one without tokens), a candidate not shorter than the text (no
context around the slot), a candidate longer than --max_predictions_per_seq
or than half of --max_seq_length.
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

from bert_ad.data.tokenization import CLS, MASK, SEP
from bert_ad.errors import fail

SEGMENT_PUNCTUATION = "。！!？?，,：:"
# Latin separators that do not cut between two digits (1,000  10:30).
DIGIT_SEPARATORS = ",:"
SLOT = "[SLOT]"
ROW_COLUMNS = ("label", "segment_index", "candidate", "text_with_slot")
LABELS = ("0", "1")
_SLOT_RUN = re.compile("(?:" + re.escape(SLOT) + ")+")


# ----------------------------------------------------------------------------
# Segments and slots
# ----------------------------------------------------------------------------

def _cuts_here(text: str, i: int, punctuation: str) -> bool:
    char = text[i]
    if char not in punctuation:
        return False
    if char in DIGIT_SEPARATORS and 0 < i < len(text) - 1:
        return not (text[i - 1].isdigit() and text[i + 1].isdigit())
    return True


def segment_spans(text: str, punctuation: str = SEGMENT_PUNCTUATION
                  ) -> List[Tuple[int, int]]:
    """(start, end) of each segment of `text`, in order.

    A segment is a stretch between punctuation marks, without the spaces
    around it; stretches that are empty or only spaces are not segments.

    >>> segment_spans("好，很好！ ok")
    [(0, 1), (2, 4), (6, 8)]
    """
    spans = []
    start = 0
    for i in range(len(text) + 1):
        if i < len(text) and not _cuts_here(text, i, punctuation):
            continue
        piece = text[start:i]
        stripped = piece.strip()
        if stripped:
            left = start + len(piece) - len(piece.lstrip())
            spans.append((left, left + len(stripped)))
        start = i + 1
    return spans


def split_segments(text: str, punctuation: str = SEGMENT_PUNCTUATION) -> List[str]:
    """The segments of `text` (see `segment_spans`)."""
    return [text[s:e] for s, e in segment_spans(text, punctuation)]


def blank_segment(text: str, span: Tuple[int, int], size: int) -> str:
    """`text` with the segment at `span` replaced by `size` SLOT markers."""
    if size < 1:
        raise ValueError(f"a slot needs at least one marker, got size {size}")
    start, end = span
    return text[:start] + SLOT * size + text[end:]


class Slot(NamedTuple):
    """A parsed text_with_slot: the text around the slot and its size."""

    before: str
    after: str
    size: int        # SLOT markers = tokens of the blanked segment
    segments: int    # segments of the text, the slot included


def parse_slot(text_with_slot: str, segment_index: int, where: str) -> Slot:
    """Check that `text_with_slot` has one slot, at segment `segment_index`.

    Raises:
      UserError naming `where`: no slot, two slots, a slot that is not a
      whole segment, or an index that is not the slot's.
    """
    runs = list(_SLOT_RUN.finditer(text_with_slot))
    if not runs:
        fail(f"{where}: text_with_slot has no {SLOT} marker; blank the segment "
             f"to rewrite with one {SLOT} per token of it")
    if len(runs) > 1:
        fail(f"{where}: text_with_slot has {len(runs)} separate {SLOT} runs; a "
             f"row blanks exactly one segment")
    run = runs[0]
    spans = segment_spans(text_with_slot)
    if segment_index >= len(spans):
        fail(f"{where}: segment_index {segment_index} does not exist: the text "
             f"has {len(spans)} segment(s), numbered 0 to {len(spans) - 1}")
    slot_index = next((i for i, span in enumerate(spans)
                       if span == (run.start(), run.end())), None)
    if slot_index is None:
        fail(f"{where}: the {SLOT} run is not a whole segment (text around it "
             f"without punctuation in between); a slot replaces a segment")
    if slot_index != segment_index:
        fail(f"{where}: segment_index {segment_index} is not the slot: segment "
             f"{segment_index} is {text_with_slot[slice(*spans[segment_index])]!r}"
             f" and the {SLOT} run is segment {slot_index}")
    return Slot(text_with_slot[:run.start()], text_with_slot[run.end():],
                (run.end() - run.start()) // len(SLOT), len(spans))


# ----------------------------------------------------------------------------
# Row files
# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class RewriteRow:
    """One row of a rewrite file.

    label is "0", "1" or None (a 3-column file to score); columns are the
    row's own fields as read, for output files; source and line (1-based)
    say where it came from.
    """

    label: Optional[str]
    segment_index: int
    candidate: str
    text_with_slot: str
    slot: Slot
    columns: Tuple[str, ...]
    source: str = ""
    line: int = 0

    @property
    def slot_key(self) -> Tuple[int, str]:
        """Rows with the same key are candidates for the same slot."""
        return self.segment_index, self.text_with_slot


def file_lines(path: str, what: str) -> Iterator[Tuple[int, str]]:
    """(1-based number, line without its end) of a UTF-8 file.

    Splits on "\\n" only (a stray "\\r" or U+2028 inside a text stays), drops
    a CRLF's "\\r" and a BOM on line 1.
    """
    if not os.path.isfile(path):
        fail(f"{what} {path!r} does not exist")
    try:
        with open(path, "rb") as f:
            for number, raw in enumerate(f, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    fail(f"{path} line {number}: not valid UTF-8 (byte "
                         f"{e.start}); save the file as UTF-8")
                if number == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                yield number, line.rstrip("\n").rstrip("\r")
    except OSError as e:
        fail(f"cannot read {what} {path!r}: {e.strerror or e}")


def parse_row(fields: Sequence[str], where: str, labelled: Optional[bool] = True,
              allow_empty_candidate: bool = False) -> RewriteRow:
    """A RewriteRow from the tab-separated `fields` of one line.

    Args:
      fields: the line split on tabs.
      where: "<file> line <n>", for error messages.
      labelled: True: 4 columns with a label 0/1; None: 4 columns, or 3
        without the label (files to score).
      allow_empty_candidate: keep a row whose candidate is empty (span
        pretraining counts and skips those) instead of refusing it.
    """
    allowed = (3, 4) if labelled is None else (4,)
    if len(fields) not in allowed:
        names = ROW_COLUMNS if 4 in allowed else ROW_COLUMNS[1:]
        extra = " (or 3, without the label)" if labelled is None else ""
        fail(f"{where}: expected {len(names)} tab-separated columns "
             f"{', '.join(names)}{extra}, found {len(fields)}")
    label = None
    if len(fields) == 4:
        label = fields[0].strip()
        if label not in LABELS:
            fail(f"{where}: label {label!r} must be 0 or 1 (1 = the candidate "
                 f"is the blanked segment)")
    index_text, candidate, text = fields[-3], fields[-2].strip(), fields[-1].strip()
    try:
        segment_index = int(index_text.strip())
        if segment_index < 0:
            raise ValueError
    except ValueError:
        fail(f"{where}: segment_index {index_text!r} is not a number 0, 1, 2, ...")
    if not text:
        fail(f"{where}: empty text_with_slot (column {len(fields)})")
    if not candidate and not allow_empty_candidate:
        fail(f"{where}: empty candidate (column {len(fields) - 1})")
    slot = parse_slot(text, segment_index, where)
    return RewriteRow(label, segment_index, candidate, text, slot, tuple(fields))


def read_rows(path: str, what: str = "rewrite file", labelled: Optional[bool] = True,
              allow_empty_candidate: bool = False,
              skip_blank_lines: bool = True) -> List[RewriteRow]:
    """The rows of a rewrite file, in file order.

    Blank lines are skipped, or, with `skip_blank_lines=False` (a file whose
    predictions must line up with it line by line), refused.

    Raises:
      UserError naming the file and line (see `parse_row`), or a file
      without rows.
    """
    rows = []
    for number, line in file_lines(path, what):
        if not line.strip():
            if not skip_blank_lines:
                fail(f"{path} line {number}: blank line; predict.txt has one line per "
                     "row of this file, so remove the blank line (or give it a row)")
            continue
        row = parse_row(line.split("\t"), f"{path} line {number}", labelled,
                        allow_empty_candidate)
        rows.append(dataclasses.replace(row, source=path, line=number))
    if not rows:
        fail(f"{what} {path!r} has no rows")
    return rows


# ----------------------------------------------------------------------------
# Model input for fine-tuning
# ----------------------------------------------------------------------------

def fit_context(before: Sequence, after: Sequence, room: int) -> Tuple[list, list]:
    """At most `room` tokens of context, those nearest the slot.

    Each side keeps up to half of `room` (the before side the smaller half);
    what one side does not need goes to the other.
    """
    if len(before) + len(after) <= room:
        return list(before), list(after)
    keep_before = min(len(before), max(room // 2, room - len(after)))
    keep_after = room - keep_before
    return list(before[len(before) - keep_before:]), list(after[:keep_after])


def encode_row(row: RewriteRow, tokenizer, max_seq_length: int) -> Tuple[list, list]:
    """(tokens, segment_ids) of `[CLS] candidate [SEP] before [MASK]*N after [SEP]`.

    N = min(row.slot.size, candidate tokens); see the module doc.
    """
    max_tokens = max_seq_length - 3
    candidate = tokenizer.tokenize(row.candidate)[:max_tokens // 2]
    if not candidate:
        fail(f"{row.source} line {row.line}: the candidate {row.candidate!r} has "
             f"no tokens with this vocab")
    masks = min(row.slot.size, len(candidate))
    before, after = fit_context(tokenizer.tokenize(row.slot.before),
                                tokenizer.tokenize(row.slot.after),
                                max_tokens - len(candidate) - masks)
    tokens = [CLS] + candidate + [SEP] + before + [MASK] * masks + after + [SEP]
    segment_ids = [0] * (len(candidate) + 2) + [1] * (len(tokens) - len(candidate) - 2)
    return tokens, segment_ids
