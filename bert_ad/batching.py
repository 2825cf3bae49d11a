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

    `columns` maps a feature name to a list of 1-D int arrays (all of one
    example's sequence features have the same length); `labels` is [n] int.
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
        length = examples.lengths[index]
        for name, column in examples.columns.items():
            batch[name][row, :length] = column[index]
        mask[row, :length] = 1
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


def epoch_order(num_examples: int, seed: int, epoch: int) -> np.ndarray:
    """The seeded permutation of one training epoch."""
    return np.random.RandomState((seed * 1000003 + epoch) % (2 ** 32)).permutation(
        num_examples)


def training_stream(num_examples: int, global_batch: int, seed: int,
                    start_example: int = 0) -> Iterator[np.ndarray]:
    """Endless global batches of example indices, epoch after epoch.

    A batch may span an epoch boundary, so every example is seen exactly once
    per epoch and none is dropped. `start_example` (examples already consumed)
    resumes mid-epoch.
    """
    epoch, offset = divmod(start_example, num_examples)
    order = epoch_order(num_examples, seed, epoch)
    while True:
        batch = []
        while len(batch) < global_batch:
            take = min(global_batch - len(batch), num_examples - offset)
            batch.extend(order[offset:offset + take])
            offset += take
            if offset == num_examples:
                epoch, offset = epoch + 1, 0
                order = epoch_order(num_examples, seed, epoch)
        yield np.array(batch, dtype=np.int64)


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
