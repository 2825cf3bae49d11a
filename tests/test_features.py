"""extract_features.py (bert-ad features): Google's output, streaming, bad input.

* Google's JSON lines exactly: `google_json_line` against Google's own
  writing loop (round(float(x), 6) of float32 values, json.dumps of ordered
  dicts) character for character; the root launcher's file line by line.
* Streaming: 5,000 short lines through windows of a few batches on 2 towers
  come out complete and in input order (each row equals the vector of its
  text scored alone), in a .npy file np.load reads.
* Bad input is one `error:` line naming the flag or file, exit 2, and the
  output folder unchanged: an empty input file, an unknown layer, --pooling
  with several layers, an unwritable output file, a checkpoint of another
  model (it fails after the output was opened: nothing half-written).
* Spearman's rank correlation on a worked example (docs/features.md uses it).

The vectors' values against Hugging Face are tests/test_features_reference.py.
"""

from __future__ import annotations

import collections
import contextlib
import io
import json
import logging
import os

import numpy as np
import pytest

from bert_ad.cli import features as features_cli
from bert_ad.data.embedding_files import google_json_line, rounded
from bert_ad.metrics.regression import spearman
from bert_ad.inference.layout import metadata_path
from bert_ad.tasks.features import split_line
from helpers import (REPO, Run, assert_one_error_line, basic_words, flag_args,
                     run_launcher, run_launcher_in_process, run_main, save_initial_checkpoint,
                     tiny_model, tree_digest)

LAUNCHER = os.path.join(REPO, "extract_features.py")
SAMPLE_CORPUS = os.path.join(REPO, "data", "sample_corpus")


