"""`bert-ad predict`'s loop: instances in, answers out, in chunks, with a flat memory.

    reader thread:  lines -> instances -> parse -> featurize (a chunk at a time)
    this thread:    a chunk's rows sorted by length -> padded batches -> scorer
                    -> the rows' outputs in the chunk's order -> answers -> lines

A chunk is `chunk_size` instances; the reader makes the next chunk's rows
while this thread scores the current one (tokenising overlapped with
scoring), and at most `QUEUED_CHUNKS` wait between them, so memory depends on
the chunk size, never on the number of lines. Inside a chunk, rows are scored
sorted by length (little padding, bert_ad/inference/batching.py's `pack` pads
as --do_predict does) and put back in input order before the task's
`predict` makes the answers: the same code bert-ad serve answers with
(bert_ad/inference/predictions.py).

A bad line (bert_ad/inference/prediction_input.py's BadLine, or an instance
the task's `parse` refuses) stops the run with its message, or, with
`skip_bad_lines`, is not scored: its answer is `{"error": message}` in its
place (the output stays one line per input line, so it can be joined back to
the input by position), it is counted, and the first few are logged. A
progress line (rows, rows/sec, ETA when the line count is known) is logged
every `progress_every_s`. After each chunk's lines are written, `after_chunk`
hears where the answers end (bert_ad/inference/resumable_output.py keeps them
there when a stop signal came, and a later run goes on from that point).
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from typing import Callable, Dict, Iterable, Iterator, List, Optional, TextIO, Union

import numpy as np

from bert_ad.errors import fail
from bert_ad.inference.prediction_input import BadLine, Item, line_number
from bert_ad.inference.prediction_output import AnswerLines, error_answer
from bert_ad.data.scored_rows import stack_rows
from bert_ad.inference.predictions import BadInstance, Featurized, Predictions
from bert_ad.inference.resumable_output import ResumePoint

log = logging.getLogger("bert_ad")

QUEUED_CHUNKS = 2   # featurized chunks waiting for the scorer
LOGGED_BAD_LINES = 10   # --skip_bad_lines: the first ones are logged, all are counted
_DONE = object()


@dataclasses.dataclass(frozen=True)
class StreamSettings:
    """How the stream is cut (bert-ad predict's flags).

    Attributes:
      batch_size: rows (texts, windows) scored in one call.
      chunk_size: instances read, featurized and answered together.
      skip_bad_lines: answer a line that cannot be read with an error in its
        place (and count it) instead of stopping at it.
      progress_every_s: seconds between progress lines.
      source: how messages name the input ("--input_file=a.txt").
    """
    batch_size: int = 32
    chunk_size: int = 2048
    skip_bad_lines: bool = False
    progress_every_s: float = 10.0
    source: str = "the input"


@dataclasses.dataclass
class _Chunk:
    """A chunk of lines: the good ones parsed and featurized, the bad ones'
    messages by their position among the chunk's lines."""
    parsed: list
    featurized: Optional[Featurized]
    rows: List[Dict[str, np.ndarray]]
    bad: Dict[int, str]
    last_line: int   # the input line of the chunk's last instance
    input_mark: str  # the input reader's mark after that line (after_chunk's)

    def answers(self, good: List[dict]) -> List[dict]:
        """The chunk's answers in line order: `good` (the parsed lines'), each
        bad line's error in its place."""
        good_answers = iter(good)
        return [error_answer(self.bad[i]) if i in self.bad else next(good_answers)
                for i in range(len(self.parsed) + len(self.bad))]


@dataclasses.dataclass
class Counts:
    """What a run did: instances answered, feature rows scored, bad lines not
    scored (answered with an error)."""
    answered: int = 0
    rows: int = 0
    skipped: int = 0


class Progress:
    """The progress line: instances answered, their rate, the ETA when the total is known."""

    def __init__(self, total: Optional[int], every_s: float):
        self.total, self.every_s = total, every_s
        self.started = self.last = time.monotonic()

    def update(self, counts: Counts, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last < self.every_s:
            return
        self.last = now
        rate = counts.answered / max(now - self.started, 1e-9)
        line = f"predict: {counts.answered:,} lines answered ({counts.rows:,} rows), " \
               f"{rate:,.1f} lines/sec"
        if self.total and not final and rate > 0:
            done = counts.answered + counts.skipped
            left = max(self.total - done, 0)
            line += f", {100.0 * done / self.total:.1f}% of {self.total:,}, " \
                    f"ETA {_duration(left / rate)}"
        if counts.skipped:
            line += f", {counts.skipped:,} bad line(s) answered with an error"
        log.info("%s%s", line, " (done)" if final else "")


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _chunks(items: Iterable[Union[Item, BadLine]], predictions: Predictions,
            settings: StreamSettings, counts: Counts,
            input_mark: Callable[[], str]) -> Iterator[_Chunk]:
    """The featurized chunks of the items (bad lines stopped at, or kept in
    their place as errors)."""
    parsed, bad = [], {}
    for item in items:
        number = line_number(item)
        if not isinstance(item, BadLine):
            instance = item[1]
            try:
                parsed.append(predictions.parse(instance))
            except BadInstance as e:
                item = BadLine(number, f"{settings.source} line {number}: the instance {e} "
                               f"(the task takes {predictions.instance_format})")
        if isinstance(item, BadLine):
            if not settings.skip_bad_lines:
                fail(f"{item.message}; nothing was written (fix the line, or pass "
                     "--skip_bad_lines to skip such lines)")
            counts.skipped += 1
            if counts.skipped <= LOGGED_BAD_LINES:
                log.warning("predict: %s; answered with an error line (--skip_bad_lines)%s",
                            item.message, "; further bad lines are counted, not logged"
                            if counts.skipped == LOGGED_BAD_LINES else "")
            bad[len(parsed) + len(bad)] = item.message
        if len(parsed) + len(bad) == settings.chunk_size:
            yield _featurized(parsed, bad, number, input_mark(), predictions)
            parsed, bad = [], {}
    if parsed or bad:
        yield _featurized(parsed, bad, number, input_mark(), predictions)


def _featurized(parsed: list, bad: Dict[int, str], last_line: int, input_mark: str,
                predictions: Predictions) -> _Chunk:
    if not parsed:
        return _Chunk(parsed, None, [], bad, last_line, input_mark)
    featurized = predictions.featurize(parsed)
    return _Chunk(parsed, featurized, featurized.rows(), bad, last_line, input_mark)


class _Reader(threading.Thread):
    """Makes the chunks on its own thread, a bounded queue ahead of the scorer;
    an error (a bad line) is handed over in its place."""

    def __init__(self, chunks: Iterator[_Chunk]):
        super().__init__(name="bert_ad-predict-reader", daemon=True)
        self.chunks = chunks
        self.queue: queue.Queue = queue.Queue(QUEUED_CHUNKS)
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            for chunk in self.chunks:
                if not self._put(chunk):
                    return
        except BaseException as e:  # noqa: BLE001 (re-raised on the scoring thread)
            self._put(e)
            return
        self._put(_DONE)

    def _put(self, item) -> bool:
        while not self.stopping.is_set():
            try:
                self.queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Iterator[_Chunk]:
        while True:
            item = self.queue.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item

    def stop(self) -> None:
        self.stopping.set()


def score_chunk(chunk: _Chunk, predictions: Predictions,
                score: Callable[[dict], Dict[str, np.ndarray]], batch_size: int) -> dict:
    """The chunk's per-row outputs, stacked in its rows' order: rows scored in
    batches of similar length."""
    order = sorted(range(len(chunk.rows)), key=lambda i: len(chunk.rows[i]["input_ids"]))
    per_row: List[Optional[dict]] = [None] * len(chunk.rows)
    for start in range(0, len(order), batch_size):
        indices = order[start:start + batch_size]
        batch = predictions.batch_of([chunk.rows[i] for i in indices])
        outputs = score(batch)
        for position, index in enumerate(indices):
            per_row[index] = {name: value[position] for name, value in outputs.items()}
    return stack_rows(enumerate(per_row))


def predict_stream(items: Iterable[Union[Item, BadLine]], predictions: Predictions,
                   score: Callable[[dict], Dict[str, np.ndarray]], output: TextIO,
                   output_format: str, settings: StreamSettings,
                   total_lines: Optional[int] = None,
                   resume_from: Optional[ResumePoint] = None,
                   after_chunk: Optional[Callable[[ResumePoint], None]] = None,
                   input_mark: Callable[[], str] = lambda: "") -> Counts:
    """Answer every item and write one line per answer to `output`, in input order.

    Args:
      items: (line number, instance) or BadLine, as read_instances gives them
        (on a resumed run, those after `resume_from.input_lines`).
      score: a padded batch -> {output name: [rows, ...] array}.
      output_format: "jsonl" or "tsv".
      total_lines: the lines left to answer, when known (the ETA).
      resume_from: where the answers already in `output` end (a TSV's header
        written then is not written again).
      after_chunk: called with where the answers end once a chunk's lines are
        written (not while a TSV's error rows wait for its header).
      input_mark: the input reader's state after the lines read so far (called on
        the reader thread at each chunk's end; resumable_output.HashedLines.mark).
    """
    counts = Counts()
    progress = Progress(total_lines, settings.progress_every_s)
    resume_from = resume_from or ResumePoint()
    lines = AnswerLines(output_format, error_column=settings.skip_bad_lines,
                        header=resume_from.header)
    answers_written = resume_from.answers
    reader = _Reader(_chunks(items, predictions, settings, counts, input_mark))
    reader.start()
    try:
        for chunk in reader:
            good = []
            if chunk.parsed:
                outputs = score_chunk(chunk, predictions, score, settings.batch_size)
                good = predictions.predict(chunk.parsed, chunk.featurized, outputs)
            answers = chunk.answers(good)
            output.writelines(lines.lines(answers))
            answers_written += len(answers)
            counts.answered += len(good)
            counts.rows += len(chunk.rows)
            if after_chunk is not None and not lines.waiting:
                after_chunk(ResumePoint(answers_written, chunk.last_line, list(lines.header),
                                        chunk.input_mark))
            progress.update(counts)
        output.writelines(lines.finish())
    finally:
        reader.stop()
    progress.update(counts, final=True)
    return counts
