"""Distillation: a small student learns a fine-tuned teacher's outputs (`bert-ad distill`).

The student is an ordinary classifier or token classifier (`student`, a
ClassificationTask or TokenClassificationTask on the student's encoder):
scoring, evaluation, export and serving are its own, so its output folder
holds Google's variable names and is used like any fine-tuned model's. Only
training differs. On every tower the graph holds both models over the same
features:

  student (trainable)        teacher (frozen: variables under `teacher/`)
       logits, layers  <--- loss ---  logits, layers

  loss = hard_weight   * mean over rows of [the student's own loss where the row has a gold label]
       + soft_weight   * mean over rows of T^2 KL(teacher/T || student/T)
       + hidden_weight * mean over rows of MSE(student layer i, teacher layer matched_layers[i])

(bert_ad/model/distillation_losses.py). Every term is a mean over the tower's
real rows (a row of unlabelled transfer text counts as a row with a hard loss
of 0), so N towers x B rows give exactly the loss and gradients of 1 tower x
N*B rows, as every other task.

The teacher's variables are local variables (never in tf.global_variables(),
so no Saver of the loop writes them into the student's checkpoints) and not
trainable; their initializers read the teacher's checkpoint, so the loop's
local initialisation loads the teacher at every start, a resume included.
The student's initializers read the checkpoint it starts from
(`StudentStart`: K of the teacher's layers, or --student_init_checkpoint):
they run when training starts fresh, and a resume restores the student's own
checkpoint instead. Rows of --transfer_file carry the label id -1 ("no gold
label"): the heads see 0 in their place and the hard loss skips them.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_ad.compat import list_checkpoint_variables, tf
from bert_ad.data.batching import TokenizedExamples, concatenate
from bert_ad.data.features import split_labels
from bert_ad.data.transfer_text import read_sentences, read_texts
from bert_ad.errors import fail
from bert_ad.model.distillation_losses import (hidden_mse, soft_target_loss,
                                               token_soft_target_loss)
from bert_ad.model.losses import weighted_mean
from bert_ad.model.student import source_name
from bert_ad.parallel.checkpoints import is_optimizer_state
from bert_ad.parallel.replicated import google_name
from bert_ad.tasks.base import Batches, SplitData, Task
from bert_ad.tasks.token_classification import ConllSplit, TokenClassificationTask

log = logging.getLogger("bert_ad")

TEACHER_SCOPE = "teacher"
# A graph collection of the variables whose initializers read a checkpoint here
# (build_model runs once per tower; each variable is set up once).
_INITIALISED = "bert_ad_distillation_initialised"
# A transfer row's label id (or each of its words' tag ids): no gold label.
NO_LABEL = -1
BERT_CONFIG_FILE = "bert_config.json"
RECORD_FILE = "distillation.json"


@dataclasses.dataclass(frozen=True)
class DistillationLosses:
    """The loss terms' weights and the temperature (see the module docstring)."""
    temperature: float = 2.0
    soft_weight: float = 1.0
    hard_weight: float = 1.0
    hidden_weight: float = 0.0

    @property
    def needs_teacher(self) -> bool:
        """Whether the training graph runs the teacher at all (not for a student
        trained on the gold labels alone, the baseline distillation is measured
        against)."""
        return self.soft_weight > 0 or self.hidden_weight > 0


@dataclasses.dataclass(frozen=True)
class StudentStart:
    """The checkpoint the student's weights start from when training starts fresh.

    Attributes:
      checkpoint: a readable checkpoint prefix.
      layer_map: student layer i reads the checkpoint's layer layer_map[i]
        (K of the teacher's layers); None: every variable by its own name.
      description: for the log ("layers 0, 6, 11 of the teacher's 12").
    """
    checkpoint: str
    layer_map: Optional[Tuple[int, ...]] = None
    description: str = ""


@dataclasses.dataclass
class DistillationSplit(SplitData):
    """The training rows: the gold-labelled split and the transfer text, if any."""
    gold: Optional[SplitData] = None
    transfer: Optional[SplitData] = None


