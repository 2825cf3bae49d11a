"""One run per output_dir: a lock the kernel releases (bert_ad/locks.py).

A lock is held by a live process, and by nothing else: what a crash, a full
disk, a reboot or another host's dead run leaves behind never blocks the next
run. Holders here are real processes (a small Python holding the lock); the
full disk is a file-size limit (RLIMIT_FSIZE) on a real launcher run.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import subprocess
import sys
import threading

import pytest

from bert_ad.errors import UserError
from bert_ad import locks
from bert_ad.locks import (LOCK_NAME, OutputDirLock, describe_owner, live_writer,
                           refuse_reading_while_written)
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


# --- readers: a model folder a live run is still writing (issue 55) -------------------------

def test_a_reader_sees_a_live_writer_but_not_a_gone_one_nor_itself(holder, tmp_path):
    process, output_dir = holder
    owner = live_writer(output_dir)
    assert owner["pid"] == process.pid and owner["host"] == socket.gethostname()
    with pytest.raises(UserError) as error:
        refuse_reading_while_written(output_dir, f"--teacher_dir={output_dir}")
    assert str(error.value) == (
        f"--teacher_dir={output_dir} is a folder that a live run is still writing "
        f"({describe_owner(owner)}); wait for it to finish, or add --read_while_training "
        "to read its newest complete checkpoint")
    process.kill()
    process.wait()
    assert live_writer(output_dir) is None  # its lock file stays, no process holds it
    mine = str(tmp_path / "mine")
    with OutputDirLock(mine):  # this run's own folder: read by itself, never refused
        assert live_writer(mine) is None
    assert live_writer(str(tmp_path / "never_locked")) is None


def test_read_while_training_reads_the_newest_checkpoint_with_a_warning(holder, tmp_path):
    """features with --init_checkpoint in a folder being trained: refused, and with
    --read_while_training embedded from the checkpoint there, said in a warning."""
    process, output_dir = holder
    model = tiny_model(str(tmp_path / "model"))
    save_initial_checkpoint(os.path.join(output_dir, "model.ckpt-1"), model.bert_config(),
                            seed=1)
    text = tmp_path / "in.txt"
    text.write_text("a good film\n")
    args = [os.path.join(REPO, "extract_features.py")] + flag_args(
        {"vocab_file": model.vocab_file, "bert_config_file": model.config_file,
         "init_checkpoint": output_dir, "input_file": str(text), "max_seq_length": 16,
         "layers": -1, "output_file": str(tmp_path / "out.jsonl")})
    assert_one_error_line(run_launcher_in_process(args), f"--init_checkpoint={output_dir} is "
                          f"a folder that a live run is still writing (pid {process.pid} on ")
    assert not (tmp_path / "out.jsonl").exists()
    run = run_launcher_in_process(args + ["--read_while_training"]).check()
    assert (f"warning: --init_checkpoint={output_dir} is a folder that a live run is still "
            f"writing (pid {process.pid} on ") in run.stderr
    assert "reading its newest complete checkpoint (--read_while_training)" in run.stderr
    assert (tmp_path / "out.jsonl").read_text().count("\n") == 1


def test_a_readers_probe_never_refuses_a_writer_starting_meanwhile(tmp_path):
    """The probe holds a shared flock for an instant; a writer starting then tries again."""
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    fd = os.open(str(output_dir / LOCK_NAME), os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_SH)  # a probe, caught in the act
    threading.Timer(0.1, os.close, [fd]).start()
    with OutputDirLock(str(output_dir)) as lock:
        assert lock.held


def test_without_working_flock_a_reader_goes_by_the_owner_record(holder, monkeypatch):
    """A file system whose flock fails (ENOLCK: some network and FUSE mounts): the
    owner record decides, a live pid of this host is a writer, another host's is not."""
    process, output_dir = holder

    class NoFlock:
        LOCK_SH, LOCK_EX, LOCK_NB, LOCK_UN = (fcntl.LOCK_SH, fcntl.LOCK_EX, fcntl.LOCK_NB,
                                              fcntl.LOCK_UN)

        @staticmethod
        def flock(fd, operation):
            raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(locks, "fcntl", NoFlock)
    assert live_writer(output_dir)["pid"] == process.pid
    path = os.path.join(output_dir, LOCK_NAME)
    owner = json.load(open(path))
    with open(path, "w") as f:
        json.dump(dict(owner, host="another-host.example"), f)
    assert live_writer(output_dir) is None  # unseen: the documented limit
