"""CoNLL reader and predict.txt writer: line numbers, layouts, errors by message."""

from __future__ import annotations

import pytest

from bert_ad.data.conll import (prediction_lines, read_conll, token_separator,
                               write_predictions)
from bert_ad.errors import UserError


def write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_reads_sentences_with_their_line_numbers(tmp_path):
    path = write(tmp_path, "train.txt", (
        b"-DOCSTART- -X- -X- O\n"
        b"\n"
        b"EU NNP B-ORG\n"
        b"rejects VBZ O\n"
        b"\n"
        b"\n"
        b"Peter NNP B-PER\n"
        b"-DOCSTART- -X- -X- O\n"
        b"Blackburn NNP I-PER\n"))
    conll = read_conll(path)
    assert [s.tokens for s in conll.sentences] == [["EU", "rejects"], ["Peter"], ["Blackburn"]]
    assert [s.tags for s in conll.sentences] == [["B-ORG", "O"], ["B-PER"], ["I-PER"]]
    assert [s.line_numbers for s in conll.sentences] == [[3, 4], [7], [9]]
    assert conll.num_columns == 3 and conll.has_tags
    assert len(conll.lines) == 9


def test_columns_are_selectable_and_tabs_spaces_crlf_bom_accepted(tmp_path):
    path = write(tmp_path, "x.txt", b"\xef\xbb\xbf" + "B-LOC\t北 x\r\nI-LOC  京\tx\r\n".encode())
    conll = read_conll(path, token_column=1, label_column=0)
    assert conll.sentences[0].tokens == ["北", "京"]
    assert conll.sentences[0].tags == ["B-LOC", "I-LOC"]
    assert conll.lines == ["B-LOC\t北 x", "I-LOC  京\tx"]


def test_ideographic_space_is_a_token_not_a_separator(tmp_path):
    path = write(tmp_path, "x.txt", "\u3000\tO\n中\tS\n".encode())
    assert read_conll(path).sentences[0].tokens == ["\u3000", "中"]


def test_tokens_only_file_for_prediction(tmp_path):
    path = write(tmp_path, "test.txt", b"a\nb\n\nc\n")
    conll = read_conll(path, require_tags=False)
    assert not conll.has_tags
    assert [s.tokens for s in conll.sentences] == [["a", "b"], ["c"]]
    assert conll.sentences[0].tags is None
    with pytest.raises(UserError, match=r"test.txt line 1: token 'a' has no tag"):
        read_conll(path)


def test_label_column_none_ignores_tags(tmp_path):
    path = write(tmp_path, "test.txt", b"a X\nb Y\n")
    conll = read_conll(path, label_column=None)
    assert conll.sentences[0].tokens == ["a", "b"] and not conll.has_tags


@pytest.mark.parametrize("data, label_column, message", [
    (b"", -1, r"bad\.txt is empty"),
    (b"\xef\xbb\xbf\r\n \n\t\n", -1, r"bad\.txt is empty"),
    (b"-DOCSTART- O\n\n-DOCSTART- O\n", -1, r"bad\.txt has no sentence"),
    (b"a O\nb\nc O\n", -1, r"bad\.txt line 2: token 'b' has no tag"),
    (b"a NN O\n\nb O\n", -1, r"bad\.txt line 3: 2 columns, but line 1 has 3"),
    (b"\na O\nb O\n", 5, r"bad\.txt line 2: 2 columns, so --label_column=5 is out of range"),
    (b"a O\n\xff\n", -1, r"bad\.txt: not UTF-8 text \(byte 4\)"),
])
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, data, label_column, message):
    path = write(tmp_path, "bad.txt", data)
    with pytest.raises(UserError, match=message) as error:
        read_conll(path, label_column=label_column)
    assert "\n" not in str(error.value)


def test_same_token_and_label_column_is_refused(tmp_path):
    path = write(tmp_path, "x.txt", b"a O\n")
    with pytest.raises(UserError, match="name the same column"):
        read_conll(path, token_column=1, label_column=-1)


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        read_conll(str(tmp_path / "nope.txt"))


@pytest.mark.parametrize("text", [
    # 5 sentences (does not divide by a batch of 2), runs of blank lines,
    # trailing blank lines, CRLF, DOCSTART lines.
    "-DOCSTART- -X- O\r\n\r\nw1 B-PER\r\nw2 I-PER\r\n\r\n\r\n\r\nw3 O\r\n\r\n"
    "w4\tB-LOC\r\nw5\tO\r\n-DOCSTART- -X- O\r\nw6 O\r\n\r\nw7 S\r\n\r\n\r\n",
    # no final newline
    "w1 B-PER\nw2 I-PER\n\nw3 O\n\n\nw4 O\nw5 O\n\nw6 O\n\nw7 O",
    # leading blank lines
    "\n\n  \nw1 O\n\nw2 O",
])
def test_predict_file_lines_up_with_the_input_line_by_line(tmp_path, text):
    path = write(tmp_path, "test.txt", text.encode())
    conll = read_conll(path)
    predicted = [[f"P{i}-{j}" for j in range(len(s.tokens))]
                 for i, s in enumerate(conll.sentences)]
    out = write_predictions(str(tmp_path / "out" / "predict.txt"), conll, predicted)
    with open(out, encoding="utf-8", newline="") as f:
        written = f.read()
    assert written.endswith("\n") and "\r" not in written
    input_lines = [line.rstrip("\r") for line in text.split("\n")]
    if text.endswith("\n"):
        input_lines.pop()
    output_lines = written.split("\n")[:-1]
    assert len(output_lines) == len(input_lines)
    expected_tags = iter(tag for tags in predicted for tag in tags)
    for given, produced in zip(input_lines, output_lines):
        columns = given.split()
        if not columns:
            assert produced == ""
        elif columns[0] == "-DOCSTART-":
            assert produced == given
        else:
            separator = "\t" if "\t" in given else " "
            assert produced == columns[0] + separator + next(expected_tags)
    assert next(expected_tags, None) is None


def test_prediction_lines_checks_counts(tmp_path):
    conll = read_conll(write(tmp_path, "x.txt", b"a O\nb O\n\nc O\n"))
    with pytest.raises(ValueError, match="1 predicted sentences for 2"):
        prediction_lines(conll, [["O", "O"]])
    with pytest.raises(ValueError, match="1 predicted tags for 2 tokens"):
        prediction_lines(conll, [["O"], ["O"]])


def test_token_separator(tmp_path):
    chinese = read_conll(write(tmp_path, "zh.txt", "江\tB-PER\n泽\tI-PER\n\nA\tO\n".encode()))
    english = read_conll(write(tmp_path, "en.txt", b"New B-LOC\nYork I-LOC\n\nA O\n"))
    assert token_separator(chinese) == "" and token_separator(english) == " "
