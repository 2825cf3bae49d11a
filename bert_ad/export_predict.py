"""`--do_predict --predict_from_export=DIR`: the predict rows scored by an export, any format.

The one path from an export to a task's prediction files, used by every
task's command line (bert_ad/cli/task_runner.py): the predict rows read and
checked, the export checked against the task (inference/compatibility.py),
the label list resolved as a training run's (run_outputs.py), output_dir
locked and cleaned of a killed run's leftovers, the rows scored by the
export's own scorer (ExportedModel.open_scorer: ONNX Runtime, or TensorFlow
for a SavedModel or frozen graph) and the prediction files written as one set.

Nothing here imports TensorFlow: an ONNX export runs on a machine without it
(tests/test_onnx.py checks sys.modules after such a run); a TensorFlow
export's scorer imports it when it opens.
"""

from __future__ import annotations

from bert_ad.inference.compatibility import check_compatible
from bert_ad.inference.exported_model import ExportedModel, score_split
from bert_ad.locks import OutputDirLock
from bert_ad.run_outputs import (refuse_outputs_over_inputs, remove_leftovers,
                                 resolve_labels, write_predictions)
from bert_ad.run_settings import RunSettings
from bert_ad.tasks.base import Task


def run(task: Task, settings: RunSettings, session_config=None) -> int:
    """Score the task's predict rows with the export settings.predict_from_export
    and write its prediction files (exit code). `session_config`: TensorFlow's,
    for a SavedModel or frozen graph (the placement's)."""
    exported = ExportedModel.open(settings.predict_from_export)
    data = task.read("predict")
    check_compatible(exported, task)
    task = task.with_labels(resolve_labels(task, None, settings, exported.metadata))
    task.check_labels(data)
    refuse_outputs_over_inputs(task, settings.output_dir, [data])
    with OutputDirLock(settings.output_dir):
        remove_leftovers(settings.output_dir)
        task = task.with_answer_settings(exported.metadata.answer_settings, exported.where)
        outputs = score_split(exported, task, data, settings.predict_batch_size,
                              session_config=session_config)
        write_predictions(task, data, outputs, settings.output_dir)
    return 0
