"""distill_mgpu.py: distill a fine-tuned classifier or token classifier into a small student.

The teacher is a fine-tuned output folder (--teacher_dir: its newest
checkpoint and labels.txt; --bert_config_file and --vocab_file name its model
files, as when it was fine-tuned) or --teacher_checkpoint (with
--teacher_config_file). The student is the teacher's config with
--student_layers=K layers, started from K of the teacher's layers
(--student_layer_selection: spread, the default, or first), or
--student_config_file, started from --student_init_checkpoint by name.

Loss (docs/distillation.md): --soft_weight x the teacher's outputs softened
by --temperature (per word for a token classifier: a CRF student learns the
teacher's emissions), + --hard_weight x the gold labels where a row has one,
+ --hidden_weight x the MSE of each student layer against the teacher layer
it came from. The teacher runs frozen on every tower, its variables outside
the student's checkpoints. --transfer_file adds unlabelled text (one text, or
text_a<TAB>text_b, a line; one sentence a line for a token classifier) that
the teacher labels for the student.

The rest are the classifier's flags (--task_name, --data_dir, ...), or for a
token classifier's teacher (--teacher_task=ner, read from the teacher when
unset) the CoNLL files in --data_dir (train.txt, dev.txt, test.txt unless
--train_file etc.) with --use_crf, --tag_scheme, --doc_stride. Outputs in
--output_dir: the student's model.ckpt-N (Google's names), its own
bert_config.json, labels.txt, distillation.json, and what the classifier or
token classifier writes: the folder predicts, evaluates, exports and serves
like any fine-tuned one.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

from absl import flags

from bert_ad.choices import STUDENT_LAYER_SELECTIONS, TEACHER_TASKS
from bert_ad.cli import classifier, ner, task_runner
from bert_ad.cli.registry import register_task
from bert_ad.errors import fail
from bert_ad.bert_config import BertConfig
from bert_ad.model.student import (config_differences, describe_layers, student_config,
                                   teacher_layers)

# The distillation's own flags every worker of a cluster must agree on, beside
# the classifier's and the token classifier's.
AGREED_FLAGS = classifier.AGREED_FLAGS + (
    "teacher_task", "student_layers", "student_layer_selection", "temperature",
    "soft_weight", "hard_weight", "hidden_weight", "token_column", "tag_scheme",
    "doc_stride", "use_crf")
TEACHER_FLAGS = ("teacher_dir", "teacher_checkpoint")
# Flags only one kind of teacher reads.
CLASSIFIER_ONLY = ("task_name", "text_a_column", "text_b_column", "delimiter", "has_header",
                   "skip_header", "regression", "multi_label", "multi_label_separator",
                   "multi_label_threshold", "truncation", "truncation_head_fraction",
                   "pooling")
NER_ONLY = ("token_column", "tag_scheme", "doc_stride", "use_crf")
STUDENT_CONFIG_FILE = "bert_config.json"
RECORD_FILE = "distillation.json"


def define_task_flags(fv: flags.FlagValues) -> None:
    """The distillation's own flags, then the classifier's and the token classifier's."""
    d = dict(flag_values=fv)
    flags.DEFINE_string("teacher_dir", None,
                        "The teacher: a fine-tuned classifier's or token classifier's "
                        "--output_dir (its newest model.ckpt-N and labels.txt).", **d)
    flags.DEFINE_string("teacher_checkpoint", None,
                        "The teacher as a checkpoint prefix, instead of --teacher_dir.", **d)
    flags.DEFINE_string("teacher_config_file", None,
                        "The teacher's bert_config.json (default: the teacher folder's own, "
                        "else --bert_config_file).", **d)
    flags.DEFINE_enum("teacher_task", None, list(TEACHER_TASKS),
                      "The command that fine-tuned the teacher: classifier or ner (default: "
                      "read from the teacher: a CRF or a labels.txt of tags is ner).", **d)
    flags.DEFINE_integer("student_layers", None,
                         "The student: the teacher's config with this many layers, started "
                         "from as many of the teacher's layers.", **d)
    flags.DEFINE_enum("student_layer_selection", "spread", list(STUDENT_LAYER_SELECTIONS),
                      "Which teacher layers a student of --student_layers starts from and "
                      "--hidden_weight matches: spread (evenly from the first to the last) "
                      "or first (docs/distillation.md).", **d)
    flags.DEFINE_string("student_config_file", None,
                        "The student's bert_config.json, instead of --student_layers.", **d)
    flags.DEFINE_string("student_init_checkpoint", None,
                        "The student's starting weights, read by name (default with "
                        "--student_config_file: freshly initialised).", **d)
    flags.DEFINE_float("temperature", 2.0, "Softens the teacher's and the student's "
                       "outputs in the soft loss.", **d)
    flags.DEFINE_float("soft_weight", 1.0, "Weight of the teacher's softened outputs.", **d)
    flags.DEFINE_float("hard_weight", 1.0, "Weight of the gold labels (rows that have one).",
                       **d)
    flags.DEFINE_float("hidden_weight", 0.0, "Weight of the MSE of the student's layers "
                       "against the teacher layers they came from (0: off).", **d)
    flags.DEFINE_string("transfer_file", None,
                        "Unlabelled text the teacher labels for the student: one text (or "
                        "text_a<TAB>text_b) a line; one sentence a line for a token "
                        "classifier.", **d)
    classifier.define_task_flags(fv)
    ner.define_tagging_flags(fv)


