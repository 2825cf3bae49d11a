"""What several test files share.

* Running a launcher as a user runs it: a subprocess with the repository on
  PYTHONPATH and no GPU (`run_launcher`, `run_module`, `run_command`, several
  side by side with `run_many`, long-lived ones with a log file in `Processes`), its flags
  from a dict (`flag_args`).
* The tiny model those runs train: a vocab of the sample sentences' words,
  configs/tiny_bert_config.json with changes, an initial checkpoint
  (`tiny_model`, `save_initial_checkpoint`).
* Bad input is refused cleanly: exit 2, exactly one `error:` line and it is
  the last, no traceback, and the output folder exactly as it was
  (`assert_one_error_line`, `tree_digest`, `run_bad_inputs`, `BadRun`).
* create_pretraining_data.py's main, in this process; one training step of a
  multi-tower graph from saved weights (`train_one_step`), for equivalence tests.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import runpy
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import (Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence,
                    Tuple)

import numpy as np
import pytest

from bert_ad.cli import create_pretraining_data as create_pretraining_data_cli
from bert_ad.cli.runner import parse_flags
from bert_ad.compat import TF_LOGS_ASKED_FOR, session_config, tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_SENTIMENT = os.path.join(REPO, "data", "sample_sentiment")
TINY_CONFIG = os.path.join(REPO, "configs", "tiny_bert_config.json")
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
TIMEOUT = 300      # seconds, any one subprocess
PARALLEL = 4       # subprocesses run_many starts at once


# ---------------------------------------------------------------------------
# Running launchers.


def fresh_python_lines(code: str, count: int, variable: str, **env: str) -> List[str]:
    """The last `count` lines `python -c code` prints in a fresh process with
    launcher_env(**env), `variable` unset there unless given in env (for what a
    process does with an environment variable it reads at start-up)."""
    full = launcher_env(**env)
    if variable not in env:
        full.pop(variable, None)
    run = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=full,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines()[-count:]


def launcher_env(**extra: str) -> Dict[str, str]:
    """The environment a launcher runs in: this repository first on PYTHONPATH,
    CPU only (the same numbers on a machine with a GPU), no inherited
    TF_CONFIG, TF_CPP_MIN_LOG_LEVEL only if the user set it; then `extra`."""
    env = dict(os.environ)
    if not TF_LOGS_ASKED_FOR:
        # bert_ad.compat set it in this process as a default, not as the
        # user's wish: a launcher starts as from a user's shell, quieting
        # TensorFlow's own lines itself.
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (REPO, env.get("PYTHONPATH", "")) if p)
    env["CUDA_VISIBLE_DEVICES"] = "-1"
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


@dataclass
class Run:
    """A finished command: its argv, exit code and captured output."""

    command: List[str]
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False

    def describe(self) -> str:
        """The command, how it ended and its stderr: the message of a failed assert."""
        ended = "killed after the timeout" if self.timed_out else f"exit {self.returncode}"
        return f"{' '.join(self.command)}\n{ended}\nstderr:\n{self.stderr}"

    def check(self) -> "Run":
        """Assert exit 0; returns self."""
        assert self.returncode == 0, self.describe()
        return self


def run_command(command: Sequence[str], timeout: float = TIMEOUT, cwd: str = REPO,
                **env: str) -> Run:
    """Run `command` (an argv) in `launcher_env(**env)`, output captured.

    A run still going after `timeout` seconds is killed and returned with
    `timed_out` set (its exit code is then the signal's).
    """
    process = subprocess.Popen(list(command), cwd=cwd, env=launcher_env(**env),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               universal_newlines=True, preexec_fn=default_signals)
    timed_out = False
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        timed_out = True
    return Run(list(command), process.returncode, stdout, stderr, timed_out)


def run_launcher(argv: Sequence[str], timeout: float = TIMEOUT, cwd: str = REPO,
                 **env: str) -> Run:
    """`python argv[0] argv[1:]` as a user types it (argv[0] a path, relative
    to `cwd` or absolute); see run_command."""
    return run_command([sys.executable] + list(argv), timeout, cwd, **env)


def run_module(module: str, args: Sequence[str] = (), timeout: float = TIMEOUT,
               cwd: str = REPO, **env: str) -> Run:
    """`python -m module args` (e.g. bert_ad.convert); see run_command."""
    return run_command([sys.executable, "-m", module] + list(args), timeout, cwd, **env)


def run_many(jobs: Mapping[str, Sequence[str]], parallel: int = PARALLEL,
             run: Callable[..., Run] = run_launcher) -> Dict[str, Run]:
    """{name: argv} -> {name: Run}, `run(argv)` each, at most `parallel` at a time.

    A thread per run drains its pipes, so a chatty run never blocks.
    """
    with ThreadPoolExecutor(parallel) as pool:
        futures = {name: pool.submit(run, argv) for name, argv in jobs.items()}
        return {name: future.result() for name, future in futures.items()}


def flag_args(flags: Mapping[str, object]) -> List[str]:
    """{name: value} -> ["--name=value"]; True -> "--name"; None -> left out."""
    return [f"--{name}" if value is True else f"--{name}={value}"
            for name, value in flags.items() if value is not None]


def default_signals() -> None:
    """preexec_fn of every command a test starts: SIGINT, SIGTERM and SIGHUP at their
    defaults, as for a command typed at a terminal, whatever the test run inherited
    (a CI job started in the background has SIGINT ignored, nohup SIGHUP; a launcher
    keeps a signal it started with ignored, so the signal tests would see nothing)."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


class Processes:
    """Long-lived subprocesses, each writing stdout and stderr to its own log
    file, each in its own session; every one still running is killed (with
    the processes it started) when the `with` block ends."""

    def __init__(self):
        self.running: List[subprocess.Popen] = []

    def start(self, command: Sequence[str], log_path: str, **env: str) -> subprocess.Popen:
        """Start `command` in `launcher_env(**env)`; the process gets `.log_path`."""
        with open(log_path, "w") as log:
            process = subprocess.Popen(list(command), cwd=REPO, env=launcher_env(**env),
                                       stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, preexec_fn=default_signals)
        process.log_path = log_path
        self.running.append(process)
        return process

    def __enter__(self) -> "Processes":
        return self

    def __exit__(self, *exc) -> None:
        for process in self.running:
            if process.poll() is None:
                # A launcher's workers share its session: end them all.
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def read_text(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def wait(process: subprocess.Popen, timeout: float = TIMEOUT) -> int:
    """The exit code of a `Processes` process; fails the test (with its log)
    and kills its session if it runs past `timeout` seconds."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        pytest.fail(f"{process.args} still running after {timeout}s; log:\n"
                    f"{read_text(process.log_path)}")


def logged_run(process: subprocess.Popen) -> Run:
    """A finished `Processes` process as a Run: its log (stdout and stderr
    interleaved) is the Run's stderr."""
    return Run(list(process.args), process.returncode, "", read_text(process.log_path))


# ---------------------------------------------------------------------------
# The tiny model.


def sample_sentiment_texts(splits: Iterable[str] = ("train", "dev", "test")) -> List[str]:
    """The text column of data/sample_sentiment/{split}.tsv (label<TAB>text rows)."""
    texts = []
    for split in splits:
        with open(os.path.join(SAMPLE_SENTIMENT, f"{split}.tsv"), encoding="utf-8") as f:
            texts += [line.rstrip("\n").split("\t", 1)[1] for line in f if line.strip()]
    return texts


def basic_words(text: str) -> List[str]:
    """Whole words and single punctuation marks, as BERT's basic tokenizer
    splits lower-cased English."""
    return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def write_vocab(path: str, texts: Iterable[str]) -> int:
    """A vocab file: the special tokens, then every word of `texts` sorted.
    Returns its size."""
    words = set()
    for text in texts:
        words.update(basic_words(text))
    tokens = list(SPECIAL_TOKENS) + sorted(words)
    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(t + "\n" for t in tokens))
    return len(tokens)


def write_config(path: str, vocab_size: int, **changes: object) -> str:
    """configs/tiny_bert_config.json (hidden 32, 2 layers) with `vocab_size`
    and `changes`, written to `path`; returns `path`."""
    with open(TINY_CONFIG) as f:
        config = json.load(f)
    config.update(vocab_size=vocab_size)
    config.update(changes)
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
    return path


@dataclass
class TinyModel:
    """The files of a tiny BERT: vocab.txt and bert_config.json."""

    vocab_file: str
    config_file: str
    vocab_size: int

    def bert_config(self):
        """The config as a modeling.BertConfig."""
        from bert_ad.model.modeling import BertConfig
        return BertConfig.from_json_file(self.config_file)


def tiny_model(directory: str, texts: Optional[Iterable[str]] = None,
               **config_changes: object) -> TinyModel:
    """vocab.txt of the words of `texts` (default: every sample_sentiment
    split) and bert_config.json (the tiny config with `config_changes`), in
    `directory` (made if missing)."""
    os.makedirs(directory, exist_ok=True)
    vocab_file = os.path.join(directory, "vocab.txt")
    size = write_vocab(vocab_file, sample_sentiment_texts() if texts is None else texts)
    config_file = write_config(os.path.join(directory, "bert_config.json"), size,
                               **config_changes)
    return TinyModel(vocab_file, config_file, size)


def head_graph(config, feature_spec, is_training: bool, head: Callable):
    """head(bert, features) on tower 0's placeholders of `feature_spec`, `bert` being
    BERT as a task's encoder builds it (Encoder(config): fp32, padding removed)."""
    from bert_ad.parallel.train_graph import feature_placeholders
    from bert_ad.tasks.base import Encoder
    features = feature_placeholders(feature_spec, 0)
    return head(Encoder(config).model(features, is_training), features)


def save_initial_checkpoint(prefix: str, config, build: Optional[Callable] = None,
                            seed: Optional[int] = None) -> str:
    """Freshly initialised weights saved at checkpoint `prefix`; returns it.

    Args:
      prefix: the checkpoint path prefix (…/model.ckpt); its folder is made.
      config: a modeling.BertConfig.
      build: build(config) adds the variables to the default graph; default
        the encoder alone (BertModel, as a released checkpoint holds it).
      seed: the graph-level seed, for a start that other graphs can share.
    """
    from bert_ad.compat import tf
    from bert_ad.model.modeling import BertModel
    with tf.Graph().as_default():
        if seed is not None:
            tf.set_random_seed(seed)
        if build is None:
            BertModel(config, False, tf.placeholder(tf.int32, [None, None]))
        else:
            build(config)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, prefix, write_meta_graph=False)
    return prefix


