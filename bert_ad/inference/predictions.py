"""What a served model answers: JSON instances -> feature rows -> JSON predictions, per task.

`bert-ad serve` (bert_ad/inference/server.py) takes TensorFlow Serving's
`{"instances": [...]}` with text in each instance. For each task one
`Predictions` turns instances into the rows the export scores and the scored
rows back into answers, with the same code `--do_predict` runs, so a served
answer equals the export's `--predict_from_export` result:

  classifier            rows: bert_ad.data.features.convert_examples (the
                        export's truncation, or its windows); answers:
                        ClassificationTask.row_outputs (windows pooled per
                        text), then the label (argmax), the labels at or over
                        --multi_label_threshold, or the value (regression)
  token_classification  rows: bert_ad.data.token_features.convert_sentences;
                        tags: TokenClassificationTask.predicted_tags (each word
                        from its max-context window); entities:
                        tag_schemes.span_records, mapped to characters
  squad                 rows: bert_ad.data.squad_features.convert_questions;
                        answers: bert_ad.answers.squad.answers_from_logits
  features              rows: bert_ad.tasks.features.encode_line; the export's
                        pooled `embedding` as it is

`parse` checks one instance (a `BadInstance` names what is wrong: the server
answers 400); `featurize` runs on a tokenizer thread, `predict` too; the rows
in between are scored by the batcher (bert_ad/inference/batching.py) together
with other requests' rows.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from bert_ad.answers.classification import ClassifierOutputs
from bert_ad.answers.squad import AnswerSettings, answers_from_logits
from bert_ad.answers.tokens import predicted_tags
from bert_ad.data.basic_tokenization import _is_control, _is_punctuation, _is_whitespace, \
    is_chinese_char
from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.conll import TOKEN_SPLITS
from bert_ad.data.embedding_rows import encode_line
from bert_ad.data.embedding_settings import EMBEDDING
from bert_ad.data.features import FeatureSettings, convert_examples
from bert_ad.data.processors import InputExample
from bert_ad.data.squad_features import SquadWindowSettings, convert_questions
from bert_ad.data.squad_json import Question
from bert_ad.data.tag_schemes import span_records
from bert_ad.data.token_features import convert_sentences, default_doc_stride
from bert_ad.errors import fail
from bert_ad.inference.batching import pack
from bert_ad.inference.exported_model import ExportedModel


class BadInstance(ValueError):
    """An instance the task cannot read; the message says what it needs."""


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """What the export does not say and a prediction needs (bert-ad serve's flags,
    with the defaults of the tasks' own predict flags).

    Attributes:
      multi_label_threshold: a label is answered at this probability or more.
      token_split: how a token classifier's text becomes words: "words"
        (whitespace, and each punctuation mark and CJK character alone:
        Google's basic tokenizer) or "characters" (every character but
        whitespace, for models trained one character a line); None: the split
        the model was trained with (export.json's settings), else "words".
      doc_stride: pieces between windows of a long sentence or context
        (0: the task's default, half a window for token classification, 128
        for squad).
      max_query_length, n_best_size, max_answer_length: as run_squad's flags.
      version_2_with_negative: as run_squad's; None: as the model was trained
        (export.json's settings), else v1.1.
      null_score_diff_threshold: None = export.json's (when recorded), else 0.
    """
    multi_label_threshold: float = 0.5
    token_split: Optional[str] = None
    doc_stride: int = 0
    max_query_length: int = 64
    n_best_size: int = 20
    max_answer_length: int = 30
    version_2_with_negative: Optional[bool] = None
    null_score_diff_threshold: Optional[float] = None


@dataclasses.dataclass
class Featurized:
    """A request's feature rows (what the export scores) and what `predict` needs."""
    examples: TokenizedExamples
    state: object = None

    def rows(self) -> List[Dict[str, np.ndarray]]:
        """One {column name: 1-D array} per row (bert_ad.inference.batching packs
        them into batches). Row values (a target, a window's document) are left
        out: an export takes none but document_index, which complete_batch sets."""
        columns = self.examples.columns
        return [{name: column[i] for name, column in columns.items()}
                for i in range(len(self.examples))]


def _string(value, what: str) -> str:
    if not isinstance(value, str):
        raise BadInstance(f"{what} must be a string, not {_json_type(value)}")
    return value


def _json_type(value) -> str:
    return {dict: "an object", list: "a list", bool: "true/false", type(None): "null",
            int: "a number", float: "a number", str: "a string"}.get(type(value),
                                                                     type(value).__name__)


def _fields(instance, required: Sequence[str], optional: Sequence[str] = ()) -> dict:
    """The string fields of an object instance; BadInstance for a missing,
    unknown or non-string one."""
    if not isinstance(instance, dict):
        raise BadInstance(f"must be a string or an object with {', '.join(required)}, not "
                          f"{_json_type(instance)}")
    for key in instance:
        if key not in required and key not in optional:
            raise BadInstance(f"has an unknown field {key!r}; the fields are "
                              f"{', '.join(tuple(required) + tuple(optional))}")
    for key in required:
        if key not in instance:
            raise BadInstance(f"has no {key!r}")
    return {key: None if value is None and key not in required else _string(value, repr(key))
            for key, value in instance.items()}


class Predictions(abc.ABC):
    """One task's way from instances to answers.

    Attributes:
      instance_format: what an instance is, for the metadata endpoint.
      sample: an instance the server scores once at start (warm-up).
      text_fields: the fields of a first and a second text.
    """
    instance_format: str = ""
    sample: object = "warm up"
    # An instance's fields for a first and a second text (bert-ad predict's columns).
    text_fields: Tuple[str, ...] = ("text_a", "text_b")

    def __init__(self, model: ExportedModel, options: ServeOptions):
        self.metadata = model.metadata
        self.tokenizer = model.tokenizer
        self.max_seq_length = model.metadata.max_seq_length
        self.options = options

    @abc.abstractmethod
    def parse(self, instance) -> object:
        """One instance, checked (BadInstance otherwise)."""

    @abc.abstractmethod
    def featurize(self, parsed: List[object]) -> Featurized:
        """The feature rows of a request's parsed instances."""

    @abc.abstractmethod
    def predict(self, parsed: List[object], featurized: Featurized,
                outputs: Dict[str, np.ndarray]) -> List[dict]:
        """One answer per instance from the rows' outputs (stacked as
        bert_ad.data.scored_rows.stack_rows stacks a split's)."""

    def complete_batch(self, batch: Dict[str, np.ndarray]) -> None:  # noqa: B027 (optional hook)
        """Inputs a batch of several requests' rows needs besides theirs."""

    def batch_of(self, rows: List[Dict[str, np.ndarray]]) -> Dict[str, np.ndarray]:
        """`rows` (of one request or several) as one batch the export scores:
        padded as --do_predict pads, with the inputs complete_batch adds."""
        batch = pack(rows)
        self.complete_batch(batch)
        return batch

    def one_batch(self, instances: Sequence[object]) -> Tuple[list, Featurized, dict]:
        """(parsed, featurized, batch) of `instances` scored together: the
        server's path without its queue (warm-up, benchmarks)."""
        parsed = [self.parse(instance) for instance in instances]
        featurized = self.featurize(parsed)
        return parsed, featurized, self.batch_of(featurized.rows())

    def answer_in_one_batch(self, instances: Sequence[object],
                            score: Callable[[dict], Dict[str, np.ndarray]]) -> List[dict]:
        """The answers to `instances`, their rows scored in one call of `score`."""
        parsed, featurized, batch = self.one_batch(instances)
        return self.predict(parsed, featurized, score(batch))

    def describe(self) -> dict:
        """What the metadata endpoint says about how this model answers."""
        return {}


class ClassifierPredictions(Predictions):
    """{"label", "probabilities"} / {"labels", "probabilities"} (multi-label) /
    {"value"} (regression) of a text or a pair."""
    instance_format = 'a string, or {"text_a": ..., "text_b": ...}'

    def __init__(self, model, options):
        super().__init__(model, options)
        metadata = self.metadata
        self.meaning = ClassifierOutputs.from_export(metadata.settings, metadata.labels,
                                                     list(metadata.outputs),
                                                     options.multi_label_threshold)
        self.feature_settings = FeatureSettings.from_export_settings(
            metadata.settings, self.max_seq_length, metadata.labels or (),
            self.meaning.target)

    def parse(self, instance) -> InputExample:
        if isinstance(instance, str):
            return InputExample("", instance)
        fields = _fields(instance, ("text_a",), ("text_b",))
        return InputExample("", fields["text_a"], fields.get("text_b") or None)

    def featurize(self, parsed):
        return Featurized(convert_examples(parsed, self.tokenizer, self.feature_settings))

    def complete_batch(self, batch):
        if self.meaning.window_pooling:
            # Each window its own document within the batch: the answer is pooled
            # on the host from the windows' own logits, as --predict_from_export does.
            batch["document_index"] = np.arange(len(batch["input_ids"]), dtype=np.int32)

    def predict(self, parsed, featurized, outputs):
        outputs = dict(outputs)
        if self.meaning.window_pooling:
            outputs["window_documents"] = featurized.examples.row_values["document_index"]
        answers = self.meaning.answers(outputs, len(parsed))
        # The names the user gave (--label_names), else labels.txt's.
        labels = self.metadata.label_names or self.metadata.labels
        return [answers.as_json(row, labels) for row in range(len(parsed))]

    def describe(self):
        described = {"target": self.meaning.target}
        if self.meaning.target == "multi_label":
            described["multi_label_threshold"] = self.meaning.threshold
        return described


@dataclasses.dataclass
class Sentence:
    """A token classifier's instance: its words and, for text, where each is."""
    words: List[str]
    spans: Optional[List[Tuple[int, int]]]   # None: given as tokens
    text: Optional[str]


def split_words(text: str, characters: bool = False) -> List[Tuple[int, int]]:
    """[start, end) of each word of `text`: whitespace separates words, and each
    punctuation mark and CJK character is a word alone (Google's basic
    tokenizer, without its lower-casing, so the spans are the text's own);
    control characters are dropped. `characters`: every character but
    whitespace and controls is a word."""
    spans, start = [], None
    for i, char in enumerate(text):
        alone = characters or _is_punctuation(char) or is_chinese_char(ord(char))
        ends = _is_whitespace(char) or _is_control(char) or char == "\ufffd" or alone
        if ends and start is not None:
            spans.append((start, i))
            start = None
        if alone and not (_is_whitespace(char) or _is_control(char)):
            spans.append((i, i + 1))
        elif not ends and start is None:
            start = i
    if start is not None:
        spans.append((start, len(text)))
    return spans


class TokenPredictions(Predictions):
    """{"tokens", "tags", "entities": [{"type", "start", "end", "text"}]}: for text,
    start and end are characters of it (end exclusive); for tokens, token indexes."""
    instance_format = 'a string, {"text": ...}, or {"tokens": [...]}'
    text_fields = ("text",)

    def __init__(self, model, options):
        super().__init__(model, options)
        # The split the model was trained with (export.json), unless --token_split says.
        self.token_split = options.token_split or str(
            self.metadata.settings.get("token_split", "words"))
        if self.token_split not in TOKEN_SPLITS:
            fail(f"--token_split={self.token_split} is not one of {', '.join(TOKEN_SPLITS)}")
        self.labels = list(self.metadata.labels or ())
        self.doc_stride = options.doc_stride or default_doc_stride(self.max_seq_length)

    def parse(self, instance) -> Sentence:
        if isinstance(instance, dict) and "tokens" in instance:
            if set(instance) != {"tokens"}:
                raise BadInstance("gives either \"text\" or \"tokens\", alone")
            tokens = instance["tokens"]
            if not isinstance(tokens, list) or not all(
                    isinstance(t, str) and t.strip() for t in tokens):
                raise BadInstance('"tokens" must be a list of non-blank strings')
            return Sentence(list(tokens), None, None)
        text = instance if isinstance(instance, str) else _fields(instance, ("text",))["text"]
        spans = split_words(text, self.token_split == "characters")
        return Sentence([text[s:e] for s, e in spans], spans, text)

    def featurize(self, parsed):
        # A text of no words gets no rows (and the answer of no entities).
        sentences = [s.words for s in parsed if s.words]
        features = convert_sentences(sentences, None, self.tokenizer, self.labels,
                                     self.max_seq_length, self.doc_stride)
        return Featurized(features.examples, features)

    def predict(self, parsed, featurized, outputs):
        with_words = any(s.words for s in parsed)
        tags = iter(predicted_tags(featurized.state, outputs["predicted"], self.labels)
                    if with_words else [])
        answers = []
        for sentence in parsed:
            sentence_tags = next(tags) if sentence.words else []
            if sentence.spans is None:
                separator = "" if all(len(w) == 1 for w in sentence.words) else " "
                entities = span_records(sentence.words, sentence_tags, separator)
            else:
                entities = []
                for entity in span_records(sentence.words, sentence_tags):
                    start = sentence.spans[entity["start"]][0]
                    end = sentence.spans[entity["end"] - 1][1]
                    entities.append({"type": entity["type"], "start": start, "end": end,
                                     "text": sentence.text[start:end]})
            answers.append({"tokens": sentence.words, "tags": sentence_tags,
                            "entities": entities})
        return answers

    def describe(self):
        return {"token_split": self.token_split, "doc_stride": self.doc_stride}


class SquadPredictions(Predictions):
    """{"answer", "start", "end", "score"} of a question about a context: start and
    end are characters of the context (end exclusive; null for the answer "",
    SQuAD v2.0), score the answer's probability among the n best."""
    instance_format = '{"question": ..., "context": ...}'
    text_fields = ("question", "context")
    sample = {"question": "warm up", "context": "warm up"}

    def __init__(self, model, options):
        super().__init__(model, options)
        metadata = self.metadata
        self.windows = SquadWindowSettings(self.max_seq_length, options.doc_stride or 128,
                                           options.max_query_length)
        self.windows.check()
        threshold = options.null_score_diff_threshold
        if threshold is None:  # recorded by a training run that chose it on dev
            recorded = metadata.answer_settings.get(
                "null_score_diff_threshold", metadata.settings.get("null_score_diff_threshold"))
            threshold = float(recorded) if recorded is not None else 0.0
        # v2.0 (answer "" when the null answer wins) as the model was trained, unless
        # --version_2_with_negative says.
        version_2 = options.version_2_with_negative
        if version_2 is None:
            version_2 = bool(metadata.settings.get("version_2_with_negative", False))
        self.answer_settings = AnswerSettings(options.n_best_size, options.max_answer_length,
                                              version_2, threshold)

    def parse(self, instance) -> Tuple[str, str]:
        fields = _fields(instance, ("question", "context"))
        return fields["question"], fields["context"]

    def featurize(self, parsed):
        questions = [Question(str(i), question, i, ()) for i, (question, _) in
                     enumerate(parsed)]
        features = convert_questions(questions, [context for _, context in parsed],
                                     self.tokenizer, self.windows, training=False)
        return Featurized(features.examples, (questions, features))

    def predict(self, parsed, featurized, outputs):
        questions, features = featurized.state
        found = answers_from_logits(questions, [context for _, context in parsed], features,
                                    list(outputs.get("start_logits", ())),
                                    list(outputs.get("end_logits", ())), self.answer_settings)
        answers = []
        for question in questions:
            text = found.predictions[question.id]
            offsets = found.offsets[question.id]
            score = next((e["probability"] for e in found.nbest[question.id]
                          if e["text"] == text), 0.0)
            answer = {"answer": text, "start": offsets[0] if offsets else None,
                      "end": offsets[1] if offsets else None, "score": float(score)}
            if self.answer_settings.version_2_with_negative:
                answer["null_odds"] = float(found.null_odds[question.id])
            answers.append(answer)
        return answers

    def describe(self):
        return dict(dataclasses.asdict(self.answer_settings),
                    doc_stride=self.windows.doc_stride,
                    max_query_length=self.windows.max_query_length)


class FeaturePredictions(Predictions):
    """{"embedding": [...]}: the export's pooled vector of a text or a pair."""
    instance_format = 'a string, or {"text_a": ..., "text_b": ...}'

    def parse(self, instance) -> Tuple[str, Optional[str]]:
        if isinstance(instance, str):
            return instance, None
        fields = _fields(instance, ("text_a",), ("text_b",))
        return fields["text_a"], fields.get("text_b") or None

    def featurize(self, parsed):
        prefix = str(self.metadata.settings.get("text_prefix", ""))
        rows = [encode_line(self.tokenizer, a, b, self.max_seq_length, prefix)
                for a, b in parsed]
        return Featurized(TokenizedExamples({
            name: [np.array(r.columns[name], np.int32) for r in rows]
            for name in ("input_ids", "segment_ids")}))

    def predict(self, parsed, featurized, outputs):
        return [{"embedding": [float(x) for x in vector]} for vector in outputs[EMBEDDING]]

    def describe(self):
        return {name: self.metadata.settings.get(name) for name in
                ("pooling", "layers", "normalize", "text_prefix")}


PREDICTIONS = {"classifier": ClassifierPredictions, "token_classification": TokenPredictions,
               "squad": SquadPredictions, "features": FeaturePredictions}


def predictions_for(model: ExportedModel, options: ServeOptions) -> Predictions:
    """The task's Predictions; UserError (one line) for a task that is not served."""
    metadata, where = model.metadata, model.where
    kind = PREDICTIONS.get(metadata.task)
    if kind is None:
        fail(f"{where} is an export of the {metadata.task} task, which bert-ad serve does not "
             f"answer; it serves {', '.join(sorted(PREDICTIONS))}")
    return kind(model, options)
