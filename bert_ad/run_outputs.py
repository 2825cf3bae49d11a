"""What a run writes in output_dir, and what it must leave alone (no TensorFlow).

The result files' names, the run's label list (fixed once output_dir holds a
checkpoint), the prediction files written as one set, leftovers of a killed
run removed, and no output written over an input. The driver's runs and
scoring an ONNX export without TensorFlow (bert_ad/onnx_predict.py) share them.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, List, Optional, Tuple

import numpy as np

from bert_ad.data.processors import load_label_list
from bert_ad.errors import fail
from bert_ad.files import remove_stale_temporaries, write_results
from bert_ad import path_overlaps
from bert_ad.folders import remove_stale_staging
from bert_ad.parallel.checkpoint_files import remove_partial_save, step_checkpoints
from bert_ad.run_settings import RunSettings
from bert_ad.inference.layout import ExportMetadata
from bert_ad.tasks.base import SplitData, Task

log = logging.getLogger("bert_ad")

LABELS_FILE = "labels.txt"
TRAIN_RESULTS_FILE = "train_results.txt"
EVAL_RESULTS_FILE = "eval_results.txt"


def resolve_labels(task: Task, train: Optional[SplitData], settings: RunSettings,
                   export: Optional[ExportMetadata] = None) -> Optional[List[str]]:
    """The run's label list: the training data's (or the task's), else
    labels.txt's, else those of the export predictions are made with
    (`export`); None for a task without one.

    The label list of an output_dir that holds a checkpoint is fixed: the
    head's rows follow it, so another list (other names, or the same names in
    another order) is refused before anything is written; so is a list other
    than the export's.
    """
    path = os.path.join(settings.output_dir, LABELS_FILE)
    saved = load_label_list(path) if os.path.isfile(path) else None
    labels = task.resolve_labels(train, saved if saved is not None or export is None
                                 else export.labels)
    if labels is not None and saved is not None and labels != saved \
            and step_checkpoints(settings.output_dir):
        fail(f"{path} lists the labels {', '.join(saved)} but this run's are "
             f"{', '.join(labels)}: the checkpoints in --output_dir were trained with "
             "the saved list, in that order; use a new --output_dir for other labels")
    if export is not None and labels != export.labels:
        fail(f"--predict_from_export={settings.predict_from_export} predicts the labels "
             f"{', '.join(export.labels or ['(none)'])} but this run's are "
             f"{', '.join(labels or ['(none)'])}; score it from a fresh --output_dir")
    return labels


def output_files(task: Task, output_dir: str) -> List[Tuple[str, str]]:
    """(what, path) of the files a run writes in output_dir besides checkpoints: its
    results and the task's prediction files."""
    names = (LABELS_FILE, TRAIN_RESULTS_FILE, EVAL_RESULTS_FILE) + tuple(
        task.prediction_file_names()) + tuple(task.model_files())
    return [("the result file", os.path.join(output_dir, name)) for name in names]


def refuse_outputs_over_inputs(task: Task, output_dir: str, inputs: List[SplitData]) -> None:
    """An input file this run would write over (NER's --predict_file=OUTPUT_DIR/predict.txt
    renamed the input aside and replaced it with the output), however its path is
    spelled (a symlink, a hard link): one line, nothing written."""
    path_overlaps.refuse_outputs_over_inputs(
        output_files(task, output_dir),
        [(f"the {data.split} file", source) for data in inputs for source in data.sources()],
        advice="give another --output_dir or move the input")


def write_predictions(task: Task, data: SplitData, outputs: Dict[str, np.ndarray],
                      output_dir: str) -> None:
    """The task's prediction files of the scored `data`, written as one set: a
    failure leaves every earlier result file as it was."""
    written = task.prediction_files(data, outputs)
    write_results(output_dir, written)
    log.info("predict: wrote %d rows to %s in %s", len(data), ", ".join(written), output_dir)


def remove_leftovers(output_dir: str) -> None:
    """Temporary files a killed run left in output_dir (ours, and TensorFlow's
    `*.tempstate*` of a torn checkpoint save): the lock says no one writes them."""
    for name in remove_stale_temporaries(output_dir):
        log.info("removed %s, left by an earlier run that was stopped while writing", name)
    for name in remove_partial_save(output_dir):
        log.info("removed %s, left by a checkpoint save that did not finish", name)
    for folder in (output_dir, os.path.join(output_dir, "export")):
        for path in remove_stale_staging(folder):
            log.info("cleaned up %s, left by an earlier run stopped while writing", path)
