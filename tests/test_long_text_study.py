"""scripts/long_text_study.py: the grid, each strategy's flags, the report, one real run."""

from __future__ import annotations

import importlib.util
import os
import statistics
import sys

import pytest

from helpers import REPO, sample_sentiment_texts, save_initial_checkpoint, tiny_model


def _load_study():
    spec = importlib.util.spec_from_file_location(
        "long_text_study", os.path.join(REPO, "scripts", "long_text_study.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


study = _load_study()


def test_the_grid_covers_every_strategy_length_and_seed():
    grid = study.study_grid(study.STRATEGIES, (128, 256), (1, 2, 3))
    assert len(grid) == 6 * 2 * 3 == len(set(grid))
    assert {s.strategy for s in grid} == {"head", "tail", "head+tail", "windows-mean",
                                          "windows-max", "windows-attention"}
    assert [s.seed for s in grid[:12]] == [1] * 12          # seed by seed
    assert len({s.name for s in grid}) == len(grid)
    # The affordable defaults: 600 training reviews, at most about 1,000 pieces
    # of a review read at either length (8 windows of 128, 4 of 256).
    assert {(s.max_seq_length, s.max_train_examples, s.max_windows) for s in grid} == {
        (128, 600, 8), (256, 600, 4)}
    assert grid[3].name == "windows-mean-len128-w8-n600-ep3-b8-lr5e-05-mean-adam-seed1"
    assert grid[9].name == "windows-mean-len256-w4-n600-ep3-b8-lr5e-05-mean-adam-seed1"
    assert grid[0].name == "head-len128-n600-ep3-b8-lr5e-05-mean-adam-seed1"
    # --max_windows overrides both lengths.
    assert {s.max_windows for s in study.study_grid(["windows-max"], (128, 256), (1,),
                                                    max_windows=16)} == {16}


def test_the_command_carries_the_training_settings():
    spec = study.RunSpec("tail", 256, 2)
    command = study.cli_command(spec, "python", "/m", "/d", "/out/run")
    for flag in ("--train_batch_size=8", "--learning_rate=5e-05", "--num_train_epochs=3",
                 "--pooling=mean", "--optimizer=adam", "--seed=2", "--max_seq_length=256",
                 "--truncation=tail", "--max_train_examples=600"):
        assert flag in command


def test_each_strategy_becomes_its_flags():
    assert study.strategy_flags("head+tail", 128, 16) == [
        "--truncation=head+tail", "--truncation_head_fraction=0.25"]
    assert study.strategy_flags("windows-attention", 256, 8) == [
        "--long_text=windows", "--window_pooling=attention", "--window_stride=127",
        "--max_windows=8"]


def test_the_report_gives_mean_and_sample_sd_per_cell():
    records = [dict(status="ok", strategy="head", max_seq_length=128, seed=s,
                    max_train_examples=None, epochs=2.0, dev_accuracy=d, test_accuracy=t)
               for s, d, t in ((1, 0.80, 0.70), (2, 0.84, 0.72), (3, 0.79, 0.75))]
    records.append(dict(status="failed", name="tail-len128-seed1", error="error: boom"))
    text = study.report(records, ["head", "tail"])
    mean, sd = statistics.mean([0.80, 0.84, 0.79]), statistics.stdev([0.80, 0.84, 0.79])
    assert f"| head | {mean:.3f} ± {sd:.3f} (n=3) |" in text
    assert "| tail | - |" in text
    assert "1 failed run(s): tail-len128-seed1: error: boom" in text
    # Every column names its settings; a record written before the training
    # settings were fields reads as the first attempt's (b16, AdamW, [CLS]).
    assert "| strategy | len 128, 2 ep, b16, lr 5e-05, cls, adamw |" in text
    new = dict(study.RunSpec("head", 128, 1)._asdict(), status="ok", dev_accuracy=0.7,
               test_accuracy=0.6)
    text = study.report(records + [new], ["head"])
    assert ("| strategy | len 128, 2 ep, b16, lr 5e-05, cls, adamw | "
            "len 128, 600 train rows, 3 ep, b8, lr 5e-05, mean, adam |") in text
    assert f"| head | {mean:.3f} ± {sd:.3f} (n=3) | 0.700 (n=1) |" in text


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny 'Google checkpoint' folder and a long-review-like data set."""
    root = tmp_path_factory.mktemp("study")
    model = tiny_model(str(root / "model"), max_position_embeddings=32)
    save_initial_checkpoint(str(root / "model" / "bert_model.ckpt"), model.bert_config(),
                            seed=1)
    texts = sample_sentiment_texts()
    data = root / "data"
    data.mkdir()
    for split, count in (("train", 12), ("dev", 6), ("test", 6)):
        rows = [f"{i % 2}\t{' '.join(texts[(i * 3 + k) % len(texts)] for k in range(4))}"
                for i in range(count)]
        (data / f"{split}.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def test_one_real_run_through_the_launcher(tiny):
    spec = study.RunSpec("windows-attention", 32, 1, max_train_examples=None, epochs=1.0,
                         batch=4, max_windows=4)
    record = study.run_one(spec, sys.executable, str(tiny / "model"), str(tiny / "data"),
                           str(tiny / "runs"))
    assert record["status"] == "ok", record
    output_dir = tiny / "runs" / spec.name
    dev = study.read_key_values(str(output_dir / "eval_results.txt"))
    assert record["dev_accuracy"] == float(dev["eval_accuracy"])
    assert record["global_step"] == 3                       # 12 reviews / 4, 1 epoch
    predicted = (output_dir / "predict.txt").read_text().split("\n")[:-1]
    truth = [line.split("\t")[0] for line in
             (tiny / "data" / "test.tsv").read_text().split("\n")[:-1]]
    assert record["test_accuracy"] == pytest.approx(
        sum(p == t for p, t in zip(predicted, truth)) / 6)
    assert "--long_text=windows" in record["command"]
    assert not [n for n in os.listdir(output_dir) if n.startswith("model.ckpt")]
    runs = str(tiny / "runs.jsonl")
    study.append_run(runs, record)
    assert study.load_runs(runs) == [record]
