"""bert-ad predict's resumable output: a stop keeps the answers so far, the same
command goes on from there (bert_ad/inference/resumable_output.py; both lanes, no
TensorFlow, no model: test_predict_input.py's stand-in task). The stop here is the
handler called by hand in the middle of a chunk, as a signal would call it; a real
SIGTERM to a real command is tests/test_scoring_machine.py's."""

from __future__ import annotations

import fcntl
import gzip
import json
import os
import signal

import pytest

from bert_ad.cli.predict import after_line
from bert_ad.errors import Stopped, UserError
from bert_ad.inference.prediction_input import InputSettings, open_input, read_instances
from bert_ad.inference.resumable_output import (PARTIAL_SUFFIX, RECORD_SUFFIX, HashedLines,
                                                ResumableOutput, input_lines_digest)
from bert_ad.inference.streamed_predictions import StreamSettings, predict_stream

from test_predict_input import LengthPredictions

IDENTITY = {"model": {"path": "/models/a", "global_step": 7},
            "flags": {"output_format": "jsonl", "skip_bad_lines": True}}
# 30 lines: texts of growing length, two lines the stand-in task refuses (answered
# with their error: --skip_bad_lines) and one that is not UTF-8.
LINES = [f"text {'x' * (i % 7)} {i}".encode() for i in range(30)]
LINES[4] = b"refused"
LINES[17] = b"\xff not utf-8"
CHUNK = 4


def output_format_of(name: str) -> str:
    return "tsv" if ".tsv" in name else "jsonl"


def run(tmp_path, name: str, identity=IDENTITY, stop_at_batch=None) -> ResumableOutput:
    """predict's file-to-file flow (bert_ad/cli/predict.py main) on the stand-in task;
    the stop handler is called while batch `stop_at_batch` is scored."""
    input_file, output_file = str(tmp_path / "in.txt"), str(tmp_path / name)
    resumable = ResumableOutput(output_file, input_file, identity)
    batches = []

    def score(batch):
        batches.append(batch)
        if len(batches) == stop_at_batch:
            resumable._on_signal(signal.SIGTERM)   # what the kernel's signal would call
        return batch

    with resumable.writing() as (output, point), open_input(input_file) as stream:
        lines = HashedLines(stream)
        items = after_line(read_instances(lines, f"--input_file={input_file}",
                                          InputSettings("text"), ("text_a", "text_b")),
                           point.input_lines)
        predict_stream(items, LengthPredictions(), score, output, output_format_of(name),
                       StreamSettings(batch_size=3, chunk_size=CHUNK, skip_bad_lines=True,
                                      source=f"--input_file={input_file}"),
                       resume_from=point, after_chunk=resumable.chunk_written,
                       input_mark=lines.mark)
    return resumable


def read_output(path: str) -> bytes:
    if ".gz" in path:   # the output, or its partial
        with gzip.open(path, "rb") as f:   # every member, as zcat reads them
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def write_input(tmp_path, lines=LINES) -> str:
    path = tmp_path / "in.txt"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("name", ["out.jsonl", "out.tsv", "out.tsv.gz"])
def test_a_stop_keeps_the_answers_so_far_and_the_same_run_goes_on(tmp_path, name):
    write_input(tmp_path)
    output_file = str(tmp_path / name)
    run(tmp_path, name)
    expected = read_output(output_file)
    os.remove(output_file)

    # Stopped in the third chunk's scoring: the chunk is finished and kept.
    with pytest.raises(Stopped) as stopped:
        run(tmp_path, name, stop_at_batch=5)
    assert stopped.value.exit_code == 128 + signal.SIGTERM
    assert str(stopped.value) == (
        f"stopped by SIGTERM after line 12 of --input_file={tmp_path}/in.txt: the answers "
        f"to it and the lines before it (12) are kept in {output_file}.partial; the same "
        "command goes on from there")
    assert not os.path.exists(output_file)
    partial = read_output(output_file + PARTIAL_SUFFIX)
    assert expected.startswith(partial)
    header = 1 if ".tsv" in name else 0
    assert len(partial.splitlines()) == header + 12
    with open(output_file + RECORD_SUFFIX, encoding="utf-8") as f:
        record = json.load(f)
    assert (record["answers"], record["input_lines"]) == (12, 12)
    assert record["output_bytes"] == os.path.getsize(output_file + PARTIAL_SUFFIX)
    assert record["input_sha256"] == input_lines_digest(f"{tmp_path}/in.txt", 12)
    assert record["model"] == IDENTITY["model"] and record["flags"] == IDENTITY["flags"]
    assert record["header"] == (["text", "length", "error"] if header else [])

    # The same run goes on from line 13; the output is the uninterrupted run's.
    resumed = run(tmp_path, name)
    assert resumed.resumed["answers"] == 12
    assert read_output(output_file) == expected
    assert sorted(os.listdir(tmp_path)) == ["in.txt", name]


def stopped_run(tmp_path, name="out.jsonl") -> tuple:
    """A run stopped after 8 lines: (the partial's bytes, the record's)."""
    write_input(tmp_path)
    with pytest.raises(Stopped):
        run(tmp_path, name, stop_at_batch=3)
    output_file = str(tmp_path / name)
    return tuple(open(output_file + suffix, "rb").read()
                 for suffix in (PARTIAL_SUFFIX, RECORD_SUFFIX))


