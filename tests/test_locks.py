"""One run per output_dir: a lock the kernel releases (bert_ad/locks.py).

A lock is held by a live process, and by nothing else: what a crash, a full
disk, a reboot or another host's dead run leaves behind never blocks the next
run. Holders here are real processes (a small Python holding the lock); the
full disk is a file-size limit (RLIMIT_FSIZE) on a real launcher run.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys

import pytest

from bert_ad.errors import UserError
from bert_ad.locks import LOCK_NAME, OutputDirLock
from helpers import (REPO, SAMPLE_SENTIMENT, assert_one_error_line, flag_args, launcher_env,
                     run_command, run_launcher_in_process, save_initial_checkpoint,
                     tiny_model)

HOLD = ("import sys, time; from bert_ad.locks import OutputDirLock; "
        "lock = OutputDirLock(sys.argv[1]); lock.acquire(); print('held', flush=True); "
        "time.sleep(120)")


@pytest.fixture
def holder(tmp_path):
    """A live process holding tmp_path/out's lock (with sys.argv naming it)."""
    output_dir = str(tmp_path / "out")
    process = subprocess.Popen([sys.executable, "-c", HOLD, output_dir], env=launcher_env(),
                               stdout=subprocess.PIPE, universal_newlines=True)
    assert process.stdout.readline() == "held\n"
    yield process, output_dir
    if process.poll() is None:
        process.kill()
    process.wait()


def test_a_live_lock_is_refused_naming_its_owner(holder):
    process, output_dir = holder
    with pytest.raises(UserError) as error:
        OutputDirLock(output_dir).acquire()
    message = str(error.value)
    assert message.startswith(f"--output_dir={output_dir} is in use by another run: pid "
                              f"{process.pid} on {socket.gethostname()} (started ")
    assert message.endswith(f": -c {output_dir}); wait for it to finish or use another "
                            "--output_dir")  # its command line (python -c's argv)
    owner = json.load(open(os.path.join(output_dir, LOCK_NAME)))
    assert owner["pid"] == process.pid


def test_the_lock_of_a_killed_run_is_taken_over(holder, caplog):
    process, output_dir = holder
    process.kill()
    process.wait()
    assert os.path.exists(os.path.join(output_dir, LOCK_NAME))
    with caplog.at_level(logging.WARNING, logger="bert_ad"):
        with OutputDirLock(output_dir):
            owner = json.load(open(os.path.join(output_dir, LOCK_NAME)))
            assert owner["pid"] == os.getpid()
    assert f"was locked by pid {process.pid}" in caplog.text
    assert "which is no longer running: taking the lock over" in caplog.text
    assert not os.path.exists(os.path.join(output_dir, LOCK_NAME))


@pytest.mark.parametrize("left", ["empty", "cut"])
def test_a_lock_file_a_full_disk_left_does_not_block(tmp_path, left):
    """A full disk left a 0-byte (or cut) .bert_ad.lock; every later run was refused
    as "in use by another run: an unreadable lock"."""
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    (output_dir / LOCK_NAME).write_text("" if left == "empty" else '{"host": "h", "pi')
    with OutputDirLock(str(output_dir)) as lock:
        assert json.load(open(lock.path))["pid"] == os.getpid()
    assert os.listdir(str(output_dir)) == []


@pytest.mark.parametrize("owner", ["reused_pid", "other_host"])
def test_a_lock_no_process_holds_does_not_block(tmp_path, owner, caplog):
    """Sibling: a lock naming a pid that is alive again after a reboot (pid reuse),
    or a run on another host sharing the folder, blocked every later run, though
    no process held it."""
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    left = {"host": socket.gethostname(), "pid": os.getppid(), "started": "yesterday",
            "command": "run_classifier_mgpu.py --do_train"}
    if owner == "other_host":
        left.update(host="another-host.example", pid=4242)
    (output_dir / LOCK_NAME).write_text(json.dumps(left))
    with caplog.at_level(logging.WARNING, logger="bert_ad"):
        with OutputDirLock(str(output_dir)):
            pass
    assert (f"was locked by pid {left['pid']} on {left['host']} (started yesterday: "
            "run_classifier_mgpu.py --do_train), which is no longer running: taking the "
            "lock over") in caplog.text


def test_two_locks_in_one_process_exclude_each_other(tmp_path):
    output_dir = str(tmp_path / "out")
    with OutputDirLock(output_dir):
        with pytest.raises(UserError, match=f"pid {os.getpid()} on"):
            OutputDirLock(output_dir).acquire()
    with OutputDirLock(output_dir):  # released: free again
        pass


def test_a_full_disk_while_writing_the_lock_names_it_and_blocks_nothing(tmp_path):
    """The file-size limit makes the lock's owner record fail to write (EFBIG, as
    ENOSPC would): one line naming the lock file, nothing left behind, and the
    next run goes ahead."""
    model = tiny_model(str(tmp_path / "model"))
    init = save_initial_checkpoint(str(tmp_path / "init" / "bert_model.ckpt"),
                                   model.bert_config(), seed=1)
    output_dir = str(tmp_path / "out")
    args = [os.path.join(REPO, "run_classifier_mgpu.py")] + flag_args(
        {"task_name": "sentiment", "data_dir": SAMPLE_SENTIMENT, "vocab_file": model.vocab_file,
         "bert_config_file": model.config_file, "init_checkpoint": init,
         "output_dir": output_dir, "max_seq_length": 32, "train_batch_size": 8,
         "num_train_epochs": 1, "do_train": True})
    limited = ("import os, resource, signal, sys; signal.signal(signal.SIGXFSZ, "
               "signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64)); "
               "os.execv(sys.executable, [sys.executable] + sys.argv[1:])")
    run = run_command([sys.executable, "-c", limited] + args)
    assert_one_error_line(run, f"cannot write {os.path.join(output_dir, LOCK_NAME)}: File too "
                               "large")
    assert not os.path.exists(output_dir) or os.listdir(output_dir) == []
    run_launcher_in_process(args).check()   # no limit here: the same command goes ahead
