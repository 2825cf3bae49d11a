"""Tag schemes: detection, validation by file and line, spans as seqeval reads them."""

from __future__ import annotations

import random

import pytest

from bert_ad.data.conll import read_conll
from bert_ad.data.tag_schemes import (SCHEMES, Span, detect_scheme, extract_spans,
                                      get_scheme, label_list, parse_tag, span_records,
                                      span_types, validate_label_list, validate_tags)
from bert_ad.errors import UserError


def test_parse_tag():
    assert parse_tag("B-PER") == ("B", "PER")
    assert parse_tag("I-ORG-X") == ("I", "ORG-X")
    assert parse_tag("S") == ("S", "")
    assert parse_tag("O") == ("O", "")
    for bad in ("PER", "B-", "O-PER", "", "X-PER", "b-PER", "BI"):
        assert parse_tag(bad) is None, bad


@pytest.mark.parametrize("tags, scheme", [
    (["O", "B-PER", "I-PER"], "BIO"),
    (["O", "I-PER"], "IO"),
    (["O", "O"], "BIO"),
    (["B-PER", "E-PER", "S-LOC", "O", "I-LOC"], "BIOES"),
    (["S-LOC", "O"], "BIOES"),
    (["B", "M", "E", "S"], "BMES"),
    (["B", "E", "S"], "BIOES"),
    (["B-PER", "M-PER", "E-PER", "O"], "BMES"),
    (["B-PER", "PER", "I-PER"], "BIO"),  # unparsable tags are validate_tags' job
])
def test_detect_scheme(tags, scheme):
    assert detect_scheme(tags).name == scheme


def test_detect_scheme_refuses_i_and_m_together():
    with pytest.raises(UserError, match="train.txt has both I and M tags"):
        detect_scheme(["B-X", "I-X", "M-X"], "train.txt")


def test_get_scheme_is_case_insensitive_and_names_the_known_ones():
    assert get_scheme("bioes") is SCHEMES["BIOES"]
    with pytest.raises(UserError, match="unknown --tag_scheme 'IOB2'; known: BIO, BIOES"):
        get_scheme("IOB2")