@pytest.mark.parametrize("change, expected", [
    ("flags", "holds the answers to the first 8 line(s) made with other flags "
              "(output_format: 'jsonl' then, 'tsv' now)"),
    ("model", "made with another model (global_step: 7 then, 9 now)"),
    ("input", "holds the answers to the first 8 line(s) of --input_file={tmp}/in.txt, and "
              "those lines have changed since"),
])
def test_a_record_that_does_not_match_is_refused_and_nothing_is_removed(tmp_path, change,
                                                                        expected):
    kept = stopped_run(tmp_path)
    identity = json.loads(json.dumps(IDENTITY))
    if change == "flags":
        identity["flags"]["output_format"] = "tsv"
    elif change == "model":
        identity["model"]["global_step"] = 9
    else:
        write_input(tmp_path, [b"another first line"] + LINES[1:])
    with pytest.raises(UserError) as refused:
        run(tmp_path, "out.jsonl", identity)
    message = str(refused.value)
    assert expected.format(tmp=tmp_path) in message
    assert message.endswith(f"run the command that wrote it to finish it, or remove "
                            f"{tmp_path}/out.jsonl.partial and "
                            f"{tmp_path}/out.jsonl.partial.json to start over")
    partial = str(tmp_path / "out.jsonl")
    assert tuple(open(partial + suffix, "rb").read()
                 for suffix in (PARTIAL_SUFFIX, RECORD_SUFFIX)) == kept


def test_lines_added_after_the_kept_ones_are_answered(tmp_path):
    """The record holds a digest of the lines answered, not of the whole file."""
    stopped_run(tmp_path)
    write_input(tmp_path, LINES + [b"one more"])
    run(tmp_path, "out.jsonl")
    answers = [json.loads(line) for line in open(tmp_path / "out.jsonl", encoding="utf-8")]
    assert len(answers) == len(LINES) + 1
    assert answers[-1] == {"text": "one more", "length": 8}


def test_a_partial_without_a_record_is_a_leftover_and_the_run_starts_over(tmp_path):
    """kill -9 on a first run leaves the partial and no record (no handler ran)."""
    write_input(tmp_path)
    (tmp_path / ("out.jsonl" + PARTIAL_SUFFIX)).write_text('{"half": \n')
    run(tmp_path, "out.jsonl")
    answers = [json.loads(line) for line in open(tmp_path / "out.jsonl", encoding="utf-8")]
    assert len(answers) == len(LINES) and answers[0] == {"text": "text  0", "length": 7}
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.jsonl"]


def test_a_partial_longer_than_its_record_is_cut_back(tmp_path):
    """A second signal (at once) or kill -9 on a resumed run leaves more bytes than the
    record names: only the recorded ones are kept."""
    write_input(tmp_path)
    run(tmp_path, "out.jsonl")
    expected = read_output(str(tmp_path / "out.jsonl"))
    os.remove(tmp_path / "out.jsonl")
    stopped_run(tmp_path)
    with open(tmp_path / ("out.jsonl" + PARTIAL_SUFFIX), "ab") as f:
        f.write(b'{"text": "written after the record", "length": 0}\n{"half')
    run(tmp_path, "out.jsonl")
    assert read_output(str(tmp_path / "out.jsonl")) == expected


def test_an_error_leaves_what_the_user_had(tmp_path):
    """A resumed partial is cut back to its record; a new one is removed."""
    partial, record = stopped_run(tmp_path)

    def failing(batch):
        raise OSError(28, "No space left on device")

    resumable = ResumableOutput(str(tmp_path / "out.jsonl"), str(tmp_path / "in.txt"),
                                IDENTITY)
    with pytest.raises(OSError), resumable.writing() as (output, point), \
            open_input(str(tmp_path / "in.txt")) as stream:
        items = after_line(read_instances(stream, "x", InputSettings("text"),
                                          ("text_a", "text_b")), point.input_lines)
        predict_stream(items, LengthPredictions(), failing, output, "jsonl",
                       StreamSettings(batch_size=3, chunk_size=CHUNK, skip_bad_lines=True),
                       resume_from=point, after_chunk=resumable.chunk_written)
    assert open(tmp_path / ("out.jsonl" + PARTIAL_SUFFIX), "rb").read() == partial
    assert open(tmp_path / ("out.jsonl" + RECORD_SUFFIX), "rb").read() == record

    os.remove(tmp_path / ("out.jsonl" + PARTIAL_SUFFIX))
    os.remove(tmp_path / ("out.jsonl" + RECORD_SUFFIX))
    resumable = ResumableOutput(str(tmp_path / "out.jsonl"), str(tmp_path / "in.txt"),
                                IDENTITY)
    resumable.start()
    resumable.abandon()
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]


def test_a_partial_another_run_is_writing_is_refused(tmp_path):
    write_input(tmp_path)
    partial = tmp_path / ("out.jsonl" + PARTIAL_SUFFIX)
    partial.write_text("")
    with open(partial, "rb") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UserError, match=r"--output_file=.*out\.jsonl: another bert-ad "
                                            r"predict is writing it \(.*out\.jsonl\.partial "
                                            r"is in use\); wait for it, or give another"):
            run(tmp_path, "out.jsonl")
    assert partial.read_text() == ""
