"""bert-ad predict's input lines and flags, without a model (both lanes, no TensorFlow).

The lines -> instances of bert_ad/inference/prediction_input.py against
instances written out by hand, and the flags refused before a model is read
(bert_ad/cli/predict.py), each in one `error:` line, and the streamed loop's
order with bad lines kept as errors (bert_ad/inference/streamed_predictions.py,
on a stand-in task). The scoring itself is
tested on real exports in tests/test_scoring_machine.py and tests/test_serve.py.
"""

from __future__ import annotations

import gzip
import io
import os

import json

import numpy as np
import pytest

from bert_ad.cli import predict as predict_cli
from bert_ad.errors import UserError
from bert_ad.inference.prediction_input import (BadLine, InputSettings, count_lines,
                                                format_of, open_input, read_instances)
from bert_ad.inference.prediction_output import AnswerLines, open_output
from bert_ad.inference.prediction_output import format_of as output_format_of
from bert_ad.inference.predictions import BadInstance, Predictions
from bert_ad.inference.streamed_predictions import StreamSettings, predict_stream

from helpers import assert_one_error_line, run_cli_in_process

PAIR = ("text_a", "text_b")
SQUAD = ("question", "context")


def read(data: bytes, fields=PAIR, **settings) -> list:
    return list(read_instances(io.BytesIO(data), "--input_file=x", InputSettings(**settings),
                               fields))


def test_text_lines_are_the_texts_in_order_crlf_and_bom_dropped():
    assert read(b"\xef\xbb\xbfone\r\ntwo\n\nthree") == [(1, "one"), (2, "two"), (3, ""),
                                                      (4, "three")]


def test_tsv_and_csv_columns_by_number_and_by_header_name():
    tsv = b"id\ttitle\tbody\n1\tA title\tits body\n2\tB\tb\n"
    assert read(tsv, input_format="tsv", text_column="title") == [(2, "A title"), (3, "B")]
    assert read(tsv, input_format="tsv", text_column="1", text_b_column="2") == [
        (1, {"text_a": "title", "text_b": "body"}), (2, {"text_a": "A title",
                                                         "text_b": "its body"}),
        (3, {"text_a": "B", "text_b": "b"})]
    csv = b'question,context\n"Who, then?","He said ""no"", then left."\n'
    assert read(csv, SQUAD, input_format="csv", text_column="question",
                text_b_column="context") == [
        (2, {"question": "Who, then?", "context": 'He said "no", then left.'})]


def test_jsonl_instances_as_serve_takes_them_or_named_fields():
    data = b'"plain"\n{"text_a": "a", "text_b": "b"}\n{"tokens": ["x", "y"]}\n'
    assert read(data, input_format="jsonl") == [
        (1, "plain"), (2, {"text_a": "a", "text_b": "b"}), (3, {"tokens": ["x", "y"]})]
    data = b'{"id": 7, "q": "why?", "doc": "because."}\n'
    assert read(data, SQUAD, input_format="jsonl", text_column="q", text_b_column="doc") == [
        (1, {"question": "why?", "context": "because."})]


def test_bad_lines_are_named_by_number():
    found = read(b"ok\n\xff\n", input_format="text")
    assert found[0] == (1, "ok")
    assert found[1] == BadLine(2, "--input_file=x line 2 is not UTF-8 text (its byte 1); "
                                  "convert it to UTF-8 (e.g. iconv -f GBK -t UTF-8)")
    assert read(b"1\ta\n2\n", input_format="tsv", text_column="1")[1] == BadLine(
        2, "--input_file=x line 2 has 1 tab-separated column(s); column 1 (0-based) is missing")
    assert read(b"{\n", input_format="jsonl")[0].message.startswith(
        "--input_file=x line 1 is not JSON (")
    assert read(b'{"q": 1}\n', input_format="jsonl", text_column="q")[0] == BadLine(
        1, "--input_file=x line 1 has no string field 'q' (--text_column)")


CSV_RULE = ("a quote not closed on its line, or text after a closing quote); a record is one "
            'line, a quote inside a quoted field is written "" (RFC 4180)')


def test_a_csv_line_that_is_not_one_record_is_a_bad_line_not_a_text():
    """A quote left open would have read the rest of the line (its commas too)
    as one text; a record split over lines is not read as two."""
    data = b'a,"fine, quoted"\nb,"open, never closed\nc,"x"y\nd,last\n'
    assert read(data, input_format="csv", text_column="1") == [
        (1, "fine, quoted"),
        BadLine(2, "--input_file=x line 2 is not one CSV record (unexpected end of data: "
                + CSV_RULE),
        BadLine(3, "--input_file=x line 3 is not one CSV record (',' expected after '\"': "
                + CSV_RULE),
        (4, "last")]
    with pytest.raises(UserError, match=r"line 1 is not one CSV record .*; the header line "
                       "must be read to find the columns$"):
        read(b'id,"title\n1,a\n', input_format="csv", text_column="title")