def _conll(tmp_path, text: str, name: str = "dev.txt"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return read_conll(str(path))


def test_validate_tags_names_file_and_line_of_a_tag_outside_the_scheme(tmp_path):
    conll = _conll(tmp_path, "a B-PER\nb I-PER\n\nc E-PER\n")
    validate_tags(conll, SCHEMES["BIOES"])
    with pytest.raises(UserError, match=r"dev.txt line 4: tag 'E-PER' is not a BIO tag "
                                        r"\(B-TYPE, I-TYPE, O \(or bare B, I\)\)"):
        validate_tags(conll, SCHEMES["BIO"])
    with pytest.raises(UserError, match=r"dev.txt line 1: tag 'B-PER' is not a IO tag"):
        validate_tags(conll, SCHEMES["IO"])


def test_validate_tags_names_a_tag_unseen_in_training(tmp_path):
    conll = _conll(tmp_path, "a B-PER\nb O\n\nc B-MISC\n")
    with pytest.raises(UserError, match=r"dev.txt line 4: tag 'B-MISC' was not seen in "
                                        r"training \(known: O, B-PER, I-PER\)"):
        validate_tags(conll, SCHEMES["BIO"], known_tags=["O", "B-PER", "I-PER"])


def test_validate_tags_refuses_malformed_tags(tmp_path):
    conll = _conll(tmp_path, "a PER\n")
    with pytest.raises(UserError, match=r"line 1: tag 'PER' is not a BIO tag"):
        validate_tags(conll, SCHEMES["BIO"])


def test_validate_label_list():
    validate_label_list(["O", "B-X", "I-X"], SCHEMES["BIO"])
    with pytest.raises(UserError, match=r"--labels: 'S-X' is not a BIO tag"):
        validate_label_list(["O", "S-X"], SCHEMES["BIO"])


def test_label_list_order_and_types():
    tags = ["I-PER", "O", "S-LOC", "B-PER", "E-PER", "B-LOC", "O", "I-PER"]
    assert label_list(tags) == ["O", "B-LOC", "S-LOC", "B-PER", "I-PER", "E-PER"]
    assert label_list(["S", "E", "M", "B"]) == ["B", "M", "E", "S"]
    assert span_types(tags) == ["LOC", "PER"]
    assert span_types(["B", "E", "S"]) == []


@pytest.mark.parametrize("tags, spans", [
    (["B-PER", "I-PER", "O", "B-LOC"], [("PER", 0, 2), ("LOC", 3, 4)]),
    # I after O starts a span (conlleval, seqeval default mode).
    (["O", "I-PER", "I-PER", "O"], [("PER", 1, 3)]),
    # A type change inside a span cuts it.
    (["B-PER", "I-LOC", "I-LOC"], [("PER", 0, 1), ("LOC", 1, 3)]),
    (["B-PER", "B-PER"], [("PER", 0, 1), ("PER", 1, 2)]),
    # BIOES / BMES
    (["B-PER", "E-PER", "S-PER", "S-LOC"], [("PER", 0, 2), ("PER", 2, 3), ("LOC", 3, 4)]),
    (["B-PER", "M-PER", "M-PER", "E-PER", "O"], [("PER", 0, 4)]),
    (["O", "E-PER", "E-PER"], [("PER", 1, 2), ("PER", 2, 3)]),
    (["S-PER", "I-PER", "E-PER"], [("PER", 0, 1), ("PER", 1, 3)]),
    # segmentation: every span is a word
    (["B", "E", "S", "B", "M", "E", "S"], [("", 0, 2), ("", 2, 3), ("", 3, 6), ("", 6, 7)]),
    (["B", "M", "B", "E"], [("", 0, 2), ("", 2, 4)]),
    # IO
    (["I-PER", "I-PER", "I-LOC", "O", "I-LOC"], [("PER", 0, 2), ("LOC", 2, 3), ("LOC", 4, 5)]),
    ([], []),
    (["O"], []),
])
def test_extract_spans(tags, spans):
    assert extract_spans(tags) == [Span(*s) for s in spans]


def _seqeval_view(tags):
    """seqeval does not know M; BMES is BIOES with M for I."""
    return ["I" + t[1:] if t.startswith("M") else t for t in tags]


@pytest.mark.parametrize("letters, types", [
    ("BIO", ["PER", "LOC"]), ("BIOES", ["PER", "LOC", "ORG"]), ("BMES", [""]),
    ("BMESO", ["A", "B"]), ("IO", ["X", "Y"]), ("BIOES", [""]),
])
def test_extract_spans_equals_seqeval_on_random_sequences(letters, types):
    sequence_labeling = pytest.importorskip("seqeval.metrics.sequence_labeling")
    rng = random.Random(len(letters) * 10 + len(types))
    for _ in range(400):
        tags = []
        for _ in range(rng.randint(0, 12)):
            letter = rng.choice(letters)
            kind = rng.choice(types)
            tags.append(letter if letter == "O" or not kind else f"{letter}-{kind}")
        expected = [(kind if kind != "_" else "", start, end + 1) for kind, start, end
                    in sequence_labeling.get_entities(_seqeval_view(tags))]
        assert [tuple(s) for s in extract_spans(tags)] == expected, tags


def test_span_records():
    assert span_records(list("江泽民访美"), ["B-PER", "I-PER", "I-PER", "O", "S-LOC"], "") == [
        {"type": "PER", "start": 0, "end": 3, "text": "江泽民"},
        {"type": "LOC", "start": 4, "end": 5, "text": "美"}]
    assert span_records(["New", "York", "is"], ["B-LOC", "I-LOC", "O"]) == [
        {"type": "LOC", "start": 0, "end": 2, "text": "New York"}]
