"""Examples -> token ids ([CLS] a [SEP] b [SEP]), tokenised once and cached.

The cache is a TFRecord file per split (Google's feature names: input_ids,
segment_ids, label_ids; unpadded) whose name is a hash of the input file's
bytes and of every setting that changes the features (vocab, casing, length,
truncation, labels, columns), so an edited file or flag never reuses a stale
cache.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Sequence

import numpy as np

from bert_ad.data.batching import TokenizedExamples
from bert_ad.compat import tf
from bert_ad.data.processors import InputExample
from bert_ad.data.tokenization import truncate_pair, truncate_tokens
from bert_ad.files import atomic_path, cannot_write

log = logging.getLogger("bert_ad")


class FeatureSettings:
    """Everything besides the examples that decides the token ids."""

    def __init__(self, max_seq_length: int, truncation: str = "head",
                 head_fraction: float = 0.25, label_list: Sequence[str] = ()):
        self.max_seq_length = max_seq_length
        self.truncation = truncation
        self.head_fraction = head_fraction
        self.label_list = list(label_list)


def encode_example(example: InputExample, tokenizer, settings: FeatureSettings):
    """(input_ids, segment_ids) of one example, truncated to max_seq_length."""
    tokens_a = tokenizer.tokenize(example.text_a)
    if example.text_b:
        tokens_b = tokenizer.tokenize(example.text_b)
        tokens_a, tokens_b = truncate_pair(tokens_a, tokens_b,
                                           settings.max_seq_length - 3,
                                           settings.truncation, settings.head_fraction)
    else:
        tokens_b = []
        tokens_a = truncate_tokens(tokens_a, settings.max_seq_length - 2,
                                   settings.truncation, settings.head_fraction)
    tokens = ["[CLS]"] + list(tokens_a) + ["[SEP]"]
    segments = [0] * len(tokens)
    if tokens_b:
        tokens += list(tokens_b) + ["[SEP]"]
        segments += [1] * (len(tokens_b) + 1)
    return tokenizer.convert_tokens_to_ids(tokens), segments


def convert_examples(examples: Sequence[InputExample], tokenizer,
                     settings: FeatureSettings) -> TokenizedExamples:
    label_index = {label: i for i, label in enumerate(settings.label_list)}
    input_ids, segment_ids, labels = [], [], []
    for example in examples:
        ids, segments = encode_example(example, tokenizer, settings)
        input_ids.append(np.array(ids, np.int32))
        segment_ids.append(np.array(segments, np.int32))
        labels.append(label_index.get(example.label, 0) if example.label is not None else 0)
    return TokenizedExamples({"input_ids": input_ids, "segment_ids": segment_ids},
                             np.array(labels, np.int32))


def file_digest(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cache_key(data_file: str, vocab_file: str, do_lower_case: bool,
              settings: FeatureSettings, task_description: str) -> str:
    """A hash of the input file's bytes and every setting that shapes the features."""
    parts = {
        "data": file_digest(data_file),
        "vocab": file_digest(vocab_file) if vocab_file else "",
        "do_lower_case": bool(do_lower_case),
        "max_seq_length": settings.max_seq_length,
        "truncation": settings.truncation,
        "head_fraction": settings.head_fraction,
        "labels": settings.label_list,
        "task": task_description,
        "format": 1,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:20]


def cached_features(cache_dir: str, split: str, key: str, build) -> TokenizedExamples:
    """Load `<cache_dir>/<split>-<key>.tf_record`, or `build()` and write it."""
    path = os.path.join(cache_dir, f"{split}-{key}.tf_record")
    if os.path.exists(path):
        features = read_features(path)
        log.info("%s features: %d examples from cache %s", split, len(features), path)
        return features
    features = build()
    write_features(path, features)
    log.info("%s features: %d examples, cached in %s", split, len(features), path)
    return features


def _int_feature(values) -> "tf.train.Feature":
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def write_features(path: str, features: TokenizedExamples) -> None:
    """Write unpadded features as tf.train.Examples, atomically (bert_ad.files).

    Raises:
      UserError: "cannot write PATH: CAUSE" (e.g. the disk is full).
    """
    with atomic_path(path) as temporary:
        try:
            with tf.io.TFRecordWriter(temporary) as writer:
                for i in range(len(features)):
                    feature = {name: _int_feature(column[i])
                               for name, column in features.columns.items()}
                    feature["label_ids"] = _int_feature([features.labels[i]])
                    example = tf.train.Example(features=tf.train.Features(feature=feature))
                    writer.write(example.SerializeToString())
        except tf.errors.OpError as e:
            raise cannot_write(path, e) from e


def read_features(path: str) -> TokenizedExamples:
    columns = {"input_ids": [], "segment_ids": []}
    labels = []
    for record in tf.io.tf_record_iterator(path):
        feature = tf.train.Example.FromString(record).features.feature
        for name, column in columns.items():
            column.append(np.array(feature[name].int64_list.value, np.int32))
        labels.append(feature["label_ids"].int64_list.value[0])
    return TokenizedExamples(columns, np.array(labels, np.int32))
