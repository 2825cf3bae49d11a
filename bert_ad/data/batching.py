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

import abc
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

PAD_MULTIPLE = 8
# Length bucketing (--bucket_by_length) sorts this many global batches at a time.
BUCKET_WINDOW_BATCHES = 50


class TokenizedExamples:
    """Unpadded token ids per example, with optional per-example values.

    `columns` maps a feature name to a list of 1-D int arrays; the first
    column's lengths are the examples' lengths (they set `input_mask` and the
    padded length); another column may be shorter (e.g. one entry per word,
    not per token) and is zero-padded to the same length, or longer (words
    sharing pieces) and is zero-padded to its own longest row in the batch. `labels` is [n] int
    (batched as `label_ids`); `row_values` maps other per-example features to
    [n, ...] arrays of any dtype (a regression target, a multi-hot label
    vector), batched under their own names.
    """

    def __init__(self, columns: dict, labels: np.ndarray | None = None,
                 row_values: dict | None = None):
        self.columns = {k: list(v) for k, v in columns.items()}
        first = next(iter(self.columns.values()))
        self.lengths = np.array([len(ids) for ids in first], dtype=np.int64)
        self.labels = None if labels is None else np.asarray(labels, dtype=np.int32)
        self.row_values = {k: np.asarray(v) for k, v in (row_values or {}).items()}

    def __len__(self) -> int:
        return len(self.lengths)


def concatenate(first: TokenizedExamples, second: TokenizedExamples) -> TokenizedExamples:
    """The examples of `first`, then those of `second` (the same columns and values)."""
    if first.columns.keys() != second.columns.keys() or \
            first.row_values.keys() != second.row_values.keys() or \
            (first.labels is None) != (second.labels is None):
        raise ValueError("examples with different features cannot be concatenated")
    labels = (None if first.labels is None
              else np.concatenate([first.labels, second.labels]))
    return TokenizedExamples(
        {name: first.columns[name] + second.columns[name] for name in first.columns},
        labels, {name: np.concatenate([first.row_values[name], second.row_values[name]])
                 for name in first.row_values})


def padded_length(longest: int, padding) -> int:
    """Sequence length of a batch whose longest example has `longest` tokens."""
    if padding == "dynamic":
        return max(PAD_MULTIPLE, -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE)
    return int(padding)


def make_batch(examples: TokenizedExamples, indices: Sequence[int], padding,
               batch_size: int | None = None) -> dict:
    """Padded arrays for the examples at `indices`.

    Returns input_ids/input_mask/segment_ids-style [batch, seq] int32 arrays for
    every column plus `input_mask`, `label_ids` [batch], `example_weights`
    [batch] (1.0 real, 0.0 filler) and each of `row_values` [batch, ...].
    With `batch_size` larger than len(indices), filler rows (all padding,
    weight 0) complete the batch so every step has the same batch shape and
    no real example is dropped.
    """
    indices = np.asarray(indices, dtype=np.int64)
    rows = batch_size or len(indices)
    longest = int(examples.lengths[indices].max()) if len(indices) else 1
    seq = padded_length(longest, padding)
    # Another column may be longer than the first (a sentence's words when
    # several share a piece): it is padded to its own longest row.
    batch = {name: np.zeros((rows, max([seq] + [len(column[i]) for i in indices])), np.int32)
             for name, column in examples.columns.items()}
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
    for name, values in examples.row_values.items():
        batch[name] = np.zeros((rows,) + values.shape[1:], values.dtype)
        batch[name][:len(indices)] = values[indices]
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