@dataclasses.dataclass(eq=False)
class DistillationTask(Task):
    """A student task trained on a teacher's outputs; otherwise the student itself.

    Attributes:
      student: the student's task (its encoder: the student's config).
      teacher: the same task on the teacher's encoder, or None when the run
        does not train (then only the student is scored).
      teacher_checkpoint: the teacher's weights.
      teacher_labels: the teacher's label list (its labels.txt), or None.
      teacher_labels_source: where they came from, for messages.
      start: where the student starts (None: freshly initialised).
      losses: the loss weights and temperature.
      matched_layers: the teacher layer each student layer is matched to
        (--hidden_weight).
      teacher_outputs: rows of the teacher's head (0: not known).
      transfer_file: unlabelled text the teacher labels ("" for none).
      record: what output_dir/distillation.json says about the run.
    """
    student: Task
    teacher: Optional[Task] = None
    teacher_checkpoint: str = ""
    teacher_labels: Optional[List[str]] = None
    teacher_labels_source: str = ""
    start: Optional[StudentStart] = None
    losses: DistillationLosses = DistillationLosses()
    matched_layers: Tuple[int, ...] = ()
    teacher_outputs: int = 0
    transfer_file: str = ""
    record: dict = dataclasses.field(default_factory=dict)
    labels: Optional[List[str]] = None
    trained_by = "distillation"  # a student's folder is never its teacher's resume point

    # --- the student, as the driver, the exporter and a server see it -----------------

    @property
    def name(self) -> str:
        # An export of the student is the student task's: `bert-ad serve` and
        # --predict_from_export treat it as any classifier's.
        return self.student.name

    @property
    def encoder(self):
        return self.student.encoder

    @property
    def feature_spec(self):
        return self.student.feature_spec

    @property
    def serving_inputs(self):
        return self.student.serving_inputs

    @property
    def main_metric(self) -> str:
        return self.student.main_metric

    def with_labels(self, labels: Optional[Sequence[str]]) -> "DistillationTask":
        labels = None if labels is None else list(labels)
        if labels == self.labels:
            return self
        return dataclasses.replace(
            self, labels=labels, student=self.student.with_labels(labels),
            teacher=None if self.teacher is None else self.teacher.with_labels(labels))

    def with_encoder(self, **changes) -> "DistillationTask":
        return dataclasses.replace(self, student=self.student.with_encoder(**changes))

    def with_answer_settings(self, values, where: str) -> "DistillationTask":
        return dataclasses.replace(self, student=self.student.with_answer_settings(values,
                                                                                   where))

    def serving_outputs(self, features):
        return self.student.serving_outputs(features)

    def serving_settings(self):
        return self.student.serving_settings()

    def answer_settings(self):
        return self.student.answer_settings()

    def learning_rate_multipliers(self):
        return self.student.learning_rate_multipliers()

    def metrics(self, data, outputs):
        return self.student.metrics(data, outputs)

    def prediction_file_names(self):
        return self.student.prediction_file_names()

    def prediction_files(self, data, outputs):
        return self.student.prediction_files(data, outputs)

    def metric_names(self):
        return self.student.metric_names()

    def describe_metrics(self, metrics):
        return self.student.describe_metrics(metrics)

    def metric_warnings(self, metrics):
        return self.student.metric_warnings(metrics)

    def model_files(self) -> Dict[str, str]:
        """The student's own bert_config.json (what its checkpoints hold: scoring
        and export in other commands read it) and distillation.json."""
        return {BERT_CONFIG_FILE: self.student.encoder.config.to_json_string(),
                RECORD_FILE: json.dumps(self.record, indent=2, sort_keys=True,
                                        ensure_ascii=False) + "\n"}

    # --- inputs -----------------------------------------------------------------------

    def read(self, split: str) -> SplitData:
        data = self.student.read(split)
        if split != "train":
            return data
        transfer = self._read_transfer() if self.transfer_file else None
        rows = list(data.rows) + (list(transfer.rows) if transfer is not None else [])
        source = data.source + (f", {self.transfer_file}" if transfer is not None else "")
        return DistillationSplit("train", rows, source, gold=data, transfer=transfer)

    def _read_transfer(self) -> SplitData:
        """--transfer_file as rows of the student's task (bert_ad/data/transfer_text.py)."""
        path = self.transfer_file
        if isinstance(self.student, TokenClassificationTask):
            return ConllSplit("transfer", read_sentences(path), path)
        pairs = self.student.spec.text_b_column is not None
        return SplitData("transfer", read_texts(path, pairs), path)

    def resolve_labels(self, train: Optional[SplitData], saved: Optional[List[str]]
                       ) -> Optional[List[str]]:
        """The teacher's labels, in its head's order; a gold label the teacher does not
        know is refused (file and line). Without training: output_dir's labels.txt, else
        the teacher's."""
        gold = train.gold if isinstance(train, DistillationSplit) else train
        if gold is None:
            return self.student.resolve_labels(
                None, saved if saved is not None else self.teacher_labels)
        found = self.student.resolve_labels(gold, saved)  # checks the rows as it would
        if self.teacher_labels is None or found is None:
            if found is not None and self.teacher_outputs not in (0, len(found)):
                fail(f"{gold.source} has {len(found)} labels ({', '.join(found)}) but the "
                     f"teacher's head has {self.teacher_outputs} outputs: give the teacher's "
                     "labels in its order with --labels (or its labels.txt beside the "
                     "checkpoint)")
            return found
        teacher = set(self.teacher_labels)
        for label in found:
            if label not in teacher:
                source, line = self._first_row_with(gold, label)
                fail(f"{source} line {line}: label {label!r} is not one of the teacher's "
                     f"labels {self.teacher_labels} ({self.teacher_labels_source}): the "
                     "student learns the teacher's labels; fix the file, or distill a "
                     "teacher fine-tuned with that label")
        return list(self.teacher_labels)

    def _first_row_with(self, gold: SplitData, label: str) -> Tuple[str, int]:
        """(file, line) of the first row of `gold` with `label` (a word's tag, one of a
        multi-label row's labels)."""
        for row in gold.rows:
            if getattr(row, "tags", None) is not None:
                for tag, line in zip(row.tags, row.line_numbers):
                    if tag == label:
                        return gold.source, line
            elif getattr(row, "label", None) is not None:
                labels = (split_labels(row.label, self.student.label_separator)
                          if getattr(self.student, "target", "") == "multi_label"
                          else [row.label])
                if label in labels:
                    return row.source, row.line
        return gold.source, 0

    def check_labels(self, data: SplitData) -> None:
        if isinstance(data, DistillationSplit):
            data = data.gold
        self.student.check_labels(data)

    def batches(self, data: SplitData) -> Batches:
        if not isinstance(data, DistillationSplit):
            return self.student.batches(data)
        gold = self.student.batches(data.gold)
        if data.transfer is None:
            return gold
        transfer = without_labels(self.student.batches(data.transfer).examples)
        log.info("train: %d labelled rows and %d rows of %s that the teacher labels",
                 len(gold.examples), len(transfer), self.transfer_file)
        return self.student.encoder.batches(concatenate(gold.examples, transfer))

    # --- model --------------------------------------------------------------------------

    def build_model(self, features, is_training):
        if not is_training:
            return self.student.build_model(features, is_training)
        return {"loss": self.distillation_loss(features)}

    def distillation_loss(self, features):
        """One tower's training loss (see the module docstring)."""
        losses = self.losses
        gold = _gold_rows(features)
        labelled = _stand_in_labels(features)
        weights = features["example_weights"]
        student = head_outputs(self.student, labelled, is_training=True)
        terms = []
        if losses.hard_weight:
            terms.append(losses.hard_weight * weighted_mean(student.per_example_loss * gold,
                                                            weights))
        if losses.needs_teacher:
            with tf.variable_scope(TEACHER_SCOPE, custom_getter=_frozen):
                teacher = head_outputs(self.teacher, labelled, is_training=False)
            if losses.soft_weight:
                if isinstance(self.student, TokenClassificationTask):
                    soft = token_soft_target_loss(student.logits, teacher.logits,
                                                  features["word_mask"], losses.temperature)
                else:
                    soft = soft_target_loss(student.logits, teacher.logits,
                                            self.student.objective, losses.temperature)
                terms.append(losses.soft_weight * weighted_mean(soft, weights))
            if losses.hidden_weight:
                teacher_layers = teacher.model.get_all_encoder_layers()
                hidden = hidden_mse(student.model.get_all_encoder_layers(),
                                    [teacher_layers[i] for i in self.matched_layers],
                                    features["input_mask"])
                terms.append(losses.hidden_weight * weighted_mean(hidden, weights))
        self._initialise_from_checkpoints()
        return tf.add_n(terms)

    def _initialise_from_checkpoints(self) -> None:
        """Point the initializers of this graph's new teacher and student variables at
        their checkpoints (tf.train.init_from_checkpoint)."""
        graph = tf.get_default_graph()
        done = set(graph.get_collection(_INITIALISED))
        prefix = TEACHER_SCOPE + "/"
        # Replicated towers each hold a copy of the teacher (replica_i/teacher/...).
        copies: Dict[str, dict] = {}
        for variable in tf.local_variables():
            name = variable.op.name
            google = google_name(name)
            if google.startswith(prefix) and name not in done:
                copies.setdefault(name[:len(name) - len(google)], {})[
                    google[len(prefix):]] = variable
        for assignment in copies.values():
            tf.train.init_from_checkpoint(self.teacher_checkpoint, assignment)
            for variable in assignment.values():
                graph.add_to_collection(_INITIALISED, variable.op.name)
        if self.start is not None:
            self._start_student(graph, done)

    def _start_student(self, graph, done: set) -> None:
        start = self.start
        saved = dict(list_checkpoint_variables(start.checkpoint))
        assignment, fresh = {}, []
        for variable in tf.global_variables():
            name = variable.op.name
            if name in done or is_optimizer_state(name) or google_name(name) != name:
                continue
            source = source_name(name, start.layer_map)
            if source not in saved:
                fresh.append(name)
                continue
            if saved[source] != variable.shape.as_list():
                fail(f"the student's {name} is {variable.shape.as_list()} but "
                     f"{start.checkpoint}'s {source} is {saved[source]}: give the student "
                     "config that checkpoint was trained with")
            assignment[source] = variable
        if not assignment:
            return
        tf.train.init_from_checkpoint(start.checkpoint, assignment)
        for variable in assignment.values():
            graph.add_to_collection(_INITIALISED, variable.op.name)
        log.info("student: a fresh start reads %d variables from %s%s; a resume reads "
                 "output_dir's checkpoint", len(assignment), start.checkpoint,
                 f" ({start.description})" if start.description else "")
        if fresh:
            log.info("  not in it, freshly initialised (%d): %s", len(fresh),
                     ", ".join(fresh[:12]) + (f" ... {len(fresh) - 12} more"
                                              if len(fresh) > 12 else ""))