def check_flags(f: flags.FlagValues) -> None:
    """What the distillation's flags alone can tell is wrong (no file is read)."""
    given = [name for name in TEACHER_FLAGS if f[name].value]
    if len(given) > 1:
        fail("--teacher_dir and --teacher_checkpoint both name the teacher: give one")
    if f.do_train and not given:
        fail("--do_train distills a teacher: give --teacher_dir (a fine-tuned output "
             "folder) or --teacher_checkpoint with --teacher_config_file")
    if f.teacher_config_file and not given:
        fail("--teacher_config_file is the config of --teacher_checkpoint (or "
             "--teacher_dir): give one of them too")
    if f.student_layers is not None and f.student_config_file:
        fail("--student_layers and --student_config_file both say the student: give one")
    if f.student_layers is not None and f.student_layers < 1:
        fail(f"--student_layers={f.student_layers} must be at least 1 (and at most the "
             "teacher's layers)")
    if f.init_checkpoint:
        fail(f"--init_checkpoint={f.init_checkpoint} does not apply to distill: the student "
             "starts from the teacher's layers (--student_layers) or from "
             "--student_init_checkpoint")
    if not (math.isfinite(f.temperature) and f.temperature > 0):
        fail(f"--temperature={f.temperature} must be a finite number above 0")
    for name in ("soft_weight", "hard_weight", "hidden_weight"):
        if not (math.isfinite(f[name].value) and f[name].value >= 0):
            fail(f"--{name}={f[name].value} must be a finite number, at least 0")
    if not (f.soft_weight or f.hard_weight or f.hidden_weight):
        fail("--soft_weight, --hard_weight and --hidden_weight are all 0: the student "
             "would learn nothing; give at least one a weight")
    if f.long_text == "windows":
        fail("--long_text=windows is not supported by distill yet: leave it out (long "
             "texts are truncated, --truncation)")
    if f.transfer_file and not f.do_train:
        fail(f"--transfer_file={f.transfer_file} is read when training: add --do_train, or "
             "leave it out")
    if f.teacher_task is not None:
        check_task_flags(f, f.teacher_task)


def check_task_flags(f: flags.FlagValues, task: str, teacher: str = "") -> None:
    """No flag only the other kind of teacher reads; `teacher` says how the task was
    known (default: --teacher_task)."""
    kinds = {"classifier": "classifier", "ner": "token classifier"}
    other = "ner" if task == "classifier" else "classifier"
    teacher = teacher or f"the teacher (--teacher_task={task})"
    for name in NER_ONLY if task == "classifier" else CLASSIFIER_ONLY:
        if f[name].present:
            fail(f"--{name} is for a {kinds[other]} teacher, but {teacher} is a "
                 f"{kinds[task]}: leave --{name} out")
    if task == "classifier" and not f.task_name:
        fail("--task_name is required for a classifier teacher (the task it was fine-tuned "
             "on: its files' layout and labels)")


