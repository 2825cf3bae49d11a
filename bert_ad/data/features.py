"""Examples -> token ids ([CLS] a [SEP] b [SEP]), for the classifier and rewrite tasks.

The features are cached by bert_ad/data/feature_cache.py under a hash of the
input file's bytes and of every setting that changes them (vocab, casing,
length, truncation or windows, labels and their kind), so an edited file or
flag never reuses a stale cache.

What a row's label becomes (`FeatureSettings.target`):

  single_label  label_ids: the label's index in the label list
  multi_label   row value multi_hot_labels [num_labels] float32: 1.0 for every
                label of the row (labels joined by `label_separator`)
  regression    row value targets [] float32: the label read as a number

Long texts (`FeatureSettings.windows`): by default a text is truncated
(`truncation`: head, tail, head+tail). With `WindowSettings` it is cut into
overlapping windows of max_seq_length - 2 pieces, `stride` pieces apart, the
last ending at the text's end (`window_starts`); each window is a row of
its own with its document's label and targets, and row value
document_index [] int32 says which input row it came from.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.processors import InputExample
from bert_ad.data.truncation import truncate_pair, truncate_tokens
from bert_ad.errors import fail

log = logging.getLogger("bert_ad")

TARGETS = ("single_label", "multi_label", "regression")


@dataclasses.dataclass(frozen=True)
class WindowSettings:
    """How a long text becomes windows (--long_text=windows).

    Attributes:
      stride: pieces between the starts of consecutive windows; less than a
        window's max_seq_length - 2 pieces, so windows overlap.
      max_windows: at most this many windows a text (0: all); when a text
        has more, that many are taken evenly spread from the first to the
        last (`window_starts`).
    """
    stride: int
    max_windows: int = 0


@dataclasses.dataclass
class FeatureSettings:
    """Everything besides the examples that decides the token ids and targets
    (and so the feature cache's key)."""
    max_seq_length: int
    truncation: str = "head"
    head_fraction: float = 0.25
    label_list: Sequence[str] = ()
    target: str = "single_label"
    label_separator: str = "|"
    windows: Optional[WindowSettings] = None

    def __post_init__(self):
        self.label_list = list(self.label_list)

    def export_settings(self) -> Dict[str, object]:
        """How text became rows and what the outputs mean, as export.json records
        them (the classifier's Task.serving_settings; read back by
        `from_export_settings`)."""
        settings: Dict[str, object] = {"target": self.target}
        if self.windows is None:
            settings.update(long_text="truncate", truncation=self.truncation)
            if self.truncation == "head+tail":
                settings["truncation_head_fraction"] = self.head_fraction
        else:
            settings.update(long_text="windows", window_stride=self.windows.stride,
                            max_windows=self.windows.max_windows)
        return settings

    @classmethod
    def from_export_settings(cls, settings: Mapping[str, object], max_seq_length: int,
                             labels: Sequence[str], target: str) -> "FeatureSettings":
        """The settings an export recorded (`export_settings`), at its length and
        labels (exports before `target` was recorded: the target told apart by
        the caller)."""
        windows = None
        if settings.get("long_text") == "windows":
            windows = WindowSettings(int(settings["window_stride"]),
                                     int(settings["max_windows"]))
        return cls(max_seq_length, str(settings.get("truncation", "head")),
                   float(settings.get("truncation_head_fraction", 0.25)), list(labels),
                   target=target, windows=windows)


def check_window_settings(max_seq_length: int, windows: WindowSettings) -> None:
    """UserError (naming the flag) for a stride that leaves no overlap or no progress."""
    window = max_seq_length - 2
    if windows.stride < 1 or windows.stride >= window:
        fail(f"--window_stride={windows.stride} must be at least 1 and less than a "
             f"window's {window} pieces (--max_seq_length={max_seq_length} minus [CLS] "
             "and [SEP]) so that windows overlap")
    if windows.max_windows < 0:
        fail(f"--max_windows={windows.max_windows} must be at least 0 (0: every window)")


def window_starts(num_pieces: int, window: int, stride: int, max_windows: int = 0
                  ) -> List[int]:
    """Where the windows of a text of `num_pieces` pieces start.

    Windows of `window` pieces start every `stride` pieces; the last one ends
    at the text's end (it may overlap its predecessor by more). A text that
    fits is one window. With `max_windows` > 0 and more windows than that,
    `max_windows` of them are kept, evenly spread, always the first and the
    last.

    Returns:
      Ascending start positions; window k is pieces[start_k:start_k + window].
    """
    if num_pieces <= window:
        return [0]
    count = 1 + math.ceil((num_pieces - window) / stride)
    starts = [min(k * stride, num_pieces - window) for k in range(count)]
    if 0 < max_windows < count:
        keep = sorted({int(round(i * (count - 1) / max(max_windows - 1, 1)))
                       for i in range(max_windows)})
        starts = [starts[k] for k in keep]
    return starts


def encode_example(example: InputExample, tokenizer, settings: FeatureSettings):
    """(input_ids, segment_ids) of one example, truncated to max_seq_length."""
    if not example.text_b and settings.truncation == "head":
        # A long text is tokenized only as far as it is kept.
        tokens_a = tokenizer.tokenize_head(example.text_a, settings.max_seq_length - 2)
        return row_ids(tokenizer, tokens_a)
    tokens_a = tokenizer.tokenize(example.text_a)
    if example.text_b:
        tokens_b = tokenizer.tokenize(example.text_b)
        tokens_a, tokens_b = truncate_pair(tokens_a, tokens_b,
                                           settings.max_seq_length - 3,
                                           settings.truncation, settings.head_fraction)
    else:
        tokens_b = []
        tokens_a = truncate_tokens(tokens_a, settings.max_seq_length - 2,
                                   settings.truncation, settings.head_fraction)
    return row_ids(tokenizer, tokens_a, tokens_b)


def row_ids(tokenizer, first: Sequence[str], second: Sequence[str] = ()
            ) -> Tuple[List[int], List[int]]:
    """(input_ids, segment_ids) of `[CLS] first [SEP]`, plus `second [SEP]` in
    segment 1 when there is a second text."""
    tokens = ["[CLS]"] + list(first) + ["[SEP]"]
    segments = [0] * len(tokens)
    if second:
        tokens += list(second) + ["[SEP]"]
        segments += [1] * (len(second) + 1)
    return tokenizer.convert_tokens_to_ids(tokens), segments


def encode_windows(example: InputExample, tokenizer,
                   settings: FeatureSettings) -> List[Tuple[List[int], List[int]]]:
    """[(input_ids, segment_ids)] of the windows of one example.

    A single text is cut into windows of max_seq_length - 2 pieces. A pair
    (title and body, query and document) keeps its first text in every window,
    `[CLS] a [SEP] b_k [SEP]`, cut to at most half the room if it is longer,
    and cuts the second into windows filling the rest; their stride is
    --window_stride scaled by how much shorter they are than a single text's
    window, so consecutive windows overlap by the same share.
    """
    pieces = tokenizer.tokenize(example.text_a)
    stride, max_windows = settings.windows.stride, settings.windows.max_windows
    if not example.text_b:
        window = settings.max_seq_length - 2
        return [row_ids(tokenizer, pieces[start:start + window])
                for start in window_starts(len(pieces), window, stride, max_windows)]
    room = settings.max_seq_length - 3
    first = pieces[:room // 2]
    second = tokenizer.tokenize(example.text_b)
    window = room - len(first)
    stride = max(1, min(window - 1, round(stride * window / (settings.max_seq_length - 2))))
    return [row_ids(tokenizer, first, second[start:start + window])
            for start in window_starts(len(second), window, stride, max_windows)]


def split_labels(label: str, separator: str) -> List[str]:
    """The labels of a multi-label cell, e.g. "sports|travel" -> [sports, travel];
    an empty cell is a row with none of the labels."""
    if not label.strip():
        return []
    return [part.strip() for part in label.split(separator)]


def encode_target(example: InputExample, settings: FeatureSettings,
                  label_index: dict) -> Tuple[int, dict]:
    """(label id, {row value name: value}) of a checked example (None label: zeros)."""
    if settings.target == "multi_label":
        multi_hot = np.zeros(len(settings.label_list), np.float32)
        if example.label is not None:
            for label in split_labels(example.label, settings.label_separator):
                multi_hot[label_index[label]] = 1.0
        return 0, {"multi_hot_labels": multi_hot}
    if settings.target == "regression":
        value = float(example.label) if example.label is not None else 0.0
        return 0, {"targets": np.float32(value)}
    return (label_index.get(example.label, 0) if example.label is not None else 0), {}


def convert_examples(examples: Sequence[InputExample], tokenizer,
                     settings: FeatureSettings) -> TokenizedExamples:
    """The features of `examples` (labels already checked): one row each, or
    one row per window with `settings.windows` (row value document_index)."""
    label_index = {label: i for i, label in enumerate(settings.label_list)}
    input_ids, segment_ids, labels = [], [], []
    row_values = {}
    for number, example in enumerate(examples):
        if settings.windows is not None:
            rows = encode_windows(example, tokenizer, settings)
        else:
            rows = [encode_example(example, tokenizer, settings)]
        label, values = encode_target(example, settings, label_index)
        if settings.windows is not None:
            values["document_index"] = np.int32(number)
        for ids, segments in rows:
            input_ids.append(np.array(ids, np.int32))
            segment_ids.append(np.array(segments, np.int32))
            labels.append(label)
            for name, value in values.items():
                row_values.setdefault(name, []).append(value)
    return TokenizedExamples({"input_ids": input_ids, "segment_ids": segment_ids},
                             np.array(labels, np.int32),
                             {name: np.stack(v) for name, v in row_values.items()})
