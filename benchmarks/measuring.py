"""What the benchmarks (benchmarks/) and the studies (studies/) share.

Not part of the wheel: it sits beside bert_ad/ in the checkout, and every
`python -m benchmarks.X` / `python -m studies.X` run from the checkout finds it.
Nothing here imports TensorFlow or PyTorch at import time: a driver process
only starts workers and launchers, which import them.

* the checkout: its launchers and the PYTHONPATH its child processes get;
* the machine: the CPU line every table carries (model, vector ISA, oneDNN)
  and the machine table;
* tables and statistics: markdown tables, medians, paired ratios;
* workers: one measurement a fresh process (`worker_command`, `run_worker`,
  `serve_worker`), two side by side on a core each (`run_workers_side_by_side`);
* memory: peak RSS of this process and of a child (`run_measured`);
* launcher runs: a launcher in a fresh output folder, how it ended (`run_launcher`);
* records: a study's JSON lines (`load_runs`, `append_run`), a benchmark's JSON;
* the Hugging Face reference: AdamW with Google's no-decay list, one update,
  the Hugging Face copy of a Google checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, NamedTuple, Optional, Sequence

from bert_ad.cpu_features import cpu_flags
from bert_ad.files import atomic_open, read_key_values
from bert_ad.resources.assets import cache_dir

# --- the checkout ----------------------------------------------------------------------------

# The checkout whose launchers the benchmarks and studies run.
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLASSIFIER = os.path.join(REPO, "run_classifier_mgpu.py")


def checkout_env(**extra: str) -> Dict[str, str]:
    """Environment additions for a child process: this checkout first on PYTHONPATH
    (its bert_ad, benchmarks and studies), and `extra` (which may replace it)."""
    path = os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH", "")) if p)
    return dict({"PYTHONPATH": path}, **extra)


# --- the machine -----------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# The SIMD extensions that decide which CPU kernels TensorFlow and PyTorch run
# (names as /proc/cpuinfo spells them).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni",
             "avx512_bf16", "amx_tile")


def cpu_isa(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The vector ISA of this CPU that matters for the kernels, e.g. "avx avx2 fma".

    Args:
      cpuinfo: the file to read (Linux's /proc/cpuinfo).
    Returns:
      The ISA_FLAGS this CPU has, space-separated, or "unknown" (no flags line).
    """
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return "unknown"
    return " ".join(name for name in ISA_FLAGS if name in flags) or "none of " + ", ".join(
        ISA_FLAGS)


def vector_class(isa: str) -> str:
    """The widest vector class in a cpu_isa() string: "AMX", "AVX-512", "AVX2", ..."""
    for flag, name in (("amx_tile", "AMX"), ("avx512f", "AVX-512"), ("avx2", "AVX2"),
                       ("avx", "AVX"), ("sse4_2", "SSE4.2")):
        if flag in isa.split():
            return name
    return "unknown"


def logged_onednn_state(log_text: str) -> str:
    """The oneDNN state a launcher's start-up log names (its device plan's line)."""
    found = re.search(r"CPU kernels: oneDNN (.*)", log_text)
    return found.group(1).strip() if found else "not logged"


def onednn_state() -> str:
    """Whether this process's TensorFlow runs oneDNN, and why (imports TensorFlow)."""
    from bert_ad.compat.onednn import onednn_state as state
    return state()


def cpu_line(onednn: Optional[str] = None) -> str:
    """One line for every benchmark table: CPU model, vector ISA, oneDNN state.

    Args:
      onednn: the oneDNN state a worker reported (onednn_state()); None
        leaves it out (a process that did not import TensorFlow).
    """
    isa = cpu_isa()
    line = f"CPU: {cpu_model()}, {os.cpu_count()} cores, {vector_class(isa)} ({isa})"
    return line + (f"; TensorFlow oneDNN {onednn}" if onednn else "")


def machine_description() -> dict:
    """nproc, CPU model and ISA, load average, Python and library versions."""
    info = {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "isa": cpu_isa(),
            "python": platform.python_version(), "platform": platform.platform()}
    try:
        info["loadavg"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        info["loadavg"] = "unknown"
    for module in ("numpy", "tensorflow", "torch", "transformers"):
        info[module] = _version_without_import(module)
    return info


def machine_table(info: Optional[dict] = None) -> str:
    """`### Machine` and machine_description() (or `info`) as a two-column table."""
    info = info or machine_description()
    return "### Machine\n\n" + markdown_table(["", ""], [[k, v] for k, v in info.items()],
                                              "ll")


def loadavg() -> str:
    """The 1-minute load average now, as a worker reports it ("?" where unknown)."""
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "?"


def _version_without_import(module: str) -> str:
    """A package's version from its metadata (importing TF or torch here would
    start their thread pools in the driver process)."""
    try:
        from importlib import metadata
    except ImportError:  # Python 3.7
        try:
            import importlib_metadata as metadata  # type: ignore
        except ImportError:
            return "unknown"
    names = {"tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow_cpu",
                            "tensorflow-gpu")}.get(module, (module,))
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            continue
    return "not installed"


