"""SQuAD questions -> `[CLS] question [SEP] context window [SEP]` rows, and back.

As Google's run_squad.py `convert_examples_to_features`, on pieces with
character spans (bert_ad/data/piece_offsets.py) instead of whitespace words:

  * the question's pieces, cut to --max_query_length (counted: the log says
    how many questions were cut);
  * the context's pieces cut into windows of max_seq_length - question - 3
    pieces, each starting --doc_stride pieces after the previous one, the last
    one ending at the context's end (bert_ad/data/token_features.py
    `window_spans`, shared with token classification);
  * a piece is answered from the window where it has the most context
    (Google's `_check_is_max_context`: `max_context_span`): `max_context`
    marks, per window, the context pieces whose answers it may start;
  * training targets: the pieces of the answer's characters (the first and
    last piece overlapping them); a window that does not hold the whole
    answer, and an unanswerable question, point at [CLS] (0, 0).

A training question with several answers (every mention of an entity type
in peoples_daily_mrc) becomes one training question per distinct answer,
each with its own windows: extractive QA predicts one span, so each mention
is one target. Scoring keeps one set of windows per question; its targets
(for the eval loss) are those of its first answer.

One window is one row of `TokenizedExamples`: columns `input_ids` and
`segment_ids` (0 for [CLS] question [SEP], 1 for the context and its [SEP]),
row values `start_positions` and `end_positions`. `SquadFeatures.windows`
says where each comes from; features are cached by the feature cache with
the SQUAD_FEATURES codec.
"""

from __future__ import annotations

import dataclasses
import unicodedata
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.feature_cache import Codec, DamagedCache, decode_examples, encode_examples
from bert_ad.data.piece_offsets import PieceSpans, piece_spans
from bert_ad.data.squad_json import Question, SquadFile
from bert_ad.data.token_features import window_spans
from bert_ad.data.tokenization import CLS, SEP
from bert_ad.errors import fail


def _maybe_dropped(char: str) -> bool:
    """A character a tokenizer may drop: a control or format character (NUL, BEL,
    U+200B), a space, a combining mark (accents go with lower-casing), U+FFFD."""
    return unicodedata.category(char)[0] in "CZM" or char == "\ufffd"


def check_texts_have_pieces(squad: SquadFile, tokenizer) -> None:
    """One error line for a context or question made only of characters the
    tokenizer drops (U+200B, NUL, U+FFFD, a lone combining mark, `\\x07`): it
    has no piece, and was answered "" with a 1.0-probability empty n-best
    entry, silently. Refused as an empty one is (squad_json)."""
    first_question = {}
    for question in squad.questions:
        first_question.setdefault(question.context, question.id)
    for index, context in enumerate(squad.contexts):
        if all(map(_maybe_dropped, context)) and not tokenizer.tokenize(context):
            fail(f"{squad.path}: the context of question {first_question.get(index)!r} "
                 f"holds only characters the tokenizer drops ({_shown(context)}): no text "
                 "to answer from; remove the paragraph or give its text")
    for question in squad.questions:
        text = question.question
        if all(map(_maybe_dropped, text)) and not tokenizer.tokenize(text):
            fail(f"{squad.path}: question {question.id!r}: its question text holds only "
                 f"characters the tokenizer drops ({_shown(text)}); give the question")


def _shown(text: str) -> str:
    """The distinct characters of `text` as code points: "U+200B, U+0000"."""
    return ", ".join(f"U+{ord(c):04X}" for c in dict.fromkeys(text))


@dataclasses.dataclass(frozen=True)
class SquadWindowSettings:
    """How questions and contexts become rows (Google's run_squad flags)."""
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64

    def check(self) -> None:
        if self.doc_stride < 1 or self.max_query_length < 1:
            fail(f"--doc_stride={self.doc_stride} and --max_query_length="
                 f"{self.max_query_length} must be at least 1")
        if self.max_seq_length <= self.max_query_length + 3:
            fail(f"--max_seq_length={self.max_seq_length} leaves no room for the context "
                 f"after a question of --max_query_length={self.max_query_length} pieces, "
                 "[CLS] and two [SEP]: raise it or lower --max_query_length")


