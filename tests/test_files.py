"""The one atomic writer (bert_ad.files) and every writer built on it.

Each writer of the project must: create its files with the normal mode (0644
under umask 022, not mkstemp's 0600), leave nothing behind when it fails, and
turn a full disk into one `error: cannot write PATH: CAUSE` line. The full
disk is a file-size limit (RLIMIT_FSIZE) in a subprocess, so writes fail with
EFBIG ("File too large") as they would with ENOSPC.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import subprocess
import sys

import numpy as np
import pytest

from bert_ad import files, folders
from bert_ad.data import processors
from bert_ad.data.batching import TokenizedExamples
from bert_ad.data.feature_cache import write_features
from bert_ad.errors import UserError
from bert_ad.pretraining.records import ShardWriter
from bert_ad.resources import safetensors
from helpers import launcher_env, run_command

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

# About 40 kB per file: far above the file-size limit of the disk-full test.
LINES = [f"第 {i} 行\tline {i}" for i in range(2000)]


def snapshot(directory) -> dict:
    """{name: bytes} of every entry, hidden ones included."""
    out = {}
    for name in sorted(os.listdir(str(directory))):
        path = os.path.join(str(directory), name)
        with open(path, "rb") as f:
            out[name] = f.read()
    return out


def mode(path) -> int:
    return stat.S_IMODE(os.stat(str(path)).st_mode)


# --- every writer of the project: (path) -> the target paths it wrote -------

def _write_lines(path):
    files.write_lines(path, LINES)
    return [path]


def _write_results(path):
    directory, name = os.path.split(path)
    return files.write_results(directory, {"eval_results.txt": ["accuracy = 0.5"],
                                           name: LINES})


def _atomic_path(path):
    with files.atomic_path(path) as temporary:
        with open(temporary, "wb") as f:
            f.write(os.urandom(40000))
    return [path]


def _atomic_open(path):
    with files.atomic_open(path) as f:
        f.write("\n".join(LINES))
    return [path]


def _label_list(path):
    processors.save_label_list(path, [f"label{i:05d}" for i in range(4000)])
    return [path]


def _features_cache(path):
    ids = [np.arange(1, 201, dtype=np.int32)] * 100
    write_features(path, TokenizedExamples({"input_ids": ids, "segment_ids": ids},
                                           np.zeros(100, np.int32)))
    return [path, path + ".json"]  # the cache and its record


def _shards(path):
    paths = [path, path + "-2"]
    writer = ShardWriter(paths)
    try:
        for i in range(100):
            writer.write(bytes([i]) * 500)
        return writer.commit()
    except BaseException:
        writer.abort()
        raise


def _safetensors(path):
    safetensors.save({"w": np.arange(10000, dtype=np.float32)}, path)
    return [path]


WRITERS = {
    "write_lines": _write_lines,
    "write_results": _write_results,
    "atomic_path": _atomic_path,
    "atomic_open": _atomic_open,
    "save_label_list": _label_list,
    "write_features": _features_cache,
    "ShardWriter": _shards,
    "safetensors.save": _safetensors,
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_every_writer_creates_files_with_the_normal_mode(writer, tmp_path, umask_022):
    written = WRITERS[writer](str(tmp_path / "result"))
    assert sorted(os.listdir(str(tmp_path))) == sorted(os.path.basename(p) for p in written)
    assert {os.path.basename(p): oct(mode(p)) for p in written} == \
        {os.path.basename(p): "0o644" for p in written}


def test_the_mode_follows_the_umask(tmp_path):
    old = os.umask(0o027)
    try:
        files.write_lines(str(tmp_path / "a.txt"), ["a"])
        files.write_results(str(tmp_path), {"b.txt": ["b"]})
        with files.atomic_path(str(tmp_path / "c.bin")):
            pass
        staging = folders.staging_directory(str(tmp_path / "d"))
    finally:
        os.umask(old)
    assert [oct(mode(tmp_path / n)) for n in ("a.txt", "b.txt", "c.bin")] == ["0o640"] * 3
    assert oct(mode(staging)) == "0o750"


DISK_FULL = """
import json, os, resource, signal
import test_files  # (tests/ on PYTHONPATH) imports TensorFlow, before the limit as in a run
from bert_ad.errors import UserError, run_cli
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))
for name in sorted(test_files.WRITERS):
    try:
        test_files.WRITERS[name](os.path.join({root!r}, name, "result"))
        outcome = "no error"
    except UserError as e:
        outcome = str(e)
    except BaseException as e:
        outcome = "not a UserError: " + repr(e)
    print(json.dumps([name, outcome]), flush=True)