def worker_training_batches(examples: TokenizedExamples, per_tower: int, towers: int,
                            seed: int, start_example: int, padding, bucket_batches: int = 0,
                            workers: int = 1, index: int = 0) -> Iterator[list]:
    """Worker `index`'s micro-batches: one padded batch dict per local tower.

    The cluster's global batch is dealt to `workers * towers` towers exactly
    as one machine with that many towers would deal it (`training_batches`),
    and this worker keeps its towers' shares: the cluster sees every example
    once per epoch, and 2 workers x 1 tower get the same batches as 1 worker
    x 2 towers.
    """
    if workers == 1:
        yield from training_batches(examples, per_tower, towers, seed, start_example,
                                    padding, bucket_batches)
        return
    yield from dealt_training_batches(
        len(examples), examples.lengths, lambda part: make_batch(examples, part, padding),
        per_tower, towers, seed, start_example, bucket_batches, workers, index)


def dealt_training_batches(num_examples: int, lengths: np.ndarray,
                           batch_of: Callable[[np.ndarray], dict], per_tower: int,
                           towers: int, seed: int, start_example: int,
                           bucket_batches: int = 0, workers: int = 1, index: int = 0
                           ) -> Iterator[list]:
    """`worker_training_batches` for any batch maker: `batch_of(indices)` makes
    one tower's batch of the examples at `indices` (`lengths` [num_examples]
    balances the towers' shares)."""
    stream = training_stream(num_examples, per_tower * towers * workers, seed,
                             start_example, lengths, bucket_batches)
    for indices in stream:
        shares = split_for_towers(indices, towers * workers, lengths)
        yield [batch_of(part) for part in shares[index * towers:(index + 1) * towers]]


