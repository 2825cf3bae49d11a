"""From tokenised examples to per-tower padded batches.

Examples are stored unpadded (a list of id arrays). A batch is padded only to
its longest member, rounded up to a multiple of 8 (`padding="dynamic"`), or to
a fixed length (`padding=max_seq_length`, Google's behaviour), so the work per
step follows the real lengths.

Training reads an endless stream of epochs, each a seeded permutation: example
k of the stream is fully determined by (seed, k), which is what lets a resumed
run continue exactly where the interrupted one stopped.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

PAD_MULTIPLE = 8


class TokenizedExamples:
    """Unpadded token ids per example, with optional per-example int labels.

    `columns` maps a feature name to a list of 1-D int arrays; `labels` is
    [n] int. The first column's lengths are the examples' lengths (they set
    `input_mask` and the padded length); another column may be shorter (e.g.
    one entry per word, not per token) and is zero-padded to the same length.
    """

    def __init__(self, columns: dict, labels: np.ndarray | None = None):
        self.columns = {k: list(v) for k, v in columns.items()}
        first = next(iter(self.columns.values()))
        self.lengths = np.array([len(ids) for ids in first], dtype=np.int64)
        self.labels = None if labels is None else np.asarray(labels, dtype=np.int32)

    def __len__(self) -> int:
        return len(self.lengths)


def padded_length(longest: int, padding) -> int:
    """Sequence length of a batch whose longest example has `longest` tokens."""
    if padding == "dynamic":
        return max(PAD_MULTIPLE, -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE)
    return int(padding)


def make_batch(examples: TokenizedExamples, indices: Sequence[int], padding,
               batch_size: int | None = None) -> dict:
    """Padded arrays for the examples at `indices`.

    Returns input_ids/input_mask/segment_ids-style [batch, seq] int32 arrays for
    every column plus `input_mask`, `label_ids` [batch] and `example_weights`
    [batch] (1.0 real, 0.0 filler). With `batch_size` larger than
    len(indices), filler rows (all padding, weight 0) complete the batch so
    every step has the same batch shape and no real example is dropped.
    """
    indices = np.asarray(indices, dtype=np.int64)
    rows = batch_size or len(indices)
    longest = int(examples.lengths[indices].max()) if len(indices) else 1
    seq = padded_length(longest, padding)
    batch = {name: np.zeros((rows, seq), np.int32) for name in examples.columns}
    mask = np.zeros((rows, seq), np.int32)
    for row, index in enumerate(indices):
        for name, column in examples.columns.items():
            batch[name][row, :len(column[index])] = column[index]
        mask[row, :examples.lengths[index]] = 1
    batch["input_mask"] = mask
    weights = np.zeros(rows, np.float32)
    weights[:len(indices)] = 1.0
    batch["example_weights"] = weights
    labels = np.zeros(rows, np.int32)
    if examples.labels is not None:
        labels[:len(indices)] = examples.labels[indices]
    batch["label_ids"] = labels
    return batch


def split_evenly(indices: np.ndarray, parts: int) -> list:
    """`parts` consecutive slices of equal size (len(indices) divides by parts)."""
    return np.split(np.asarray(indices), parts)


def epoch_order(num_examples: int, seed: int, epoch: int,
                lengths: np.ndarray | None = None, batch_size: int = 0,
                bucket_batches: int = 0) -> np.ndarray:
    """The seeded order of one training epoch.

    With `lengths` and `bucket_batches` (length bucketing), the shuffled
    examples are taken `bucket_batches` batches at a time, sorted by length
    inside that window and cut into batches whose order is shuffled again:
    batches of similar lengths (little padding), still a fresh random mix
    every epoch, and still a pure function of (seed, epoch).
    """
    rng = np.random.RandomState((seed * 1000003 + epoch) % (2 ** 32))
    order = rng.permutation(num_examples)
    if lengths is None or not bucket_batches or batch_size < 1:
        return order
    window = batch_size * bucket_batches
    out = []
    for start in range(0, num_examples, window):
        chunk = order[start:start + window]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches = [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
        out.extend(batches[i] for i in rng.permutation(len(batches)))
    return np.concatenate(out)


def training_stream(num_examples: int, global_batch: int, seed: int,
                    start_example: int = 0, lengths: np.ndarray | None = None,
                    bucket_batches: int = 0) -> Iterator[np.ndarray]:
    """Endless global batches of example indices, epoch after epoch.

    A batch may span an epoch boundary, so every example is seen exactly once
    per epoch and none is dropped. `start_example` (examples already consumed)
    resumes mid-epoch. `lengths` + `bucket_batches` turn on length bucketing
    (see `epoch_order`).
    """
    def order(epoch):
        return epoch_order(num_examples, seed, epoch, lengths, global_batch,
                           bucket_batches)

    epoch, offset = divmod(start_example, num_examples)
    current = order(epoch)
    while True:
        batch = []
        while len(batch) < global_batch:
            take = min(global_batch - len(batch), num_examples - offset)
            batch.extend(current[offset:offset + take])
            offset += take
            if offset == num_examples:
                epoch, offset = epoch + 1, 0
                current = order(epoch)
        yield np.array(batch, dtype=np.int64)


def split_for_towers(indices: np.ndarray, parts: int,
                     lengths: np.ndarray | None = None) -> list:
    """`parts` equal-size shares of a global batch.

    With `lengths`, rows are dealt in length order (snake order), so every
    tower gets the same number of rows and about the same real tokens and
    longest row: no tower waits for a slower one.
    """
    indices = np.asarray(indices)
    if lengths is None:
        return split_evenly(indices, parts)
    by_length = indices[np.argsort(lengths[indices], kind="stable")]
    # Deal like a snake (0 1 1 0 0 1 ...), which evens out the token sums.
    rank = np.arange(len(by_length))
    rounds, seat = rank // parts, rank % parts
    tower = np.where(rounds % 2 == 0, seat, parts - 1 - seat)
    return [by_length[tower == t] for t in range(parts)]


def training_batches(examples: TokenizedExamples, per_tower: int, towers: int,
                     seed: int, start_example: int, padding,
                     bucket_batches: int = 0) -> Iterator[list]:
    """Micro-batches for the training loop: one padded batch dict per tower."""
    stream = training_stream(len(examples), per_tower * towers, seed, start_example,
                             examples.lengths, bucket_batches)
    for indices in stream:
        yield [make_batch(examples, part, padding)
               for part in split_for_towers(indices, towers, examples.lengths)]


def prefetch(iterator: Iterator, depth: int = 2) -> Iterator:
    """Run `iterator` in a background thread, `depth` items ahead.

    Batches are built in numpy while the session runs the previous step
    (session.run releases the GIL), so the input is never the bottleneck.
    An exception in the producer is raised in the consumer.
    """
    import queue
    import threading

    items: queue.Queue = queue.Queue(maxsize=depth)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            for item in iterator:
                while not stop.is_set():
                    try:
                        items.put(("item", item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put(("item", done))
        except BaseException as e:  # handed to the consumer
            items.put(("error", e))

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            kind, item = items.get()
            if kind == "error":
                raise item
            if item is done:
                return
            yield item
    finally:
        stop.set()


def inference_batches(examples: TokenizedExamples, batch_size: int,
                      num_towers: int, sort_by_length: bool = True
                      ) -> Iterator[tuple]:
    """(indices per tower, global batch) covering every example exactly once.

    With `sort_by_length`, examples are grouped by length so little padding is
    computed; callers put results back in input order by index. The last
    global batch is completed with filler rows (weight 0), never dropped.
    Yields (list of per-tower index arrays, per-tower row count).
    """
    order = np.argsort(examples.lengths, kind="stable") if sort_by_length \
        else np.arange(len(examples))
    global_batch = batch_size * num_towers
    for start in range(0, len(order), global_batch):
        chunk = order[start:start + global_batch]
        # Spread a short last chunk over all towers rather than filling tower 0.
        yield [chunk[t::num_towers] for t in range(num_towers)], batch_size