# ---------------------------------------------------------------------------
# Bad input: one error line, nothing changed.


def tree_digest(directory: str) -> Optional[Dict[str, str]]:
    """{relative path: sha256 of the bytes, or "dir"} of everything under
    `directory`; None if it does not exist."""
    if not os.path.exists(directory):
        return None
    found = {}
    for root, dirs, files in os.walk(directory):
        for name in dirs:
            found[os.path.relpath(os.path.join(root, name), directory) + "/"] = "dir"
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, directory)] = hashlib.sha256(
                    f.read()).hexdigest()
    return found


def assert_one_error_line(run: Run, *expected: str) -> str:
    """Assert the run was refused as bad input: exit 2, no traceback, exactly
    one line starting `error:` and it is the last of stderr, holding each of
    `expected`. Returns that line."""
    assert run.returncode == 2, run.describe()
    assert "Traceback" not in run.stderr, run.describe()
    lines = run.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1, run.describe()
    assert lines[-1] == errors[0], run.describe()
    for text in expected:
        assert text in errors[0], run.describe()
    return errors[0]


@dataclass
class BadRun:
    """A run given bad input, with its output folder's digest before and after."""

    run: Run
    expected: Sequence[str]
    before: Optional[Dict[str, str]]
    after: Optional[Dict[str, str]]

    def assert_refused(self) -> str:
        """assert_one_error_line with `expected`, and the output folder
        unchanged. Returns the error line."""
        line = assert_one_error_line(self.run, *self.expected)
        assert self.after == self.before, self.run.describe()
        return line