def prefetch(iterator: Iterator, depth: int = 2) -> Iterator:
    """Run `iterator` in a background thread, `depth` items ahead.

    Batches are built in numpy while the session runs the previous step
    (session.run releases the GIL), so the input is never the bottleneck.
    An exception in the producer is raised in the consumer. When the consumer
    goes away (the generator is closed or garbage-collected) the producer
    stops within 0.1 s and closes `iterator`: no thread is left blocked.
    """
    import queue
    import threading

    items: queue.Queue = queue.Queue(maxsize=depth)
    consumer_gone = threading.Event()

    def hand_over(kind: str, value) -> bool:
        """Queue (kind, value) unless the consumer has gone; True if queued."""
        while not consumer_gone.is_set():
            try:
                items.put((kind, value), timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in iterator:
                if not hand_over("item", item):
                    break
            else:
                hand_over("done", None)
        except BaseException as e:  # handed to the consumer
            hand_over("error", e)
        finally:
            if consumer_gone.is_set() and hasattr(iterator, "close"):
                iterator.close()  # its files and workers, now, in its own thread

    thread = threading.Thread(target=produce, name="bert_ad-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            kind, item = items.get()
            if kind == "error":
                raise item
            if kind == "done":
                return
            yield item
    finally:
        consumer_gone.set()


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


# What a split's data must offer the driver: training micro-batches (one
# padded dict per local tower) and scoring batches (row indices per tower,
# and one padded dict per tower), every row exactly once.
TrainingBatches = Iterator[List[dict]]
ScoringBatches = Iterator[Tuple[List[np.ndarray], List[dict]]]


class Batches(abc.ABC):
    """A split's model features, dealt into per-tower batches."""

    num_examples: Optional[int] = None  # None: an endless stream (pretraining)

    @abc.abstractmethod
    def training(self, per_tower: int, towers: int, workers: int, worker_index: int,
                 seed: int, start_example: int) -> TrainingBatches:
        """Endless micro-batches from example `start_example` of the seeded stream."""

    @abc.abstractmethod
    def scoring(self, per_tower: int, towers: int) -> ScoringBatches:
        """Every example once: (row indices per tower, padded batch per tower)."""


class ExampleBatches(Batches):
    """Tokenised examples held in memory (every fine-tuning task)."""

    def __init__(self, examples: TokenizedExamples, padding, bucket_by_length: bool):
        self.examples = examples
        self.num_examples = len(examples)
        self.padding = padding
        self.bucket_batches = BUCKET_WINDOW_BATCHES if bucket_by_length else 0

    def training(self, per_tower, towers, workers, worker_index, seed, start_example):
        return worker_training_batches(self.examples, per_tower, towers, seed,
                                       start_example, self.padding, self.bucket_batches,
                                       workers, worker_index)

    def scoring(self, per_tower, towers):
        for tower_indices, rows in inference_batches(self.examples, per_tower, towers):
            yield tower_indices, [make_batch(self.examples, indices, self.padding,
                                             batch_size=rows)
                                  for indices in tower_indices]


class WindowBatches(Batches):
    """Long documents as windows (--long_text=windows), one window a feature row.

    `examples` holds one row per window, the windows of a document
    consecutive, with row value `document_index` (its document in the split)
    and the document's label and targets copied onto each window.

    Training deals documents: a tower's batch holds every window of its
    documents ([windows, seq] inputs) with `window_document` [windows] (the
    window's document among the batch's, 0..D-1) and the documents' own
    `label_ids`, `example_weights` and targets [D, ...], so a document's
    windows are pooled and its loss taken in one tower and one step.
    `num_examples` counts documents (epochs are over documents).

    Scoring deals windows as rows, like any row, over all towers (a
    document's windows may sit on different towers): each window is its own
    segment (`window_document` = 0..rows-1) and comes back with its
    `document_index`; the task pools them per document afterwards
    (bert_ad/model/windows.py).
    """

    DOCUMENT = "document_index"

    def __init__(self, examples: TokenizedExamples, padding, bucket_by_length: bool):
        self.examples = examples
        self.padding = padding
        self.bucket_batches = BUCKET_WINDOW_BATCHES if bucket_by_length else 0
        documents = examples.row_values[self.DOCUMENT].astype(np.int64)
        if len(documents) and np.any(np.diff(documents) < 0):
            raise ValueError("the windows of a document must be consecutive")
        self.num_examples = int(documents[-1]) + 1 if len(documents) else 0
        self.window_counts = np.bincount(documents, minlength=self.num_examples)
        self.first_window = np.concatenate([[0], np.cumsum(self.window_counts)[:-1]])
        self.document_lengths = np.bincount(documents, examples.lengths,
                                            minlength=self.num_examples).astype(np.int64)

    @property
    def num_windows(self) -> int:
        return len(self.examples)

    def windows_of(self, documents: np.ndarray) -> np.ndarray:
        """The window rows of `documents`, document by document."""
        return np.concatenate([np.arange(self.first_window[d],
                                         self.first_window[d] + self.window_counts[d])
                               for d in documents]).astype(np.int64)

    def document_batch(self, documents: np.ndarray) -> dict:
        """One tower's training batch: every window of `documents`."""
        documents = np.asarray(documents, np.int64)
        batch = make_batch(self.examples, self.windows_of(documents), self.padding)
        first = self.first_window[documents]
        batch["window_document"] = np.repeat(np.arange(len(documents), dtype=np.int32),
                                             self.window_counts[documents])
        batch["label_ids"] = self.examples.labels[first]
        batch["example_weights"] = np.ones(len(documents), np.float32)
        for name, values in self.examples.row_values.items():
            if name != self.DOCUMENT:
                batch[name] = values[first]
        return batch

    def training(self, per_tower, towers, workers, worker_index, seed, start_example):
        return dealt_training_batches(self.num_examples, self.document_lengths,
                                      self.document_batch, per_tower, towers, seed,
                                      start_example, self.bucket_batches, workers,
                                      worker_index)

    def scoring(self, per_tower, towers):
        for tower_indices, rows in inference_batches(self.examples, per_tower, towers):
            batches = []
            for indices in tower_indices:
                batch = make_batch(self.examples, indices, self.padding, batch_size=rows)
                batch["window_document"] = np.arange(rows, dtype=np.int32)
                batches.append(batch)
            yield tower_indices, batches