# --- the heads: this module's only calls into bert_ad/model/heads.py ----------------------

@dataclasses.dataclass
class HeadOutputs:
    """A task's head on its encoder, one tower: logits [rows, outputs] (a token
    classifier's [rows, words, tags], a CRF's emissions), the per-row loss against
    the features' labels, and the encoder (BertModel), whose layers the hidden loss
    reads."""
    logits: object
    per_example_loss: object
    model: object


def head_outputs(task: Task, features, is_training: bool) -> HeadOutputs:
    """The head of `task` (a ClassificationTask or TokenClassificationTask) over its
    own encoder, built with the run's precision and padding removal (task.head)."""
    out, model = task.head(features, is_training)
    return HeadOutputs(out.logits, out.per_example_loss, model)


# --- rows with and without a gold label ----------------------------------------------------

def without_labels(examples: TokenizedExamples) -> TokenizedExamples:
    """`examples` marked as having no gold label: label ids (and a token
    classifier's word tag ids) NO_LABEL."""
    columns = dict(examples.columns)
    if "word_tag_ids" in columns:
        columns["word_tag_ids"] = [np.full_like(ids, NO_LABEL) for ids in columns["word_tag_ids"]]
    labels = None if examples.labels is None else np.full(len(examples), NO_LABEL, np.int32)
    return TokenizedExamples(columns, labels, examples.row_values)


