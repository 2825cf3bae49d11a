"""A fine-tuned output folder is the model: what it holds, and its settings record.

Every run that trains writes into its output_dir, before the first
checkpoint, what a later command needs to use the model with nothing else
(bert_ad/run_model_folder.py writes it; docs/model_folder.md has the table):

  bert_config.json      the model's config (a distilled student's own)
  <vocab>               the vocabulary / piece list (and normalization.tsv) as trained
  labels.txt            the label list, in the head's order
  model_settings.json   ModelSettings: everything that changes the model's inputs or
                        the meaning of its outputs, what identifies the run, and at
                        the end the checkpoint step and its metrics
  model.ckpt-N          the weights

ModelSettings uses export.json's names (bert_ad/inference/layout.py,
ExportMetadata) for what both record: task, labels, max_seq_length,
do_lower_case, vocab_file, tokenizer, vocab_sha256, settings (the task's
serving_settings: truncation, windows, pooling, ...), answer_settings,
label_names. This module imports no TensorFlow and nothing of the tasks, so
flag checks and bert_ad/inference/ can read a folder; `read_model_settings` is
the one place the file is validated.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Dict, List, Optional

from bert_ad.bert_config import BertConfig
from bert_ad.errors import fail

SETTINGS_FILE = "model_settings.json"
BERT_CONFIG_FILE = "bert_config.json"
FORMAT_VERSION = 1
TOKENIZERS = ("wordpiece", "sentencepiece", "unigram")
# The config fields that make a checkpoint's variables what they are.
SHAPE_KEYS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "intermediate_size", "max_position_embeddings", "type_vocab_size")


def model_shape(config: BertConfig) -> Dict[str, int]:
    """The config's fields that decide its variables' shapes (part of a run's identity)."""
    return {key: getattr(config, key) for key in SHAPE_KEYS}


@dataclasses.dataclass(frozen=True)
class ModelSettings:
    """model_settings.json: the model a folder holds and the run that trained it.

    Attributes:
      task: the task's name ("classifier", "ner", "squad", "distill", ...).
      labels: the label list (labels.txt), or None for a task without one.
      label_names: a display name per label (--label_names), or None.
      max_seq_length, do_lower_case: the tokenizer settings it was trained with.
      tokenizer: "wordpiece", "sentencepiece" or "unigram"; "" for a task on
        token ids (pretraining), which has no vocabulary.
      vocab_file: the vocabulary's file name in the folder ("" without one).
      vocab_sha256: its digest.
      model_shape: the config fields that shape the weights (SHAPE_KEYS).
      settings: how text became rows and what the head is, {flag name: value}
        (Task.serving_settings, as export.json's `settings`).
      answer_settings: how outputs become answers (Task.answer_settings).
      dev_file: the dev file of the run ("" without one).
      bert_ad_version: the bert_ad that trained it.
      trained_by: how its weights were trained (Task.trained_by: "fine-tuning",
        "distillation", "pretraining"): a student never resumes its teacher.
      global_step, metrics: the checkpoint the run ended with and its dev
        figures; None and {} until the run ends.
    """
    task: str
    labels: Optional[List[str]]
    max_seq_length: int
    do_lower_case: bool
    tokenizer: str
    vocab_file: str
    vocab_sha256: str
    model_shape: Dict[str, int]
    bert_ad_version: str
    trained_by: str = "fine-tuning"
    label_names: Optional[List[str]] = None
    settings: Dict[str, object] = dataclasses.field(default_factory=dict)
    answer_settings: Dict[str, object] = dataclasses.field(default_factory=dict)
    dev_file: str = ""
    global_step: Optional[int] = None
    metrics: Dict[str, object] = dataclasses.field(default_factory=dict)
    format_version: int = FORMAT_VERSION

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True,
                          ensure_ascii=False) + "\n"

    def identity(self) -> Dict[str, object]:
        """What makes two runs the same run (a resume point): the task, the model's
        shape, the vocabulary and the labels; not the schedule, not the lengths."""
        return {"task": self.task, "trained_by": self.trained_by,
                "model_shape": self.model_shape,
                "vocab_sha256": self.vocab_sha256, "labels": self.labels}

    def describe(self) -> str:
        """One phrase for messages: "a classifier (labels 0, 1) of 2 layers x 32"."""
        shape = self.model_shape
        labels = (f", labels {', '.join(self.labels[:6])}{', ...' if len(self.labels) > 6 else ''}"
                  if self.labels else "")
        how = "" if self.trained_by == "fine-tuning" else f" ({self.trained_by})"
        return (f"a {self.task}{how} model of {shape.get('num_hidden_layers')} layers x "
                f"{shape.get('hidden_size')}{labels}")

    def identity_differences(self, other: Dict[str, object]) -> List[str]:
        """What of another run's identity (`identity()`'s keys, or some of them) differs
        from this one's: ["task classifier, not ner", "num_hidden_layers 2, not 1"]."""
        mine = self.identity()
        found = []
        for key, theirs in other.items():
            if mine[key] == theirs:
                continue
            if key == "model_shape":
                found.extend(f"{name} {mine[key].get(name)}, not {theirs.get(name)}"
                             for name in SHAPE_KEYS if mine[key].get(name) != theirs.get(name))
            elif key == "vocab_sha256":
                found.append("another vocabulary")
            else:
                found.append(f"{key} {mine[key]}, not {theirs}")
        return found

    def display_labels(self) -> Optional[List[str]]:
        """The names answers show: label_names, else the labels themselves."""
        return self.label_names or self.labels


