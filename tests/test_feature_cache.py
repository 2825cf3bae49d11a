"""The one feature cache (bert_ad/data/feature_cache.py): any columns, never trusted unchecked.

* Round trips: TokenizedExamples (columns, labels, per-row values and their
  dtypes) and a token task's windows.
* A cache cut at a record boundary, cut in the middle, emptied, or missing its
  record is rebuilt with one warning line, never read as it is.
* End to end: predict.txt has one line per input row after its cache was cut
  (it had half the rows before the cache was checked).
"""

from __future__ import annotations

import glob
import logging
import os

import numpy as np
import pytest

from bert_ad.cli import classifier as classifier_cli
from bert_ad.data import feature_cache
from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.token_features import TOKEN_FEATURES, TokenFeatures, Window
from helpers import SAMPLE_SENTIMENT, run_main, tiny_model


def _examples(rows: int = 6) -> TokenizedExamples:
    ids = [np.arange(2, 4 + i, dtype=np.int32) for i in range(rows)]
    return TokenizedExamples(
        {"input_ids": ids, "segment_ids": [np.zeros_like(r) for r in ids]},
        np.arange(rows) % 2,
        {"targets": np.linspace(-1, 1, rows).astype(np.float32),
         "multi_hot_labels": np.eye(rows, 3, dtype=np.float32)})


def _assert_same(a: TokenizedExamples, b: TokenizedExamples) -> None:
    assert sorted(a.columns) == sorted(b.columns)
    for name in a.columns:
        assert len(a.columns[name]) == len(b.columns[name])
        for x, y in zip(a.columns[name], b.columns[name]):
            np.testing.assert_array_equal(x, y)
            assert y.dtype == np.int32
    np.testing.assert_array_equal(a.labels, b.labels)
    assert sorted(a.row_values) == sorted(b.row_values)
    for name, values in a.row_values.items():
        np.testing.assert_array_equal(values, b.row_values[name])
        assert values.dtype == b.row_values[name].dtype


def test_examples_and_token_windows_round_trip(tmp_path):
    examples = _examples()
    path = str(tmp_path / "train-k.npz")
    feature_cache.write_features(path, examples)
    _assert_same(examples, feature_cache.read_features(path))
    windows = TokenFeatures(examples, [Window(i // 2, i, np.array([True, False] * (i + 1)))
                                       for i in range(6)], [3, 4, 5])
    back = feature_cache.cached(str(tmp_path), "dev", "k", lambda: windows, TOKEN_FEATURES)
    assert back is windows  # built: nothing cached yet
    read = feature_cache.cached(str(tmp_path), "dev", "k", _never, TOKEN_FEATURES)
    _assert_same(examples, read.examples)
    assert read.sentence_lengths == [3, 4, 5]
    for want, got in zip(windows.windows, read.windows):
        assert (want.sentence, want.first_word) == (got.sentence, got.first_word)
        np.testing.assert_array_equal(want.max_context, got.max_context)


def _never():
    raise AssertionError("the cache should have been used")


def _cut_at_half(path: str) -> None:
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 2])


@pytest.mark.parametrize("damage", ["cut_in_the_middle", "empty", "no_record",
                                    "rewritten_with_fewer_rows", "garbage_record"])
def test_a_damaged_cache_is_rebuilt_with_one_warning(tmp_path, caplog, damage):
    examples = _examples()
    feature_cache.cached(str(tmp_path), "train", "k", lambda: examples,
                         feature_cache.EXAMPLES)
    path = str(tmp_path / "train-k.npz")
    if damage == "cut_in_the_middle":
        _cut_at_half(path)
    elif damage == "empty":
        open(path, "wb").close()
    elif damage == "no_record":
        os.remove(path + ".json")
    elif damage == "rewritten_with_fewer_rows":
        # A whole, well-formed file of 3 rows under the 6-row record: the
        # "cut at a record boundary" of the old format.
        record = open(path + ".json").read()
        feature_cache.write_features(path, _examples(3))
        with open(path + ".json", "w") as f:
            f.write(record)
    else:
        with open(path + ".json", "w") as f:
            f.write("{not json")
    caplog.set_level(logging.INFO, logger="bert_ad")
    rebuilt = feature_cache.cached(str(tmp_path), "train", "k", lambda: examples,
                                   feature_cache.EXAMPLES)
    _assert_same(examples, rebuilt)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert warnings[0].startswith(f"warning: the feature cache {path} cannot be used (")
    assert warnings[0].endswith("; rebuilding it")
    # Rebuilt whole: the next run reads it without a warning.
    caplog.clear()
    _assert_same(examples, feature_cache.cached(str(tmp_path), "train", "k", _never,
                                                feature_cache.EXAMPLES))
    assert not [r for r in caplog.records if r.levelno == logging.WARNING]


def test_the_key_changes_with_every_part_and_the_input(tmp_path):
    data = tmp_path / "train.tsv"
    data.write_text("a\tb\n")
    base = feature_cache.cache_key(str(data), "", True, {"max_seq_length": 8, "labels": ["a"]})
    assert base == feature_cache.cache_key(str(data), "", True,
                                           {"labels": ["a"], "max_seq_length": 8})
    assert base != feature_cache.cache_key(str(data), "", True,
                                           {"max_seq_length": 9, "labels": ["a"]})
    assert base != feature_cache.cache_key(str(data), "", False,
                                           {"max_seq_length": 8, "labels": ["a"]})
    data.write_text("a\tc\n")
    assert base != feature_cache.cache_key(str(data), "", True,
                                           {"max_seq_length": 8, "labels": ["a"]})


def test_predict_after_the_cache_was_cut_still_has_every_row(tmp_path, caplog):
    model = tiny_model(str(tmp_path / "model"))
    output_dir = str(tmp_path / "out")
    flags = dict(task_name="sentiment", data_dir=SAMPLE_SENTIMENT, vocab_file=model.vocab_file,
                 bert_config_file=model.config_file, max_seq_length=32,
                 train_batch_size=8, predict_batch_size=3, num_train_epochs=1, n_gpus=2,
                 do_train=True, do_predict=True, output_dir=output_dir)
    assert run_main(classifier_cli, flags) == 0
    with open(os.path.join(SAMPLE_SENTIMENT, "test.tsv"), encoding="utf-8") as f:
        rows = len(f.read().splitlines())
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        first = f.read().splitlines()
    assert len(first) == rows
    (cache,) = glob.glob(os.path.join(output_dir, "cache", "predict-*.npz"))
    _cut_at_half(cache)
    caplog.set_level(logging.INFO, logger="bert_ad")
    assert run_main(classifier_cli, dict(flags, do_train=False)) == 0
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        assert f.read().splitlines() == first
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING
            and "feature cache" in r.getMessage()] != []