def test_format_from_the_name_gzip_and_the_line_count(tmp_path):
    assert [format_of(n, None) for n in ("a.tsv", "a.csv.gz", "a.JSONL", "a.txt", "-")] == [
        "tsv", "csv", "jsonl", "text", "text"]
    assert format_of("a.tsv", "text") == "text"
    path = str(tmp_path / "a.txt.gz")
    with gzip.open(path, "wb") as f:
        f.write(b"x\ny\n")
    with open_input(path) as stream:
        assert read(stream.read()) == [(1, "x"), (2, "y")]
    plain = tmp_path / "b.txt"
    plain.write_bytes(b"1\n2\n3")
    assert (count_lines(str(plain)), count_lines(path), count_lines("-")) == (3, None, None)


def test_output_format_from_the_name_and_gzip_written_whole_or_not_at_all(tmp_path):
    assert [output_format_of(n, None) for n in (
        "a.tsv", "a.TSV.gz", "a.jsonl", "a.txt", "-", "a.tsv.txt", "a.gz")] == [
        "tsv", "tsv", "jsonl", "jsonl", "jsonl", "jsonl", "jsonl"]
    assert output_format_of("a.tsv", "jsonl") == "jsonl"
    path = tmp_path / "a.jsonl.gz"
    with pytest.raises(RuntimeError):
        with open_output(str(path)) as output:
            output.write("first\n")
            raise RuntimeError("a bad line")
    assert os.listdir(tmp_path) == []
    with open_output(str(path)) as output:
        output.write("first\nsecond\n")
    assert os.listdir(tmp_path) == ["a.jsonl.gz"]
    assert gzip.decompress(path.read_bytes()) == b"first\nsecond\n"
    with open_output(str(tmp_path / "b.jsonl")) as output:
        output.write("plain\n")
    assert (tmp_path / "b.jsonl").read_bytes() == b"plain\n"


def test_tsv_output_flattens_answers_under_one_header():
    lines = AnswerLines("tsv").lines([
        {"label": "pos", "probabilities": {"neg": 0.25, "pos": 0.75}},
        {"label": "neg\tx", "probabilities": {"neg": 0.5, "pos": 0.5}}])
    assert lines == ["label\tprobabilities.neg\tprobabilities.pos\n", "pos\t0.25\t0.75\n",
                     "neg x\t0.5\t0.5\n"]
    assert AnswerLines("tsv").lines([{"tokens": ["a", "b"], "tags": ["O", "B-X"],
                                      "entities": [{"type": "X", "start": 1}]}]) == [
        "tokens\ttags\tentities\n", 'a b\tO B-X\t[{"type": "X", "start": 1}]\n']


class _Rows:
    def __init__(self, rows):
        self._rows = rows

    def rows(self):
        return self._rows


class LengthPredictions(Predictions):
    """A stand-in task without a model: a text's answer is itself and its
    length (scored as a row of length + 1 ids); "refused" is an instance it
    does not take."""
    instance_format = "a string"

    def __init__(self):   # no export to read
        pass

    def parse(self, instance):
        if instance == "refused":
            raise BadInstance("is refused")
        return instance

    def featurize(self, parsed):
        return _Rows([{"input_ids": np.arange(len(text) + 1)} for text in parsed])

    def batch_of(self, rows):
        return {"length": np.array([len(row["input_ids"]) - 1 for row in rows])}

    def predict(self, parsed, featurized, outputs):
        return [{"text": text, "length": int(length)}
                for text, length in zip(parsed, outputs["length"])]


def stream(data: bytes, output_format: str, chunk_size: int, skip: bool = True):
    output = io.StringIO()
    counts = predict_stream(read(data), LengthPredictions(), lambda batch: batch, output,
                            output_format, StreamSettings(batch_size=2, chunk_size=chunk_size,
                                                          skip_bad_lines=skip,
                                                          source="--input_file=x"))
    return output.getvalue().splitlines(), counts


NOT_UTF8 = ("--input_file=x line {} is not UTF-8 text (its byte 1); convert it to UTF-8 "
            "(e.g. iconv -f GBK -t UTF-8)")
