"""bert-ad serve's batcher (bert_ad/inference/batching.py) on its own: fair between
requests, bounded by rows and tokens, a cancelled request's rows never scored.

The scorer is a stand-in that records each batch and, until released, blocks
the scoring thread, so what is queued at a given moment is known exactly.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import threading

import numpy as np
import pytest

from bert_ad.inference.batching import (CallCost, DynamicBatcher, TooManyRows, calls_by_length,
                                        padded_length)


class Scorer:
    """Records each batch's rows (their first token: the request's mark) and
    holds the first batch until `release`."""

    def __init__(self):
        self.batches, self.started, self.gate = [], threading.Event(), threading.Event()
        self.shapes = []   # each call's padded [rows, length]

    def __call__(self, batch: dict) -> dict:
        self.batches.append([int(row[1]) for row in batch["input_ids"]])
        self.shapes.append(batch["input_ids"].shape)
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


# --- calls of rows of similar length ----------------------------------------------------

def brute_force_cheapest(lengths, overhead):
    """The least work over every way to cut sorted rows into consecutive calls."""
    best = float("inf")
    for cuts in itertools.product([False, True], repeat=len(lengths) - 1):
        work, start = 0.0, 0
        for end in [i + 1 for i, cut in enumerate(cuts) if cut] + [len(lengths)]:
            work += overhead + (end - start) * padded_length(lengths[end - 1])
            start = end
        best = min(best, work)
    return best


@pytest.mark.parametrize("overhead", [0.0, 8.0, 17.0, 200.0])
def test_a_batch_is_cut_into_the_calls_that_make_the_least_work(overhead):
    rng = np.random.default_rng(int(overhead))
    for _ in range(40):
        lengths = sorted(rng.integers(3, 130, size=int(rng.integers(1, 9))).tolist())
        calls = calls_by_length(lengths, overhead)
        assert calls[0][0] == 0 and calls[-1][1] == len(lengths)
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(calls, calls[1:]))
        work = sum(overhead + (end - start) * padded_length(lengths[end - 1])
                   for start, end in calls)
        assert work == pytest.approx(brute_force_cheapest(lengths, overhead))
    # A call's cost above any padding saved: one call, as before; none: none padded.
    assert calls_by_length([5, 9, 60, 120], 10_000.0) == [(0, 4)]
    assert calls_by_length([5, 9, 60, 120], 0.0) == [(0, 1), (1, 2), (2, 3), (3, 4)]


def test_short_and_long_rows_of_one_batch_are_scored_in_calls_of_their_own_length():
    scorer = Scorer()
    queue = batcher(scorer, max_batch_size=8)
    queue.submit(rows(1, 1))
    assert scorer.started.wait(30)   # the next batch: 4 short rows and 4 long ones
    short, long = queue.submit(rows(2, 4, length=6)), queue.submit(rows(3, 4, length=120))
    scorer.release()
    assert [answer["mark"] for answer in short.result(30)] == [2] * 4
    assert [answer["mark"] for answer in long.result(30)] == [3] * 4
    queue.close()
    # Padded together they would be 8 x 120; apart, 4 x 8 and 4 x 120.
    assert scorer.shapes[1:] == [(4, 8), (4, 120)]


def test_the_cost_of_a_call_is_learnt_from_the_models_own_calls():
    cost = CallCost(prior_tokens=16.0)
    rng = np.random.default_rng(0)
    for tokens in rng.integers(8, 2048, size=CallCost.MIN_CALLS - 1):
        cost.observe(int(tokens), 0.003 + 0.0002 * tokens)
    assert cost.overhead_tokens() == 16.0          # too few calls yet: the prior
    for tokens in rng.integers(8, 2048, size=100):
        cost.observe(int(tokens), (0.003 + 0.0002 * tokens) * rng.uniform(0.97, 1.03))
    assert cost.overhead_tokens() == pytest.approx(15.0, rel=0.15)   # 0.003 / 0.0002
    # A GPU-like model (a call's fixed cost large, tokens almost free): few, long calls.
    gpu = CallCost()
    for tokens in rng.integers(8, 4096, size=64):
        gpu.observe(int(tokens), 0.004 + 2e-7 * tokens)
    assert gpu.overhead_tokens() > 10_000
    assert calls_by_length([5, 9, 60, 120], gpu.overhead_tokens()) == [(0, 4)]
    # Calls of one size, or times that fall as calls grow (noise): the prior.
    flat = CallCost(prior_tokens=16.0)
    for seconds in rng.uniform(0.001, 0.002, size=40):
        flat.observe(64, float(seconds))
    assert flat.overhead_tokens() == 16.0
    falling = CallCost(prior_tokens=16.0)
    for tokens in range(8, 400, 8):
        falling.observe(tokens, 0.05 - 0.0001 * tokens)
    assert falling.overhead_tokens() == 16.0
