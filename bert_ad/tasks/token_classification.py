"""Token classification (NER, word segmentation, tagging) on CoNLL files, on the driver.

Rows are the sentences of a CoNLL file (bert_ad/data/conll.py: one token a
line with its tag, a blank line between sentences). Each sentence becomes
pieces, word by word with WordPiece or as a whole with a unigram piece list
(bert_ad/data/token_pieces.py), and long sentences overlapping windows
(bert_ad/data/token_features.py); the head tags each word from the piece it
reads (its first; words may share one with a piece list), by a softmax or a
linear-chain CRF (bert_ad/model/heads.py `token_classifier`); each word's tag
comes from the window where it has the most context. Results in output_dir:

  predict.txt              the input file line for line: `token<TAB>tag` on
                           token lines, blank and -DOCSTART- lines as they are
  predict_entities.jsonl   one JSON object per sentence: its entities (type,
                           start and end token, end exclusive, text)
  eval_results.txt         entity precision/recall/F1 micro, macro and per
                           type, token accuracy (bert_ad/metrics/entities.py),
                           eval_loss (per window), eval_sentences,
                           eval_windows, global_step

Features (each window's columns and where it comes from) are cached as
every task's are (bert_ad/data/feature_cache.py, the TOKEN_FEATURES codec).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import os
from typing import Dict, List, Optional, Sequence

import numpy as np

from bert_ad.answers.tokens import predicted_tags
from bert_ad.data.conll import (ConllFile, prediction_lines, read_conll, token_separator,
                                token_split_of)
from bert_ad.data.tag_schemes import (OUTSIDE, TagScheme, detect_scheme, get_scheme, label_list,
                                      span_records, span_types, validate_label_list,
                                      validate_tags)
from bert_ad.data.token_features import (COLUMNS, TOKEN_FEATURES, TokenFeatures,
                                         convert_sentences, default_doc_stride)
from bert_ad.data.token_pieces import segments_whole_sentences
from bert_ad.errors import fail
from bert_ad.metrics.entities import entity_metric_names, entity_metrics
from bert_ad.model.feature_specs import PIECE_TOKEN_FEATURE_SPEC, TOKEN_FEATURE_SPEC
from bert_ad.tasks.base import (SERVING_INPUTS, Batches, SplitData, Task, TextEncoder,
                                 check_head_learning_rate_multiplier, head_learning_rates,
                                 serving_features)

log = logging.getLogger("bert_ad")

# The head's variables (bert_ad/model/heads.py token_classifier), as a regular expression.
HEAD_VARIABLES = "^(output_weights|output_bias|output_offset_embeddings|crf/transitions)$"
# What an export takes besides the pieces: the piece each word reads, 1 on real words.
WORD_INPUTS = ("word_positions", "word_mask")


@dataclasses.dataclass
class ConllSplit(SplitData):
    """A split read from one CoNLL file.

    Attributes:
      conll: the parsed file (all its lines: predict.txt follows them).
      features: its windows, built once by `batches` and reused to turn the
        scored windows back into one tag per word.
    """
    conll: Optional[ConllFile] = None
    features: Optional[TokenFeatures] = None


@dataclasses.dataclass(frozen=True)
class ConllFormat:
    """Where a split's file is and how its columns are read.

    Attributes:
      data_dir: --data_dir; file names are relative to it (absolute ones kept).
      train_file, dev_file, test_file: the splits' files.
      predict_file: what --do_predict scores (default: test_file).
      token_column, label_column: column indexes (0 first, -1 last).
    """
    data_dir: str = ""
    train_file: str = "train.txt"
    dev_file: str = "dev.txt"
    test_file: str = "test.txt"
    predict_file: Optional[str] = None
    token_column: int = 0
    label_column: int = -1

    def path(self, split: str) -> str:
        name = {"train": self.train_file, "dev": self.dev_file,
                "predict": self.predict_file or self.test_file}[split]
        return os.path.join(self.data_dir, name) if self.data_dir else name


class TokenClassificationTask(Task):
    """One tag per input token, from a softmax or a CRF over each window's words.

    Args:
      encoder: the model and tokenizer.
      files: where the CoNLL files are and which columns to read.
      tag_scheme: BIO, BIOES, BMES or IO; None reads it from the tags.
      labels: the tag list (--labels), None for the training file's tags.
      doc_stride: pieces between the starts of a long sentence's windows (None:
        half a window, default_doc_stride).
      use_crf: a linear-chain CRF (Viterbi decoding) instead of a softmax.
      token_split: how a served text becomes words (bert_ad.data.conll.TOKEN_SPLITS);
        None: read from the training tokens when training (token_split_of).
      head_learning_rate_multiplier: the head (output_weights, output_bias,
        output_offset_embeddings, crf/transitions) learns this many times
        faster than the encoder. It starts from random weights near 0 (or
        zeros): at the encoder's fine-tuning rate it learns so slowly that
        the encoder drifts first (a model whose token vectors collapse to
        one, docs/ner.md), and a CRF's transitions would hardly move
        (bert4keras's crf_lr_multiplier).
      max_train_examples, max_eval_examples: only the first N sentences.
    """

    name = "token_classification"
    main_metric = "eval_f1"
    feature_spec = TOKEN_FEATURE_SPEC

    def __init__(self, encoder: TextEncoder, files: ConllFormat,
                 tag_scheme: Optional[str] = None, labels: Optional[Sequence[str]] = None,
                 doc_stride: Optional[int] = None, use_crf: bool = False,
                 token_split: Optional[str] = None,
                 head_learning_rate_multiplier: float = 1.0,
                 max_train_examples: Optional[int] = None,
                 max_eval_examples: Optional[int] = None):
        self.encoder = encoder
        self.files = files
        self.scheme: Optional[TagScheme] = get_scheme(tag_scheme) if tag_scheme else None
        self.label_flag = list(labels) if labels else None
        if self.label_flag and len(set(self.label_flag)) != len(self.label_flag):
            fail(f"--labels lists a tag twice: {','.join(self.label_flag)}")
        self.doc_stride = doc_stride or default_doc_stride(encoder.max_seq_length)
        self.use_crf = use_crf
        self.token_split = token_split
        self.head_learning_rate_multiplier = check_head_learning_rate_multiplier(
            head_learning_rate_multiplier)
        self.limits = {"train": max_train_examples, "dev": max_eval_examples}
        # A piece list segments each sentence as a whole, so words may share a
        # piece (bert_ad/data/token_pieces.py); other vocabularies, token by token.
        self.segmentation = ("sentence" if segments_whole_sentences(encoder.tokenizer)
                             else "token")
        if self.segmentation == "sentence":
            self.feature_spec = PIECE_TOKEN_FEATURE_SPEC  # with word_offsets

    # --- inputs -----------------------------------------------------------------

    def read(self, split: str) -> ConllSplit:
        """The sentences of a split's file; train and dev need tags, predict not."""
        path = self.files.path(split)
        conll = read_conll(path, self.files.token_column, self.files.label_column,
                           require_tags=split != "predict")
        sentences = conll.sentences
        limit = self.limits.get(split)
        if limit is not None:
            sentences = sentences[:limit]
        return ConllSplit(split, sentences, path, conll=conll)

    def resolve_labels(self, train: Optional[ConllSplit],
                       saved: Optional[List[str]]) -> List[str]:
        """--labels, else the training file's tags, else output_dir's labels.txt.

        Also fixes the tag scheme (--tag_scheme, else read from those tags).
        """
        if train is not None and self.token_split is None:
            self.token_split = token_split_of(train.rows)
        if self.label_flag is not None:
            labels, source = self.label_flag, "--labels"
        elif train is not None:
            tags = [tag for sentence in train.rows for tag in sentence.tags]
            if self.scheme is None:
                self.scheme = detect_scheme(tags, train.source)
            validate_tags(_limited(train), self.scheme)  # outside the scheme: file, line
            labels, source = label_list(tags), train.source
        elif saved is not None:
            labels, source = saved, "labels.txt"
        else:
            fail("no tag list: train into this --output_dir first (it keeps labels.txt) "
                 "or set --labels")
        if self.scheme is None:
            self.scheme = detect_scheme(labels, source)
        validate_label_list(labels, self.scheme)
        if len(labels) < 2:
            fail(f"{source} has only the tag {labels[0]!r}; token classification needs "
                 "at least 2 tags")
        return list(labels)

    def check_labels(self, data: ConllSplit) -> None:
        """Every tag of a tagged file fits the scheme and is in the tag list (file, line)."""
        if not data.conll.has_tags:
            return
        conll = _limited(data)
        if data.split == "train" and self.label_flag is not None:
            validate_tags(conll, self.scheme)
            known = set(self.labels)
            for sentence in data.rows:
                for tag, number in zip(sentence.tags, sentence.line_numbers):
                    if tag not in known:
                        fail(f"{data.source} line {number}: tag {tag!r} is not in --labels "
                             f"({','.join(self.labels)}); add it or fix the file")
            return
        validate_tags(conll, self.scheme)
        if data.split == "dev":
            self._warn_unseen_tags(data)

    def _warn_unseen_tags(self, data: ConllSplit) -> None:
        """Gold tags of the dev file that training never saw: scored, and said once.

        The model cannot predict them, so their entities count as missed in
        the entity figures (with a per-type line of their own); in the loss
        they count as the outside tag. Predictions ignore a file's tags.
        """
        known = set(self.labels)
        unseen = collections.Counter(tag for sentence in _limited(data).sentences
                                     for tag in sentence.tags or () if tag not in known)
        if unseen:
            log.warning("warning: %s has tags never seen in training: %s; the model cannot "
                        "predict them, so their entities count as missed in eval_results.txt "
                        "(retrain with them in the training file, or --labels when training, "
                        "to learn them)", data.source,
                        ", ".join(f"{tag} ({n} tokens)" for tag, n in sorted(unseen.items())))

    def _stand_in_tag(self) -> str:
        """What an unseen gold tag counts as in the dev loss: the outside tag."""
        return OUTSIDE if OUTSIDE in self.labels else self.labels[0]

    def batches(self, data: ConllSplit) -> Batches:
        return self.encoder.batches(self.features(data).examples)

    def features(self, data: ConllSplit) -> TokenFeatures:
        """The windows of `data` (built on first use)."""
        if data.features is None:
            # Training and evaluation read tags; prediction needs none (and the file
            # may have none), nor does untagged text (a distillation's transfer file).
            tags = [s.tags for s in data.rows] if data.split in ("train", "dev") else None
            data.features = self.encoder.cached(
                data, {"task": "token_classification", "labels": self.labels,
                       "doc_stride": self.doc_stride, "tagged": tags is not None,
                       "columns": list(COLUMNS), "pieces": self.segmentation,
                       "unseen_tag": self._stand_in_tag() if data.split == "dev" else None},
                lambda: convert_sentences([s.tokens for s in data.rows], tags,
                                          self.encoder.tokenizer, self.labels,
                                          self.encoder.max_seq_length, self.doc_stride,
                                          unseen_tag=(self._stand_in_tag()
                                                      if data.split == "dev" else None)),
                TOKEN_FEATURES)
            windows = len(data.features.windows)
            log.info("%s: %d sentences -> %d windows of at most %d pieces (%d sentences "
                     "split, doc_stride %d)", data.split, len(data), windows,
                     self.encoder.max_seq_length, _split_sentences(data.features),
                     self.doc_stride)
        return data.features

    # --- model ------------------------------------------------------------------

    def head(self, features, is_training):
        """(the tagger head's outputs, the BERT model under it) over this task's encoder:
        build_model's, serving's and what distillation compares."""
        from bert_ad.model.heads import token_classifier  # graph code: tasks/base.py
        model = self.encoder.model(features, is_training)
        return token_classifier(model, features, len(self.labels), is_training, self.use_crf,
                                piece_offsets=self.segmentation == "sentence"), model

    def build_model(self, features, is_training):
        out, _ = self.head(features, is_training)
        return {"loss": out.loss, "predicted": out.predicted,
                "per_example_loss": out.per_example_loss}

    @property
    def serving_inputs(self):
        # The head reads each word's piece: where the words are is an input.
        return SERVING_INPUTS + WORD_INPUTS + (
            ("word_offsets",) if self.segmentation == "sentence" else ())

    def serving_outputs(self, features):
        """`predicted` [batch, words] int32 (Viterbi-decoded with a CRF, argmax
        otherwise) and `logits` [batch, words, num_tags] float32 (the CRF's
        emissions) of the words `word_positions` names, `word_mask` 1 on real
        ones (bert_ad/data/token_features.py makes all three)."""
        features = dict(features, word_tag_ids=features["word_mask"] * 0)  # loss only
        out, _ = self.head(serving_features(features, self.feature_spec), False)
        return {"predicted": out.predicted, "logits": out.logits}

    def learning_rate_multipliers(self) -> Dict[str, float]:
        return head_learning_rates(HEAD_VARIABLES, self.head_learning_rate_multiplier)

    # --- results ----------------------------------------------------------------

    def predicted_tags(self, data: ConllSplit, outputs: Dict[str, np.ndarray]
                       ) -> List[List[str]]:
        """One predicted tag per token of each sentence, from the scored windows.

        outputs["predicted"] holds each window's tag ids padded to its batch's
        length: a 2-D array, or an object array of rows when batches differ.
        """
        return predicted_tags(self.features(data), outputs["predicted"], self.labels)

    def serving_settings(self) -> Dict[str, object]:
        """How a served text becomes words, when known (trained here, or --token_split):
        bert-ad serve and a model folder's users read it."""
        return {"token_split": self.token_split} if self.token_split else {}

    def metrics(self, data: ConllSplit, outputs: Dict[str, np.ndarray]) -> dict:
        predicted = self.predicted_tags(data, outputs)
        metrics = entity_metrics([s.tags for s in data.rows], predicted,
                                 types=span_types(self.labels))
        if "per_example_loss" in outputs:  # (an export serves no loss)
            metrics["eval_loss"] = float(np.mean(outputs["per_example_loss"]))
        metrics["eval_sentences"] = len(data)
        metrics["eval_windows"] = len(self.features(data).windows)
        return metrics

    def prediction_file_names(self) -> Sequence[str]:
        return ("predict.txt", "predict_entities.jsonl")

    def prediction_files(self, data: ConllSplit, outputs: Dict[str, np.ndarray]):
        predicted = self.predicted_tags(data, outputs)
        separator = token_separator(data.conll)
        entities = [json.dumps({"sentence": index, "line": sentence.line_numbers[0],
                                "entities": span_records(sentence.tokens, tags, separator)},
                               ensure_ascii=False)
                    for index, (sentence, tags) in enumerate(zip(data.rows, predicted))]
        return {"predict.txt": prediction_lines(_limited(data), predicted),
                "predict_entities.jsonl": entities}

    def metric_names(self) -> List[str]:
        return entity_metric_names(span_types(self.labels)) + [
            "eval_loss", "eval_sentences", "eval_windows"]

    def describe_metrics(self, metrics) -> str:
        types = span_types(self.labels)
        per_type = "  ".join(f"{kind} {metrics[f'eval_{kind}_f1']:.4f}" for kind in types)
        return (f"entity F1 {metrics['eval_f1']:.4f} (precision "
                f"{metrics['eval_precision']:.4f}, recall {metrics['eval_recall']:.4f})"
                f"{'  ' + per_type if per_type else ''}  token accuracy "
                f"{metrics['eval_accuracy']:.4f}  loss {metrics['eval_loss']:.4f}  "
                f"({metrics['eval_sentences']} sentences, step {metrics['global_step']})")


def _limited(data: ConllSplit) -> ConllFile:
    """data.conll restricted to the sentences in use (--max_*_examples: the first N)
    and the lines up to the last of them."""
    if len(data.rows) == len(data.conll.sentences):
        return data.conll
    last_line = data.rows[-1].line_numbers[-1] if data.rows else 0
    return dataclasses.replace(data.conll, sentences=list(data.rows),
                               lines=data.conll.lines[:last_line])


def _split_sentences(features: TokenFeatures) -> int:
    """Sentences cut into more than one window."""
    windows = collections.Counter(w.sentence for w in features.windows)
    return sum(count > 1 for count in windows.values())
