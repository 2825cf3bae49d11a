"""Nothing lost, nothing silently wrong: the run-level promises of docs/reliability.md.

Runs of run_classifier_mgpu.py on a tiny model: a locked output_dir, a fixed label
list, a cut-short newest checkpoint, SIGTERM and Ctrl-C, a full disk during a
checkpoint save, predict files with blank lines, a finished run rerun, and a frozen
worker under scripts/launch_local_workers.sh. Where the process is the subject (a
signal, a lock another process holds, what a real process prints to the terminal,
a file-size limit) the run is a subprocess, as users run it; the rest run the same
entry point in this process (helpers.run_launcher_in_process), without a TensorFlow
import each. One 10-step training run (the `trained` fixture) is copied by the tests
that go on from a trained output_dir.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from helpers import (REPO, SAMPLE_SENTIMENT, Processes, Run, assert_one_error_line,
                     default_signals, flag_args, launcher_env, logged_run, read_text,
                     run_command, run_launcher, run_launcher_in_process,
                     save_initial_checkpoint, tiny_model, tree_digest, wait, write_config)

LAUNCHER = os.path.join(REPO, "run_classifier_mgpu.py")


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    class Workspace:
        pass
    w = Workspace()
    w.root = str(tmp_path_factory.mktemp("reliability"))
    w.model = tiny_model(os.path.join(w.root, "model"))
    w.init = save_initial_checkpoint(os.path.join(w.root, "init", "bert_model.ckpt"),
                                     w.model.bert_config(), seed=1)
    return w


def flags(w, output_dir: str, **changes) -> list:
    values = {"task_name": "sentiment", "data_dir": SAMPLE_SENTIMENT,
              "vocab_file": w.model.vocab_file, "bert_config_file": w.model.config_file,
              "init_checkpoint": w.init, "output_dir": output_dir, "max_seq_length": 32,
              "train_batch_size": 4, "num_train_epochs": 1, "do_train": True,
              "log_every_n_steps": 1}
    values.update(changes)
    return [LAUNCHER] + flag_args(values)


# The `trained` fixture's run: 40 rows / 4 = 10 steps, a checkpoint at 5 and at 10.
TRAINED = {"save_checkpoints_steps": 5}


@pytest.fixture(scope="module")
def trained(ws, tmp_path_factory) -> str:
    """An output_dir after 10 training steps (model.ckpt-5, model.ckpt-10, labels.txt,
    train_results.txt): tests that go on from a trained output_dir get a copy
    (`trained_copy`)."""
    output_dir = str(tmp_path_factory.mktemp("trained") / "out")
    run_launcher_in_process(flags(ws, output_dir, **TRAINED)).check()
    return output_dir


def trained_copy(trained: str, tmp_path) -> str:
    output_dir = str(tmp_path / "out")
    shutil.copytree(trained, output_dir)
    return output_dir


def wait_for(predicate, seconds: float = 120.0) -> None:
    deadline = time.time() + seconds
    while not predicate():
        if time.time() > deadline:
            pytest.fail("timed out waiting")
        time.sleep(0.2)


def test_a_second_run_into_a_busy_output_dir_is_refused(ws, tmp_path):
    output_dir = str(tmp_path / "out")
    lock = os.path.join(output_dir, ".bert_ad.lock")
    with Processes() as processes:
        first = processes.start([sys.executable] + flags(ws, output_dir, num_train_epochs=1e5,
                                                         save_checkpoints_steps=100000),
                                str(tmp_path / "first.log"))
        wait_for(lambda: "step 1/" in read_text(first.log_path))
        owner = json.load(open(lock))
        assert owner["pid"] == first.pid
        before = sorted(os.listdir(output_dir))
        # The lock is held by another process (`first`); the refused run can be this one.
        second = run_launcher_in_process(flags(ws, output_dir, num_train_epochs=1))
        assert_one_error_line(second, "is in use by another run", f"pid {first.pid}")
        assert json.load(open(lock))["pid"] == first.pid     # still the first run's
        assert sorted(os.listdir(output_dir)) == before
        # A kill -9 leaves the lock behind: the next run takes it over, with a warning.
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert os.path.exists(lock)
    third = run_launcher_in_process(flags(ws, output_dir, num_train_epochs=1)).check()
    assert "is no longer running: taking the lock over" in third.stderr
    assert not os.path.exists(lock)  # released at the end


def test_relabelled_data_is_refused_before_anything_is_written(ws, trained, tmp_path):
    output_dir = trained_copy(trained, tmp_path)
    assert open(os.path.join(output_dir, "labels.txt")).read() == "0\n1\n"
    before = tree_digest(output_dir)
    swapped = run_launcher_in_process(flags(ws, output_dir, labels="1,0", num_train_epochs=2))
    assert_one_error_line(swapped, "labels.txt lists the labels 0, 1", "are 1, 0")
    data = tmp_path / "three"
    shutil.copytree(SAMPLE_SENTIMENT, data)
    with open(data / "train.tsv", "a", encoding="utf-8") as f:
        f.write("2\ta third kind of review\n")
    three = run_launcher_in_process(flags(ws, output_dir, data_dir=str(data),
                                          num_train_epochs=2))
    assert_one_error_line(three, "labels.txt lists the labels 0, 1", "are 0, 1, 2")
    assert tree_digest(output_dir) == before


def test_an_output_dir_trained_with_another_config_is_refused_before_anything_is_written(
        ws, trained, tmp_path):
    """Resuming, predicting or exporting with a --bert_config_file of another shape
    than the one output_dir's checkpoints were trained with: one line naming a
    variable, both shapes and the config fields, before anything is written."""
    output_dir = trained_copy(trained, tmp_path)
    before = tree_digest(output_dir)
    wider = write_config(str(tmp_path / "wider.json"), ws.model.vocab_size, hidden_size=64,
                         intermediate_size=128)
    for changes in ({"num_train_epochs": 2}, {"do_train": None, "do_predict": True},
                    {"do_train": None, "do_export": True}):
        run = run_launcher_in_process(flags(ws, output_dir, bert_config_file=wider,
                                            init_checkpoint=None, **changes))
        # The folder's own record (model_settings.json) tells, before a checkpoint is read.
        assert_one_error_line(
            run, f"--bert_config_file={wider} is another model than the model folder "
                 f"--output_dir={output_dir}: hidden_size=64 (the folder's 32), "
                 "intermediate_size=128 (the folder's 64); leave --bert_config_file out to "
                 "use the folder's")
        assert tree_digest(output_dir) == before


def test_resume_skips_a_cut_short_checkpoint(ws, trained, tmp_path):
    # 40 rows / 4 = 10 steps an epoch, a checkpoint every 5 (TRAINED).
    output_dir = trained_copy(trained, tmp_path)
    data = os.path.join(output_dir, "model.ckpt-10.data-00000-of-00001")
    raw = open(data, "rb").read()
    open(data, "wb").write(raw[:len(raw) // 3])
    resumed = run_launcher_in_process(flags(ws, output_dir, save_checkpoints_steps=5,
                                            num_train_epochs=2)).check()
    assert "model.ckpt-10 cannot be read" in resumed.stderr
    assert re.search(r"resuming from .*model\.ckpt-5\n", resumed.stderr)
    names = os.listdir(output_dir)
    # Kept aside, byte for byte, not deleted; the run went on to its end.
    kept = [n for n in names if n.startswith("model.ckpt-10.broken-1.data")]
    assert kept and open(os.path.join(output_dir, kept[0]), "rb").read() == raw[:len(raw) // 3]
    assert "model.ckpt-20.index" in names


@pytest.mark.parametrize("first, second", [(signal.SIGTERM, signal.SIGINT)])
def test_sigterm_saves_and_the_same_command_resumes(ws, tmp_path, first, second):
    output_dir = str(tmp_path / "out")
    command = [sys.executable] + flags(ws, output_dir, num_train_epochs=500,
                                       save_checkpoints_steps=100000)
    with Processes() as processes:
        run = processes.start(command, str(tmp_path / "first.log"))
        wait_for(lambda: "step 3/" in read_text(run.log_path))
        run.send_signal(first)
        assert wait(run) == 128 + first
        log = logged_run(run).stderr
        errors = [line for line in log.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and log.splitlines()[-1] == errors[0], log
        assert "Traceback" not in log
        match = re.fullmatch(r"error: stopped by SIGTERM at step (\d+): saved (\S+); the "
                             r"same command resumes from there", errors[0])
        assert match, log
        step = int(match.group(1))
        assert match.group(2) == os.path.join(output_dir, f"model.ckpt-{step}")
        assert os.path.exists(match.group(2) + ".index")
        # The same command resumes there; Ctrl-C stops it the same way.
        again = processes.start(command, str(tmp_path / "second.log"))
        wait_for(lambda: f"step {step + 2}/" in read_text(again.log_path))
        again.send_signal(second)
        assert wait(again) == 128 + second
        text = read_text(again.log_path)
        assert f"resuming from {match.group(2)}" in text
        assert re.search(r"error: stopped by Ctrl-C \(SIGINT\) at step (\d+): saved ", text)
        assert "Traceback" not in text


def signalled_at(command: list, marker: str, signum: int) -> Run:
    """Run `command`, send it `signum` as soon as a line holding `marker` is written
    (stdout and stderr together), and return how it ended."""
    process = subprocess.Popen(command, cwd=REPO, env=launcher_env(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True,
                               preexec_fn=default_signals)
    seen = []
    try:
        for line in process.stdout:
            seen.append(line)
            if marker in line:
                process.send_signal(signum)
                break
        rest, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    log = "".join(seen) + rest
    assert any(marker in line for line in seen), log
    return Run(command, process.returncode, "", log)


def leftovers(directory: str) -> list:
    """Hidden staging folders and temporary files anywhere under `directory`."""
    return [os.path.join(root, name) for root, dirs, files in os.walk(directory)
            for name in dirs + files if ".staging" in name or name.endswith(".tmp")]


@pytest.mark.parametrize("phase, marker", [("graph", "training classifier:"),
                                           ("predict", "predict: scoring"),
                                           ("export", "export: saved_model")])
def test_sigterm_outside_the_training_loop_is_one_line_and_leaves_nothing(
        ws, trained, tmp_path, phase, marker):
    """SIGTERM while the training graph was built, during predict or during an
    export ended the run with 143 and no message, and left export/.N.XXXX.staging."""
    output_dir = str(tmp_path / "out")
    if phase == "graph":
        changes = {"num_train_epochs": 2}
    else:
        shutil.copytree(trained, output_dir)
        changes = {"do_train": None, "do_predict": phase == "predict" or None,
                   "do_export": phase == "export" or None}
    if phase == "predict":  # long enough to be in the middle of it
        rows = open(os.path.join(SAMPLE_SENTIMENT, "test.tsv"), encoding="utf-8").read()
        (tmp_path / "many.tsv").write_text(rows * 200, encoding="utf-8")
        changes["predict_file"] = str(tmp_path / "many.tsv")
    command = [sys.executable] + flags(ws, output_dir, **changes)
    run = signalled_at(command, marker, signal.SIGTERM)
    line = assert_one_error_line(Run(command, 2, "", run.stderr))  # the one line, last
    assert run.returncode == 128 + signal.SIGTERM, run.describe()
    assert line == ("error: stopped by SIGTERM: nothing half-written was kept (files being "
                    "written were removed); run the same command again to finish"), line
    assert not leftovers(output_dir), run.describe()
    assert not os.path.exists(os.path.join(output_dir, "predict.txt"))
    assert not os.path.exists(os.path.join(output_dir, "export", "10"))
    if phase == "export":
        # What a kill -9 leaves (no handler runs) is removed by the next run.
        stale = os.path.join(output_dir, "export", ".10.0123abcd.staging")
        os.makedirs(os.path.join(stale, "variables"))
        again = run_launcher_in_process(command[1:]).check()
        assert f"cleaned up {stale}, left by an earlier run" in again.stderr
        assert not leftovers(output_dir)
        assert os.path.exists(os.path.join(output_dir, "export", "10", "saved_model.pb"))


def test_sighup_saves_and_stops_like_sigterm(ws, tmp_path):
    """Sibling: SIGHUP (the terminal closed, an ssh connection dropped) killed a
    training run on the spot: no checkpoint since the last save, no message."""
    output_dir = str(tmp_path / "out")
    command = [sys.executable] + flags(ws, output_dir, num_train_epochs=500,
                                       save_checkpoints_steps=100000)
    run = signalled_at(command, "step 3/", signal.SIGHUP)
    assert run.returncode == 128 + signal.SIGHUP, run.describe()
    line = assert_one_error_line(Run(command, 2, "", run.stderr))
    match = re.fullmatch(r"error: stopped by SIGHUP \(the terminal closed\) at step (\d+): "
                         r"saved (\S+); the same command resumes from there", line)
    assert match, line
    assert os.path.exists(match.group(2) + ".index")


def test_tensorflow_notices_stay_out_of_the_terminal(ws, tmp_path):
    """TensorFlow's `E0000 ... oneDNN supports DT_INT32 only on platforms with
    AVX-512` (DT_HALF with fp16) reached the terminal: here NER --use_crf's
    Viterbi, at predict. Only bert_ad's own lines (and no absl/glog line) may show,
    with TensorFlow's graph optimiser on as in a user's run (its rewrites log too)."""
    data = tmp_path / "ner"
    data.mkdir()
    sentences = "the O\ngood B-X\nfilm I-X\n. O\n\nbad B-X\nmovie O\n\n"
    for split in ("train", "dev", "test"):
        (data / f"{split}.txt").write_text(sentences, encoding="utf-8")
    launcher = os.path.join(REPO, "run_ner_mgpu.py")
    run = run_launcher([launcher] + flag_args({
        "data_dir": str(data), "vocab_file": ws.model.vocab_file,
        "bert_config_file": ws.model.config_file, "init_checkpoint": ws.init,
        "output_dir": str(tmp_path / "out"), "max_seq_length": 32, "train_batch_size": 2,
        "num_train_epochs": 1, "use_crf": True, "do_train": True, "do_predict": True}),
        BERT_AD_GRAPPLER="on").check()
    assert "predict: wrote 2 rows" in run.stderr, run.describe()
    noise = [line for line in run.stderr.splitlines()
             if re.match(r"^[IWEF]\d{4} |^WARNING: All log messages before absl", line)]
    assert not noise, run.describe()


def test_disk_full_during_a_checkpoint_save_is_one_line(ws, tmp_path):
    """A file-size limit makes the checkpoint's data file fail to write (EFBIG)."""
    output_dir = str(tmp_path / "out")
    limited = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, "
               "signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (60000, 60000)); "
               "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")
    run = run_command([sys.executable, "-c", limited] + flags(ws, output_dir))
    line = assert_one_error_line(run, "cannot write", "model.ckpt-10")
    assert "Traceback" not in run.stderr, line
    left = os.listdir(output_dir)
    assert not [n for n in left if "tempstate" in n or n.endswith(".tmp")], left
    assert not [n for n in left if n.startswith("model.ckpt-10")], left


def test_blank_lines_of_a_predict_file_keep_predict_txt_aligned(ws, trained, tmp_path):
    output_dir = trained_copy(trained, tmp_path)
    rows = open(os.path.join(SAMPLE_SENTIMENT, "test.tsv"), encoding="utf-8").read()
    lines = rows.splitlines()[:9]
    lines[3:3] = [""]          # a blank line in the middle
    lines += ["\t", ""]        # a line of empty columns, a blank line at the end
    predict_file = tmp_path / "predict.tsv"
    predict_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
    run_launcher_in_process(flags(ws, output_dir, do_train=None, do_predict=True,
                                  predict_file=str(predict_file))).check()
    predicted = open(os.path.join(output_dir, "predict.txt")).read().splitlines()
    probabilities = open(os.path.join(output_dir, "test_results.tsv")).read().splitlines()
    assert len(predicted) == len(probabilities) == len(lines) == 12


def test_a_rerun_with_nothing_to_train_keeps_train_results(ws, trained, tmp_path):
    output_dir = trained_copy(trained, tmp_path)
    path = os.path.join(output_dir, "train_results.txt")
    finished = open(path).read()
    assert "steps_run = 10" in finished
    rerun = run_launcher_in_process(flags(ws, output_dir, **TRAINED)).check()
    assert "kept the finished run's train_results.txt" in rerun.stderr
    assert open(path).read() == finished
    assert not os.path.exists(path + ".~1~")


def test_launch_local_workers_ends_when_a_worker_freezes(tmp_path):
    """Worker 0 (the chief) exits; worker 1 would wait forever."""
    script = os.path.join(REPO, "scripts", "launch_local_workers.sh")
    worker = ("import json, os, sys, time; index = json.loads(os.environ['TF_CONFIG'])"
              "['task']['index']; time.sleep(0 if index == 0 else 3600)")
    started = time.time()
    run = run_command(["bash", script, "2", sys.executable, "-c", worker], timeout=60,
                      GRACE_S="2")
    assert not run.timed_out and time.time() - started < 30
    assert run.returncode == 124
    assert "worker 1 still running 2s after the chief exited: stopping it" in run.stderr
