"""The fine-tuned teacher a student is distilled from, found and checked (`bert-ad distill`).

A teacher is a fine-tuned output folder (`--teacher_dir`: its newest readable
model.ckpt-N, its labels.txt, and its bert_config.json when it has one, as a
distilled student's folder does) or a checkpoint (`--teacher_checkpoint`,
with the labels.txt beside it if there is one). Its config is, in this order:
--teacher_config_file, the folder's bert_config.json, --bert_config_file (the
file the teacher was fine-tuned with, as for any fine-tuned model).

Which task trained it is read from what it holds, because a fine-tuned
folder keeps no record of the command: a CRF's `crf/transitions` or a piece
list's `output_offset_embeddings` make a token classifier, and so does a
labels.txt of tags (`O`, `B-PER`, ...); `output_weights` with other labels a
classifier; `cls/squad/...` a question answering model and a checkpoint
without `output_weights` a model nobody fine-tuned, both refused. Every
problem is one `error:` line naming the flag and what to do.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Dict, List, Optional

from bert_ad.compat import list_checkpoint_variables
from bert_ad.data.processors import load_label_list
from bert_ad.data.tag_schemes import OUTSIDE, parse_tag
from bert_ad.errors import fail
from bert_ad.bert_config import BertConfig
from bert_ad.parallel.checkpoints import (check_fits_config, latest_checkpoint,
                                          resolve_checkpoint, step_checkpoints)

LABELS_FILE = "labels.txt"
CONFIG_FILE = "bert_config.json"


@dataclasses.dataclass(frozen=True)
class FineTunedTeacher:
    """A teacher's weights, config, labels and task.

    Attributes:
      where: how the user named it ("--teacher_dir=out/teacher"), for messages.
      checkpoint: its checkpoint prefix (readable whole).
      config: its BertConfig; config_source names the file.
      labels: its label list in its head's order, or None when no labels.txt
        came with it (then --labels or the training data say them).
      labels_source: the labels.txt read ("" without one).
      task: "classifier" or "ner" (bert_ad.choices.TEACHER_TASKS).
      use_crf: its head is a CRF (token classifier).
      num_outputs: rows of its output_weights.
      variables: {name: shape} of its checkpoint.
    """
    where: str
    checkpoint: str
    config: BertConfig
    config_source: str
    labels: Optional[List[str]]
    labels_source: str
    task: str
    use_crf: bool
    num_outputs: int
    variables: Dict[str, list]

    @property
    def evidence(self) -> str:
        """Why it is the task it is ("its checkpoint has crf/transitions")."""
        return _evidence(self.variables, self.labels, self.labels_source)


def find_teacher(teacher_dir: str, teacher_checkpoint: str, teacher_config_file: str,
                 bert_config_file: str, teacher_task: Optional[str]) -> FineTunedTeacher:
    """The teacher the flags name, checked: a checkpoint that fits its config, labels
    that fit its head, and the task `teacher_task` says (None: whatever it is)."""
    if teacher_dir:
        where = f"--teacher_dir={teacher_dir}"
        if not os.path.isdir(teacher_dir):
            fail(f"{where} is not a folder: give the --output_dir of a fine-tuned "
                 "classifier or token classifier")
        checkpoint = latest_checkpoint(teacher_dir)
        if checkpoint is None:
            broken = step_checkpoints(teacher_dir)
            fail(f"{where} holds no {'readable ' if broken else ''}model.ckpt-N: give the "
                 "output folder of a fine-tuned classifier or token classifier (after "
                 "--do_train), or --teacher_checkpoint with --teacher_config_file")
        folder = teacher_dir
    else:
        where = f"--teacher_checkpoint={teacher_checkpoint}"
        checkpoint = resolve_checkpoint(teacher_checkpoint, "--teacher_checkpoint")
        folder = os.path.dirname(checkpoint)
    labels_path = os.path.join(folder, LABELS_FILE)
    labels = load_label_list(labels_path) if os.path.isfile(labels_path) else None
    variables = dict(list_checkpoint_variables(checkpoint))
    # What it is first: another task's model does not fit this run's config either.
    task = _task_of(where, variables, labels, labels_path)
    if teacher_task and teacher_task != task:
        fail(f"{where} holds a fine-tuned {_TASK_NAMES[task]} "
             f"({_evidence(variables, labels, labels_path)}), not a "
             f"{_TASK_NAMES[teacher_task]}: distill it with --teacher_task={task} (or leave "
             f"--teacher_task out), or give the output folder of a {_TASK_NAMES[teacher_task]}")
    config_file, config_source = _config_file(folder, teacher_dir, teacher_config_file,
                                              bert_config_file)
    config = BertConfig.from_json_file(config_file)
    check_fits_config(checkpoint, config, f"the teacher's checkpoint {checkpoint}",
                      config_source, "give the config the teacher was fine-tuned with "
                      "(--bert_config_file, or --teacher_config_file)")
    num_outputs = variables["output_weights"][0]
    if labels is not None and len(labels) != num_outputs and not (
            task == "classifier" and num_outputs == 1):
        fail(f"{labels_path} lists {len(labels)} labels but the teacher's head "
             f"(output_weights) has {num_outputs} outputs: the folder's checkpoint and "
             "labels.txt are of different models")
    return FineTunedTeacher(where, checkpoint, config, config_source, labels,
                            labels_path if labels is not None else "", task,
                            "crf/transitions" in variables, num_outputs, variables)


def _config_file(folder: str, teacher_dir: str, teacher_config_file: str,
                 bert_config_file: str) -> tuple:
    """(path, how messages name it) of the teacher's config."""
    if teacher_config_file:
        return teacher_config_file, f"--teacher_config_file={teacher_config_file}"
    own = os.path.join(folder, CONFIG_FILE)
    if teacher_dir and os.path.isfile(own):
        return own, own
    return bert_config_file, f"--bert_config_file={bert_config_file}"