def build(f: flags.FlagValues, encoder):
    """The DistillationTask the flags describe, every input checked."""
    from bert_ad.tasks.distillation import (DistillationLosses, DistillationTask,
                                            StudentStart, teacher_task)
    from bert_ad.tasks.teacher import find_teacher
    teacher = None
    if f.teacher_dir or f.teacher_checkpoint:
        teacher = find_teacher(f.teacher_dir or "", f.teacher_checkpoint or "",
                               f.teacher_config_file or "", f.bert_config_file,
                               f.teacher_task)
    kind = teacher.task if teacher is not None else (
        f.teacher_task or _saved_record(f.output_dir).get("task") or "classifier")
    check_task_flags(f, kind, f"{teacher.where} ({teacher.evidence})" if teacher else "")
    teacher_config = teacher.config if teacher is not None else None
    if teacher is not None and teacher.config.vocab_size != encoder.config.vocab_size:
        fail(f"the teacher's config {teacher.config_source} has vocab_size="
             f"{teacher.config.vocab_size} but --bert_config_file and the vocab have "
             f"{encoder.config.vocab_size}: give the vocab the teacher was fine-tuned with")
    config, layer_map, matched = student_from_flags(f, teacher_config)
    losses = DistillationLosses(f.temperature, f.soft_weight, f.hard_weight, f.hidden_weight)
    start = None
    if f.student_init_checkpoint:
        start = StudentStart(_student_checkpoint(f.student_init_checkpoint, config))
    elif layer_map is not None and teacher is not None:
        start = StudentStart(teacher.checkpoint, layer_map,
                             describe_layers(layer_map, teacher.config.num_hidden_layers))
    student_encoder = dataclasses.replace(encoder, config=config)
    student = (_token_student(f, student_encoder, teacher) if kind == "ner"
               else classifier.build(f, student_encoder))
    teacher_labels, labels_source = _teacher_labels(f, teacher, kind)
    record = {"task": kind, "losses": dataclasses.asdict(losses),
              "student_layers": config.num_hidden_layers,
              "transfer_file": f.transfer_file or ""}
    if teacher is not None:
        record.update(teacher=teacher.where, teacher_checkpoint=teacher.checkpoint,
                      teacher_layers=teacher.config.num_hidden_layers,
                      matched_layers=list(matched),
                      student_start=(start.description or start.checkpoint) if start
                      else "freshly initialised")
    return DistillationTask(
        student, None if teacher is None else teacher_task(
            student, dataclasses.replace(encoder, config=teacher.config), teacher.use_crf),
        teacher.checkpoint if teacher is not None else "", teacher_labels, labels_source,
        start, losses, tuple(matched), teacher.num_outputs if teacher is not None else 0,
        f.transfer_file or "", record)


