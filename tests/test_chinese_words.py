"""Word boundaries for Chinese whole-word masking, and the domain text built with them."""

from __future__ import annotations

import os

from bert_ad.pretraining.chinese_words import build_lexicon, forward_max_match
from helpers import assert_one_error_line
from prepare_command import run_prepare


def test_the_lexicon_keeps_frequent_short_chinese_words():
    words = (["中国"] * 2 + ["人民"] * 3 + ["银行"] + ["中华人民共和国"] * 5 + ["GDP"] * 4
             + ["的"] * 9)
    assert build_lexicon(words) == {"中国", "人民"}
    assert build_lexicon(words, min_count=1) == {"中国", "人民", "银行"}
    assert build_lexicon(words, max_length=7) == {"中国", "人民", "中华人民共和国"}


def test_forward_maximum_matching_takes_the_longest_word_first():
    lexicon = {"中国", "中国人", "人民", "银行"}
    # Greedy from the left: 中国人 wins over 中国, which leaves 民 alone
    # (what forward maximum matching does; a trained segmenter would say 中国 人民).
    assert forward_max_match("中国人民银行", lexicon) == ["中国人", "民", "银行"]
    assert forward_max_match("中国人民银行", lexicon, max_length=2) == ["中国", "人民", "银行"]


def test_other_characters_stay_together_and_spaces_go():
    assert forward_max_match("买了iPhone 12，很好", {"买了"}) == [
        "买了", "iPhone", "12，", "很", "好"]
    assert forward_max_match("  ", {"买了"}) == []


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def test_domain_text_uses_only_training_text_and_holds_out_the_tail(tmp_path):
    reviews = tmp_path / "reviews"
    train_texts = [f"手机{'很好' if i % 2 else '不好'}第{i}" for i in range(20)]
    _write(str(reviews / "train.tsv"),
           "".join(f"{i % 2}\t{text}\n" for i, text in enumerate(train_texts)))
    _write(str(reviews / "dev.tsv"), "1\t开发集的句子\n")
    _write(str(reviews / "test.tsv"), "0\t测试集的句子\n")
    # 10 paragraphs: the NER split puts 8 in train, 1 dev, 1 test.
    corpus = str(tmp_path / "199801.txt")
    _write(corpus, "".join(f"手机/n  很/d  好/a  段落{i}/m  。/w\n" for i in range(10)))
    out = tmp_path / "text"
    command = ["domain_text", "--reviews_dir", str(reviews),
               "--peoples_daily", corpus, "--output_dir", str(out)]
    run = run_prepare(*command, "--heldout_fraction", "0.25")
    assert run.returncode == 0, run.describe()

    def lines(name):
        with open(str(out / name), encoding="utf-8") as f:
            return f.read().splitlines()
    # 手机 appears 10 times in the corpus: a lexicon word; 很好 is two words there.
    expected_reviews = [" ".join(forward_max_match(t, {"手机"})) for t in train_texts]
    assert expected_reviews[0] == "手机 不 好 第 0"
    paragraphs = [f"手机 很 好 段落{i} 。" for i in range(8)]
    assert lines("train.txt") == expected_reviews[:15] + paragraphs[:6]
    assert lines("heldout.txt") == expected_reviews[15:] + paragraphs[6:]
    everything = "\n".join(lines("train.txt") + lines("heldout.txt"))
    assert "开发" not in everything and "测试" not in everything
    assert "段落8" not in everything and "段落9" not in everything

    again = run_prepare(*command)
    assert_one_error_line(again, f"{out}/train.txt exists; give a new --output_dir")
    assert lines("heldout.txt") == expected_reviews[15:] + paragraphs[6:]