_TASK_NAMES = {"classifier": "classifier", "ner": "token classifier"}


def looks_like_tags(labels: List[str]) -> bool:
    """Every label a tag of a tagging scheme (O, B-PER, I-PER, S, ...) and one
    of them O or typed: a token classifier's list, not a classifier's."""
    parsed = [parse_tag(label) for label in labels]
    return all(parsed) and any(label == OUTSIDE or p[1] for label, p in zip(labels, parsed))


def _task_of(where: str, variables: Dict[str, list], labels: Optional[List[str]],
             labels_path: str) -> str:
    if any(name.startswith("cls/squad/") for name in variables):
        fail(f"{where} holds a question answering model (cls/squad/...), not a fine-tuned "
             "classifier or token classifier: distill takes those two")
    if "output_weights" not in variables:
        kind = ("a pretrained model (cls/predictions/...)"
                if any(name.startswith("cls/predictions/") for name in variables)
                else "a checkpoint without a task head (output_weights)")
        fail(f"{where} holds {kind}, not a fine-tuned classifier or token classifier: "
             "fine-tune it first (bert-ad classifier or bert-ad ner) and give that output "
             "folder")
    if "crf/transitions" in variables or "output_offset_embeddings" in variables:
        return "ner"
    if labels is not None and looks_like_tags(labels):
        return "ner"
    return "classifier"


def _evidence(variables: Dict[str, list], labels: Optional[List[str]],
              labels_path: str) -> str:
    """Why _task_of decided what it did, for the message."""
    for name in ("crf/transitions", "output_offset_embeddings"):
        if name in variables:
            return f"its checkpoint has {name}"
    if labels is not None and looks_like_tags(labels):
        return f"{labels_path} lists tags: {', '.join(labels[:4])}" + (
            ", ..." if len(labels) > 4 else "")
    return "its head is output_weights " + "x".join(str(d) for d in variables[
        "output_weights"]) + (f" and {labels_path} lists {', '.join(labels[:4])}"
                              if labels is not None else "")