def run_bad_inputs(cases: Mapping[str, Tuple[Sequence[str], str, Sequence[str]]],
                   names: Optional[Sequence[str]] = None,
                   run: Callable[..., Run] = run_launcher,
                   parallel: int = PARALLEL) -> Dict[str, BadRun]:
    """{name: (argv, output_dir, expected words)} -> {name: BadRun}: every
    output_dir digested, the runs side by side (run_many), digested again.
    `names`, if given, must be the cases' names (a test parametrized by them
    then covers every case)."""
    if names is not None:
        assert sorted(cases) == sorted(names)
    before = {name: tree_digest(output_dir) for name, (_, output_dir, _) in cases.items()}
    runs = run_many({name: argv for name, (argv, _, _) in cases.items()}, parallel, run=run)
    return {name: BadRun(runs[name], expected, before[name], tree_digest(output_dir))
            for name, (_, output_dir, expected) in cases.items()}


def run_bad_inputs_in_process(cases: Mapping[str, Tuple[Sequence[str], str, Sequence[str]]],
                              names: Sequence[str], through_launcher: str
                              ) -> Dict[str, BadRun]:
    """run_bad_inputs with every case run in this process (run_launcher_in_process),
    but `through_launcher`, which also runs as a user types it (a fresh interpreter
    through the root launcher) and must end the same: the same exit code and the
    same error line. One fresh process a table keeps the launcher honest; the rest
    skip a TensorFlow import each."""
    runs = run_bad_inputs(cases, names, run=run_launcher_in_process, parallel=1)
    argv, _, _ = cases[through_launcher]
    launched = run_launcher(argv)
    in_process = runs[through_launcher].run
    assert launched.returncode == in_process.returncode, launched.describe()
    assert launched.stderr.splitlines()[-1:] == in_process.stderr.splitlines()[-1:], (
        launched.describe(), in_process.describe())
    return runs


