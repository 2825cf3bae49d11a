"""Dynamic batching: the rows of many requests scored together, on one thread per model.

A request's feature rows (a text is one row, a long one several windows) join
the model's queue. The scoring thread takes waiting rows once the batch is
full, or the oldest has waited `batch_timeout_ms`, or no other request is on
its way (announced, still being tokenised): a lone request is scored at once,
and under load the rows that arrived while the previous batch was scored,
with those about to arrive, go together.

Fair and bounded: a batch takes one row from each waiting request in turn
(round robin), so a one-sentence request sent after a request of a thousand
windows is in the very next batch instead of behind all of them; a batch
holds at most `max_batch_size` rows and, padded, `max_batch_tokens` tokens (a
batch's time, which is what a newcomer waits, stays about the same at any
length); a request of more than `max_request_rows` rows is refused whole
(`TooManyRows`) before any is queued. A request whose future is cancelled (its
deadline passed) leaves the queue at once: its rows are never scored.

Each batch is sorted by length and cut into calls of rows of similar length,
each padded to its own longest row (bert_ad.data.batching.make_batch, as
--do_predict pads): one call padded to a batch's longest row can cost more
than its rows scored one by one (8 random review sentences on MiniLM int8,
one AVX2 core: one row a call was 1.26x faster), and cut where padding costs
more than a call (`calls_by_length`), the same batches went 1.39x faster than
one call (1.90x at 32 rows; benchmarks/batch_calls.py, docs/serving.md). What
a call costs is learnt from this model's own calls (`CallCost`). Each row's
outputs go back to its own request, which is answered when all of its rows
are scored. Tokenising and answering run on the server's other threads, so
the scoring thread only pads and scores (TensorFlow and ONNX Runtime release
the GIL while they compute).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from bert_ad.data.batching import PAD_MULTIPLE, TokenizedExamples, make_batch

Row = Dict[str, np.ndarray]   # a feature row: {column name: 1-D int32 array}, input_ids first
# A call's fixed cost is never counted as more than this many tokens of work: past
# it, rows of any lengths share a call, as they would with one call a batch.
MAX_OVERHEAD_TOKENS = 1 << 16


class TooManyRows(ValueError):
    """A request of more rows than a request may have (the server answers 413)."""

    def __init__(self, rows: int, limit: int):
        super().__init__(f"{rows} rows over the limit of {limit}")
        self.rows, self.limit = rows, limit


@dataclasses.dataclass(eq=False)
class _Request:
    rows: List[Row]
    future: concurrent.futures.Future
    outputs: List[Optional[Row]]
    arrived: float      # time.monotonic()
    remaining: int      # rows not scored yet
    next_row: int = 0   # the next row to put in a batch

    @property
    def unbatched(self) -> int:
        return len(self.rows) - self.next_row


def _settle(future: concurrent.futures.Future, result=None,
            error: Optional[BaseException] = None) -> None:
    """Give `future` its result or error unless it is done: the event loop may
    cancel it (a deadline) at any moment, also between a check and a set."""
    try:
        if not future.done():
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)
    except Exception:  # noqa: BLE001 (InvalidStateError: cancelled meanwhile)
        pass


def padded_length(length: int) -> int:
    """A row's length once padded as make_batch pads (a multiple of 8)."""
    return -(-length // PAD_MULTIPLE) * PAD_MULTIPLE


def pack(rows: List[Row]) -> dict:
    """One padded batch of `rows` (in this order), as --do_predict pads: every
    column to the longest row's length rounded up to 8, input_mask from
    input_ids' lengths."""
    names = ["input_ids"] + [name for name in rows[0] if name != "input_ids"]
    columns = {name: [row[name] for row in rows] for name in names}
    return make_batch(TokenizedExamples(columns), np.arange(len(rows)), "dynamic")


class DynamicBatcher:
    """The queue and scoring thread of one model.

    Args:
      score: padded batch dict -> {output name: [rows, ...] array}.
      max_batch_size: most rows scored in one call.
      batch_timeout_ms: how long the oldest waiting row waits for the rows of
        announced requests while the scorer is idle (0: score what is there).
      max_batch_tokens: most tokens in one call, padding included (a single
        row is always taken, however long).
      max_request_rows: most rows one request may make (None: no limit).
      batch_of: rows -> the padded batch the model scores
        (Predictions.batch_of: packed, and the inputs a batch of several
        requests needs added); default: pack.
      on_batch: called with (rows, tokens, seconds) after each batch (metrics;
        tokens: its calls' padded tokens, calls_by_length).
      name: for the thread's name.
    """

    def __init__(self, score: Callable[[dict], Dict[str, np.ndarray]], max_batch_size: int,
                 batch_timeout_ms: float, max_batch_tokens: Optional[int] = None,
                 max_request_rows: Optional[int] = None,
                 batch_of: Optional[Callable[[List[Row]], dict]] = None,
                 on_batch: Optional[Callable[[int, int, float], None]] = None, name: str = ""):
        self._score = score
        self.max_batch_size = max_batch_size
        self.max_batch_tokens = max_batch_tokens
        self.max_request_rows = max_request_rows
        self.timeout = batch_timeout_ms / 1000.0
        self._batch_of = batch_of or pack
        self._on_batch = on_batch
        self.call_cost = CallCost()
        # Requests with rows not yet in a batch, in turn order: a batch takes one
        # row of the first, puts it back at the end (if it has more), and so on.
        self._turns: collections.deque = collections.deque()
        self._queued = 0    # rows in _turns' requests not yet in a batch
        self._coming = 0    # requests announced and not yet submitted
        self._changed = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._loop, name=f"bert_ad-batcher-{name}",
                                        daemon=True)
        self._thread.start()

    def announce(self) -> None:
        """A request is on its way (being tokenised): a batch may wait for it."""
        with self._changed:
            self._coming += 1

    def withdraw(self) -> None:
        """An announced request will not come (it failed before its rows were made)."""
        with self._changed:
            self._coming -= 1
            self._changed.notify()

    def submit(self, rows: List[Row], announced: bool = False) -> concurrent.futures.Future:
        """A future of the rows' outputs ([{output name: value}] in `rows`' order);
        `announced`: the request was announced (it no longer is on its way).
        TooManyRows for more than max_request_rows; cancelling the future drops
        the rows not scored yet."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        request = _Request(rows, future, [None] * len(rows), time.monotonic(), len(rows))
        with self._changed:
            if announced:
                self._coming -= 1
            self._changed.notify()   # rows to score, or one request fewer to wait for
            if self._closing:
                raise RuntimeError("the batcher is closed")
            if self.max_request_rows is not None and len(rows) > self.max_request_rows:
                raise TooManyRows(len(rows), self.max_request_rows)
            if rows:
                self._turns.append(request)
                self._queued += len(rows)
        if not rows:
            future.set_result([])
        future.add_done_callback(lambda done: self._drop(request) if done.cancelled() else None)
        return future

    def _drop(self, request: _Request) -> None:
        """A cancelled request's rows leave the queue."""
        with self._changed:
            if request in self._turns:
                self._turns.remove(request)
                self._queued -= request.unbatched

    @property
    def queued_rows(self) -> int:
        return self._queued

    def close(self) -> None:
        """Stop the thread once the batch being scored is done; requests still
        queued (the server stopped waiting for them) fail."""
        with self._changed:
            self._closing = True
            left, self._turns, self._queued = list(self._turns), collections.deque(), 0
            self._changed.notify()
        for request in left:
            _settle(request.future, error=RuntimeError("the server stopped"))
        self._thread.join()

    def _next_batch(self) -> List[tuple]:
        """The next (request, row index) pairs to score (empty once closed)."""
        with self._changed:
            while not self._turns and not self._closing:
                self._changed.wait()
            while self._queued < self.max_batch_size and self._coming > 0 and \
                    not self._closing:
                oldest = min(request.arrived for request in self._turns)
                left = oldest + self.timeout - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            batch, longest = [], 0
            while self._turns and len(batch) < self.max_batch_size:
                request = self._turns[0]
                length = padded_length(len(request.rows[request.next_row]["input_ids"]))
                tokens = max(longest, length) * (len(batch) + 1)
                if batch and self.max_batch_tokens is not None and \
                        tokens > self.max_batch_tokens:
                    break
                self._turns.popleft()
                batch.append((request, request.next_row))
                longest = max(longest, length)
                request.next_row += 1
                self._queued -= 1
                if request.unbatched:
                    self._turns.append(request)   # its next row waits for its next turn
            return batch

    def _loop(self) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                return
            started = time.perf_counter()
            # Sorted by length: rows of similar length sit together (as --do_predict
            # sorts them), and the order does not depend on arrival.
            rows = sorted(((request.rows[index], request, index) for request, index in batch),
                          key=lambda item: len(item[0]["input_ids"]))
            lengths = [len(row["input_ids"]) for row, _, _ in rows]
            tokens = sum(self._score_call(rows[start:end]) for start, end in
                         calls_by_length(lengths, self.call_cost.overhead_tokens()))
            if self._on_batch is not None:
                self._on_batch(len(rows), tokens, time.perf_counter() - started)

    def _score_call(self, rows: List[tuple]) -> int:
        """Score (row, request, index) triples in one call and hand each its outputs;
        the tokens scored (padding included)."""
        started = time.perf_counter()
        try:
            padded = self._batch_of([row for row, _, _ in rows])
            outputs = self._score(padded)
        except Exception as e:  # every request of the call learns it; the thread goes on
            for _, request, _ in rows:
                _settle(request.future, error=e)
            return 0
        tokens = int(padded["input_ids"].size)
        self.call_cost.observe(tokens, time.perf_counter() - started)
        for position, (_, request, index) in enumerate(rows):
            if request.future.done():   # cancelled, or failed in an earlier call
                continue
            request.outputs[index] = {name: value[position] for name, value in outputs.items()}
            request.remaining -= 1
            if not request.remaining:
                _settle(request.future, request.outputs)
        return tokens