# --- tables and statistics ------------------------------------------------------------------

def markdown_table(headers: Sequence[str], rows: Sequence[Sequence],
                   align: Optional[str] = None) -> str:
    """A GitHub markdown table; cells are str()-ed, columns padded to width.

    Args:
      headers: column titles.
      rows: one sequence of cells per row, as many as headers.
      align: one character per column, "l" or "r" (default: first column
        left, the others right).

    Returns:
      The table, one line per row, without a trailing newline.
    """
    cells = [[str(c) for c in row] for row in rows]
    for row in cells:
        if len(row) != len(headers):
            raise ValueError(f"row {row} has {len(row)} cells, expected {len(headers)}")
    align = align or "l" + "r" * (len(headers) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values):
        padded = [v.ljust(w) if a == "l" else v.rjust(w)
                  for v, w, a in zip(values, widths, align)]
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join((":" + "-" * (w + 1)) if a == "l" else ("-" * (w + 1) + ":")
                          for w, a in zip(widths, align)) + "|"
    return "\n".join([line(headers), rule] + [line(r) for r in cells])


def median(values: Sequence[float]) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")


def fmt(value: float, digits: int = 1) -> str:
    """`value` with `digits` decimals; NaN (not measured) as "-"."""
    if value is None or value != value:
        return "-"
    return f"{value:,.{digits}f}"


def paired_ratio(runs_a: list, runs_b: list, field: str = "examples_per_sec") -> str:
    """Median (range) of `field`'s ratio a / b of runs made back to back, round by round."""
    ratios = [a[field] / b[field] for a, b in zip(runs_a, runs_b)
              if a.get(field) and b.get(field)]
    if not ratios:
        return "-"
    if len(ratios) == 1:
        return fmt(ratios[0], 2)
    return f"{fmt(median(ratios), 2)} ({fmt(min(ratios), 2)}-{fmt(max(ratios), 2)})"


# --- workers: one measurement a fresh process ------------------------------------------------

RESULT_PREFIX = "BENCH_RESULT "


def worker_command(module: str, worker: str, *, interpreter: Optional[str] = None,
                   **flags) -> list:
    """`python -m MODULE --worker WORKER --flag value ...`: one measurement's process.

    `interpreter` is another venv's python (default: this one's). A flag whose
    value is None or False is left out, True gives it bare; other values are str()-ed.
    """
    command = [interpreter or sys.executable, "-m", module, "--worker", worker]
    for name, value in flags.items():
        if value is None or value is False:
            continue
        command.append(f"--{name}")
        if value is not True:
            command.append(str(value))
    return command


def add_worker_flag(parser: argparse.ArgumentParser, workers: Sequence[str]) -> None:
    """The hidden `--worker NAME` that makes the module a worker process."""
    parser.add_argument("--worker", choices=list(workers), default=None,
                        help=argparse.SUPPRESS)


def serve_worker(args, workers: Dict[str, Callable]) -> int:
    """Run the worker `args.worker` names and emit its result, with the process's
    peak RSS (its own, or a launcher's it waited for) unless it measured one."""
    result = workers[args.worker](args)
    result.setdefault("peak_rss_mb", peak_rss_mb(children=True))
    emit_result(result)
    return 0


def emit_result(result: dict) -> None:
    """Print a worker's result as the one line the driver looks for."""
    sys.stdout.write(RESULT_PREFIX + json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()


def run_worker(command: Sequence[str], env: Optional[dict] = None,
               timeout: Optional[float] = None) -> dict:
    """Run a worker process (this checkout on its PYTHONPATH, then `env`) and return
    the result it emitted.

    Each measurement runs in a fresh process, so TensorFlow's and PyTorch's
    thread pools never compete inside one process and a measurement starts
    from the same state whatever ran before it.

    Raises:
      RuntimeError: the worker failed or printed no result (its output tail
        is in the message).
    """
    full_env = dict(os.environ, **checkout_env(**(env or {})))
    proc = subprocess.run(list(command), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, env=full_env, timeout=timeout)
    return _emitted_result(command, proc.returncode, proc.stdout)


def _emitted_result(command: Sequence[str], returncode: int, output: str) -> dict:
    for line in reversed(output.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    tail = "\n".join(output.splitlines()[-20:])
    raise RuntimeError(f"worker {' '.join(command)} exited {returncode} "
                       f"without a result:\n{tail}")


def run_workers_side_by_side(commands: Sequence[Sequence[str]], cores: Sequence[int],
                             env: Optional[dict] = None) -> list:
    """Run the workers at the same time, worker i pinned to CPU core cores[i].

    A virtual machine's speed can drift by 1.7x between minutes
    (docs/benchmarks.md): two workers one after the other compare two
    different minutes, two side by side share them. Each gets one core of its
    own, so neither slows the other beyond what cores of one machine share
    (memory bandwidth, caches). Run it again with the cores swapped.

    Returns:
      Each worker's result, or {"error": its output tail} for one that emitted none.
    """
    if len(commands) != len(cores):
        raise ValueError(f"{len(commands)} commands for {len(cores)} cores")
    full_env = dict(os.environ, **checkout_env(**(env or {})))
    running = []
    for command, core in zip(commands, cores):
        # The output to a file, not a pipe: an unread pipe would stall its worker.
        output = tempfile.TemporaryFile("w+", encoding="utf-8")
        running.append((command, output, subprocess.Popen(
            list(command), stdout=output, stderr=subprocess.STDOUT,
            text=True, env=full_env,
            preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}))))
    results = []
    for command, output, process in running:
        returncode = process.wait()
        output.seek(0)
        try:
            results.append(_emitted_result(command, returncode, output.read()))
        except RuntimeError as e:
            results.append({"error": str(e)[-600:]})
        output.close()
    return results


