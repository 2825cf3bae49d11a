"""Whether an export can score a run's rows: the same task, text cut into rows the
same way, every input the task feeds, the same tokenizer (no TensorFlow: scoring
an ONNX export checks it too, bert_ad/export_predict.py)."""

from __future__ import annotations

from bert_ad.data.feature_cache import file_digest
from bert_ad.errors import fail
from bert_ad.inference.exported_model import ExportedModel

# The flags behind a recorded setting whose name is no flag of its own.
SETTING_FLAGS = {"target": "--regression or --multi_label"}


def check_compatible(exported: ExportedModel, task) -> None:
    """UserError (one line) unless the export can score this run's rows.

    Args:
      exported: the export.
      task: the run's Task (bert_ad/tasks/base.py): its name, serving_settings(),
        serving_inputs and encoder.
    The export must be of the same task, cut text into rows as the run does
    (Task.serving_settings), take every input the task feeds, and have been
    trained with the run's tokenizer (the same vocab file content, casing and
    max_seq_length).
    """
    where, metadata = exported.where, exported.metadata
    if metadata.task != task.name:
        fail(f"{where} is an export of the {metadata.task} task, not {task.name}; "
             "score it with that task's launcher")
    # How text became rows (truncation, windows) must match, or the rows
    # scored are not the ones the export was trained on.
    mine = task.serving_settings()
    for key, value in metadata.settings.items():
        if mine.get(key) == value:
            continue
        if key in SETTING_FLAGS:
            fail(f"{where} was exported with {key}={value} but this run has "
                 f"{key}={mine.get(key)}; set {SETTING_FLAGS[key]} as the export was trained")
        fail(f"{where} was exported with --{key}={value} but this run has "
             f"--{key}={mine.get(key)}; set --{key}={value}")
    missing = [name for name in task.serving_inputs if name not in metadata.inputs]
    if missing:
        fail(f"{where} does not take the input(s) {', '.join(missing)}")
    encoder = task.encoder
    if not hasattr(encoder, "tokenizer"):  # a task on token ids (pretraining)
        return
    if file_digest(encoder.vocab_file) != metadata.vocab_sha256:
        fail(f"{where} was trained with another vocab than {encoder.vocab_file}; leave "
             "--vocab_file/--spm_model_file out to use the export's own")
    for key, value in (("do_lower_case", bool(encoder.do_lower_case)),
                       ("max_seq_length", encoder.max_seq_length)):
        if getattr(metadata, key) != value:
            fail(f"{where} was exported with {key}={getattr(metadata, key)} but this run "
                 f"has --{key}={value}; leave --{key} out to use the export's")
