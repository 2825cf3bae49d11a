"""bert-ad serve's batcher (bert_ad/inference/batching.py) on its own: fair between
requests, bounded by rows and tokens, a cancelled request's rows never scored.

The scorer is a stand-in that records each batch and, until released, blocks
the scoring thread, so what is queued at a given moment is known exactly.
"""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest

from bert_ad.inference.batching import DynamicBatcher, TooManyRows


class Scorer:
    """Records each batch's rows (their first token: the request's mark) and
    holds the first batch until `release`."""

    def __init__(self):
        self.batches, self.started, self.gate = [], threading.Event(), threading.Event()

    def __call__(self, batch: dict) -> dict:
        self.batches.append([int(row[1]) for row in batch["input_ids"]])
        self.started.set()
        self.gate.wait(30)
        return {"mark": batch["input_ids"][:, 1].copy()}

    def release(self):
        self.gate.set()


def rows(mark: int, count: int, length: int = 6) -> list:
    return [{"input_ids": np.array([101, mark] + [7] * (length - 3) + [102], np.int32),
             "segment_ids": np.zeros(length, np.int32)} for _ in range(count)]


def batcher(scorer, **options) -> DynamicBatcher:
    return DynamicBatcher(scorer, options.pop("max_batch_size", 4), 0.0, **options)


def test_requests_take_turns_so_a_small_one_is_in_the_next_batch():
    scorer = Scorer()
    queue = batcher(scorer)
    first = queue.submit(rows(1, 1))
    assert scorer.started.wait(30)          # scoring the first batch: the rest queue up
    big = queue.submit(rows(2, 12))
    small = queue.submit(rows(3, 1))
    scorer.release()
    assert [answer["mark"] for answer in small.result(30)] == [3]
    big.result(30), first.result(30)
    queue.close()
    # The batch after the first holds the small request's row beside the big one's.
    assert [sorted(batch) for batch in scorer.batches[:3]] == [[1], [2, 2, 2, 3], [2, 2, 2, 2]]


def test_a_batch_is_bounded_by_tokens_as_well_as_rows():
    scorer = Scorer()
    scorer.release()
    queue = batcher(scorer, max_batch_size=8, max_batch_tokens=48)
    queue.submit(rows(1, 2, length=20)).result(30)   # padded to 24: 2 rows a batch
    queue.submit(rows(2, 1, length=40)).result(30)   # alone over the bound: still taken
    queue.close()
    assert [len(batch) for batch in scorer.batches] == [2, 1]


def test_a_cancelled_request_leaves_the_queue_unscored():
    scorer = Scorer()
    queue = batcher(scorer, max_batch_size=2)
    queue.submit(rows(1, 1))
    assert scorer.started.wait(30)
    late = queue.submit(rows(2, 10))
    assert queue.queued_rows == 10
    assert late.cancel()
    assert queue.queued_rows == 0
    kept = queue.submit(rows(3, 1))
    scorer.release()
    kept.result(30)
    queue.close()
    assert 2 not in [mark for batch in scorer.batches for mark in batch]


def test_too_many_rows_is_refused_before_any_is_queued():
    queue = batcher(Scorer(), max_request_rows=3)
    with pytest.raises(TooManyRows) as refused:
        queue.submit(rows(1, 4))
    assert (refused.value.rows, refused.value.limit, queue.queued_rows) == (4, 3, 0)
    queue.close()


def test_closing_fails_what_is_still_queued():
    scorer = Scorer()
    queue = batcher(scorer, max_batch_size=1)
    running = queue.submit(rows(1, 1))
    assert scorer.started.wait(30)
    waiting = queue.submit(rows(2, 3))
    threading.Timer(0.2, scorer.release).start()
    queue.close()
    assert running.result(30)[0]["mark"] == 1
    with pytest.raises(RuntimeError, match="the server stopped"):
        waiting.result(30)
    assert isinstance(waiting, concurrent.futures.Future)
