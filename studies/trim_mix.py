"""How much English does a trimmed e5 need? The table behind the default's English mix.

  python -m studies.trim_mix FULL_DIR TRIM_CORPUS_DIR FROM_NONE_DIR

FULL_DIR: the converted multilingual-e5 (pieces.tsv); TRIM_CORPUS_DIR: `bert-ad data
prepare trim_corpus`; FROM_NONE_DIR: `python -m studies.trim_segmentation from_none`.
Each row keeps a set of pieces; a held-out line agrees when every piece of its
full-list segmentation is kept, which is exactly when the trimmed reader segments it
the same way (a split can only use kept pieces, and the full list's best split is
still the best). Pure set arithmetic: no model is written.
"""

from __future__ import annotations

import os
import sys

from bert_ad.data.unigram import CONTROL_PIECES, UNK_PIECE, WORD_START, UnigramTokenizer
from bert_ad.tools.trim_inputs import (piece_chars, piece_of_scripts, single_of_scripts,
                                       word_forms, word_list_words)

CHINESE_ALL = ["han", "cjk_punct", "fullwidth", "general_punct", "digits", "ascii_punct"]
FIRST_SINGLES = ["han", "cjk_punct", "fullwidth", "general_punct", "latin", "bopomofo"]
HELD_OUT = (("reviews", "heldout/reviews.txt"), ("Pang & Lee", "heldout/pang_lee.txt"),
            ("Lee docs", "heldout/lee.txt"), ("Wikipedia", "heldout/wikipedia.txt"))


def _lines(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.strip() for line in f if line.strip()]


def main(argv) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    full_dir, corpus, none_dir = argv
    full = UnigramTokenizer.from_file(os.path.join(full_dir, "pieces.tsv"))
    pieces, scores = full.pieces, full.scores

    def used(*names):
        ids = set()
        for name in names:
            for line in _lines(os.path.join(corpus, "train", name + ".txt")):
                ids.update(full.encode(line))
        return ids

    control = {i for i, p in enumerate(pieces)
               if p in set(CONTROL_PIECES) | {UNK_PIECE, WORD_START}}
    base = control | {i for i, p in enumerate(pieces) if single_of_scripts(p, FIRST_SINGLES)
                      or piece_of_scripts(p, CHINESE_ALL)}
    chinese = base | used("reviews", "peoples_daily")
    english = chinese | used("pang_lee", "lee")
    latin_by_score = sorted((i for i, p in enumerate(pieces) if piece_of_scripts(p, ["latin"])
                             and i not in english), key=lambda i: -scores[i])
    words = word_list_words(os.path.join(corpus, "words", "en_lexicon.txt"))
    as_given = {i for w in words for i in full.encode(w)}
    all_forms = {i for w in words for form in word_forms(w) for i in full.encode(form)}
    short = {i for i, p in enumerate(pieces)
             if len(piece_chars(p)) <= 3 and piece_of_scripts(p, ["ascii"])}
    lexicon = english | all_forms | short
    wikipedia = lexicon | used("wikipedia")
    every_single = wikipedia | {i for i, p in enumerate(pieces) if len(piece_chars(p)) == 1}
    rows = [
        ("Chinese corpora only (reviews, People's Daily)", chinese),
        ("+ the English corpora (Pang & Lee, Lee)", english),
        ("  + the 40,000 best-scored Latin pieces", english | set(latin_by_score[:40000])),
        ("  + Brill's lexicon, words as given", english | as_given),
        ("+ the lexicon as given, capitalised, in capitals", english | all_forms),
        ("+ every ASCII piece of at most 3 characters", lexicon),
        ("+ the Wikipedia sample", wikipedia),
        ("+ every single-character piece (the default)", every_single),
    ]
    held = [(label, [set(full.encode(line)) for line in
                     _lines(os.path.join(corpus, path))]) for label, path in HELD_OUT]
    held.append(("OANC (from none)", [set(full.encode(line)) for line in
                                      _lines(os.path.join(none_dir, "oanc_en.txt"))]))
    print("| kept | pieces | " + " | ".join(label for label, _ in held) + " |")
    print("|---|---:|" + "---:|" * len(held))
    for label, kept in rows:
        cells = [f"{100 * sum(s <= kept for s in sets) / len(sets):.1f} %" for _, sets in held]
        print(f"| {label} | {len(kept):,} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
