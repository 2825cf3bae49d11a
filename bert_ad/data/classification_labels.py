"""A classification task's labels checked against its files: the label list a
multi-label training file holds, every row's label in the run's list, a
regression target a finite float32, a header row taken for a row (file, line,
what to do; nothing is written before these checks).

bert_ad/tasks/classification.py asks `LabelRules` (its target, separator,
the task spec's fixed labels and whether to look for a header).
"""

from __future__ import annotations

import collections
import dataclasses
import math
from typing import List, Optional, Sequence

import numpy as np

from bert_ad.data.features import split_labels
from bert_ad.errors import fail


@dataclasses.dataclass(frozen=True)
class LabelRules:
    """How a task's label cells are read.

    Attributes:
      target: single_label, multi_label or regression.
      separator: joins a multi-label row's labels.
      fixed_labels: the task spec's own list, or None (read from the training file).
      detect_header: refuse a first line that looks like a header.
    """
    target: str
    separator: str = "|"
    fixed_labels: Optional[Sequence[str]] = None
    detect_header: bool = True

    def multi_label_list(self, train) -> List[str]:
        """The sorted labels found in the training rows' label cells."""
        self._check_multi_labels(train, None)
        found = sorted({label for row in train.rows if row.label is not None
                        for label in split_labels(row.label, self.separator)})
        if len(found) < 2:
            fail(f"{train.source} has {len(found)} distinct label(s) {found} with "
                 f"--multi_label_separator={self.separator!r}; multi-label needs at "
                 "least 2: fix the file or the separator, or list them with --labels")
        return found

    def check(self, data, labels: Optional[Sequence[str]]) -> None:
        """Every label of a split (a SplitData of InputExamples) fits the task (file,
        line), `labels` the run's list, before anything runs.

        A predict file's labels are not used, but one that the task cannot
        read (a regression target "?", a label outside a multi-label list)
        would fail when its features are built, after training: refused here.
        A single-label predict file may hold any label (its rows are scored
        whatever it says).
        """
        self._refuse_header(data, labels)
        if self.target == "multi_label":
            self._check_multi_labels(data, labels)
        elif self.target == "regression":
            for row in data.rows:
                problem = None if row.label is None else _target_problem(row.label)
                if problem:
                    fail(f"{row.source} line {row.line}: regression target {row.label!r} "
                         f"{problem}; fix the file or the --label_column"
                         + (" (the predict file's targets are not used: leave the cell "
                            "empty)" if data.split == "predict" else ""))
        elif data.split != "predict":
            known = set(labels)
            for row in data.rows:
                if row.label is not None and row.label not in known:
                    fail(_unknown_label(row, row.label, labels, data.split))

    def _refuse_header(self, data, labels: Optional[Sequence[str]]) -> None:
        """A first line that looks like a header row: one line pointing to --skip_header.

        It looks like one when its label appears on no other row of the file
        and is no label of the list this run knows (a training file's own
        labels are all in its list: there the label must be the file's only
        single-row one among labels that repeat), or is no number under
        --regression. Read as a row, it would become a class of its own and a
        line of predict.txt.
        """
        if not self.detect_header or not data.rows or data.rows[0].line != 1:
            return
        first = data.rows[0]
        if first.label is None or first.label == "":
            return
        if self.target == "regression":
            looks_like_one = _target_problem(first.label) == "is not a number"
        else:
            counts = collections.Counter(row.label for row in data.rows)
            fixed = self.fixed_labels
            if counts[first.label] != 1:
                return
            if data.split == "train" and fixed is None:
                looks_like_one = len(counts) > 2 and min(
                    n for label, n in counts.items() if label != first.label) > 1
            else:
                known = fixed if fixed is not None else labels
                looks_like_one = (known is not None and self.target == "single_label"
                                  and first.label not in known)
        if looks_like_one:
            fail(f"{first.source} line 1: {first.label!r} looks like a header, not a row "
                 "(its label appears on no other line); pass --skip_header to skip the "
                 "first line, or --has_header=false if it is a real row")

    def _check_multi_labels(self, data, labels: Optional[Sequence[str]]) -> None:
        """Every label of every row non-empty and (given `labels`) in the list."""
        known = None if labels is None else set(labels)
        for row in data.rows:
            if row.label is None:
                continue
            for label in split_labels(row.label, self.separator):
                if not label:
                    fail(f"{row.source} line {row.line}: an empty label in {row.label!r} "
                         f"(labels are joined by --multi_label_separator="
                         f"{self.separator!r})")
                if known is not None and label not in known:
                    fail(_unknown_label(row, label, labels, data.split))


def _unknown_label(row, label: str, labels: Sequence[str], split: str) -> str:
    """The one line for a label outside the run's list, with advice that works: after
    training the list is fixed (labels.txt), so --labels helps only when training."""
    advice = ("fix the file, or list every label with --labels" if split == "train" else
              "fix the file; the model predicts only these (to add one, train again with it "
              "in the training file or in --labels)")
    return f"{row.source} line {row.line}: label {label!r} is not one of {list(labels)}; {advice}"


# The largest number a float32 target holds: a larger one becomes inf in training.
FLOAT32_MAX = float(np.finfo(np.float32).max)


def _target_problem(text: str) -> Optional[str]:
    """Why a regression target cannot be trained on, or None."""
    try:
        value = float(text)
    except ValueError:
        return "is not a number"
    if not math.isfinite(value):
        return "is not a finite number"
    if abs(value) > FLOAT32_MAX:
        return f"is beyond float32's range (+-{FLOAT32_MAX:.3g}), where training works"
    return None
