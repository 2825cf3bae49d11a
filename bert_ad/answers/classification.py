"""A classifier's answer to each row, decided once: the metrics, predict.txt,
test_results.tsv, bert-ad predict and the HTTP answer all read it.

What the head's outputs mean is `ClassifierOutputs`: the target (single_label:
softmax over the labels, the most probable one is the answer; multi_label: a
sigmoid per label, every label at or over the threshold; regression: one
value), the label list, and for a windows model how its windows' logits
become the document's. A task builds it from its flags; an export's reader
from export.json (`from_export_settings`, beside `export_settings`, which
writes them), so both answer alike.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from bert_ad.answers.windows import activate, pool_scored_windows

TARGETS = ("single_label", "multi_label", "regression")
# The head's objective for each target (bert_ad/model/heads.py).
OBJECTIVE = {"single_label": "softmax", "multi_label": "sigmoid", "regression": "mse"}


@dataclasses.dataclass(frozen=True)
class ClassifierAnswers:
    """Per row, the answer (n rows).

    Attributes:
      target: one of TARGETS.
      probabilities: [n, labels] (single_label, multi_label), else None.
      label_ids: [n] the most probable label's index (single_label), else None.
      chosen: [n, labels] bool, the labels at or over the threshold
        (multi_label), else None.
      values: [n] (regression), else None.
    """
    target: str
    probabilities: Optional[np.ndarray] = None
    label_ids: Optional[np.ndarray] = None
    chosen: Optional[np.ndarray] = None
    values: Optional[np.ndarray] = None

    def __len__(self) -> int:
        return len(self.values if self.target == "regression" else self.probabilities)

    def label_indices(self, row: int) -> List[int]:
        """The indices of a multi-label row's chosen labels, in label order."""
        return [int(i) for i in np.flatnonzero(self.chosen[row])]

    def as_json(self, row: int, labels: Sequence[str]) -> dict:
        """One row's answer as bert-ad serve and bert-ad predict give it: {"label",
        "probabilities"} / {"labels", "probabilities"} / {"value"}, label names
        from `labels` (the names the user gave, else labels.txt's)."""
        if self.target == "regression":
            return {"value": float(self.values[row])}
        probabilities = {label: float(p) for label, p in zip(labels, self.probabilities[row])}
        if self.target == "multi_label":
            return {"labels": [labels[i] for i in self.label_indices(row)],
                    "probabilities": probabilities}
        return {"label": labels[int(self.label_ids[row])], "probabilities": probabilities}


def classifier_answers(predictions: np.ndarray, target: str,
                       threshold: float = 0.5) -> ClassifierAnswers:
    """The answers of rows from their predictions (probabilities [n, labels], or
    values [n] for regression)."""
    if target == "regression":
        return ClassifierAnswers(target, values=np.asarray(predictions).reshape(-1))
    probabilities = np.asarray(predictions)
    if target == "multi_label":
        return ClassifierAnswers(target, probabilities, chosen=probabilities >= threshold)
    return ClassifierAnswers(target, probabilities,
                             label_ids=np.argmax(probabilities, axis=-1).astype(np.int64))


@dataclasses.dataclass(frozen=True)
class ClassifierOutputs:
    """What a classifier's outputs mean (see the module docstring).

    Attributes:
      target: one of TARGETS.
      labels: the label list (labels.txt order); None for regression.
      threshold: multi_label's: a label is chosen at this probability or more.
      window_pooling: a windows model's pooling of its windows' logits
        (bert_ad.choices.WINDOW_POOLINGS); "" for a model that truncates.
    """
    target: str = "single_label"
    labels: Optional[Sequence[str]] = None
    threshold: float = 0.5
    window_pooling: str = ""

    def __post_init__(self):
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS}, got {self.target!r}")

    @property
    def objective(self) -> str:
        return OBJECTIVE[self.target]

    def predictions(self, outputs: Mapping[str, np.ndarray], num_rows: int) -> np.ndarray:
        """Per input row: probabilities [n, labels] or values [n], from the scored
        rows' outputs (a windows model's windows pooled into their rows here)."""
        if not self.window_pooling:
            return np.asarray(outputs["value" if self.target == "regression"
                                      else "probabilities"])
        predictions = activate(self.pooled_logits(outputs, num_rows), self.objective)
        return predictions[:, 0] if self.target == "regression" else predictions

    def pooled_logits(self, outputs: Mapping[str, np.ndarray], num_rows: int) -> np.ndarray:
        """A windows model's logits per input row [n, outputs] (float64)."""
        return pool_scored_windows(outputs["window_logits"], outputs["window_scores"],
                                   outputs["window_documents"], num_rows,
                                   self.window_pooling)

    def answers(self, outputs: Mapping[str, np.ndarray], num_rows: int) -> ClassifierAnswers:
        return classifier_answers(self.predictions(outputs, num_rows), self.target,
                                  self.threshold)

    @classmethod
    def from_export(cls, settings: Mapping[str, object], labels: Optional[Sequence[str]],
                    output_names: Sequence[str], threshold: float = 0.5
                    ) -> "ClassifierOutputs":
        """The meaning an export's metadata records: its settings' `target`
        (exports before it was recorded: told by the output names, as the
        export writes them) and windows' pooling."""
        target = str(settings.get("target") or (
            "regression" if "value" in output_names else
            "single_label" if "label_ids" in output_names else "multi_label"))
        pooling = (str(settings.get("window_pooling", "mean"))
                   if settings.get("long_text") == "windows" else "")
        return cls(target, list(labels) if labels is not None else None, threshold, pooling)


def prediction_lines(answers: ClassifierAnswers, label_separator: str = "|"
                     ) -> Dict[str, List[str]]:
    """predict.txt (the label's index; multi_label: the indices joined by the
    separator, an empty line for none; regression: the value, 6 decimals) and
    test_results.tsv (each row's probabilities), one line per row."""
    if answers.target == "regression":
        return {"predict.txt": [f"{float(v):.6f}" for v in answers.values]}
    probabilities = ["\t".join(f"{p:.6f}" for p in row) for row in answers.probabilities]
    if answers.target == "multi_label":
        lines = [label_separator.join(str(i) for i in answers.label_indices(row))
                 for row in range(len(answers))]
    else:
        lines = [str(int(i)) for i in answers.label_ids]
    return {"predict.txt": lines, "test_results.tsv": probabilities}