def calls_by_length(lengths: List[int], overhead_tokens: float) -> List[Tuple[int, int]]:
    """How to cut rows sorted by length into calls: [(start, end)] covering them in
    order, each call padded to its longest row, that make the least work when a
    call costs `overhead_tokens` plus its rows times its padded length.

    Exact (dynamic programming over where each call ends): a batch is at most a
    few hundred rows, and this is microseconds against the milliseconds of a call.
    """
    count = len(lengths)
    cheapest = [0.0] + [float("inf")] * count   # cheapest[j]: rows [0, j) scored
    start_of = [0] * (count + 1)
    for end in range(1, count + 1):
        padded = padded_length(lengths[end - 1])
        for start in range(end):
            cost = cheapest[start] + overhead_tokens + (end - start) * padded
            if cost < cheapest[end]:   # (of equal costs, the longest last call)
                cheapest[end], start_of[end] = cost, start
    calls, end = [], count
    while end:
        calls.append((start_of[end], end))
        end = start_of[end]
    return calls[::-1]


class CallCost:
    """What one call of the model costs, learnt from its own calls: seconds =
    overhead + per_token * padded tokens, fit by least squares on the last
    `window` calls. Its ratio, the overhead in tokens of work, is what
    calls_by_length weighs padding against: it differs between CPUs, models and
    GPUs (where a call's fixed cost is large and its tokens cheap), so it is
    measured, not set. Until enough calls of different sizes have been seen,
    `prior_tokens` (MiniLM int8 on one AVX2 core: 8-17, docs/serving.md).

    Used by the scoring thread alone (no lock)."""

    MIN_CALLS = 16

    def __init__(self, prior_tokens: float = 16.0, window: int = 256):
        self.prior_tokens = prior_tokens
        self._calls: collections.deque = collections.deque(maxlen=window)

    def observe(self, tokens: int, seconds: float) -> None:
        self._calls.append((tokens, seconds))

    def overhead_tokens(self) -> float:
        if len(self._calls) < self.MIN_CALLS:
            return self.prior_tokens
        tokens, seconds = np.asarray(self._calls, np.float64).T
        if np.ptp(tokens) == 0:
            return self.prior_tokens   # one size only: no slope to fit
        per_token, overhead = np.polyfit(tokens, seconds, 1)
        if per_token <= 0:
            return self.prior_tokens   # noise, not a cost
        return float(np.clip(overhead / per_token, 0.0, MAX_OVERHEAD_TOKENS))
