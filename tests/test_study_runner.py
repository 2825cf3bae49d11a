"""benchmarks/study_runner.py: a run's process, its failure line, resuming.

A real launcher run through it is in test_accuracy_study.py (with a log
file) and test_long_text_study.py (output captured).
"""

from __future__ import annotations

import operator
import os
import sys

import pytest

from benchmarks import study_runner

FAILING = ("import sys; print('progress'); sys.stderr.write('a warning\\n\\n'); "
           "print('error: --data_dir does not exist', file=sys.stderr); sys.exit(2)")


def test_a_failed_run_is_its_last_line_and_a_fresh_folder(tmp_path):
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    (output_dir / "stale.txt").write_text("an earlier attempt")
    run = study_runner.run_launcher([sys.executable, "-c", FAILING], str(output_dir))
    assert (run.ok, run.error) == (False, "error: --data_dir does not exist")
    assert run.wall_seconds >= 0 and not output_dir.exists()
    logged = study_runner.run_launcher([sys.executable, "-c", FAILING], str(output_dir),
                                       log_name="log.txt")
    assert (logged.ok, logged.error) == (False, "error: --data_dir does not exist")
    assert os.listdir(str(output_dir)) == ["log.txt"]
    assert "progress" in (output_dir / "log.txt").read_text()
    silent = study_runner.run_launcher([sys.executable, "-c", "raise SystemExit(1)"],
                                       str(output_dir))
    assert silent.error == "(no output)"


def test_a_finished_run_is_read_and_its_checkpoints_go(tmp_path):
    output_dir = tmp_path / "run"
    code = ("import os, sys; d = sys.argv[1]; os.makedirs(d)\n"
            "open(os.path.join(d, 'eval_results.txt'), 'w').write('eval_accuracy = 0.5\\n')\n"
            "open(os.path.join(d, 'train_results.txt'), 'w').write('global_step = 7\\n')\n"
            "for n in ('model.ckpt-7.index', 'model.ckpt-7.data-00000-of-00001', "
            "'checkpoint', 'predict.txt'):\n"
            "    open(os.path.join(d, n), 'w').close()\n")
    command = [sys.executable, "-c", code, str(output_dir)]
    run = study_runner.run_launcher(command, str(output_dir))
    assert run.ok and run.error == ""
    assert (run.evaluated, run.trained) == ({"eval_accuracy": "0.5"}, {"global_step": "7"})
    assert sorted(os.listdir(str(output_dir))) == [
        "checkpoint", "eval_results.txt", "predict.txt", "train_results.txt"]
    study_runner.run_launcher(command, str(output_dir), keep_checkpoints=True)
    assert "model.ckpt-7.index" in os.listdir(str(output_dir))


def test_predictions_must_match_the_test_rows(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "test.tsv").write_text("0\tbad film\n1\tgood film\n1\tfine film\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "labels.txt").write_text("0\n1\n")
    (run / "predict.txt").write_text("1\n1\n")
    labels, examples, predicted = study_runner.read_test_predictions(str(data), str(run), 2)
    assert (labels, [e.label for e in examples], predicted) == (["0", "1"], ["0", "1"], [1, 1])
    with pytest.raises(RuntimeError, match="predict.txt has 2 rows, test.tsv 3"):
        study_runner.read_test_predictions(str(data), str(run))


def test_a_resumed_study_skips_what_its_records_hold(tmp_path):
    path = str(tmp_path / "docs" / "runs.jsonl")
    assert study_runner.load_runs(path) == []
    study_runner.append_run(path, {"name": "a", "status": "ok"})
    study_runner.append_run(path, {"name": "b", "status": "failed", "error": "boom"})
    records = study_runner.load_runs(path)
    assert [r["name"] for r in records] == ["a", "b"]
    assert os.listdir(str(tmp_path / "docs")) == ["runs.jsonl"]
    name = operator.itemgetter("name")
    assert study_runner.recorded(records, name, failed_too=True) == {"a", "b"}
    assert study_runner.recorded(records, name, failed_too=False) == {"a"}


def test_a_runs_peak_memory_is_its_own_process(tmp_path):
    """Each run reports its own peak RSS: a large run first does not raise a small one's
    (getrusage(RUSAGE_CHILDREN) would give the largest of every child so far)."""
    large = ("import os, sys; d = sys.argv[1]; os.makedirs(d, exist_ok=True)\n"
             "block = bytearray(300 * 2 ** 20)\n"
             "for i in range(0, len(block), 4096): block[i] = 1\n"
             "open(os.path.join(d, 'train_results.txt'), 'w').write('global_step = 1\\n')\n"
             "open(os.path.join(d, 'eval_results.txt'), 'w').write('eval_accuracy = 1\\n')\n")
    small = large.replace("300 * 2 ** 20", "1")
    big = study_runner.run_launcher([sys.executable, "-c", large, str(tmp_path / "a")],
                                    str(tmp_path / "a"))
    little = study_runner.run_launcher([sys.executable, "-c", small, str(tmp_path / "b")],
                                       str(tmp_path / "b"), log_name="log.txt")
    assert big.ok and little.ok
    assert big.peak_rss_mb >= 300
    assert 0 < little.peak_rss_mb < 100
    measured = study_runner.run_measured([sys.executable, "-c", "sum(range(10 ** 7))"])
    assert measured.returncode == 0 and measured.cpu_seconds > 0.05
    failed = study_runner.run_launcher(
        [sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"], str(tmp_path / "c"))
    assert not failed.ok and failed.peak_rss_mb > 0