def student_from_flags(f: flags.FlagValues, teacher: "BertConfig | None"):
    """(student config, teacher layers it starts from or None, teacher layers its
    layers are matched to), every combination checked against the teacher and
    against a student output_dir already holds."""
    saved_path = os.path.join(f.output_dir, STUDENT_CONFIG_FILE)
    saved = BertConfig.from_json_file(saved_path) if os.path.isfile(saved_path) else None
    layer_map = None
    if f.student_layers is not None:
        if teacher is None:
            if saved is None or saved.num_hidden_layers != f.student_layers:
                fail(f"--student_layers={f.student_layers} makes a student of the teacher: "
                     "give --teacher_dir (or --teacher_checkpoint)")
            config = saved
        else:
            count = teacher.num_hidden_layers
            if f.student_layers > count:
                fail(f"--student_layers={f.student_layers} must be between 1 and the "
                     f"teacher's {count} layers")
            config = student_config(teacher, f.student_layers)
            layer_map = teacher_layers(f.student_layers, count, f.student_layer_selection)
        source = f"--student_layers={f.student_layers}"
    elif f.student_config_file:
        config = BertConfig.from_json_file(f.student_config_file)
        source = f"--student_config_file={f.student_config_file}"
    elif saved is not None:
        config, source = saved, saved_path
    else:
        fail("say the student: --student_layers=K (K of the teacher's layers) or "
             "--student_config_file")
    if teacher is not None and config.vocab_size != teacher.vocab_size:
        fail(f"{source} has vocab_size={config.vocab_size} but the teacher "
             f"{teacher.vocab_size}: a student reads the teacher's vocab")
    if saved is not None and config.to_dict() != saved.to_dict():
        differ = ", ".join(f"{k}={a} (saved {b})" for k, (a, b) in
                           config_differences(config, saved).items()) or "other settings"
        fail(f"--output_dir={f.output_dir} holds another student ({saved_path}); this "
             f"run's differs: {differ}; use a new --output_dir")
    matched = ()
    if teacher is not None:
        if f.hidden_weight and config.hidden_size != teacher.hidden_size:
            fail(f"--hidden_weight={f.hidden_weight} matches the student's layers against "
                 f"the teacher's, but {source} has hidden_size={config.hidden_size} and "
                 f"the teacher {teacher.hidden_size}: leave --hidden_weight out, or give a "
                 "student of the teacher's hidden size")
        if config.num_hidden_layers <= teacher.num_hidden_layers:
            matched = layer_map or teacher_layers(config.num_hidden_layers,
                                                  teacher.num_hidden_layers,
                                                  f.student_layer_selection)
        elif f.hidden_weight:
            fail(f"--hidden_weight={f.hidden_weight}: {source} has "
                 f"{config.num_hidden_layers} layers, more than the teacher's "
                 f"{teacher.num_hidden_layers}, so not every one has a teacher layer to "
                 "match")
    return config, layer_map, matched


def _student_checkpoint(path: str, config: BertConfig) -> str:
    """--student_init_checkpoint, readable, its encoder variables of the student's shapes
    (the ones it has: a deeper model's extra layers are not read)."""
    from bert_ad.compat import list_checkpoint_variables
    from bert_ad.model.variable_shapes import google_variable_shapes
    from bert_ad.parallel.checkpoints import resolve_checkpoint
    checkpoint = resolve_checkpoint(path, "--student_init_checkpoint")
    saved = dict(list_checkpoint_variables(checkpoint))
    for name, shape in google_variable_shapes(config).items():
        if name in saved and saved[name] != shape:
            fail(f"--student_init_checkpoint={path}: {name} is {saved[name]} there but "
                 f"{shape} in the student's config: give the config it was trained with")
    return checkpoint


def _token_student(f: flags.FlagValues, encoder, teacher):
    """The NER command's task (its labels the teacher's; its CRF the teacher's
    unless --use_crf is given)."""
    use_crf = f.use_crf if f["use_crf"].present or teacher is None else teacher.use_crf
    return ner.build(f, encoder, labels_from_flags=False, use_crf=use_crf)


def _teacher_labels(f: flags.FlagValues, teacher, kind: str):
    """(the teacher's labels, where they come from): its labels.txt, else --labels,
    else None (the training data's)."""
    if teacher is not None and teacher.labels is not None:
        return teacher.labels, teacher.labels_source
    if f.labels:
        from bert_ad.data.processors import parse_labels
        return list(parse_labels(f.labels)), "--labels"
    return None, ""


def _saved_record(output_dir: str) -> dict:
    """output_dir's distillation.json ({} when there is none)."""
    path = os.path.join(output_dir, RECORD_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path} cannot be read ({e}); move it away to start again")
    return record if isinstance(record, dict) else {}


COMMAND = register_task(
    "distill", "distill a fine-tuned classifier or token classifier into a small student",
    define_flags=define_task_flags, build=build, check_flags=check_flags,
    agreed_flags=AGREED_FLAGS, positive_flags=("predict_batch_size",), description=__doc__,
    launcher="distill_mgpu.py", console_script="bert-ad-distill")


# The launcher's contract (run_classifier_mgpu.py-style callers and tests).
define_flags, main, cli = task_runner.launcher_functions(COMMAND)