# ---------------------------------------------------------------------------
# In-process entry points.


def run_cli_in_process(cli: Callable[[], None], argv: Sequence[str]) -> Run:
    """A command line's `cli()` on argv (argv[0]: the program), in this process:
    its exit code, stdout and stderr, as run_command would give them."""
    import contextlib
    import io
    import logging
    out, err = io.StringIO(), io.StringIO()
    saved_argv = sys.argv
    # The command sets the "bert_ad" logger up for a terminal; later tests
    # (caplog) need it as it was.
    log = logging.getLogger("bert_ad")
    saved_log = (log.handlers[:], log.propagate, log.level)
    sys.argv = list(argv)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                cli()
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        sys.argv = saved_argv
        log.handlers[:], log.propagate, log.level = saved_log
    return Run(list(argv), code, out.getvalue(), err.getvalue())


def run_module_in_process(module: str, args: Sequence[str]) -> Run:
    """`python -m MODULE ARGS` in this process: the module run as __main__ (runpy),
    its output captured as run_cli_in_process gives it (no interpreter and no
    TensorFlow import of its own)."""
    return run_cli_in_process(lambda: runpy.run_module(module, run_name="__main__"),
                              [f"python -m {module}"] + list(args))


def run_file_in_process(launcher: str, args: Sequence[str]) -> Run:
    """`python LAUNCHER ARGS` (a root launcher, relative to the checkout) in this
    process: the file run as __main__ (runpy), its output captured."""
    path = os.path.join(REPO, launcher)
    return run_cli_in_process(lambda: runpy.run_path(path, run_name="__main__"),
                              [launcher] + list(args))


def run_launcher_in_process(argv: Sequence[str], cwd: str = REPO, **env: str) -> Run:
    """run_launcher's run without a new interpreter: the command a root launcher
    (argv[0], e.g. run_classifier_mgpu.py) or `bert-ad NAME` (argv[0] "bert-ad",
    argv[1] NAME) declares, run in this process from `cwd` with `env` set, through
    the same entry point (bert_ad/cli/entry_points.py). Saves the 4-6 s of a fresh
    TensorFlow import a case; what needs its own process (signals, locks held
    by another run, a cluster) keeps run_launcher. One at a time (run_many's
    parallel=1): it changes the working directory and sys.stdout."""
    from bert_ad.cli import entry_points, registry
    argv = list(argv)
    if os.path.basename(argv[0]) == "bert-ad":
        cli = lambda: entry_points.main(argv)  # noqa: E731
    else:
        name = os.path.basename(argv[0])
        declaration = next(d for d in registry.declarations(plugins=False)
                           if d.launcher == name)
        cli = lambda: entry_points.run_command(declaration.name,  # noqa: E731
                                               [name] + argv[1:])
    saved_cwd, saved_env = os.getcwd(), {key: os.environ.get(key) for key in env}
    os.chdir(cwd)
    os.environ.update(env)
    try:
        return run_cli_in_process(cli, argv)
    finally:
        os.chdir(saved_cwd)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def run_main(cli, flags: Mapping[str, object]) -> int:
    """A launcher module's main (bert_ad.cli.classifier, ...) on {flag: value}
    (as flag_args writes them), in this process: a UserError propagates."""
    argv = ["prog"] + flag_args(flags)
    return cli.main(parse_flags(cli.define_flags, argv, "", cli.__doc__))


def create_pretraining_data(argv: Sequence[str]) -> int:
    """create_pretraining_data.py's main on `argv` (argv[0] the program), in this
    process: a UserError propagates instead of exiting."""
    cli = create_pretraining_data_cli
    return cli.main(parse_flags(cli.define_flags, argv, cli.USAGE, cli.__doc__))


