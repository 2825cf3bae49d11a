"""Stop signals outside the training loop (bert_ad/signals.py), in a small process.

The whole runs (SIGTERM while a graph is built, during predict and export;
SIGHUP in the training loop) are in test_reliability.py; here the mechanism:
what is registered is removed, what is committed is kept, one line, exit
128 + the signal, and a signal the process was started with ignored stays
ignored.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from bert_ad import signals
from helpers import default_signals, launcher_env

STOPPED = ("import os, signal, sys\n"
           "from bert_ad.errors import run_cli\n"
           "from bert_ad.files import StagedFiles, atomic_open\n"
           "from bert_ad.folders import staging_directory\n"
           "def main():\n"
           "    folder = sys.argv[1]\n"
           "    with atomic_open(os.path.join(folder, 'done.txt')) as f:\n"
           "        f.write('committed')\n"
           "    staging = staging_directory(os.path.join(folder, 'export'))\n"
           "    open(os.path.join(staging, 'saved_model.pb'), 'w').write('half')\n"
           "    staged = StagedFiles()\n"
           "    open(staged.stage(os.path.join(folder, 'predict.txt')), 'w').write('half')\n"
           "    print('writing', flush=True)\n"
           "    os.kill(os.getpid(), int(sys.argv[2]))\n"
           "    print('never here', flush=True)\n"
           "run_cli(main)\n")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_stop_signal_removes_what_is_being_written_and_says_so(tmp_path, signum):
    folder = str(tmp_path)
    run = subprocess.run([sys.executable, "-c", STOPPED, folder, str(int(signum))],
                         env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=60, preexec_fn=default_signals)
    assert run.returncode == 128 + signum
    assert run.stdout == "writing\n"
    assert run.stderr == (f"error: stopped by {signals.signal_name(signum)}: nothing "
                          "half-written was kept (files being written were removed); run the "
                          "same command again to finish\n")
    assert sorted(os.listdir(folder)) == ["done.txt"]  # the staging folder and .tmp gone


def test_signals_the_process_ignores_stay_ignored():
    """nohup starts a run with SIGHUP ignored: closing the terminal must not stop it."""
    saved = {s: signal.getsignal(s) for s in signals.NAMES}
    try:
        default_signals()  # whatever this test run inherited
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        with signals.stop_on_signals():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) == signals.stop_now
            assert signal.getsignal(signal.SIGINT) == signals.stop_now
        assert signal.getsignal(signal.SIGTERM) == saved[signal.SIGTERM]
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


# A signal that arrives just after the folder or file is made (os.mkdir/os.open
# send it themselves here), before it is registered for removal.
STOPPED_WHILE_CREATING = (
    "import os, signal, sys, threading, time\n"
    "from bert_ad.errors import run_cli\n"
    "from bert_ad.files import StagedFiles\n"
    "from bert_ad.folders import staging_directory\n"
    # Another thread, as TensorFlow's: a signal the main thread masks goes there.
    "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    "def signalled(make):\n"
    "    def made(*args, **kwargs):\n"
    "        result = make(*args, **kwargs)\n"
    "        os.kill(os.getpid(), signal.SIGTERM)\n"
    "        return result\n"
    "    return made\n"
    "def main():\n"
    "    folder, what = sys.argv[1], sys.argv[2]\n"
    "    if what == 'staging':\n"
    "        os.mkdir = signalled(os.mkdir)\n"
    "        staging_directory(os.path.join(folder, 'export'))\n"
    "    else:\n"
    "        os.open = signalled(os.open)\n"
    "        StagedFiles().stage(os.path.join(folder, 'predict.txt'))\n"
    "    print('never here', flush=True)\n"
    "run_cli(main)\n")


@pytest.mark.parametrize("what", ["staging", "temporary"])
def test_a_signal_just_after_a_file_is_made_still_removes_it(tmp_path, what):
    """CI once found export/.10.XXXXXXXX.staging after a SIGTERM: the folder was
    made, and the signal came before it was registered for removal."""
    run = subprocess.run([sys.executable, "-c", STOPPED_WHILE_CREATING, str(tmp_path), what],
                         env=launcher_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, timeout=60, preexec_fn=default_signals)
    assert run.returncode == 128 + signal.SIGTERM, run.stderr
    assert run.stdout == ""
    assert os.listdir(str(tmp_path)) == []


HELD = ("import os, signal, sys, threading, time\n"
        "from bert_ad import signals\n"
        "from bert_ad.errors import run_cli\n"
        "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
        "def main():\n"
        "    with signals.held():\n"
        "        os.kill(os.getpid(), signal.SIGTERM)\n"
        "        time.sleep(0.5)  # time for any thread to take the signal\n"
        "        print('end of the block', flush=True)\n"
        "    print('never here', flush=True)\n"
        "run_cli(main)\n")


def test_a_stop_signal_within_held_waits_for_the_end_of_the_block():
    """With other threads running (TensorFlow's), a signal masked in the main
    thread would go to one of them, and Python would still stop at once."""
    run = subprocess.run([sys.executable, "-c", HELD], env=launcher_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=60, preexec_fn=default_signals)
    assert run.returncode == 128 + signal.SIGTERM, run.stderr
    assert run.stdout == "end of the block\n"
    assert run.stderr.startswith("error: stopped by SIGTERM: nothing half-written")