def settings_path(folder: str) -> str:
    return os.path.join(folder, SETTINGS_FILE)


def is_model_folder(path: str) -> bool:
    """Whether `path` is a folder holding a settings record (written by a training run)."""
    return bool(path) and os.path.isfile(settings_path(path))


# The type each field must have when read back ((types), may it be None).
_TYPES = {"task": ((str,), False), "labels": ((list,), True),
          "label_names": ((list,), True), "max_seq_length": ((int,), False),
          "do_lower_case": ((bool,), False), "tokenizer": ((str,), False),
          "vocab_file": ((str,), False), "vocab_sha256": ((str,), False),
          "model_shape": ((dict,), False), "bert_ad_version": ((str,), False),
          "trained_by": ((str,), False),
          "settings": ((dict,), False), "answer_settings": ((dict,), False),
          "dev_file": ((str,), False), "global_step": ((int,), True),
          "metrics": ((dict,), False), "format_version": ((int,), False)}


def read_model_settings(folder: str) -> ModelSettings:
    """The folder's record, validated: UserError (one line naming the file and what is
    wrong) for a file that cannot be read, a field of the wrong type or out of range
    (max_seq_length against the folder's bert_config.json), or a missing vocabulary."""
    path = settings_path(folder)
    advice = ("train again into a new --output_dir, or correct the file "
              "(docs/model_folder.md)")
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        fail(f"{path} cannot be read as a model folder's settings ({type(e).__name__}: "
             f"{e}); {advice}")
    if not isinstance(values, dict):
        fail(f"{path} holds a JSON {type(values).__name__}, not an object of settings; "
             f"{advice}")
    problem = _problem(values, folder)
    if problem:
        fail(f"{path}: {problem}; {advice}")
    return ModelSettings(**values)


def _problem(values: dict, folder: str) -> str:
    """What is wrong with a record's values ("" if nothing)."""
    known = {field.name for field in dataclasses.fields(ModelSettings)}
    unknown = sorted(set(values) - known)
    if unknown:
        return f"unknown field(s) {', '.join(unknown)}"
    required = [field.name for field in dataclasses.fields(ModelSettings)
                if field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING]
    missing = [name for name in required if name not in values]
    if missing:
        return f"missing field(s) {', '.join(missing)}"
    for name, value in values.items():
        types, optional = _TYPES[name]
        if value is None and optional:
            continue
        # bool is an int to Python: a true max_seq_length is no length.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"{name} is {json.dumps(value)}, not {_type_name(types, optional)}"
    for name in ("labels", "label_names"):
        if values.get(name) is not None and not all(
                isinstance(label, str) for label in values[name]):
            return f"{name} must be a list of strings"
    if values.get("label_names") is not None and (
            values.get("labels") is None or len(values["label_names"]) != len(values["labels"])):
        return (f"label_names has {len(values['label_names'])} names but labels "
                f"{len(values.get('labels') or [])}")
    if values["tokenizer"] not in TOKENIZERS + ("",):
        return f"tokenizer is {values['tokenizer']!r}, not one of {', '.join(TOKENIZERS)}"
    if values["vocab_file"] and not os.path.isfile(os.path.join(folder, values["vocab_file"])):
        return f"its vocabulary {values['vocab_file']} is not in the folder"
    config_path = os.path.join(folder, BERT_CONFIG_FILE)
    if not os.path.isfile(config_path):
        return f"{BERT_CONFIG_FILE} is not in the folder"
    limit = BertConfig.from_json_file(config_path).max_position_embeddings
    if not 1 <= values["max_seq_length"] <= limit:
        return (f"max_seq_length={values['max_seq_length']} must be between 1 and the "
                f"model's max_position_embeddings={limit}")
    return ""


def _type_name(types: tuple, optional: bool) -> str:
    names = {str: "a string", list: "a list", int: "an integer", bool: "true or false",
             dict: "an object"}
    return " or ".join(names[t] for t in types) + (" or null" if optional else "")