def _gold_rows(features):
    """[rows] 1.0 for a row with a gold label, 0.0 for a row of transfer text."""
    if "word_tag_ids" in features:
        # Every word of a window has a tag or none has; its first word is real.
        return tf.cast(features["word_tag_ids"][:, 0] >= 0, tf.float32)
    return tf.cast(features["label_ids"] >= 0, tf.float32)


def _stand_in_labels(features):
    """`features` with NO_LABEL replaced by 0, so the heads' loss ops stay in range
    (their value on those rows is not used)."""
    out = dict(features)
    for name in ("label_ids", "word_tag_ids"):
        if name in out:
            out[name] = tf.maximum(out[name], 0)
    return out


def teacher_task(student: Task, encoder, use_crf: bool) -> Task:
    """The student's task on the teacher's encoder (and, for a token classifier, the
    teacher's head: a CRF or not): the teacher as the training graph builds it."""
    if isinstance(student, TokenClassificationTask):
        return student._replaced(encoder=encoder, use_crf=use_crf)
    return student._replaced(encoder=encoder)


def _frozen(getter, name, *args, **kwargs):
    """The teacher's variables: local (no Saver of the loop sees them) and not trained."""
    kwargs["trainable"] = False
    kwargs["collections"] = [tf.GraphKeys.LOCAL_VARIABLES]
    return getter(name, *args, **kwargs)
