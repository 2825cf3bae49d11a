"""`bert-ad data prepare peoples_daily_mrc`: People's Daily's entities as SQuAD v2.0 questions.

* A hand-read sentence: times merged, persons as peoples_daily_ner merges
  them, each mention an answer at its character offset, a question per type,
  unanswerable where the type is absent.
* The first 300 corpus lines through the command: files our SQuAD reader
  accepts with --version_2_with_negative, the same sentences and split as
  peoples_daily_ner and, per type, exactly its entities; the same bytes twice.
"""

from __future__ import annotations

import json
import os

from bert_ad.data import peoples_daily
from bert_ad.data.conll import read_conll
from bert_ad.data.peoples_daily_mrc import QUESTIONS, mentions, mrc_segments, paragraph_entry
from bert_ad.data.squad_json import read_squad_file
from bert_ad.data.tag_schemes import extract_spans

from prepare_command import run_prepare

LINE = ("１２月/t  ３１日/t  ，/w  中共中央/nt  总书记/n  江/nr  泽民/nr  在/p  北京/ns  "
        "发表/v  讲话/n  。/w")


def test_a_sentence_becomes_a_question_per_type():
    words = peoples_daily.parse_pos_line(LINE, "199801.txt", 4)
    assert mrc_segments(words) == [
        ("１２月３１日", "TIME"), ("，", None), ("中共中央", "ORG"), ("总书记", None),
        ("江泽民", "PER"), ("在", None), ("北京", "LOC"), ("发表", None), ("讲话", None),
        ("。", None)]
    text, found = mentions(mrc_segments(words))
    # １２月３１日 0-5, ， 6, 中共中央 7-10, 总书记 11-13, 江泽民 14-16, 在 17, 北京 18-19.
    assert text == "１２月３１日，中共中央总书记江泽民在北京发表讲话。"
    assert found == {"PER": [{"text": "江泽民", "answer_start": 14}],
                     "LOC": [{"text": "北京", "answer_start": 18}],
                     "ORG": [{"text": "中共中央", "answer_start": 7}],
                     "TIME": [{"text": "１２月３１日", "answer_start": 0}]}
    # Two sentences; the second has a place twice and nothing else.
    second = peoples_daily.parse_pos_line("北京/ns  和/c  北京/ns  。/w", "199801.txt", 5)
    entry = paragraph_entry("dev", 7, 4, [words, second])
    assert entry["title"] == "199801.txt line 4"
    qas = entry["paragraphs"][1]["qas"]
    assert [qa["id"] for qa in qas] == ["pd-dev-000008-PER", "pd-dev-000008-LOC",
                                        "pd-dev-000008-ORG", "pd-dev-000008-TIME"]
    assert [qa["question"] for qa in qas] == list(QUESTIONS.values())
    assert qas[1]["answers"] == [{"text": "北京", "answer_start": 0},
                                 {"text": "北京", "answer_start": 3}]
    assert [qa["is_impossible"] for qa in qas] == [True, False, True, True]
    assert qas[0]["answers"] == []


def _head(path: str, target: str, count: int) -> str:
    with open(path, encoding="utf-8") as f:
        lines = [next(f) for _ in range(count)]
    with open(target, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return target


def test_the_first_300_lines_hold_the_ner_sets_entities(tmp_path, peoples_daily_corpus):
    source = _head(peoples_daily_corpus, str(tmp_path / "199801.txt"), 300)
    run = run_prepare("peoples_daily_mrc", f"--output_dir={tmp_path / 'mrc'}",
                      f"--source={source}")
    assert run.returncode == 0, run.stderr
    assert "wrote" in run.stdout and "answerable" in run.stdout
    ner = peoples_daily.prepare("peoples_daily_ner", str(tmp_path / "ner"),
                                source_path=source)
    assert ner["paragraphs"] == {"train": 240, "dev": 30, "test": 30}
    for split in ("train", "dev", "test"):
        path = str(tmp_path / "mrc" / f"{split}.json")
        squad = read_squad_file(path, version_2_with_negative=True, require_answers=True)
        sentences = read_conll(str(tmp_path / "ner" / f"{split}.txt")).sentences
        # The NER set's sentences, in order, four questions each.
        assert squad.contexts == ["".join(s.tokens) for s in sentences]
        assert len(squad.questions) == 4 * len(sentences)
        for index, sentence in enumerate(sentences):
            expected = {kind: [] for kind in QUESTIONS}
            for span in extract_spans(sentence.tags):
                expected[span.type].append(("".join(sentence.tokens[span.start:span.end]),
                                            span.start))
            for question in squad.questions[4 * index:4 * index + 3]:   # PER, LOC, ORG
                kind = question.id.rsplit("-", 1)[1]
                assert question.id == f"pd-{split}-{index:06d}-{kind}"
                assert [(a.text, a.start) for a in question.answers] == expected[kind]
                assert question.is_impossible == (not expected[kind])
        with open(path, encoding="utf-8") as f:
            assert json.load(f)["version"] == "v2.0"
    times = [q for q in read_squad_file(str(tmp_path / "mrc" / "train.json"), True, True
                                        ).questions if q.id.endswith("TIME")]
    assert sum(len(q.answers) for q in times) > 50
    # Deterministic: built again, the same bytes.
    again = run_prepare("peoples_daily_mrc", f"--output_dir={tmp_path / 'again'}",
                        f"--source={source}")
    assert again.returncode == 0, again.stderr
    for name in ("train.json", "dev.json", "test.json", "stats.txt"):
        with open(tmp_path / "mrc" / name, "rb") as a, open(tmp_path / "again" / name,
                                                             "rb") as b:
            assert a.read() == b.read(), name
    readme = (tmp_path / "mrc" / "README.txt").read_text(encoding="utf-8")
    assert "文中提到了哪些地点？" in readme and "is_impossible" in readme
    assert os.path.exists(tmp_path / "mrc" / "stats.txt")
