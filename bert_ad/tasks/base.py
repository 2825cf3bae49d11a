"""The task seam: what one objective owns, and nothing else.

After tensorflow/models' `official/nlp/tasks`: a task answers the same few
questions for the driver (bert_ad/driver.py), which does everything else for
every task (global batch and learning rate, the training graph and loop on N
towers and N workers, scoring on all towers, the chief/worker split, atomic
result files):

  read(split)             the rows of a split, checked (build_inputs, 1)
  batches(data)           their model features, ready to batch (build_inputs, 2)
  build_model(features)   the head and loss on top of BertModel, one tower
                          (build_model + build_losses)
  metrics(data, outputs)  scored rows -> eval_results.txt figures (build_metrics)
  prediction_files(...)   scored rows -> predict.txt and its companions
  serving_outputs(feats)  what an export for serving answers (bert_ad/serving/)

A new task is a subclass in bert_ad/tasks/ plus a launcher in bert_ad/cli/;
it never touches the driver, the loop or the tower code.

Only the graph methods (build_model, serving_outputs) need TensorFlow, and
they import it (and the heads) themselves: reading, batching, metrics and
result files import none, which is what scoring with an ONNX export runs
(bert_ad/inference/onnx_scorer.py; tests/test_onnx.py checks sys.modules).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from bert_ad.data.batching import Batches, ExampleBatches, TokenizedExamples
from bert_ad.data.feature_cache import EXAMPLES, Codec, cache_key, cached
from bert_ad.data.features import FeatureSettings
from bert_ad.errors import fail

# What an export's serving signature takes by default: int32 [batch, seq],
# both dimensions dynamic (bert_ad/serving/export.py).
SERVING_INPUTS = ("input_ids", "input_mask", "segment_ids")
# build_model outputs that only make sense with labels: never served.
TRAINING_ONLY_OUTPUTS = ("loss", "per_example_loss")


@dataclasses.dataclass
class SplitData:
    """One split's rows as the task read them.

    Attributes:
      split: "train", "dev" or "predict".
      rows: the task's own row objects, one per input row: what result files
        line up with.
      source: the file (or files) they came from, for messages and cache keys.
    """
    split: str
    rows: Sequence
    source: str

    def __len__(self) -> int:
        return len(self.rows)

    def sources(self) -> List[str]:
        """The input files `source` names (one path, or several joined by ", ")."""
        return [path for path in self.source.split(", ") if path]


class Task(abc.ABC):
    """One objective on top of BERT. Subclasses set `feature_spec` and `name`.

    Attributes:
      name: for logs ("classifier", "rewrite", ...).
      feature_spec: the per-tower inputs, {name: (dtype, shape)}.
      labels: the label names the head predicts, or None for a task without
        a label list (then no labels.txt is kept).
      scores_released_checkpoints: scoring may start from --init_checkpoint
        alone, its missing head initialised fresh (pretraining's "before").
      encoder: the task's encoder: a TextEncoder for a text task (model config,
        tokenizer, max_seq_length; a task needs one to be exported), an Encoder
        for one that reads token ids; `encoder.model(features, is_training)`
        builds BERT with the run's precision and padding removal, and a task
        hands that model to its head (it never builds BertModel itself).
      serving_inputs: the names in feature_spec an export's signature takes
        (the rest of feature_spec is filled with stand-ins when serving).
      main_metric: the eval figure that picks the best checkpoint when
        --best_metric is not given ("" = none; see
        bert_ad/parallel/best_checkpoint.py for which way is better).
      trained_by: how this task trains its weights ("fine-tuning", "distillation",
        "pretraining"): part of a run's identity (bert_ad/model_folder.py), so a
        student's run never resumes its teacher's checkpoints.
      chooses_on_dev: an answer setting is chosen on the dev rows (squad's
        --null_score_diff_threshold=auto): the driver scores them before it
        exports or predicts, and goes on with `with_dev_choice`'s task; a run
        without dev rows chooses on `choice_rows` of its training rows.
    """

    name: str = "task"
    feature_spec: Mapping[str, tuple] = {}
    labels: Optional[List[str]] = None
    scores_released_checkpoints: bool = False
    encoder: Optional["Encoder | TextEncoder"] = None
    serving_inputs: Sequence[str] = SERVING_INPUTS
    main_metric: str = ""
    chooses_on_dev: bool = False
    trained_by: str = "fine-tuning"

    # --- completing the task --------------------------------------------------

    def with_labels(self, labels: Optional[Sequence[str]]) -> "Task":
        """This task with its label list: the complete task the driver runs.

        The driver resolves the list once every split is read (training data,
        labels.txt, an export) and then works only with the task this returns;
        nothing writes into a task after it is built.
        """
        labels = None if labels is None else list(labels)
        if labels == self.labels:
            return self
        return self._replaced(labels=labels)

    def with_compute_dtype(self, dtype) -> "Task":
        """This task with its encoder computing in `dtype` (an fp16 export)."""
        return self.with_encoder(compute_dtype=dtype)

    def with_encoder(self, **changes) -> "Task":
        """This task with TextEncoder fields changed (an export's dtype or padding)."""
        if self.encoder is None:
            return self
        return self._replaced(encoder=dataclasses.replace(self.encoder, **changes))

    def _replaced(self, **fields) -> "Task":
        """A copy with `fields` set; a dataclass task is rebuilt through its fields."""
        if dataclasses.is_dataclass(self):
            return dataclasses.replace(self, **fields)
        task = copy.copy(self)
        for name, value in fields.items():
            setattr(task, name, value)
        return task

    # --- inputs ---------------------------------------------------------------

    @abc.abstractmethod
    def read(self, split: str) -> SplitData:
        """The rows of `split` ("train", "dev", "predict"); UserError on bad input."""

    def resolve_labels(self, train: Optional[SplitData],
                       saved: Optional[List[str]]) -> Optional[List[str]]:
        """The label list of this run (None: the task has none).

        `train` is the training data when training; `saved` the list in
        output_dir's labels.txt, if any. The driver refuses a list that differs
        from the saved one while output_dir holds a checkpoint.
        """
        return None

    def check_labels(self, data: SplitData) -> None:  # noqa: B027 (optional hook)
        """Refuse rows whose labels are outside self.labels (file and line).

        Called for every split read (train, dev, predict) before any work; a
        task whose predictions ignore the predict file's labels skips it.
        """

    @abc.abstractmethod
    def batches(self, data: SplitData) -> Batches:
        """The features of `data`, ready to batch (cached by the task if it wants)."""

    # --- model ----------------------------------------------------------------

    @abc.abstractmethod
    def build_model(self, features: Dict[str, object], is_training: bool
                    ) -> Dict[str, object]:
        """One tower's head and loss on BertModel.

        Returns {"loss": scalar (training), and per-row outputs for scoring:
        tensors whose first dimension is the batch}.
        """

    def serving_outputs(self, features: Dict[str, object]) -> Dict[str, object]:
        """What an export of this task answers: {output name: tensor}, dropout off.

        Called once by bert_ad/serving/export.py, in a fresh graph, with
        `features` holding a placeholder per name in `serving_inputs` (int32
        [batch, seq], both dimensions dynamic); the encoder's compute dtype is
        the export's precision. Names become the signature's outputs and the
        frozen graph's tensor names (`<name>:0`), so choose them for the
        people calling the server: the classifier serves `probabilities`
        [batch, num_labels] float32 and `label_ids` [batch] int32 (argmax), the
        rewrite task `score` [batch]. A token task serves per-token `tag_ids`
        [batch, seq] (Viterbi-decoded when it has a CRF) and `probabilities`
        [batch, seq, num_tags].

        Floating outputs should be float32 whatever the precision. Every output
        that `prediction_files` reads must be among them, with the same name and
        meaning as in `build_model`'s outputs: `--predict_from_export` hands
        the export's outputs to `prediction_files` unchanged.

        The default runs `build_model(is_training=False)` on the features
        completed with `serving_features` and serves every per-row output
        except the loss terms and the features themselves.

        Returns:
          {name: tensor whose first dimension is the batch}.
        """
        complete = serving_features(features, self.feature_spec)
        outputs = self.build_model(complete, is_training=False)
        inputs = {id(t) for t in complete.values()}
        return {name: value for name, value in outputs.items()
                if name not in TRAINING_ONLY_OUTPUTS and id(value) not in inputs}

    def serving_settings(self) -> Dict[str, object]:
        """How this task cuts text into rows beyond the tokenizer ({flag name:
        value}, e.g. the classifier's truncation or windows): kept in an
        export's export.json, and a run scoring with that export must match."""
        return {}

    def answer_settings(self) -> Dict[str, object]:
        """How outputs become answers beyond the model ({flag name: value}, e.g.
        squad's --null_score_diff_threshold): kept in an export's export.json,
        where a server and --predict_from_export find them, and beside a
        checkpoint when chosen on the dev rows."""
        return {}

    def with_answer_settings(self, values: Mapping[str, object], where: str) -> "Task":
        """This task answering with recorded answer settings (an export's, the
        checkpoint's), where its flags leave them open; `where` names the record."""
        return self

    def with_dev_choice(self, data: SplitData, outputs: Dict[str, np.ndarray]) -> "Task":
        """This task with the answer settings chosen on the scored dev rows
        (`chooses_on_dev`)."""
        return self

    def choice_data(self, dev: Optional[SplitData], train: Optional[SplitData]
                    ) -> Optional[SplitData]:
        """The rows `chooses_on_dev` chooses on: the dev rows the run reads, else
        `choice_rows` of its training rows; None: nothing to choose on."""
        if dev is not None:
            return dev
        return self.choice_rows(train) if train is not None else None

    def choice_rows(self, train: SplitData) -> Optional[SplitData]:
        """The rows `chooses_on_dev` chooses on in a run that has no dev rows, drawn
        from its training rows; None: such a run chooses nothing."""
        return None

    def model_files(self) -> Dict[str, str]:
        """{file name: text} that describe the model this task's checkpoints hold, when
        it is not the one --bert_config_file names (a distilled student's own
        bert_config.json): written into output_dir beside labels.txt when training."""
        return {}

    def learning_rate_multipliers(self) -> Dict[str, float]:
        """{regular expression: factor}: variables whose names match learn at
        factor x the learning rate (default: none)."""
        return {}

    # --- results --------------------------------------------------------------

    def metrics(self, data: SplitData, outputs: Dict[str, np.ndarray]) -> Dict[str, object]:
        """eval_results.txt figures of the scored dev rows (global_step is added)."""
        raise NotImplementedError(f"the {self.name} task has no evaluation")

    def prediction_file_names(self) -> Sequence[str]:
        """The files `prediction_files` writes into output_dir (checked against the
        run's inputs before anything is written)."""
        return ("predict.txt",)

    def prediction_files(self, data: SplitData, outputs: Dict[str, np.ndarray]
                         ) -> Dict[str, Iterable[str]]:
        """{file name in output_dir: its lines} for the scored predict rows."""
        raise NotImplementedError(f"the {self.name} task has no predictions")

    def metric_names(self) -> Optional[List[str]]:
        """The figures `metrics` gives (what --best_metric may name), or None if the
        task does not say: then a --best_metric it lacks is found at the first
        evaluation instead of before the run starts."""
        return None

    def describe_metrics(self, metrics: Mapping[str, object]) -> str:
        """The eval log line(s)."""
        return "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                         for k, v in sorted(metrics.items()))

    def metric_warnings(self, metrics: Mapping[str, object]) -> List[str]:
        """Warnings the dev figures call for (logged after the eval lines), e.g.
        a classifier that answers one label for every row."""
        return []


def check_head_learning_rate_multiplier(value: float) -> float:
    """--head_learning_rate_multiplier, refused unless positive."""
    if not value > 0:
        fail(f"--head_learning_rate_multiplier={value} must be positive "
             "(1 = Google's single learning rate)")
    return value


def head_learning_rates(head_variables: str, multiplier: float) -> Dict[str, float]:
    """Task.learning_rate_multipliers() of a task whose fresh head (the variables
    matching `head_variables`) learns at `multiplier` x the encoder's rate."""
    return {} if multiplier == 1.0 else {head_variables: multiplier}


def serving_features(features: Dict[str, object], feature_spec: Mapping[str, tuple]
                     ) -> Dict[str, object]:
    """`features` completed to every name of `feature_spec`, for serving.

    A feature the serving signature does not take (labels, example weights,
    a task's training targets) becomes a stand-in: ones for
    `example_weights` (every row is real), zeros otherwise, [batch] or
    [batch, seq] like input_ids, higher dimensions as in the spec (they must
    be static). The stand-ins only feed loss terms, which are not served.

    Args:
      features: {name: tensor}, with `input_ids` [batch, seq].
      feature_spec: the task's {name: (dtype, shape)}.
    Returns:
      {name: tensor} for every name in feature_spec.
    """
    from bert_ad.compat import tf
    complete = dict(features)
    batch_and_seq = tf.shape(features["input_ids"])
    for name, (dtype, shape) in feature_spec.items():
        if name in complete:
            continue
        dims = [batch_and_seq[i] if i < 2 and dim is None else dim
                for i, dim in enumerate(shape)]
        fill = tf.ones if name == "example_weights" else tf.zeros
        complete[name] = fill(tf.stack(dims) if dims else [], dtype,
                              name=f"stand_in_{name}")
    return complete


class _BuildsTheEncoder:
    """What every encoder record answers: the BERT graph over a batch, built with the
    run's precision and padding removal, so no task names them. This is the only
    place a task's BertModel is built (tests/test_architecture.py checks tasks/)."""

    def model(self, features: Mapping[str, object], is_training: bool,
              pooling: str = "cls"):
        """BERT over features' input_ids / input_mask / segment_ids [batch, seq].

        Its get_pooled_output() ([batch, hidden], `pooling`: bert_ad.choices.POOLINGS),
        get_sequence_output() ([batch, seq, hidden]) and get_all_encoder_layers()
        are in the encoder's compute dtype (--precision); cast to float32 for a head.
        The heads (bert_ad/model/heads.py, span_head.py) take this model.

        Recomputation and XLA reach the graph outside the task, as they must for
        every task: --recompute_activations is the `recomputed_layers` block the
        training graph builds each tower in (parallel/train_graph.py), read by
        BertModel; --use_xla is the session's config (placement.py), and here
        only turns padding removal off (cli/builders.remove_padding_from_flags).
        """
        from bert_ad.compat import tf  # graph code: imported when a graph is built
        from bert_ad.model.modeling import BertModel
        return BertModel(self.config, is_training, features["input_ids"],
                         features["input_mask"], features["segment_ids"],
                         compute_dtype=self.compute_dtype or tf.float32, pooling=pooling,
                         remove_padding=self.remove_padding)


@dataclasses.dataclass
class Encoder(_BuildsTheEncoder):
    """The BERT encoder of a task that reads token ids (pretraining), and how it runs.

    Built once from the shared flags (bert_ad/cli/builders.py).

    Attributes:
      config: the model's BertConfig.
      compute_dtype: the encoder's activation dtype (--precision).
      remove_padding: position-wise layers on real tokens only (BertModel).
    """
    config: object
    compute_dtype: object = None
    remove_padding: bool = True


@dataclasses.dataclass
class TextEncoder(_BuildsTheEncoder):
    """The BERT encoder a fine-tuning task runs on, and how its text becomes ids.

    Built once from the shared flags (bert_ad/cli/builders.py).

    Attributes:
      config: the model's BertConfig.
      tokenizer: WordPiece or SentencePiece, vocab_size checked against config.
      vocab_file: the vocab (or SentencePiece model) file, for cache keys.
      do_lower_case, max_seq_length: as the flags.
      padding: "dynamic" or a fixed length (--padding=max_length).
      bucket_by_length: train on batches of similar lengths.
      cache_dir: where tokenised features are cached.
      compute_dtype: the encoder's activation dtype (--precision).
      remove_padding: position-wise layers on real tokens only (BertModel).
    """
    config: object
    tokenizer: object
    vocab_file: str
    do_lower_case: bool
    max_seq_length: int
    padding: object = "dynamic"
    bucket_by_length: bool = False
    cache_dir: str = ""
    compute_dtype: object = None
    remove_padding: bool = True

    def feature_settings(self, truncation: str = "head", head_fraction: float = 0.25,
                         labels: Sequence[str] = (), **targets_and_windows
                         ) -> FeatureSettings:
        """FeatureSettings at this encoder's max_seq_length; `targets_and_windows`:
        FeatureSettings' target, label_separator and windows."""
        return FeatureSettings(self.max_seq_length, truncation, head_fraction, list(labels),
                               **targets_and_windows)

    def cached(self, data: SplitData, parts: Mapping[str, object], build,
               codec: Codec = EXAMPLES):
        """`build()`'s features (any kind `codec` stores), cached under a hash of the
        input file, this encoder's tokenizer and length, and `parts`: every
        other setting the task knows to shape them (bert_ad/data/feature_cache.py)."""
        key = cache_key(data.source, self.vocab_file, self.do_lower_case,
                        dict(parts, max_seq_length=self.max_seq_length, split=data.split,
                             rows=len(data.rows)))
        return cached(self.cache_dir, data.split, key, build, codec)

    def batches(self, examples: TokenizedExamples) -> ExampleBatches:
        return ExampleBatches(examples, self.padding, self.bucket_by_length)
