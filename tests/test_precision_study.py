"""studies/precision_study.py: its runs are the accuracy study's quick run at a
precision, Hugging Face's worker trains and scores for real, the paired report."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import types

import pytest

from studies import accuracy_study as study
from studies import precision_study as precision
from helpers import REPO, SAMPLE_SENTIMENT, save_initial_checkpoint, tiny_model


def test_ours_runs_are_the_quick_parts_one_tower_run_at_a_precision():
    fp32 = precision.ours_spec(3, "fp32")
    quick = study.planned_runs(study.parse_args(["--quick", "--seeds", "3"]))
    assert fp32 in quick and fp32.n_gpus == 1 and fp32.optimizer == "adamw"
    bf16 = precision.ours_spec(3, "bf16")
    assert bf16.name == fp32.name.replace("-seed3", "-bf16-seed3")
    command = study.cli_command(bf16, "python", "/m", "/d", "/o")
    assert "--precision=bf16" in command
    assert not any(arg.startswith("--precision") for arg in
                   study.cli_command(fp32, "python", "/m", "/d", "/o"))
    # bf16 runs never enter the accuracy study's float32 tables.
    assert study.in_towers_part(fp32) and not study.in_towers_part(bf16)
    assert not study.in_large_batch_part(bf16)
    record = dict(bf16._asdict(), status="ok")
    assert study.spec_of(record) == bf16
    del record["precision"]
    assert study.spec_of(record).precision == "fp32"    # records from before the field


def _record(impl, prec, seed, dev, test, speed=10.0, rss=900):
    return {"impl": impl, "precision": prec, "seed": seed, "status": "ok",
            "dev_accuracy": dev, "test_accuracy": test, "examples_per_sec": speed,
            "peak_rss_mb": rss}


def test_report_pairs_seeds_and_compares_with_the_fp32_spread():
    records = [_record("ours", "fp32", 1, 0.80, 0.75, 20.0),
               _record("ours", "bf16", 1, 0.79, 0.76, 30.0),
               _record("ours", "fp32", 2, 0.78, 0.73, 22.0),
               _record("ours", "bf16", 2, 0.80, 0.72, 32.0),
               _record("ours", "bf16", 3, 0.50, 0.50, 31.0),     # no fp32 partner
               {"impl": "hf", "precision": "bf16", "seed": 1, "status": "failed",
                "error": "worker exited 1"}]
    text = precision.report(records, "CPU: test")
    lines = text.splitlines()
    assert lines[0] == "CPU: test"
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines
            if line.startswith("| ours")]
    assert [row[1] for row in rows] == ["fp32", "bf16 (--precision=bf16)"]
    assert rows[0][2:] == ["2", "79.00 ± 1.41", "74.00 ± 1.41", "75.00 / 73.00", "21.0",
                           "1.00", "900"]
    cells = rows[1]
    # seed 3's bf16 run counts in its own row, not in the paired differences
    assert cells[2] == "3" and cells[5] == "76.00 / 72.00 / 50.00"
    assert cells[6] == "31.0" and cells[7] == "1.48"          # 31 / 21
    # test: +1 and -1 points -> mean 0, sd 1.41; fp32 spread 1.41
    assert ("- ours (run_classifier_mgpu.py), test: bf16 - fp32 per seed +0.00 ± 1.41 "
            "points over 2 seeds; fp32's spread over seeds ± 1.41") in lines
    assert "- failed: hf bf16 seed 1: worker exited 1" in lines
    assert precision.paired_differences(records, "ours", "dev_accuracy") == \
        pytest.approx([-0.01, 0.02])


def test_bad_choices_are_named():
    run = subprocess.run([sys.executable, "-m", "studies.precision_study",
                          "--precisions", "fp16"], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 2
    assert "--precisions: 'fp16' is not one of fp32, bf16" in run.stderr


def test_hf_worker_trains_and_scores_every_row(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model_dir = str(tmp_path / "model")
    model = tiny_model(model_dir)
    save_initial_checkpoint(os.path.join(model_dir, "bert_model.ckpt"), model.bert_config())
    data_root = str(tmp_path / "data")
    data_dir = os.path.join(data_root, precision.DATASET)
    shutil.copytree(SAMPLE_SENTIMENT, data_dir)
    args = types.SimpleNamespace(model_dir=model_dir, data_root=data_root,
                                 hf_dir=precision.hf_dir_for(model_dir, str(tmp_path / "out"),
                                                             "tiny"))
    with open(os.path.join(data_dir, "train.tsv"), encoding="utf-8") as f:
        train_rows = sum(1 for line in f if line.strip())
    results = {}
    for prec in ("fp32", "bf16"):
        results[prec] = precision.run_hf(1, prec, args)
        result = results[prec]
        assert result["status"] == "ok", result.get("error")
        assert (result["impl"], result["precision"], result["seed"]) == ("hf", prec, 1)
        assert result["steps"] == train_rows * study.EPOCHS // study.PER_TOWER_BATCH
        for split in ("dev", "test"):
            with open(os.path.join(data_dir, f"{split}.tsv"), encoding="utf-8") as f:
                rows = sum(1 for line in f if line.strip())
            assert result[f"{split}_examples"] == rows
            assert 0.0 <= result[f"{split}_accuracy"] <= 1.0
        assert result["examples_per_sec"] > 0 and result["peak_rss_mb"] > 0
    # Same seed, same data order and head: bf16 rounds, it does not change the run.
    assert results["bf16"]["final_loss"] == pytest.approx(results["fp32"]["final_loss"],
                                                          abs=0.05)

