"""Batches: dynamic padding, epoch streams that resume exactly, full coverage at inference."""

from __future__ import annotations

import gc
import itertools
import threading

import numpy as np
import pytest

from bert_ad.data.batching import (TokenizedExamples, inference_batches, make_batch,
                              padded_length, prefetch, split_for_towers, training_stream)


def examples(lengths) -> TokenizedExamples:
    ids = [np.arange(1, n + 1, dtype=np.int32) for n in lengths]
    segments = [np.zeros(n, np.int32) for n in lengths]
    return TokenizedExamples({"input_ids": ids, "segment_ids": segments},
                             np.arange(len(lengths)) % 2)


def test_padded_length_rounds_up_to_multiple_of_8_or_fixed():
    assert [padded_length(n, "dynamic") for n in (1, 8, 9, 17, 64)] == [8, 8, 16, 24, 64]
    assert padded_length(5, 128) == 128


def test_make_batch_pads_to_longest_and_marks_filler_rows():
    data = examples([3, 11, 5])
    batch = make_batch(data, [0, 1], "dynamic", batch_size=4)
    assert batch["input_ids"].shape == (4, 16)
    np.testing.assert_array_equal(batch["input_ids"][0], [1, 2, 3] + [0] * 13)
    np.testing.assert_array_equal(batch["input_mask"].sum(axis=1), [3, 11, 0, 0])
    np.testing.assert_array_equal(batch["example_weights"], [1, 1, 0, 0])
    np.testing.assert_array_equal(batch["label_ids"], [0, 1, 0, 0])


def test_stream_sees_every_example_once_per_epoch_across_batch_boundaries():
    stream = training_stream(10, 4, seed=7)
    first_two_epochs = np.concatenate([next(stream) for _ in range(5)])
    assert sorted(first_two_epochs[:10]) == list(range(10))
    assert sorted(first_two_epochs[10:]) == list(range(10))
    assert list(first_two_epochs[:10]) != list(first_two_epochs[10:])  # reshuffled


def test_stream_resumes_at_the_exact_example():
    whole = np.concatenate(list(itertools.islice(training_stream(10, 4, seed=3), 6)))
    resumed = np.concatenate(list(itertools.islice(
        training_stream(10, 4, seed=3, start_example=12), 3)))
    np.testing.assert_array_equal(resumed, whole[12:24])


def test_seed_changes_the_order():
    a = next(training_stream(50, 50, seed=1))
    b = next(training_stream(50, 50, seed=2))
    assert list(a) != list(b)


def test_inference_batches_cover_every_example_exactly_once():
    data = examples([5, 1, 9, 3, 7, 2, 8, 4, 6, 10, 11, 12, 13])
    seen = []
    for towers, rows in inference_batches(data, batch_size=2, num_towers=3):
        assert len(towers) == 3 and rows == 2
        assert all(len(t) <= rows for t in towers)
        seen.extend(int(i) for t in towers for i in t)
    assert sorted(seen) == list(range(13))


def test_length_bucketing_cuts_padding_and_still_covers_each_epoch():
    rng = np.random.RandomState(0)
    lengths = rng.randint(3, 120, size=400)
    data = examples(lengths)

    def padded_tokens(bucket_batches):
        stream = training_stream(400, 16, seed=5, lengths=data.lengths,
                                 bucket_batches=bucket_batches)
        batches = [next(stream) for _ in range(25)]  # one epoch
        assert sorted(np.concatenate(batches)) == list(range(400))
        return sum(len(b) * padded_length(int(data.lengths[b].max()), "dynamic")
                   for b in batches)

    assert padded_tokens(10) < 0.7 * padded_tokens(0)


def test_bucketed_stream_resumes_exactly():
    lengths = np.random.RandomState(1).randint(3, 60, size=50)
    whole = np.concatenate(list(itertools.islice(
        training_stream(50, 8, seed=2, lengths=lengths, bucket_batches=3), 12)))
    resumed = np.concatenate(list(itertools.islice(
        training_stream(50, 8, seed=2, start_example=40, lengths=lengths,
                        bucket_batches=3), 4)))
    np.testing.assert_array_equal(resumed, whole[40:72])


def test_towers_get_equal_rows_and_balanced_tokens():
    lengths = np.array([100, 90, 80, 70, 10, 9, 8, 7])
    parts = split_for_towers(np.arange(8), 2, lengths)
    assert [len(p) for p in parts] == [4, 4]
    tokens = [int(lengths[p].sum()) for p in parts]
    assert tokens == [187, 187]
    assert sorted(np.concatenate(parts)) == list(range(8))


def test_prefetch_keeps_order_and_raises_producer_errors():
    assert list(prefetch(iter(range(50)), depth=3)) == list(range(50))

    def broken():
        yield 1
        raise ValueError("bad row")

    stream = prefetch(broken())
    assert next(stream) == 1
    with pytest.raises(ValueError, match="bad row"):
        next(stream)


def _started_producer(stream) -> tuple:
    """(first item, the producer thread `next(stream)` started)."""
    before = set(threading.enumerate())
    first = next(stream)
    (thread,) = set(threading.enumerate()) - before
    return first, thread


def _ends_within(thread: threading.Thread, seconds: float) -> bool:
    thread.join(seconds)
    return not thread.is_alive()


def test_prefetch_thread_ends_when_the_consumer_closes_an_endless_stream():
    closed = []

    def endless():
        try:
            yield from itertools.count()
        finally:
            closed.append(True)

    stream = prefetch(endless(), depth=2)
    first, thread = _started_producer(stream)
    assert first == 0
    stream.close()
    assert _ends_within(thread, 1.0)
    assert closed == [True]  # the producer closed the iterator it owns


@pytest.mark.parametrize("ending", ["end", "raise"])
def test_prefetch_thread_ends_when_the_consumer_left_before_the_end(ending):
    # The producer fills the queue (depth 1), then its iterator ends or raises
    # only after the consumer has gone: that last hand-over must give up too.
    waiting, release = threading.Event(), threading.Event()

    def rows():
        yield 1
        yield 2
        waiting.set()
        release.wait(5)
        if ending == "raise":
            raise ValueError("bad row after the consumer left")

    stream = prefetch(rows(), depth=1)
    first, thread = _started_producer(stream)
    assert first == 1
    assert waiting.wait(5)  # row 2 fills the queue
    del stream  # dropped without close(), as an abandoned loop does
    gc.collect()
    release.set()
    assert _ends_within(thread, 1.0)


def test_make_batch_pads_a_shorter_column_by_its_own_length():
    data = TokenizedExamples({"input_ids": [np.arange(1, 6, dtype=np.int32)],
                              "word_positions": [np.array([1, 3], np.int32)]})
    batch = make_batch(data, [0], "dynamic", batch_size=2)
    np.testing.assert_array_equal(batch["word_positions"], [[1, 3] + [0] * 6, [0] * 8])
    np.testing.assert_array_equal(batch["input_mask"].sum(axis=1), [5, 0])