def english_lines() -> list:
    with open(os.path.join(SAMPLE_CORPUS, "en.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A tiny 4-layer model of the sample corpus' words: (TinyModel, checkpoint)."""
    root = tmp_path_factory.mktemp("features")
    tiny = tiny_model(str(root / "model"), texts=english_lines(), num_hidden_layers=4)
    prefix = save_initial_checkpoint(str(root / "model" / "bert_model.ckpt"),
                                     tiny.bert_config(), seed=3)
    return tiny, prefix


def model_flags(model, **changes) -> dict:
    tiny, prefix = model
    flags = {"vocab_file": tiny.vocab_file, "bert_config_file": tiny.config_file,
             "init_checkpoint": prefix, "max_seq_length": 32}
    flags.update(changes)
    return flags


def google_reference_line(unique_id: int, tokens: list, layer_indexes: list,
                          layer_outputs: list) -> str:
    """Google's extract_features.py writing loop, as it is (layer_outputs[j]:
    the row's [seq, hidden] float32 values of layer_indexes[j])."""
    output_json = collections.OrderedDict()
    output_json["linex_index"] = unique_id
    all_features = []
    for (i, token) in enumerate(tokens):
        all_layers = []
        for (j, layer_index) in enumerate(layer_indexes):
            layer_output = layer_outputs[j]
            layers = collections.OrderedDict()
            layers["index"] = layer_index
            layers["values"] = [round(float(x), 6) for x in layer_output[i:(i + 1)].flat]
            all_layers.append(layers)
        features = collections.OrderedDict()
        features["token"] = token
        features["layers"] = all_layers
        all_features.append(features)
    output_json["features"] = all_features
    return json.dumps(output_json)


def test_a_line_is_written_exactly_as_googles_loop_writes_it():
    rng = np.random.RandomState(0)
    tokens = ["[CLS]", "新", "##年", "hello", "\"quoted\"", "[SEP]"]
    # Values of every scale, with the awkward ones: tiny, negative zero, exact halves.
    outputs = [(rng.standard_normal((8, 16)) * 10.0 ** rng.randint(-8, 3, (8, 16)))
               .astype(np.float32) for _ in range(2)]
    outputs[0][0, :4] = [1e-7, -0.0, 0.0000005, 2.5e-5]
    ours = google_json_line(3, tokens, [(-1, outputs[0]), (-3, outputs[1])])
    assert ours == google_reference_line(3, tokens, [-1, -3], outputs)
    assert ours.startswith('{"linex_index": 3, "features": [{"token": "[CLS]", "layers": '
                           '[{"index": -1, "values": [')
    assert '"token": "\\u65b0"' in ours  # ASCII-escaped, as json.dumps does by default


def test_values_are_rounded_to_the_same_doubles_as_pythons_round():
    rng = np.random.RandomState(1)
    values = (rng.standard_normal(200_000) * 10.0 ** rng.uniform(-9, 4, 200_000))
    # k / 1024 * 1e6 = k * 976.5625: every eighth one is an exact tie at 6 decimals.
    ties = np.arange(-4000, 4000) / 1024
    values = np.concatenate([values, ties, [0.0, -0.0, 5e-7, -5e-7, 2.5e-6]]
                            ).astype(np.float32)
    ours = rounded(values)
    expected = [round(float(x), 6) for x in values]
    assert [repr(x) for x in ours] == [repr(x) for x in expected]


def test_pairs_are_split_as_googles_read_examples():
    assert split_line("a b ||| c d") == ("a b", "c d")
    assert split_line("a ||| b ||| c") == ("a ||| b", "c")  # the last separator
    assert split_line("a|||b") == ("a|||b", None)
    assert split_line("") == ("", None)


def test_the_launcher_writes_googles_json_lines(model, tmp_path):
    lines = english_lines()[:5] + ["the fire ||| the storm", ""]
    input_file = tmp_path / "input.txt"
    input_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    output = tmp_path / "out" / "features.jsonl"
    # The root launcher's entry point in this process (the line format is the subject;
    # test_cli_help.py starts the launcher as a user types it).
    run = run_launcher_in_process([LAUNCHER] + flag_args(model_flags(
        model, input_file=input_file, output_file=output, n_gpus=2, batch_size=2))).check()
    assert "were truncated" in run.stderr  # the long news lines, counted
    written = output.read_text(encoding="utf-8").splitlines()
    assert len(written) == len(lines)
    for index, (line, text) in enumerate(zip(written, lines)):
        row = json.loads(line)
        assert list(row) == ["linex_index", "features"] and row["linex_index"] == index
        tokens = [feature["token"] for feature in row["features"]]
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and len(tokens) <= 32
        if " ||| " in text:
            assert tokens == ["[CLS]", "the", "fire", "[SEP]", "the", "storm", "[SEP]"]
        elif text:
            assert tokens[1:4] == basic_words(text)[:3]
        else:
            assert tokens == ["[CLS]", "[SEP]"]
        for feature in row["features"]:
            assert list(feature) == ["token", "layers"]
            assert [layer["index"] for layer in feature["layers"]] == [-1, -2, -3, -4]
            assert all(len(layer["values"]) == 32 for layer in feature["layers"])
        # The line is exactly what Google's loop makes of its own values.
        layers = [layer["index"] for layer in row["features"][0]["layers"]]
        values = [np.array([f["layers"][j]["values"] for f in row["features"]], np.float32)
                  for j in range(len(layers))]
        assert line == google_reference_line(index, tokens, layers, values)
    assert not [name for name in os.listdir(output.parent) if name.endswith(".tmp")]


def test_five_thousand_lines_stream_out_complete_and_in_order(model, tmp_path):
    words = sorted({w for line in english_lines() for w in basic_words(line)})
    rng = np.random.RandomState(5)
    texts = [" ".join(rng.choice(words, size=n)) for n in rng.randint(1, 12, size=60)]
    which = rng.randint(0, len(texts), size=5000)
    distinct = tmp_path / "distinct.txt"
    distinct.write_text("".join(t + "\n" for t in texts), encoding="utf-8")
    stream = tmp_path / "stream.txt"
    stream.write_text("".join(texts[i] + "\n" for i in which), encoding="utf-8")
    alone = tmp_path / "alone.npy"
    run_main(features_cli, model_flags(model, input_file=distinct, output_file=alone,
                                       pooling="mean", batch_size=1))
    streamed = tmp_path / "streamed.npy"
    # 4 rows x 2 towers x 64 batches a window: 10 windows, each sorted by length.
    run_main(features_cli, model_flags(model, input_file=stream, output_file=streamed,
                                       pooling="mean", batch_size=4, n_gpus=2))
    expected = np.load(alone)[which]
    got = np.load(streamed)
    assert got.shape == (5000, 32) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, atol=1e-5)
    assert len({tuple(np.round(v, 4)) for v in np.load(alone)}) == len(set(texts))


@pytest.fixture(scope="module")
def bad_runs(model, tmp_path_factory):
    root = tmp_path_factory.mktemp("features_bad")
    good_input = root / "input.txt"
    good_input.write_text("the fire\nthe storm ||| the town\n", encoding="utf-8")
    empty = root / "empty.txt"
    empty.write_text("", encoding="utf-8")
    not_utf8 = root / "latin1.txt"
    not_utf8.write_bytes("the fire\ncaf\u00e9 cr\u00e8me\n".encode("latin-1"))
    other_model = tiny_model(str(root / "other"), texts=english_lines(), num_hidden_layers=2)
    other_checkpoint = save_initial_checkpoint(str(root / "other" / "bert_model.ckpt"),
                                               other_model.bert_config(), seed=1)

    def case(expected, output_name="features.jsonl", **changes):
        folder = root / f"out_{len(cases)}"
        folder.mkdir()
        (folder / "features.jsonl").write_text("an earlier result\n", encoding="utf-8")
        flags = model_flags(model, input_file=good_input,
                            output_file=folder / output_name)
        flags.update(changes)
        return flag_args(flags), str(folder), expected

    cases = {}
    cases["empty_input"] = case(["--input_file", "empty.txt", "is empty"], input_file=empty)
    cases["unknown_layer"] = case(["--layers", "no layer -5", "4 encoder layers"],
                                  layers="-1,-5")
    cases["pooling_with_several_layers"] = case(
        ["--pooling=mean pools one layer", "--layers=-1,-2"], pooling="mean", layers="-1,-2")
    cases["unwritable_output"] = case(
        ["cannot write", "features.jsonl is a file, not a folder"],
        output_name="features.jsonl/inside.jsonl")
    cases["npy_without_pooling"] = case(["features.npy", "--pooling=mean"],
                                        output_name="features.npy")
    cases["not_utf8"] = case(["latin1.txt", "line 2", "UTF-8"], input_file=not_utf8)
    cases["another_models_checkpoint"] = case(["layer_2", "checkpoint"],
                                              init_checkpoint=other_checkpoint)
    cases["export_without_pooling"] = case(["--do_export", "--pooling"], do_export=True,
                                           export_dir=root / "export")
    cases["no_output_file"] = case(["--output_file is required"], output_file=None)
    return {name: _run_bad(argv, folder, expected)
            for name, (argv, folder, expected) in cases.items()}


def _run_bad(argv: list, folder: str, expected: list) -> tuple:
    before = tree_digest(folder)
    run = _run_in_process(argv)
    return run, expected, before, tree_digest(folder)


def _run_in_process(argv: list) -> Run:
    """features' cli(argv) in this process: exit code and the streams."""
    out, err = io.StringIO(), io.StringIO()
    log = logging.getLogger("bert_ad")
    saved_log = (log.handlers[:], log.propagate, log.level)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                features_cli.cli(["extract_features.py"] + argv)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        log.handlers[:], log.propagate, log.level = saved_log
    return Run(["extract_features.py"] + argv, code, out.getvalue(), err.getvalue())


BAD_CASES = ["empty_input", "unknown_layer", "pooling_with_several_layers",
             "unwritable_output", "npy_without_pooling", "not_utf8",
             "another_models_checkpoint", "export_without_pooling", "no_output_file"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_error_line_and_nothing_is_written(bad_runs, case):
    run, expected, before, after = bad_runs[case]
    assert_one_error_line(run, *expected)
    assert after == before, run.describe()


def test_spearman_on_a_worked_example():
    # Ranks of y: 1, 2, 3.5, 5, 3.5 (the tie shares 3 and 4); x's are 1..5.
    # Deviations from the mean rank 3: x -2 -1 0 1 2, y -2 -1 .5 2 .5;
    # r = 8 / sqrt(10 * 9.5).
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(8 / np.sqrt(95))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def test_the_export_serves_the_normalised_embedding(model, tmp_path):
    from bert_ad.data.tokenization import FullTokenizer
    from bert_ad.data.embedding_rows import encode_line
    lines = ["the fire", "the storm ||| the town", "query: the fire and the storm"]
    input_file = tmp_path / "input.txt"
    input_file.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    export_dir = tmp_path / "export"
    run_main(features_cli, model_flags(
        model, input_file=input_file, output_file=tmp_path / "vectors.npy", pooling="mean",
        normalize=True, do_export=True, export_dir=export_dir))
    vectors = np.load(tmp_path / "vectors.npy")
    with open(metadata_path(str(export_dir)), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["task"] == "features" and list(metadata["outputs"]) == ["embedding"]
    assert metadata["settings"] == {"layers": "-1", "pooling": "mean", "normalize": True,
                                    "text_prefix": ""}
    tokenizer = FullTokenizer(model[0].vocab_file, do_lower_case=True)
    rows = []
    for line in lines:
        columns = encode_line(tokenizer, *split_line(line), 32).columns
        rows.append(dict(columns, input_mask=[1] * len(columns["input_ids"])))
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"rows": rows, "exports": {"e": str(export_dir)}}))
    run_launcher([os.path.join(REPO, "tests", "export_reader.py"), str(request),
                  str(tmp_path / "result.json")]).check()
    served = np.array(json.loads((tmp_path / "result.json").read_text())["e"]["embedding"])
    np.testing.assert_allclose(served, vectors, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(served, axis=1), 1.0, atol=1e-5)