# ---------------------------------------------------------------------------
# One applied training step, for the N towers = 1 tower x N*B equivalence.


class StepResult(NamedTuple):
    """What one applied step gave: loss, gradient norm, {variable: value}, global_step."""
    loss: float
    grad_norm: float
    weights: dict
    global_step: int


def classifier_rows(rows: int, seq: int, vocab_size: int, num_labels: int,
                    seed: int = 0) -> dict:
    """A classifier batch of random ids with ragged real lengths (the rest masked
    out), for the equivalence tests."""
    rng = np.random.RandomState(seed)
    lengths = rng.randint(3, seq + 1, size=rows)
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)
    return {
        "input_ids": rng.randint(5, vocab_size, size=(rows, seq)).astype(np.int32) * mask,
        "input_mask": mask,
        "segment_ids": (rng.rand(rows, seq) > 0.5).astype(np.int32) * mask,
        "label_ids": rng.randint(0, num_labels, size=rows).astype(np.int32),
        "example_weights": np.ones(rows, np.float32),
    }


def slice_rows(data: dict, start: int, stop: int) -> dict:
    return {k: v[start:stop] for k, v in data.items()}


def save_initial_weights(build_graph: Callable[[], tuple], path: str) -> str:
    """Build the graph (`build_graph()` -> (plan, TrainGraph)), initialise it and
    save every variable to `path`: one start for every graph compared."""
    with StepGraph(build_graph) as graph:
        return graph.save_initial_weights(path)


class StepGraph:
    """A training graph (`build_graph()` -> (plan, TrainGraph)) built once, in its own
    tf.Graph and session, for several independent steps: each `step` starts again from
    a checkpoint (every variable initialised afresh, the trainable ones restored), as
    a newly built graph would. Building is most of a step's cost, so a test that takes
    several steps of one graph builds it once. Use it as a context manager, or `close`."""

    def __init__(self, build_graph: Callable[[], tuple]):
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.plan, self.train = build_graph()
            self.initialize = [tf.global_variables_initializer(),
                               tf.local_variables_initializer()]
            self.restore = tf.train.Saver(var_list=self.train.variables)
            self.save_all = tf.train.Saver()
        self.session = tf.Session(graph=self.graph,
                                  config=session_config(self.plan.num_cpu_devices))

    def __enter__(self) -> "StepGraph":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.session.close()

    def save_initial_weights(self, path: str) -> str:
        """Freshly initialised variables, every one saved to `path`; returns it."""
        self.session.run(self.initialize)
        self.save_all.save(self.session, path)
        return path

    def feed(self, tower_batches: List[dict]) -> dict:
        """One micro-batch's feed: one batch per tower."""
        assert len(tower_batches) == len(self.train.placeholders)
        out = {}
        for batch, placeholders in zip(tower_batches, self.train.placeholders):
            out.update({placeholders[k]: batch[k] for k in placeholders})
        return out

    def step(self, checkpoint: str, micro_batches: List[List[dict]]) -> StepResult:
        """One applied step from `checkpoint`'s weights (see train_one_step)."""
        session, graph = self.session, self.train
        session.run(self.initialize)
        self.restore.restore(session, checkpoint)
        if graph.sync_replicas is not None:
            session.run(graph.sync_replicas)
        for tower_batches in micro_batches[:-1]:
            session.run(graph.micro_step, self.feed(tower_batches))
        loss, norm, applied, step = session.run(
            [graph.loss, graph.grad_norm, graph.train_step, graph.step_after],
            self.feed(micro_batches[-1]))
        assert applied
        weights = variable_values(session, graph.variables)
        return StepResult(float(loss), float(norm), weights, int(step))


class StepGraphs:
    """One StepGraph per distinct `build(*args)`, built on first use: a module
    fixture whose tests take steps of the same graphs builds each once."""

    def __init__(self, build: Callable[..., tuple]):
        self.build = build
        self.graphs: Dict[tuple, StepGraph] = {}

    def __call__(self, *args) -> StepGraph:
        if args not in self.graphs:
            self.graphs[args] = StepGraph(lambda: self.build(*args))
        return self.graphs[args]

    def close(self) -> None:
        for graph in self.graphs.values():
            graph.close()


