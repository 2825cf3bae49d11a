"""`--do_predict --predict_from_export=DIR` with an ONNX export: the whole run
without TensorFlow.

A scoring machine installs `bert_ad[onnx]` and no TensorFlow (issue #44), so
when predicting is all a command line asks for and DIR holds an ONNX export,
bert_ad/cli/task_runner.py runs this instead of the driver. It takes the
driver's predict-only path step for step, on the modules that import no
TensorFlow: the predict rows read and checked, the export checked against
the task (serving/compatibility.py), the label list resolved as the driver
does (run_outputs.py), output_dir locked and cleaned of a killed run's
leftovers, the rows scored by ONNX Runtime (serving/onnx_scoring.py) and the
prediction files written as one set. tests/test_onnx.py checks sys.modules
after such a run.
"""

from __future__ import annotations

from bert_ad.locks import OutputDirLock
from bert_ad.run_outputs import (refuse_outputs_over_inputs, remove_leftovers,
                                 resolve_labels, write_predictions)
from bert_ad.run_settings import RunSettings
from bert_ad.serving import layout, onnx_scoring
from bert_ad.serving.compatibility import check_compatible
from bert_ad.tasks.base import Task


def is_onnx_export(export_dir: str) -> bool:
    """DIR holds an ONNX export (its export.json says so)."""
    return bool(export_dir) and layout.read_metadata(export_dir).format == "onnx"


def run(task: Task, settings: RunSettings) -> int:
    """Score the task's predict rows with the ONNX export
    settings.predict_from_export and write its prediction files (exit code)."""
    export_dir = settings.predict_from_export
    data = task.read("predict")
    serving = layout.read_metadata(export_dir)
    check_compatible(export_dir, serving, task)
    task = task.with_labels(resolve_labels(task, None, settings, serving))
    task.check_labels(data)
    refuse_outputs_over_inputs(task, settings.output_dir, [data])
    with OutputDirLock(settings.output_dir):
        remove_leftovers(settings.output_dir)
        task = task.with_answer_settings(serving.answer_settings,
                                         f"--predict_from_export={export_dir}")
        outputs = onnx_scoring.score(task, data, settings.predict_batch_size, export_dir,
                                     serving)
        write_predictions(task, data, outputs, settings.output_dir)
    return 0