def test_rows_come_out_in_order_and_wait_at_most_one_window():
    from bert_ad.data.streamed_batches import ROW_INFO, EncodedRow, StreamedBatches
    from bert_ad.data.scored_rows import rows_in_order
    lengths = np.random.RandomState(2).randint(1, 40, size=203)
    rows = [EncodedRow({"input_ids": [7] * n, "segment_ids": [0] * n}, info=i)
            for i, n in enumerate(lengths)]
    per_tower, towers, window_batches = 3, 2, 4
    batches = StreamedBatches(lambda: iter(rows), len(rows), "dynamic", window_batches)

    class Echo:
        """Scores a row as its real length; counts the real rows scored."""
        scored = 0

        def run(self, tower_batches):
            Echo.scored += sum(len(batch[ROW_INFO]) for batch in tower_batches)
            return [{"length": batch["input_mask"].sum(1)} for batch in tower_batches]

    window = per_tower * towers * window_batches
    seen = []
    for index, row in rows_in_order(Echo(), batches.scoring(per_tower, towers),
                                    carry=(ROW_INFO,)):
        assert row[ROW_INFO] == index and row["length"] == lengths[index]
        assert Echo.scored - len(seen) <= window  # the reorder buffer's bound
        seen.append(index)
    assert seen == list(range(len(rows)))