@dataclasses.dataclass
class Windows:
    """Where each window (row) comes from; arrays [windows] unless said.

    question: the question's index in the split's rows.
    doc_offset: position in input_ids of the window's first context piece.
    piece_start: index among its context's pieces of that first piece.
    max_context: per window, [its context pieces] bool: this window has the
      most context for that piece (answers start only there).
    """
    question: np.ndarray
    doc_offset: np.ndarray
    piece_start: np.ndarray
    max_context: List[np.ndarray]

    def __len__(self) -> int:
        return len(self.question)


@dataclasses.dataclass
class SquadFeatures:
    """The rows of a split, where they come from, and each context's piece spans.

    context_starts / context_ends: per context of the file, [pieces] the
    characters each piece covers (bert_ad/data/piece_offsets.py).
    truncated_questions: questions longer than max_query_length (cut).
    answers_outside: training windows whose answer lies outside (target [CLS]).
    """
    examples: TokenizedExamples
    windows: Windows
    context_starts: List[np.ndarray]
    context_ends: List[np.ndarray]
    truncated_questions: int = 0
    answers_outside: int = 0


def answer_pieces(spans: PieceSpans, start: int, end: int) -> Optional[Tuple[int, int]]:
    """(first, last) piece overlapping the characters [start, end), or None."""
    overlap = np.nonzero((spans.ends > start) & (spans.starts < end)
                         & (spans.ends > spans.starts))[0]
    if not len(overlap):
        return None
    return int(overlap[0]), int(overlap[-1])


def best_windows(windows: Sequence[Tuple[int, int]], num_pieces: int) -> np.ndarray:
    """[num_pieces] the window where each piece has the most context: `max_context_span`
    (Google's `_check_is_max_context`) for every piece at once."""
    if not len(windows):
        return np.zeros(num_pieces, np.int64)
    starts = np.array([s for s, _ in windows], np.float64)[:, None]
    lengths = np.array([n for _, n in windows], np.float64)[:, None]
    position = np.arange(num_pieces, dtype=np.float64)[None, :]
    ends = starts + lengths - 1
    score = np.minimum(position - starts, ends - position) + 0.01 * lengths
    score[(position < starts) | (position > ends)] = -np.inf
    return np.argmax(score, axis=0)  # the first window wins a tie, as Google's


def _targets(question: Question, training: bool) -> List[Optional[Tuple[int, int]]]:
    """The character spans a question's windows are built for: one per distinct
    answer when training, else its first; None for no answer."""
    if question.is_impossible or not question.answers:
        return [None]
    spans = list(dict.fromkeys((a.start, a.end) for a in question.answers))
    return spans if training else spans[:1]