def train_one_step(build_graph: Callable[[], tuple], checkpoint: str,
                   micro_batches: List[List[dict]]) -> StepResult:
    """Run one applied step from `checkpoint`'s weights, in a graph of its own.

    Args:
      build_graph: builds the training graph in the default graph and returns
        (plan, TrainGraph), with len(micro_batches) accumulation steps.
      checkpoint: the starting weights (save_initial_weights).
      micro_batches: for each micro-batch, one feed dict per tower.
    """
    with StepGraph(build_graph) as graph:
        return graph.step(checkpoint, micro_batches)


def variable_values(session, variables) -> dict:
    """{variable name: value} in one session.run: a run per variable would prune and
    optimise the graph again for each new fetch (seconds a call on TensorFlow 2.x)."""
    variables = list(variables)
    return dict(zip([v.name for v in variables], session.run(variables)))


def assert_same_weights(a: dict, b: dict, rtol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for name in a:
        # Zero-initialised biases have no scale of their own after one step:
        # measure them against the initializer range (0.02) instead.
        scale = max(np.max(np.abs(b[name])), 0.02)
        difference = np.max(np.abs(a[name] - b[name])) / scale
        assert difference <= rtol, f"{name}: relative difference {difference:.2e}"


def assert_weights_moved(initial_checkpoint: str, weights: dict,
                         kernel: str = "bert/encoder/layer_1/output/dense/kernel:0") -> None:
    """Guard against a vacuous comparison: the step must change the weights."""
    before = tf.train.load_variable(initial_checkpoint, kernel.split(":")[0])
    assert np.max(np.abs(weights[kernel] - before)) > 1e-5


def assert_head_learns_at_multiplied_rate(task, feature_spec: dict, batch: List[List[dict]],
                                          head: Sequence[str], factor: float,
                                          checkpoint_path: str,
                                          unchecked: Sequence[str] = ()) -> None:
    """One training step with the task's learning_rate_multipliers() and one without,
    from the same weights: each `head` variable ("name:0") takes `factor` x the plain
    step, every other variable but `unchecked` (a gradient that is 0 but for
    rounding, which Adam's first step scales to any size) the same step."""
    from bert_ad.parallel.towers import plan_devices
    from bert_ad.parallel.train_graph import TrainSettings, build_train_graph

    def build(multipliers=()):
        plan = plan_devices(1, cuda_visible_devices="")
        return plan, build_train_graph(
            plan, feature_spec, lambda f, i: task.build_model(f, True)["loss"],
            TrainSettings(learning_rate=1e-3, num_train_steps=100, seed=1,
                          learning_rate_multipliers=multipliers))

    with StepGraph(build) as graph:
        checkpoint = graph.save_initial_weights(checkpoint_path)
        plain = graph.step(checkpoint, batch)
    faster = train_one_step(
        lambda: build(tuple(task.learning_rate_multipliers().items())), checkpoint, batch)
    _assert_steps_at_multiplied_rate(checkpoint, plain, faster, head, factor, unchecked)


def _assert_steps_at_multiplied_rate(checkpoint: str, plain: "StepResult",
                                     faster: "StepResult", head: Sequence[str], factor: float,
                                     unchecked: Sequence[str]) -> None:
    """Each `head` variable moved `factor` x its plain step from `checkpoint`; every
    other variable but `unchecked` the same step."""
    for name in head:
        start = tf.train.load_variable(checkpoint, name[:-2])
        step_plain, step_faster = plain.weights[name] - start, faster.weights[name] - start
        assert np.abs(step_plain).min() > 1e-4, name
        np.testing.assert_allclose(step_faster, factor * step_plain, rtol=1e-4, err_msg=name)
    skipped = set(head) | set(unchecked)
    assert_same_weights({k: v for k, v in faster.weights.items() if k not in skipped},
                        {k: v for k, v in plain.weights.items() if k not in skipped})


def assert_head_steps_at_multiplied_rate(plain: "StepGraph", faster: "StepGraph",
                                         batch: List[List[dict]], head: Sequence[str],
                                         factor: float, checkpoint_path: str,
                                         unchecked: Sequence[str] = ()) -> None:
    """assert_head_learns_at_multiplied_rate on graphs a module already built (StepGraphs):
    `plain` without learning-rate multipliers, `faster` with the task's
    learning_rate_multipliers(), both of the same model and TrainSettings otherwise. The
    initial weights are `plain`'s, saved to `checkpoint_path`; each step starts from them."""
    checkpoint = plain.save_initial_weights(checkpoint_path)
    _assert_steps_at_multiplied_rate(checkpoint, plain.step(checkpoint, batch),
                                     faster.step(checkpoint, batch), head, factor, unchecked)
