"""studies/long_text_study.py: the grid, each strategy's flags, the report, one real run."""

from __future__ import annotations

import os
import statistics
import sys

import pytest

from studies import long_text_study as study
from benchmarks import measuring
from bert_ad.files import read_key_values
from helpers import sample_sentiment_texts, save_initial_checkpoint, tiny_model


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


def _two_sided_binomial_p(b, c):
    """The reference: Binomial(b + c, 1/2) built by repeated convolution (floats),
    P(X <= min) + P(X >= max), capped at 1."""
    n = b + c
    probabilities = [1.0]
    for _ in range(n):
        probabilities = [0.5 * ((probabilities[k] if k < len(probabilities) else 0.0) +
                                (probabilities[k - 1] if k else 0.0))
                         for k in range(len(probabilities) + 1)]
    low, high = min(b, c), max(b, c)
    return min(1.0, sum(probabilities[:low + 1]) + sum(probabilities[high:]))


@pytest.mark.parametrize("b, c", [(0, 6), (1, 9), (9, 1), (5, 5), (17, 41), (22, 11),
                                  (120, 150), (0, 0), (3, 0)])
def test_exact_mcnemar_p_against_the_binomial_distribution(b, c):
    assert study.exact_mcnemar_p(b, c) == pytest.approx(_two_sided_binomial_p(b, c),
                                                        rel=1e-9, abs=1e-15)
    # Textbook values: 0 vs 6 discordant pairs is 2 / 2^6; 1 vs 9 is 2 x 11 / 2^10.
    assert study.exact_mcnemar_p(0, 6) == 2 / 64
    assert study.exact_mcnemar_p(1, 9) == 22 / 1024


def test_the_paired_report_pairs_reviews_within_a_seed_and_pools_the_seeds():
    def record(strategy, seed, correct, length=128):
        return dict(study.RunSpec(strategy, length, seed)._asdict(), status="ok",
                    dev_accuracy=0.5, test_accuracy=correct.count("1") / len(correct),
                    test_correct=correct, name=f"{strategy}-{length}-{seed}")
    records = [
        record("head+tail", 1, "110010"), record("windows-mean", 1, "111011"),
        record("head+tail", 2, "000111"), record("windows-mean", 2, "100101"),
        # Seed 3 only for windows-mean: nothing to pair it with, left out.
        record("windows-mean", 3, "000000"),
        # head at seed 1 cannot be read (None): left out, so its cell is empty.
        record("head", 1, "unreadable"), record("head+tail", 1, "111111", length=256),
        record("tail", 1, "011111", length=256)]
    missing = {"head-128-1"}
    text = study.paired_report(records, lambda r: None if r["name"] in missing
                               else r["test_correct"],
                               ["head", "tail", "head+tail", "windows-mean"])
    # Seed 1: right only with windows at 2 reviews, only with head+tail at none;
    # seed 2: 1 and 1. Pooled: 3 / 1 over 12 reviews = +16.7 points.
    p = study.exact_mcnemar_p(3, 1)
    assert p == pytest.approx(_two_sided_binomial_p(3, 1))
    assert f"| windows-mean | +16.7 (3/1, p={p:.2g}, n=2) | - |" in text
    assert f"| tail | - | -16.7 (0/1, p={study.exact_mcnemar_p(0, 1):.2g}, n=1) |" in text
    assert "| head | - | - |" in text
    assert "| head+tail |" not in text                    # the reference has no row
    # A list without the reference still pairs against it.
    alone = study.paired_report(records, lambda r: r["test_correct"], ["windows-mean"])
    assert f"| windows-mean | +16.7 (3/1, p={p:.2g}, n=2) | - |" in alone


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
    dev = read_key_values(str(output_dir / "eval_results.txt"))
    assert record["dev_accuracy"] == float(dev["eval_accuracy"])
    assert record["global_step"] == 3                       # 12 reviews / 4, 1 epoch
    predicted = (output_dir / "predict.txt").read_text().split("\n")[:-1]
    truth = [line.split("\t")[0] for line in
             (tiny / "data" / "test.tsv").read_text().split("\n")[:-1]]
    assert record["test_accuracy"] == pytest.approx(
        sum(p == t for p, t in zip(predicted, truth)) / 6)
    assert record["test_correct"] == "".join(
        "1" if p == t else "0" for p, t in zip(predicted, truth))
    # The paired report reads an older record's correctness from its folder.
    older = {k: v for k, v in record.items() if k != "test_correct"}
    correct_of = study.correctness_from_run_dirs(str(tiny / "data"), str(tiny / "runs"))
    assert correct_of(older) == record["test_correct"]
    assert correct_of(dict(older, name="no-such-run")) is None
    assert "--long_text=windows" in record["command"]
    assert not [n for n in os.listdir(output_dir) if n.startswith("model.ckpt")]
    runs = str(tiny / "runs.jsonl")
    measuring.append_run(runs, record)
    assert measuring.load_runs(runs) == [record]
