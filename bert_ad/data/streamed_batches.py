"""Rows tokenised and batched as they stream by: scoring a file without holding it.

ExampleBatches keeps every tokenised row of a split in memory; a file of
100,000 lines to embed should not need that. StreamedBatches takes its rows
from an iterator a window at a time (`window_batches` global batches), and
deals each window over the towers exactly as ExampleBatches does
(`inference_batches`: grouped by length, so little padding; `make_batch`).
Row indices are positions in the whole stream, so a consumer that puts
scored rows back in input order (bert_ad/data/scored_rows.py) holds at
most one window of them.

Each row may carry `info` (its tokens, say) that the graph does not read: a
tower's batch lists its rows' infos under ROW_INFO, in the batch's row order.
"""

from __future__ import annotations

import itertools
from typing import Callable, Dict, Iterator, List, NamedTuple

import numpy as np

from bert_ad.data.batching import Batches, TokenizedExamples, inference_batches, make_batch

# The batch key under which a tower's batch carries its rows' EncodedRow.info.
ROW_INFO = "row_info"


class EncodedRow(NamedTuple):
    """One row's token columns ({"input_ids": [...], "segment_ids": [...]}, the
    first one giving its length) and what travels with it to its scores."""
    columns: Dict[str, List[int]]
    info: object = None


class StreamedBatches(Batches):
    """Scoring batches of a stream of rows, read `window_batches` global batches ahead.

    Args:
      rows: called once per pass; yields the EncodedRows in input order.
      num_examples: how many rows it yields.
      padding: "dynamic" (each batch to its longest row) or a fixed length.
      window_batches: global batches per window: a larger window groups
        lengths better, a smaller one holds fewer rows (and their outputs).
    """

    def __init__(self, rows: Callable[[], Iterator[EncodedRow]], num_examples: int,
                 padding="dynamic", window_batches: int = 16):
        if window_batches < 1:
            raise ValueError(f"window_batches must be at least 1, got {window_batches}")
        self.rows = rows
        self.num_examples = num_examples
        self.padding = padding
        self.window_batches = window_batches

    def _padding(self, examples: TokenizedExamples, indices: np.ndarray):
        """Dynamic padding is to the batch's longest row exactly: a sorted
        window's batches hold rows of about one length, and rounding sentence
        lengths up to a multiple of 8 computed 15% more. (A batch of
        per_tower rows keeps batch x length a multiple of 8 for GPUs' tensor
        cores when per_tower is.)"""
        if self.padding != "dynamic":
            return self.padding
        return int(examples.lengths[indices].max()) if len(indices) else 1

    def training(self, per_tower, towers, workers, worker_index, seed, start_example):
        raise NotImplementedError("a stream of rows is scored, not trained on")

    def scoring(self, per_tower: int, towers: int):
        """Every row once: (row indices per tower, padded batch per tower), window
        by window; each batch also holds ROW_INFO, its rows' infos."""
        window = per_tower * towers * self.window_batches
        start = 0
        rows = self.rows()
        while True:
            chunk = list(itertools.islice(rows, window))
            if not chunk:
                return
            names = list(chunk[0].columns)
            examples = TokenizedExamples(
                {name: [np.asarray(row.columns[name], np.int32) for row in chunk]
                 for name in names})
            for tower_indices, batch_rows in inference_batches(examples, per_tower, towers):
                batches = []
                for indices in tower_indices:
                    batch = make_batch(examples, indices, self._padding(examples, indices),
                                       batch_size=batch_rows)
                    batch[ROW_INFO] = [chunk[i].info for i in indices]
                    batches.append(batch)
                yield [np.asarray(indices, np.int64) + start for indices in tower_indices], \
                    batches
            start += len(chunk)