# and through an entry point's run_cli: one `error:` line, exit 2
run_cli(lambda: test_files.WRITERS["write_results"](os.path.join({root!r}, "cli", "result")))
"""


@pytest.fixture(scope="module")
def disk_full(tmp_path_factory) -> dict:
    """Every writer run once under a file-size limit of 8 kB, in one subprocess.

    Each writes into its own folder holding earlier results. Returns
    {writer: (UserError message, folder, content before)} and ["cli"]: the run.
    """
    root = tmp_path_factory.mktemp("disk_full")
    before = {}
    for writer in sorted(WRITERS) + ["cli"]:
        (root / writer).mkdir()
        for name in ("result", "result-2", "eval_results.txt"):
            (root / writer / name).write_text("earlier run\n")
        before[writer] = snapshot(root / writer)
    run = run_command([sys.executable, "-c", DISK_FULL.format(root=str(root))],
                      PYTHONPATH=os.pathsep.join((HERE, launcher_env()["PYTHONPATH"])),
                      PYTHONDONTWRITEBYTECODE="1", TF_CPP_MIN_LOG_LEVEL="3")
    messages = dict(json.loads(line) for line in run.stdout.splitlines())
    out = {w: (messages.get(w, run.stderr), root / w, before[w]) for w in WRITERS}
    out["cli"] = (run, root / "cli", before["cli"])
    return out


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_disk_full_is_one_user_error_and_leaves_nothing_behind(disk_full, writer):
    message, folder, before = disk_full[writer]
    targets = ["result"] + (["result-2"] if writer == "ShardWriter" else [])
    assert message in [f"cannot write {folder / t}: File too large" for t in targets]
    assert snapshot(folder) == before  # earlier results kept, no temporary, no backup


def test_disk_full_in_an_entry_point_is_one_error_line(disk_full):
    run, folder, before = disk_full["cli"]
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert errors == [f"error: cannot write {folder / 'result'}: File too large"], run.stderr
    assert snapshot(folder) == before


# --- write_results: one set, all or nothing ----------------------------------

def test_write_results_writes_lines_exactly(tmp_path):
    paths = files.write_results(str(tmp_path / "new"), {
        "predict.txt": ["正面", "", "neg\tx"], "empty.txt": [],
        "eval_results.txt": iter(["a = 1"])})
    assert paths == [str(tmp_path / "new" / n)
                     for n in ("predict.txt", "empty.txt", "eval_results.txt")]
    assert snapshot(tmp_path / "new") == {
        "predict.txt": "正面\n\nneg\tx\n".encode(), "empty.txt": b"",
        "eval_results.txt": b"a = 1\n"}
    with pytest.raises(TypeError, match="the lines of x.txt are one str"):
        files.write_results(str(tmp_path / "new"), {"x.txt": "one line"})


def test_earlier_results_are_kept_as_numbered_backups(tmp_path):
    for run in ("first", "second", "third"):
        files.write_results(str(tmp_path), {"predict.txt": [run], "test_results.tsv": [run]})
    files.write_lines(str(tmp_path / "predict.txt"), ["fourth"])
    assert snapshot(tmp_path) == {
        "predict.txt": b"fourth\n", "predict.txt.~1~": b"first\n",
        "predict.txt.~2~": b"second\n", "predict.txt.~3~": b"third\n",
        "test_results.tsv": b"third\n", "test_results.tsv.~1~": b"first\n",
        "test_results.tsv.~2~": b"second\n"}


def test_a_failure_while_writing_the_set_changes_nothing(tmp_path):
    files.write_results(str(tmp_path), {"predict.txt": ["old"], "test_results.tsv": ["old"]})
    before = snapshot(tmp_path)

    def rows_then_a_bug():
        yield "new 1"
        raise ValueError("a bug in the middle of the second file")

    with pytest.raises(ValueError, match="a bug in the middle"):
        files.write_results(str(tmp_path), {"predict.txt": ["new"],
                                            "test_results.tsv": rows_then_a_bug(),
                                            "eval_results.txt": ["new"]})
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("existing", [True, False])
def test_a_failed_rename_restores_the_files_renamed_before_it(tmp_path, monkeypatch,
                                                              existing):
    if existing:
        files.write_results(str(tmp_path), {"a.txt": ["old a"], "b.txt": ["old b"]})
    before = snapshot(tmp_path)
    real_replace = os.replace

    def replace(source, target):
        if target.endswith("b.txt"):
            raise OSError(errno.EIO, os.strerror(errno.EIO), target)
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(UserError) as error:
        files.write_results(str(tmp_path), {"a.txt": ["new a"], "b.txt": ["new b"]})
    assert str(error.value) == f"cannot write {tmp_path / 'b.txt'}: Input/output error"
    assert snapshot(tmp_path) == before


def test_a_file_where_the_folder_should_be_is_one_line(tmp_path):
    (tmp_path / "out").write_text("a file")
    with pytest.raises(UserError) as error:
        files.write_results(str(tmp_path / "out"), {"predict.txt": ["x"]})
    # Names the file in the way (issue 55: "File exists" / "Not a directory" did not).
    assert str(error.value) == (f"cannot write {tmp_path / 'out' / 'predict.txt'}: "
                                f"{tmp_path / 'out'} is a file, not a folder")
    with pytest.raises(UserError, match="out is a file, not a folder"):
        write_features(str(tmp_path / "out" / "train-abc.tf_record"),
                       TokenizedExamples({"input_ids": [np.ones(3, np.int32)]}, [0]))
    assert snapshot(tmp_path) == {"out": b"a file"}


# --- atomic_path / atomic_open -----------------------------------------------

def test_atomic_path_renames_on_success_only(tmp_path):
    target = tmp_path / "model.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with files.atomic_path(str(target)) as temporary:
            assert os.path.dirname(temporary) == str(tmp_path)
            assert os.path.basename(temporary).startswith(".model.bin.")
            assert temporary.endswith(".tmp") and os.path.isfile(temporary)
            with open(temporary, "wb") as f:
                f.write(b"half")
            raise RuntimeError("interrupted")
    assert snapshot(tmp_path) == {"model.bin": b"old"}

    with files.atomic_path(str(target), keep_backup=True) as temporary:
        with open(temporary, "wb") as f:
            f.write(b"new")
    assert snapshot(tmp_path) == {"model.bin": b"new", "model.bin.~1~": b"old"}
    with files.atomic_path(str(target)) as temporary:  # no backup by default
        with open(temporary, "wb") as f:
            f.write(b"newer")
    assert snapshot(tmp_path) == {"model.bin": b"newer", "model.bin.~1~": b"old"}


def test_an_os_error_inside_atomic_open_names_the_target(tmp_path):
    target = str(tmp_path / "out.txt")
    with pytest.raises(UserError) as error:
        with files.atomic_open(target):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert str(error.value) == f"cannot write {target}: No space left on device"
    assert os.listdir(str(tmp_path)) == []


def test_atomic_open_text_is_utf8_and_binary_is_raw(tmp_path):
    with files.atomic_open(str(tmp_path / "t.txt"), newline="\n") as f:
        f.write("中文\n")
    with files.atomic_open(str(tmp_path / "b.bin"), "wb") as f:
        f.write(b"\x00\xff")
    assert snapshot(tmp_path) == {"t.txt": "中文\n".encode(), "b.bin": b"\x00\xff"}
    with pytest.raises(ValueError, match="mode 'w' or 'wb', not 'a'"):
        with files.atomic_open(str(tmp_path / "t.txt"), "a"):
            pass


def test_cannot_write_takes_the_cause_of_a_tensorflow_error():
    class OpError(Exception):  # the shape of tf.errors.OpError
        message = "/out/.x.tf_record.1a2b3c4d.tmp; File too large"

    assert str(files.cannot_write("/out/x.tf_record", OpError())) == \
        "cannot write /out/x.tf_record: File too large"


# --- temporaries of a killed run ---------------------------------------------

def test_remove_stale_temporaries_removes_only_ours(tmp_path):
    ours = [".predict.txt.1a2b3c4d.tmp", ".labels.txt.k_9xq2ab.tmp"]  # new, mkstemp-era
    others = ["predict.txt", ".predict.txt", "x.tmp", ".x.tmp", ".a.short.tmp",
              "model.ckpt-3.index.tempstate123", ".a.1a2b3c4d.tmp.keep"]
    for name in ours + others:
        (tmp_path / name).write_text("x")
    (tmp_path / ".folder.1a2b3c4d.tmp").mkdir()
    removed = files.remove_stale_temporaries(str(tmp_path))
    assert sorted(removed) == sorted(str(tmp_path / n) for n in ours)
    assert sorted(os.listdir(str(tmp_path))) == sorted(others + [".folder.1a2b3c4d.tmp"])
    assert files.remove_stale_temporaries(str(tmp_path / "missing")) == []


KILLED_MID_WRITE = """
import sys, time
from bert_ad import files
def rows():
    yield "first row"
    print("writing", flush=True)
    time.sleep(60)
files.write_results(sys.argv[1], {"predict.txt": rows()})
"""


def test_the_temporary_of_a_killed_run_is_removed_at_the_next_start(tmp_path):
    (tmp_path / "predict.txt").write_text("earlier\n")
    run = subprocess.Popen([sys.executable, "-c", KILLED_MID_WRITE, str(tmp_path)],
                           stdout=subprocess.PIPE, universal_newlines=True,
                           env=launcher_env())
    try:
        assert run.stdout.readline() == "writing\n"
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
        run.stdout.close()
    (left,) = set(os.listdir(str(tmp_path))) - {"predict.txt"}
    assert files.remove_stale_temporaries(str(tmp_path)) == [str(tmp_path / left)]
    assert snapshot(tmp_path) == {"predict.txt": b"earlier\n"}


def test_staging_directory_is_hidden_beside_its_target(tmp_path, umask_022):
    staging = folders.staging_directory(str(tmp_path / "sub" / "model"))
    assert os.path.dirname(staging) == str(tmp_path / "sub")
    assert os.path.basename(staging).startswith(".model.")
    assert os.path.isdir(staging) and oct(mode(staging)) == "0o755"
