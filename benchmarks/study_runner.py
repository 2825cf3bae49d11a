"""What the studies share: one run as a launcher process, the records file, resuming.

A study (accuracy_study.py, long_text_study.py) is a grid of runs. Each run
is one run_classifier_mgpu.py process (--do_train --do_eval --do_predict) in
a fresh output folder (`run_launcher`); the study turns how it ended into a
record (one JSON object) and appends it to its records file (`append_run`;
docs/accuracy_runs.jsonl and docs/long_text_runs.jsonl are committed) as soon
as the run ends. A stopped study started again skips the runs its records
file already holds (`recorded`), and its report reads that file alone
(--report_only), so the tables need none of the run folders.

Nothing here imports TensorFlow: the study process only starts launchers.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import (Callable, Dict, Hashable, Iterable, List, NamedTuple, Optional,
                    Sequence, Set, Tuple)

from bert_ad.files import atomic_open, read_key_values

# The checkout whose launcher the studies run.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSIFIER = os.path.join(REPO, "run_classifier_mgpu.py")


# ---------------------------------------------------------------------------
# One run.


class LauncherRun(NamedTuple):
    """How one launcher process ended."""

    ok: bool
    wall_seconds: float
    error: str = ""                              # failed: the last line it printed
    evaluated: Dict[str, str] = {}               # ok: eval_results.txt
    trained: Dict[str, str] = {}                 # ok: train_results.txt
    peak_rss_mb: float = 0.0                     # the launcher process's own peak RSS


def run_launcher(command: Sequence[str], output_dir: str, log_name: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None,
                 keep_checkpoints: bool = False) -> LauncherRun:
    """Run `command`, a launcher writing into `output_dir`, from a fresh start.

    An earlier attempt's `output_dir` is removed first. With `log_name`, the
    launcher's stdout and stderr go to output_dir/log_name (kept with the
    run) and a failure's error is the log's last line; without, both are
    captured and the error is stderr's last line. A finished run's results
    files are read, then its checkpoints (weights and optimizer slots,
    hundreds of MB a run) deleted unless `keep_checkpoints`.
    """
    shutil.rmtree(output_dir, ignore_errors=True)
    started = time.time()
    if log_name:
        os.makedirs(output_dir)
        log_path = os.path.join(output_dir, log_name)
        with open(log_path, "w", encoding="utf-8") as log:
            returncode, peak_rss_mb, _ = run_measured(command, stdout=log,
                                                      stderr=subprocess.STDOUT, env=env)
        with open(log_path, encoding="utf-8") as f:
            output = f.read()
    else:
        with tempfile.TemporaryFile("w+", encoding="utf-8") as err:
            returncode, peak_rss_mb, _ = run_measured(command, stdout=subprocess.DEVNULL,
                                                      stderr=err, env=env)
            err.seek(0)
            output = err.read()
    wall_seconds = round(time.time() - started, 1)
    if returncode != 0:
        return LauncherRun(False, wall_seconds, last_error_line(output),
                           peak_rss_mb=peak_rss_mb)
    evaluated = read_key_values(os.path.join(output_dir, "eval_results.txt"))
    trained = read_key_values(os.path.join(output_dir, "train_results.txt"))
    if not keep_checkpoints:
        remove_checkpoints(output_dir)
    return LauncherRun(True, wall_seconds, "", evaluated, trained, peak_rss_mb)


class Measured(NamedTuple):
    """How a process ended and what it used (its own, from os.wait4's rusage)."""

    returncode: int
    # ru_maxrss: not the largest of every child ever waited for. Where Popen forks (Python
    # 3.7), it includes the parent's resident pages until the exec: keep the parent small.
    peak_rss_mb: float
    cpu_seconds: float       # user + system, all its threads: less sensitive to other load


def run_measured(command: Sequence[str], **popen_args) -> Measured:
    """Run `command` (Popen's arguments) to its end; what it used."""
    process = subprocess.Popen(list(command), **popen_args)
    _, status, usage = os.wait4(process.pid, 0)
    # (os.waitstatus_to_exitcode is Python 3.9+; the tf1 lane is 3.7.)
    process.returncode = (-os.WTERMSIG(status) if os.WIFSIGNALED(status)
                          else os.WEXITSTATUS(status))
    return Measured(process.returncode, usage.ru_maxrss / 1024,
                    usage.ru_utime + usage.ru_stime)


def last_error_line(output: str) -> str:
    """The last non-blank line of a failed run's output (its `error:` line)."""
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def remove_checkpoints(output_dir: str) -> None:
    """Delete output_dir's model.ckpt-N files (the record keeps what was measured)."""
    for name in os.listdir(output_dir):
        if name.startswith("model.ckpt-"):
            os.remove(os.path.join(output_dir, name))


def read_test_predictions(data_dir: str, output_dir: str, limit: Optional[int] = None
                          ) -> Tuple[List[str], list, List[int]]:
    """(the run's labels.txt, test.tsv's examples, predict.txt's label indices).

    `limit`: only test.tsv's first `limit` rows were scored (the run was
    given a shortened copy). Raises RuntimeError when predict.txt has another
    number of rows.
    """
    from bert_ad.data import processors    # the study itself stays light
    labels = processors.load_label_list(os.path.join(output_dir, "labels.txt"))
    examples = processors.read_examples(processors.get_task("sentiment"), data_dir, "test")
    examples = examples[:limit]
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        predicted = [int(line) for line in f if line.strip()]
    if len(predicted) != len(examples):
        scored = "test.tsv" if limit is None else f"test.tsv's first {limit} rows"
        raise RuntimeError(f"{output_dir}/predict.txt has {len(predicted)} rows, "
                           f"{scored} {len(examples)}")
    return labels, examples, predicted


# ---------------------------------------------------------------------------
# The records file.


def load_runs(path: str) -> List[dict]:
    """The records of `path`, in the order they were run ([] for no file)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def append_run(path: str, record: dict) -> None:
    """Add one record to the runs file, rewriting it whole: a stopped study keeps
    what it finished, and a kill mid-write never leaves a torn line."""
    records = load_runs(path) + [record]
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with atomic_open(path) as f:
        f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def recorded(records: Iterable[dict], key: Callable[[dict], Hashable],
             failed_too: bool) -> Set[Hashable]:
    """The runs a resumed study skips: `key` of every record, or of the
    successful ones only (a failed run is then tried again)."""
    return {key(r) for r in records if failed_too or r.get("status") == "ok"}
