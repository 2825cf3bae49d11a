"""Dynamic batching: the rows of many requests scored together, on one thread per model.

A request's feature rows (a text is one row, a long one several windows) join
one queue. The scoring thread takes the rows waiting, up to `max_batch_size`,
once the batch is full, or the oldest has waited `batch_timeout_ms`, or no
other request is on its way (announced, still being tokenised): a lone
request is scored at once, and under load the rows that arrived while the
previous batch was scored, with those about to arrive, go together. It sorts
them by length, pads them to the longest
(bert_ad.data.batching.make_batch, as --do_predict pads) and scores them in
one call. Each row's outputs go back to its own request, which is answered
when all of its rows are scored; a request larger than a batch spans
several. Tokenising and answering run on the server's other threads, so the
scoring thread only pads and scores (TensorFlow releases the GIL while it
computes).
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import threading
import time
from typing import Callable, Dict, List, Optional

import numpy as np

from bert_ad.data.batching import TokenizedExamples, make_batch

Row = Dict[str, np.ndarray]   # a feature row: {column name: 1-D int32 array}, input_ids first


@dataclasses.dataclass
class _Request:
    rows: List[Row]
    future: concurrent.futures.Future
    outputs: List[Optional[Row]]
    remaining: int


@dataclasses.dataclass
class _Waiting:
    request: _Request
    index: int          # the row's index in its request
    arrived: float      # time.monotonic()


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
      complete_batch: adds inputs a batch of several requests needs
        (Predictions.complete_batch), or None.
      on_batch: called with (rows, seconds) after each batch (metrics), or None.
      name: for the thread's name.
    """

    def __init__(self, score: Callable[[dict], Dict[str, np.ndarray]], max_batch_size: int,
                 batch_timeout_ms: float, complete_batch: Optional[Callable] = None,
                 on_batch: Optional[Callable[[int, float], None]] = None, name: str = ""):
        self._score = score
        self.max_batch_size = max_batch_size
        self.timeout = batch_timeout_ms / 1000.0
        self._complete_batch = complete_batch
        self._on_batch = on_batch
        self._waiting: collections.deque = collections.deque()
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
        `announced`: the request was announced (it no longer is on its way)."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        request = _Request(rows, future, [None] * len(rows), len(rows))
        now = time.monotonic()
        with self._changed:
            if announced:
                self._coming -= 1
            if self._closing:
                raise RuntimeError("the batcher is closed")
            self._waiting.extend(_Waiting(request, i, now) for i in range(len(rows)))
            self._changed.notify()
        if not rows:
            future.set_result([])
        return future

    @property
    def queued_rows(self) -> int:
        return len(self._waiting)

    def close(self) -> None:
        """Score what is queued, then stop the thread."""
        with self._changed:
            self._closing = True
            self._changed.notify()
        self._thread.join()

    def _next_batch(self) -> List[_Waiting]:
        """The next rows to score (empty once closed and drained)."""
        with self._changed:
            while not self._waiting and not self._closing:
                self._changed.wait()
            while (len(self._waiting) < self.max_batch_size and self._coming > 0
                   and not self._closing):
                left = self._waiting[0].arrived + self.timeout - time.monotonic()
                if left <= 0:
                    break
                self._changed.wait(left)
            count = min(self.max_batch_size, len(self._waiting))
            return [self._waiting.popleft() for _ in range(count)]

    def _loop(self) -> None:
        while True:
            batch = self._next_batch()
            if not batch:
                return
            started = time.perf_counter()
            # Sorted by length: rows of similar length sit together (as --do_predict
            # sorts them), and the order does not depend on arrival.
            order = sorted(range(len(batch)), key=lambda i: len(
                batch[i].request.rows[batch[i].index]["input_ids"]))
            rows = [batch[i].request.rows[batch[i].index] for i in order]
            try:
                padded = pack(rows)
                if self._complete_batch is not None:
                    self._complete_batch(padded)
                outputs = self._score(padded)
            except Exception as e:  # every request of the batch learns it; the thread goes on
                for request in {id(w.request): w.request for w in batch}.values():
                    if not request.future.done():
                        request.future.set_exception(e)
                continue
            for position, i in enumerate(order):
                waiting = batch[i]
                request = waiting.request
                if request.future.done():   # failed in an earlier batch
                    continue
                request.outputs[waiting.index] = {name: value[position]
                                                  for name, value in outputs.items()}
                request.remaining -= 1
                if not request.remaining:
                    request.future.set_result(request.outputs)
            if self._on_batch is not None:
                self._on_batch(len(batch), time.perf_counter() - started)
