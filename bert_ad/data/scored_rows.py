"""Scored rows handed on in input order as their batches finish, not collected.

`evaluation.score` gathers a split's outputs and returns them all; a file of
100,000 lines embedded to disk should not be held like that. `rows_in_order`
runs a Scorer over scoring batches (every tower at each step) and yields
each row's outputs as soon as every row before it is scored: rows that come
back early (batches are grouped by length, not by position) wait in a small
reorder buffer, at most one window of bert_ad/data/streamed_batches.py.
`stack_rows` gathers such rows into a split's arrays (evaluation.score).
No TensorFlow here: scoring with an ONNX export runs it too.
"""

from __future__ import annotations

from typing import Dict, Iterable, Iterator, Sequence, Tuple

import numpy as np


def rows_in_order(scorer, batches: Iterable[Tuple[list, list]],
                  carry: Sequence[str] = ()) -> Iterator[Tuple[int, Dict[str, object]]]:
    """(row index, {output name: that row's value}) for rows 0, 1, 2, ... in order.

    Args:
      scorer: has `run(per_tower_batches) -> [{name: [batch, ...] array}]`
        (bert_ad.parallel.scoring.Scorer).
      batches: (row indices per tower, batch per tower), every row exactly
        once (Batches.scoring); filler rows beyond a tower's indices are dropped.
      carry: batch keys whose per-row entries go along with the outputs
        (e.g. streamed_batches.ROW_INFO).
    Raises:
      AssertionError: the batches skipped or repeated a row.
    """
    waiting: Dict[int, Dict[str, object]] = {}
    next_row = 0
    for tower_indices, tower_batches in batches:
        for indices, batch, values in zip(tower_indices, tower_batches,
                                          scorer.run(tower_batches)):
            for position, index in enumerate(np.asarray(indices).tolist()):
                if index < next_row or index in waiting:
                    raise AssertionError(f"row {index} was scored twice")
                row = {name: value[position] for name, value in values.items()}
                row.update((key, batch[key][position]) for key in carry if key in batch)
                waiting[index] = row
        while next_row in waiting:
            yield next_row, waiting.pop(next_row)
            next_row += 1
    if waiting:
        raise AssertionError(f"rows {min(waiting)}.. were scored but row {next_row} "
                             "never was")


def stack_rows(rows: Iterable[Tuple[int, Dict[str, np.ndarray]]]) -> Dict[str, np.ndarray]:
    """Rows 0, 1, 2, ... (as rows_in_order yields them) -> {output name: [rows, ...]}.

    Rows whose outputs have different shapes from batch to batch (a sequence
    dimension under dynamic padding) come back as an object array of per-row
    arrays, each padded to its batch's length.
    """
    values: Dict[str, list] = {}
    for index, row in rows:
        for name, value in row.items():
            column = values.setdefault(name, [])
            if len(column) != index:
                raise AssertionError(f"row {index} came after {len(column)} rows of {name}")
            column.append(value)
    stacked = {}
    for name, column in values.items():
        if len({np.shape(v) for v in column}) == 1:
            stacked[name] = np.stack(column)
        else:
            stacked[name] = np.empty(len(column), dtype=object)
            stacked[name][:] = column
    return stacked


def score_rows(scorer, batches, batch_size: int, towers: int = 1) -> Dict[str, np.ndarray]:
    """Every row of `batches` (a task's Batches) scored by `scorer` (a checkpoint's
    Scorer on `towers` towers, or an export's: one tower, its runtime spreads a
    batch over the cores), stacked in input order."""
    return stack_rows(rows_in_order(scorer, batches.scoring(batch_size, towers)))