# --- memory ----------------------------------------------------------------------------------

def peak_rss_mb(children: bool = False) -> float:
    """This process's peak resident memory in MB; with `children`, the larger of it
    and the peak of any child it waited for (a worker that runs a launcher)."""
    whos = (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN) if children \
        else (resource.RUSAGE_SELF,)
    return max(resource.getrusage(who).ru_maxrss for who in whos) / 1024


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM), in MB."""
    with open(f"/proc/{pid}/status") as f:
        found = re.search(r"VmHWM:\s+(\d+) kB", f.read())
    return int(found.group(1)) / 1024 if found else float("nan")


def current_rss_mb() -> float:
    """This process's resident memory now, in MB (Linux's /proc/self/status)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


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


# --- launcher runs ---------------------------------------------------------------------------

class LauncherRun(NamedTuple):
    """How one launcher process ended."""

    ok: bool
    wall_seconds: float
    error: str = ""                              # failed: the last line it printed
    evaluated: Dict[str, str] = {}               # ok: eval_results.txt ({}: none written)
    trained: Dict[str, str] = {}                 # ok: train_results.txt ({}: none written)
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
    if log_name:
        os.makedirs(output_dir)
        ended = launch_logged(command, os.path.join(output_dir, log_name), env)
    else:
        with tempfile.TemporaryFile("w+", encoding="utf-8") as err:
            ended = _launch(command, subprocess.DEVNULL, err, env)
    if not ended.ok:
        return ended
    # A predict-only run writes no train_results.txt, a train-only one no eval_results.txt.
    evaluated, trained = (read_key_values(path) if os.path.exists(path) else {}
                          for path in (os.path.join(output_dir, "eval_results.txt"),
                                       os.path.join(output_dir, "train_results.txt")))
    if not keep_checkpoints:
        remove_checkpoints(output_dir)
    return ended._replace(evaluated=evaluated, trained=trained)


def launch_logged(command: Sequence[str], log_path: str,
                  env: Optional[Dict[str, str]] = None) -> LauncherRun:
    """Run a launcher to its end, its stdout and stderr in log_path (nothing else is
    touched: the caller decides what its output_dir holds); a failure's error is the
    log's last line. Its result files are the caller's to read."""
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    with open(log_path, "w+", encoding="utf-8") as log:
        return _launch(command, log, log, env)


def _launch(command: Sequence[str], stdout, output, env: Optional[Dict[str, str]]
            ) -> LauncherRun:
    """Run `command` to its end, stdout to `stdout`, stderr into `output` (a file
    opened "w+"; the same file as stdout for one log); a failure's error is
    output's last line."""
    started = time.time()
    returncode, peak_rss, _ = run_measured(command, stdout=stdout, stderr=output, env=env)
    output.seek(0)
    error = last_error_line(output.read()) if returncode else ""
    return LauncherRun(returncode == 0, round(time.time() - started, 1), error,
                       peak_rss_mb=peak_rss)


def last_error_line(output: str) -> str:
    """The last non-blank line of a failed run's output (its `error:` line)."""
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def remove_checkpoints(output_dir: str) -> None:
    """Delete output_dir's model.ckpt-N files (the record keeps what was measured)."""
    for name in os.listdir(output_dir):
        if name.startswith("model.ckpt-"):
            os.remove(os.path.join(output_dir, name))


# --- records ---------------------------------------------------------------------------------

def load_runs(path: str) -> list:
    """The JSON-lines records of `path`, in the order they were run ([] for no file)."""
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


def write_json(path: str, payload) -> None:
    """A benchmark's raw results as one JSON file, written whole (atomically): a
    long run cut short keeps what it wrote last."""
    with atomic_open(path) as f:
        json.dump(payload, f, indent=1)