def convert_questions(questions: Sequence[Question], contexts: Sequence[str], tokenizer,
                      settings: SquadWindowSettings, training: bool, source: str = ""
                      ) -> SquadFeatures:
    """The windows of every question, in question order (see the module docstring).

    Args:
      questions: the split's rows.
      contexts: their file's contexts (Question.context indexes them).
      tokenizer: FullTokenizer or PieceListTokenizer.
      settings: lengths and stride.
      training: one set of windows per distinct answer (else per question).
      source: the file, for messages.
    """
    settings.check()
    cls_id, sep_id = tokenizer.convert_tokens_to_ids([CLS, SEP])
    context_spans: Dict[int, PieceSpans] = {}
    context_ids: Dict[int, np.ndarray] = {}
    columns: Dict[str, list] = {"input_ids": [], "segment_ids": []}
    starts, ends = [], []
    question_index, doc_offsets, piece_starts, max_context = [], [], [], []
    truncated = outside = 0
    for index, question in enumerate(questions):
        if question.context not in context_spans:
            spans = piece_spans(tokenizer, contexts[question.context])
            context_spans[question.context] = spans
            context_ids[question.context] = np.array(
                tokenizer.convert_tokens_to_ids(spans.pieces), np.int32)
        spans, doc_ids = context_spans[question.context], context_ids[question.context]
        query = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(question.question))
        if len(query) > settings.max_query_length:
            truncated += 1
            query = query[:settings.max_query_length]
        head = np.array([cls_id] + query + [sep_id], np.int32)
        windows = window_spans(len(spans), settings.max_seq_length - len(head) - 1,
                               settings.doc_stride)
        best = best_windows(windows, len(spans))
        for target in _targets(question, training):
            pieces = None
            if target is not None:
                pieces = answer_pieces(spans, *target)
                if pieces is None:
                    fail(f"{source}: question {question.id!r}: its answer "
                         f"{contexts[question.context][target[0]:target[1]]!r} is only "
                         "characters the tokenizer drops; fix the answer")
            for window_index, (start, length) in enumerate(windows):
                ids = np.concatenate([head, doc_ids[start:start + length], [sep_id]])
                columns["input_ids"].append(ids.astype(np.int32))
                segments = np.zeros(len(ids), np.int32)
                segments[len(head):] = 1
                columns["segment_ids"].append(segments)
                first, last = 0, 0
                if pieces is not None:
                    if start <= pieces[0] and pieces[1] < start + length:
                        first = pieces[0] - start + len(head)
                        last = pieces[1] - start + len(head)
                    elif training:
                        outside += 1
                starts.append(first)
                ends.append(last)
                question_index.append(index)
                doc_offsets.append(len(head))
                piece_starts.append(start)
                max_context.append(best[start:start + length] == window_index)
    examples = TokenizedExamples(columns, row_values={
        "start_positions": np.array(starts, np.int32),
        "end_positions": np.array(ends, np.int32)})
    windows = Windows(np.array(question_index, np.int64), np.array(doc_offsets, np.int64),
                      np.array(piece_starts, np.int64), max_context)
    used = range(len(contexts))
    return SquadFeatures(
        examples, windows,
        [context_spans[c].starts if c in context_spans else np.zeros(0, np.int64)
         for c in used],
        [context_spans[c].ends if c in context_spans else np.zeros(0, np.int64)
         for c in used], truncated, outside)


# --- the feature cache's view of SquadFeatures (bert_ad/data/feature_cache.py) ----------

_WINDOW, _CONTEXT = "window:", "context:"


def _encode(features: SquadFeatures) -> dict:
    arrays = encode_examples(features.examples)
    w = features.windows
    arrays.update({_WINDOW + "question": w.question, _WINDOW + "doc_offset": w.doc_offset,
                   _WINDOW + "piece_start": w.piece_start,
                   _WINDOW + "max_context": [np.asarray(m, bool) for m in w.max_context],
                   _CONTEXT + "starts": list(features.context_starts),
                   _CONTEXT + "ends": list(features.context_ends),
                   "counts": np.array([features.truncated_questions,
                                       features.answers_outside], np.int64)})
    return arrays


def _decode(arrays) -> SquadFeatures:
    examples = decode_examples({name: value for name, value in arrays.items()
                                if name.startswith(("column:", "row:", "labels"))})
    try:
        windows = Windows(*(np.asarray(arrays[_WINDOW + name], np.int64)
                            for name in ("question", "doc_offset", "piece_start")),
                          [np.asarray(m, bool) for m in arrays[_WINDOW + "max_context"]])
        starts, ends = arrays[_CONTEXT + "starts"], arrays[_CONTEXT + "ends"]
        truncated, outside = (int(n) for n in arrays["counts"])
    except KeyError as e:
        raise DamagedCache(f"it has no {e}") from None
    if not len(windows) == len(examples) == len(windows.max_context):
        raise DamagedCache(f"{len(windows)} windows for {len(examples)} rows")
    return SquadFeatures(examples, windows, [np.asarray(s, np.int64) for s in starts],
                         [np.asarray(e, np.int64) for e in ends], truncated, outside)


SQUAD_FEATURES = Codec(_encode, _decode, lambda features: len(features.examples))