REFUSED = "--input_file=x line {}: the instance is refused (the task takes a string)"


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 2048])
def test_skipped_bad_lines_keep_their_place_as_errors(chunk_size):
    """--skip_bad_lines: one output line per input line, in order, a bad line's
    error in its place (so the answers join back to the input by position)."""
    data = b"\xff first\none\nrefused\nthree\n\xfe\n"
    got, counts = stream(data, "jsonl", chunk_size)
    assert [json.loads(line) for line in got] == [
        {"error": NOT_UTF8.format(1)}, {"text": "one", "length": 3},
        {"error": REFUSED.format(3)}, {"text": "three", "length": 5},
        {"error": NOT_UTF8.format(5)}]
    assert (counts.answered, counts.skipped, counts.rows) == (2, 3, 2)
    got, _ = stream(data, "tsv", chunk_size)
    assert got == ["text\tlength\terror", "\t\t" + NOT_UTF8.format(1), "one\t3\t",
                   "\t\t" + REFUSED.format(3), "three\t5\t", "\t\t" + NOT_UTF8.format(5)]


def test_an_input_of_bad_lines_only_is_all_errors_and_the_tsv_header_is_error():
    assert stream(b"refused\n\xff\n", "tsv", 1)[0] == [
        "error", REFUSED.format(1), NOT_UTF8.format(2)]
    assert stream(b"", "tsv", 1)[0] == []


def test_without_skip_bad_lines_a_bad_line_stops_the_stream():
    with pytest.raises(UserError, match="line 2: the instance is refused .* nothing was "
                       "written .fix the line, or pass --skip_bad_lines"):
        stream(b"one\nrefused\nthree\n", "jsonl", 1, skip=False)


@pytest.mark.parametrize("args, expected", [
    ([], "--model_dir is required"),
    (["--model_dir=m", "--input_file={missing}", "--output_file=o"],
     "--input_file={missing} is not a file"),
    (["--model_dir=m", "--input_file={titles}", "--output_file=o", "--batch_size=0"],
     "--batch_size=0 must be at least 1"),
    (["--model_dir=m", "--input_file={titles}", "--output_file={titles}"],
     "--output_file={titles} is --input_file={titles}: this run reads it and would write "
     "over it; give another --output_file"),
    (["--model_dir=m", "--input_file={titles_link}", "--output_file={tmp}/./titles.txt"],
     "--output_file={tmp}/./titles.txt is --input_file={titles_link} (the same file by its "
     "real path): this run reads it and would write over it; give another --output_file"),
    (["--model_dir={model}", "--input_file={titles}", "--output_file={model}/sub/../model.onnx"],
     "--output_file={model}/sub/../model.onnx is a file in --model_dir={model}; this run "
     "would write over it: give another --output_file (or remove that file first)"),
    (["--model_dir={model}", "--input_file={titles}", "--output_file={tmp}/model_link"],
     "--output_file={tmp}/model_link is a file in --model_dir={model}; this run would "
     "write over it"),
    (["--model_dir=m", "--input_file={titles}", "--output_file={tmp}/no/such/o.jsonl"],
     "does not exist; create it first"),
    (["--model_dir={tmp}", "--input_file={titles}", "--output_file=-"],
     "is not an export of bert_ad"),
])
def test_bad_flags_are_one_line_before_a_model_is_read(tmp_path, args, expected):
    titles = tmp_path / "titles.txt"
    titles.write_text("a title\n", encoding="utf-8")
    os.symlink("titles.txt", tmp_path / "link.txt")
    os.symlink("model/model.onnx", tmp_path / "model_link")
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "model.onnx").write_bytes(b"weights")
    values = {"missing": str(tmp_path / "missing.txt"), "titles": str(titles),
              "titles_link": str(tmp_path / "link.txt"), "tmp": str(tmp_path),
              "model": str(model)}
    done = run_cli_in_process(predict_cli.cli, ["bert-ad predict"] + [
        a.format(**values) for a in args])
    assert_one_error_line(done, expected.format(**values))
    assert sorted(os.listdir(tmp_path)) == ["link.txt", "model", "model_link", "titles.txt"]
    assert titles.read_text(encoding="utf-8") == "a title\n"
    assert sorted(os.listdir(model)) == ["model.onnx", "sub"]
    assert (model / "model.onnx").read_bytes() == b"weights"


@pytest.mark.parametrize("kept, what", [(".partial", "the answers kept when stopped,"),
                                        (".partial.json", "their record,")])
def test_an_input_where_a_stopped_run_keeps_its_answers_is_refused(tmp_path, kept, what):
    """The input named as a stopped run's partial answers or their record
    (bert_ad/inference/resumable_output.py) would be cut: refused before anything."""
    texts = tmp_path / f"answers.jsonl{kept}"
    texts.write_text("a title\n", encoding="utf-8")
    done = run_cli_in_process(predict_cli.cli, [
        "bert-ad predict", "--model_dir=m", f"--input_file={texts}",
        f"--output_file={tmp_path}/answers.jsonl"])
    assert_one_error_line(done, f"{what} {texts} is --input_file={texts}: this run reads it "
                          "and would write over it; give another --output_file")
    assert os.listdir(tmp_path) == [texts.name]
    assert texts.read_text(encoding="utf-8") == "a title\n"