# --- the Hugging Face reference --------------------------------------------------------------

# Weights AdamW's decay leaves alone, as Google's BERT and transformers' examples do.
NO_DECAY = ("bias", "LayerNorm.weight")


def hf_adamw(model, learning_rate: float, weight_decay: float, head_prefix: str = "",
             head_multiplier: float = 1.0):
    """torch's AdamW (eps 1e-6, Google's) decaying every weight but NO_DECAY's; with
    head_prefix, the parameters named so learn at head_multiplier x the rate (ours'
    --head_learning_rate_multiplier). (Imports torch: for the PyTorch workers only.)"""
    import torch
    groups = {}   # (in the head, decays): its parameters, rate and decay
    for name, parameter in model.named_parameters():
        in_head = bool(head_prefix) and name.startswith(head_prefix)
        decays = not any(k in name for k in NO_DECAY)
        groups.setdefault((in_head, decays), {
            "params": [], "weight_decay": weight_decay if decays else 0.0,
            "lr": learning_rate * (head_multiplier if in_head else 1.0)
        })["params"].append(parameter)
    return torch.optim.AdamW(list(groups.values()), lr=learning_rate, eps=1e-6)


def hf_apply_update(model, optimizer, loss, clip_norm: float, scheduler=None) -> None:
    """One training update from `loss`: backward, gradients clipped by their global
    norm, the optimizer's (and the schedule's) step, gradients cleared."""
    import torch
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    optimizer.zero_grad(set_to_none=True)


def hf_dir_for(directory: str, work_dir: str, name: str) -> str:
    """The Hugging Face copy of a Google checkpoint (converted once, cached); ""
    without a checkpoint."""
    if not os.path.exists(os.path.join(directory, "bert_model.ckpt.index")):
        return ""
    out = os.path.join(work_dir, f"{name}_hf")
    if not os.path.exists(os.path.join(out, "config.json")):
        subprocess.run([sys.executable, "-m", "bert_ad.convert", "google2hf", "--checkpoint",
                        os.path.join(directory, "bert_model.ckpt"), "--output_dir", out],
                       check=True, env=dict(os.environ, **checkout_env()))
    return out


def default_hf_dir() -> str:
    """The Hugging Face MiniLM the benchmarks compare with (the minilm asset)."""
    from bert_ad.resources import assets
    return assets.path("minilm", assets.MINILM_MODEL_DIR)


# --- command lines ---------------------------------------------------------------------------

def parser_for(doc: str) -> argparse.ArgumentParser:
    """A benchmark's or study's parser, described by its docstring's first line."""
    return argparse.ArgumentParser(description=doc.split("\n")[0])


def add_minilm_flags(parser: argparse.ArgumentParser, data: bool = True) -> None:
    """--model_dir (MiniLM as a Google checkpoint), --hf_dir, and with `data` the
    movie-review sentences' --data_dir: the inputs of the MiniLM benchmarks."""
    cache = cache_dir()
    parser.add_argument("--model_dir", default=os.path.join(cache, "minilm_google"),
                        help="MiniLM as a Google checkpoint (scripts/fetch_minilm.sh)")
    parser.add_argument("--hf_dir", default=None,
                        help="Hugging Face MiniLM folder (default: the minilm asset)")
    if data:
        parser.add_argument("--data_dir",
                            default=os.path.join(cache, "data", "movie_reviews"),
                            help="the sentiment task's train/dev/test.tsv "
                                 "(bert-ad data prepare movie_reviews)")


def add_round_flags(parser: argparse.ArgumentParser, quick: str = "1 round",
                    json_file: bool = True) -> None:
    """--quick, --repeats (rounds, each in the other order than the one before) and,
    with `json_file`, --json (the raw results)."""
    parser.add_argument("--quick", action="store_true", help=f"a few minutes: {quick}")
    parser.add_argument("--repeats", type=int, default=None,
                        help="rounds (default 3; --quick 1)")
    if json_file:
        parser.add_argument("--json", default=None, help="also write the raw results here")


def missing_inputs(args, data_file: Optional[str] = "train.tsv") -> int:
    """2 after one `error:` line when MiniLM's checkpoint (or --data_dir's `data_file`)
    is missing, else 0."""
    needed = [(os.path.join(args.model_dir, "bert_model.ckpt.index"),
               "MiniLM's Google checkpoint (run scripts/fetch_minilm.sh)")]
    if data_file:
        needed.append((os.path.join(args.data_dir, data_file),
                       "the movie-review sentences (run bert-ad data prepare "
                       "movie_reviews --output_dir=DIR)"))
    for path, what in needed:
        if not os.path.exists(path):
            print(f"error: {path} not found: {what}", file=sys.stderr)
            return 2
    return 0
