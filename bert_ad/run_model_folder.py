"""A training run's output_dir made a model folder (bert_ad/model_folder.py): the record
built from the complete task, checked against the checkpoints already there (a
resume continues only the same run), then written with the config and the
vocabulary before the first checkpoint, and completed when the run ends.

Everything that can refuse the run (another run's checkpoints, a bad
--label_names file) is checked in `prepare`, before anything is written.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from typing import Dict, List, Optional

from bert_ad import __version__, files
from bert_ad.data.text_lines import text_lines
from bert_ad.errors import fail
from bert_ad.path_overlaps import same_file
from bert_ad.model_folder import (BERT_CONFIG_FILE, SETTINGS_FILE, ModelSettings,
                                  is_model_folder, read_model_settings, settings_path)
from bert_ad.parallel.checkpoint_files import step_checkpoints
from bert_ad.run_settings import RunSettings
from bert_ad.tasks.base import SplitData, Task
from bert_ad.tasks.model_description import describe_model, describe_run, describe_shape

log = logging.getLogger("bert_ad")


def prepare(task: Task, settings: RunSettings, trains: bool,
            dev: Optional[SplitData]) -> Optional[ModelSettings]:
    """The record this run writes into output_dir, or None when it writes none (a run
    that only scores and names no labels).

    A training run's record describes `task` (complete: labels resolved); when
    output_dir holds checkpoints they must be of the same run identity
    (ModelSettings.identity), or the run is refused in one line. A run that
    only scores, given --label_names, names the labels of the folder's record.
    """
    output_dir = settings.output_dir
    saved = read_model_settings(output_dir) if is_model_folder(output_dir) else None
    label_names = read_label_names(settings.label_names, task.labels)
    if not trains:
        if label_names is None:
            return None
        if saved is None:
            fail(f"--label_names={settings.label_names} names the labels of a model "
                 f"folder, but --output_dir={output_dir} has no {SETTINGS_FILE}: give it "
                 "when training, or the folder of a model trained since")
        return dataclasses.replace(saved, label_names=label_names)
    record = ModelSettings(
        **describe_model(task), model_shape=describe_shape(task),
        bert_ad_version=__version__, trained_by=task.trained_by,
        label_names=label_names or (saved.label_names if saved is not None
                                    and saved.labels == task.labels else None),
        dev_file=dev.source if dev is not None else "")
    if step_checkpoints(output_dir):
        check_resume(output_dir, saved, record.identity())
    return record


def refuse_another_run(task: Task, settings: RunSettings, trains: bool) -> None:
    """Before the labels are resolved (labels.txt's message would name the wrong
    cause): output_dir's checkpoints are of this task, model and vocabulary."""
    output_dir = settings.output_dir
    if trains and is_model_folder(output_dir) and step_checkpoints(output_dir):
        check_resume(output_dir, read_model_settings(output_dir), describe_run(task))


def check_resume(output_dir: str, saved: Optional[ModelSettings],
                 identity: Dict[str, object]) -> None:
    """output_dir's checkpoints are a resume point of the run of `identity`, or one line
    says what they are. A folder from before model_settings.json resumes, with a
    warning."""
    if saved is None:
        log.warning("warning: --output_dir=%s holds checkpoints but no %s (written by "
                    "bert_ad before 0.1.0's model folders): resuming from them without "
                    "checking that they are this run's task, model, vocabulary and labels",
                    output_dir, SETTINGS_FILE)
        return
    differences = saved.identity_differences(identity)
    if differences:
        fail(f"--output_dir={output_dir} holds the checkpoints of {saved.describe()}, not "
             f"of this run ({'; '.join(differences)}): they are no resume point; give "
             "another --output_dir (to start from that model, pass the folder as "
             "--init_checkpoint)")


def read_label_names(path: str, labels: Optional[List[str]]) -> Optional[List[str]]:
    """--label_names: one display name a line, in labels.txt's order (None if not given)."""
    if not path:
        return None
    if labels is None:
        fail(f"--label_names={path}: this task has no label list to name; leave it out")
    if not os.path.isfile(path):
        fail(f"--label_names={path} is not a file; give a file of one name a line, in "
             "labels.txt's order")
    with open(path, "rb") as f:
        names = [line.strip() for line in text_lines(f, f"--label_names={path}")]
    while names and not names[-1]:  # a trailing blank line ends the file, it is no name
        names.pop()
    if len(names) != len(labels) or not all(names):
        fail(f"--label_names={path} has {len(names)} name(s)"
             f"{' (an empty line among them)' if not all(names) else ''} but the model "
             f"has {len(labels)} labels ({', '.join(labels[:6])}"
             f"{', ...' if len(labels) > 6 else ''}): one name a line, in labels.txt's order")
    return names


def write_model_folder(output_dir: str, task: Task, record: ModelSettings) -> None:
    """bert_config.json, the vocabulary's files and the task's own model files, then
    the record, each written atomically (a file already holding the same bytes, a
    resume's or an input's, is left alone)."""
    texts: Dict[str, str] = {BERT_CONFIG_FILE: task.encoder.config.to_json_string()}
    texts.update(task.model_files())  # a distilled student's own config
    for name, text in texts.items():
        _write_bytes(os.path.join(output_dir, name), text.encode("utf-8"))
    tokenizer = getattr(task.encoder, "tokenizer", None)
    for source in tokenizer.files() if tokenizer is not None else ():
        target = os.path.join(output_dir, os.path.basename(source))
        if not (os.path.exists(target) and same_file(source, target)):
            with open(source, "rb") as f:
                _write_bytes(target, f.read())
    write_record(output_dir, record)


def write_record(output_dir: str, record: ModelSettings) -> None:
    _write_bytes(settings_path(output_dir), record.to_json().encode("utf-8"))


def finish(output_dir: str, record: ModelSettings, global_step: int,
           metrics: Optional[dict]) -> None:
    """The record completed with the checkpoint the run ended with and its dev figures."""
    plain = {key: (value.item() if hasattr(value, "item") else value)
             for key, value in (metrics or {}).items()}
    write_record(output_dir, dataclasses.replace(record, global_step=int(global_step),
                                                 metrics=plain))


def recorded_label_names(settings: RunSettings) -> Optional[List[str]]:
    """The label names of the model folder a run scores from: output_dir's record,
    else that of --init_checkpoint's folder (None without one)."""
    for folder in (settings.output_dir, os.path.dirname(settings.init_checkpoint)):
        if folder and is_model_folder(folder):
            return read_model_settings(folder).label_names
    return None


def _write_bytes(path: str, data: bytes) -> None:
    if os.path.isfile(path):
        with open(path, "rb") as f:
            if f.read() == data:
                return
    with files.atomic_open(path, "wb") as f:
        f.write(data)
