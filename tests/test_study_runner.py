"""A study's runs: a launcher's process, its failure line (measuring.py), its test
predictions and resuming (studies/study_runner.py).

A real launcher run through it is in test_accuracy_study.py (with a log
file) and test_long_text_study.py (output captured).
"""

from __future__ import annotations

import json
import operator
import os
import subprocess
import sys

import pytest

from benchmarks import measuring
from studies import study_runner

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

FAILING = ("import sys; print('progress'); sys.stderr.write('a warning\\n\\n'); "
           "print('error: --data_dir does not exist', file=sys.stderr); sys.exit(2)")


def test_a_failed_run_is_its_last_line_and_a_fresh_folder(tmp_path):
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    (output_dir / "stale.txt").write_text("an earlier attempt")
    run = measuring.run_launcher([sys.executable, "-c", FAILING], str(output_dir))
    assert (run.ok, run.error) == (False, "error: --data_dir does not exist")
    assert run.wall_seconds >= 0 and not output_dir.exists()
    logged = measuring.run_launcher([sys.executable, "-c", FAILING], str(output_dir),
                                    log_name="log.txt")
    assert (logged.ok, logged.error) == (False, "error: --data_dir does not exist")
    assert os.listdir(str(output_dir)) == ["log.txt"]
    assert "progress" in (output_dir / "log.txt").read_text()
    silent = measuring.run_launcher([sys.executable, "-c", "raise SystemExit(1)"],
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
    run = measuring.run_launcher(command, str(output_dir))
    assert run.ok and run.error == ""
    assert (run.evaluated, run.trained) == ({"eval_accuracy": "0.5"}, {"global_step": "7"})
    assert sorted(os.listdir(str(output_dir))) == [
        "checkpoint", "eval_results.txt", "predict.txt", "train_results.txt"]
    measuring.run_launcher(command, str(output_dir), keep_checkpoints=True)
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
    assert measuring.load_runs(path) == []
    measuring.append_run(path, {"name": "a", "status": "ok"})
    measuring.append_run(path, {"name": "b", "status": "failed", "error": "boom"})
    records = measuring.load_runs(path)
    assert [r["name"] for r in records] == ["a", "b"]
    assert os.listdir(str(tmp_path / "docs")) == ["runs.jsonl"]
    name = operator.itemgetter("name")
    assert study_runner.recorded(records, name, failed_too=True) == {"a", "b"}
    assert study_runner.recorded(records, name, failed_too=False) == {"a"}


def test_a_runs_peak_memory_is_its_own_process(tmp_path):
    """Each run reports its own peak RSS: a large run first does not raise a small one's
    (getrusage(RUSAGE_CHILDREN) would give the largest of every child so far).

    The runs are started from a small study process, as the studies run them: where
    Popen forks (Python 3.7), a child counts its parent's pages until its exec."""
    large = ("import os, sys; d = sys.argv[1]; os.makedirs(d, exist_ok=True)\n"
             "block = bytearray(300 * 2 ** 20)\n"
             "for i in range(0, len(block), 4096): block[i] = 1\n"
             "open(os.path.join(d, 'train_results.txt'), 'w').write('global_step = 1\\n')\n"
             "open(os.path.join(d, 'eval_results.txt'), 'w').write('eval_accuracy = 1\\n')\n")
    small = large.replace("300 * 2 ** 20", "1")
    study = ("import json, sys\n"
             "from benchmarks import measuring as s\n"
             "big, small, out = sys.argv[1], sys.argv[2], sys.argv[3]\n"
             "a = s.run_launcher([sys.executable, '-c', big, out + '/a'], out + '/a')\n"
             "b = s.run_launcher([sys.executable, '-c', small, out + '/b'], out + '/b',\n"
             "                   log_name='log.txt')\n"
             "c = s.run_launcher([sys.executable, '-c', 'import os; os.kill(os.getpid(), 9)'],\n"
             "                   out + '/c')\n"
             "m = s.run_measured([sys.executable, '-c', 'sum(range(10 ** 7))'])\n"
             "print(json.dumps([a.ok, a.peak_rss_mb, b.ok, b.peak_rss_mb, c.ok, c.peak_rss_mb,\n"
             "                  m.returncode, m.cpu_seconds]))\n")
    run = subprocess.run([sys.executable, "-c", study, large, small, str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, PYTHONPATH=REPO), timeout=120)
    assert run.returncode == 0, run.stderr
    big_ok, big, little_ok, little, killed_ok, killed, code, cpu = json.loads(run.stdout)
    assert big_ok and little_ok and not killed_ok
    assert big >= 300
    assert 0 < little < 100 and killed > 0
    assert code == 0 and cpu > 0.05
