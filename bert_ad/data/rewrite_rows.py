"""Text-rewrite rows made from raw texts: train.tsv and dev.tsv for the rewrite task.

The row format (segments, slots, the four columns) is bert_ad/data/rewrite_format.py.

`prepare` turns raw texts (one per line) into train.tsv / dev.tsv of such
rows: duplicate texts are kept once, texts with fewer than `min_segments`
segments are skipped (and counted), the texts are split into train and dev
by a seeded shuffle before any row is made (a text, its slots and its
negatives stay on one side), and each slot gets `negatives` candidates drawn
from other texts of the same split, different from the original segment and
from each other; with `length_match` they have the original's token count
where the split has such segments (else the nearest counts).
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
from typing import Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from bert_ad.data.datasets import clean_text
from bert_ad.data.rewrite_format import blank_segment, file_lines, segment_spans
from bert_ad.errors import fail
from bert_ad.files import write_lines
from bert_ad.seeds import derive_seed


# ----------------------------------------------------------------------------
# Preparing rows from raw texts
# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class PrepareSettings:
    """How raw texts become rows (flags of `bert-ad data prepare rewrite`)."""

    negatives: int = 3
    length_match: bool = True
    dev_fraction: float = 0.1
    seed: int = 12345
    slots_per_text: int = 1   # 0: every segment of the text is a slot
    min_segments: int = 2
    max_texts: Optional[int] = None

    def check(self) -> None:
        if self.negatives < 1:
            fail(f"--negatives={self.negatives} must be at least 1")
        if not 0.0 < self.dev_fraction < 1.0:
            fail(f"--dev_fraction={self.dev_fraction} must be between 0 and 1")
        if self.slots_per_text < 0:
            fail(f"--slots_per_text={self.slots_per_text} must be 0 (all) or more")
        if self.min_segments < 1:
            fail(f"--min_segments={self.min_segments} must be at least 1")
        if self.max_texts is not None and self.max_texts < 1:
            fail(f"--max_texts={self.max_texts} must be at least 1")


class SourceText(NamedTuple):
    """A raw text with its segments and their token counts."""

    text: str
    spans: List[Tuple[int, int]]
    sizes: List[int]    # tokens per segment
    source: str
    line: int

    def segment(self, i: int) -> str:
        return self.text[slice(*self.spans[i])]


def read_texts(paths: Sequence[str]) -> List[Tuple[str, str, int]]:
    """(text, file, line) of every line of `paths`; tabs and breaks become spaces.

    Raises:
      UserError for a blank line (the input is one text per line) or bad UTF-8.
    """
    texts = []
    for path in paths:
        for number, line in file_lines(path, "input file"):
            text = clean_text(line)
            if not text:
                fail(f"{path} line {number}: empty text; the input is one text "
                     f"per line, so remove blank lines (e.g. grep -v '^\\s*$')")
            texts.append((text, path, number))
    if not texts:
        fail(f"no texts in {', '.join(paths)}")
    return texts


def _derive_rng(seed: int, purpose: str) -> random.Random:
    return random.Random(derive_seed(seed, 0, purpose))


class NegativePool:
    """Segments of one split's texts, by token count, to draw negatives from."""

    def __init__(self, texts: Sequence[SourceText]):
        self.by_size = collections.defaultdict(list)  # size -> [(text id, segment)]
        for t, text in enumerate(texts):
            for i, size in enumerate(text.sizes):
                self.by_size[size].append((t, text.segment(i)))
        self.everything = [entry for size in sorted(self.by_size)
                           for entry in self.by_size[size]]
        self.largest = max(self.by_size) if self.by_size else 0

    def _groups(self, size: int, length_match: bool) -> Iterator[list]:
        if not length_match:
            yield self.everything
            return
        for distance in range(max(size, self.largest) + 1):
            group = list(self.by_size.get(size - distance, [])) if distance else []
            group += self.by_size.get(size + distance, [])
            if group:
                yield group

    def draw(self, text_id: int, original: str, size: int, count: int,
             rng: random.Random, length_match: bool) -> List[str]:
        """Up to `count` distinct segments of other texts, none equal to
        `original`; nearest token counts first with `length_match`."""
        chosen = []  # type: List[str]

        def eligible(entry) -> bool:
            return entry[0] != text_id and entry[1] != original and entry[1] not in chosen

        for group in self._groups(size, length_match):
            need = count - len(chosen)
            # Large groups: random probes find eligible entries fast.
            for _ in range(8 * need if len(group) > 64 else 0):
                entry = group[rng.randrange(len(group))]
                if eligible(entry):
                    chosen.append(entry[1])
                    if len(chosen) == count:
                        return chosen
            rest = list(collections.OrderedDict(
                (entry[1], None) for entry in group if eligible(entry)))
            rng.shuffle(rest)
            chosen.extend(rest[:count - len(chosen)])
            if len(chosen) == count:
                break
        return chosen


class PrepareStats:
    """Counts for the summary and README.txt."""

    def __init__(self):
        self.counts = collections.OrderedDict()

    def add(self, key: str, value: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + value

    def __getitem__(self, key: str) -> int:
        return self.counts.get(key, 0)


def source_texts(texts: Sequence[Tuple[str, str, int]], tokenizer,
                 settings: PrepareSettings, stats: PrepareStats) -> List[SourceText]:
    """Unique texts with at least `min_segments` segments that have tokens."""
    seen = set()
    kept = []
    for text, path, line in texts:
        stats.add("texts read")
        if text in seen:
            stats.add("duplicate texts dropped")
            continue
        seen.add(text)
        spans, sizes = [], []
        for span in segment_spans(text):
            size = len(tokenizer.tokenize(text[slice(*span)]))
            if size:
                spans.append(span)
                sizes.append(size)
        if len(spans) < settings.min_segments:
            stats.add(f"texts with fewer than {settings.min_segments} segments skipped")
            continue
        kept.append(SourceText(text, spans, sizes, path, line))
        if settings.max_texts is not None and len(kept) >= settings.max_texts:
            break
    return kept


def split_texts(texts: Sequence[SourceText], settings: PrepareSettings
                ) -> Dict[str, List[SourceText]]:
    """{"train": [...], "dev": [...]}: a seeded cut by text, input order kept."""
    order = list(range(len(texts)))
    random.Random(settings.seed).shuffle(order)
    n_dev = int(round(len(texts) * settings.dev_fraction))
    if n_dev < 1 or n_dev >= len(texts):
        fail(f"{len(texts)} usable texts leave "
             f"{'dev' if n_dev < 1 else 'train'} empty with --dev_fraction="
             f"{settings.dev_fraction}; add texts or change the fraction")
    dev = set(order[:n_dev])
    return {"train": [t for i, t in enumerate(texts) if i not in dev],
            "dev": [t for i, t in enumerate(texts) if i in dev]}


def make_rows(texts: Sequence[SourceText], settings: PrepareSettings, purpose: str,
              stats: PrepareStats) -> List[List[str]]:
    """Rows (lists of the 4 columns) for the slots of `texts`.

    Each slot: the positive and its negatives, in a seeded random order.
    """
    rng = _derive_rng(settings.seed, f"rewrite-rows-{purpose}")
    pool = NegativePool(texts)
    rows = []
    for t, text in enumerate(texts):
        indexes = list(range(len(text.spans)))
        if settings.slots_per_text:
            indexes = sorted(rng.sample(indexes, min(settings.slots_per_text,
                                                     len(indexes))))
        for i in indexes:
            original = text.segment(i)
            blanked = blank_segment(text.text, text.spans[i], text.sizes[i])
            negatives = pool.draw(t, original, text.sizes[i], settings.negatives,
                                  rng, settings.length_match)
            stats.add(f"{purpose} slots")
            if len(negatives) < settings.negatives:
                stats.add(f"{purpose} slots with fewer than {settings.negatives} "
                          f"negatives (too few other segments)")
            group = [["1", str(i), original, blanked]]
            group += [["0", str(i), negative, blanked] for negative in negatives]
            rng.shuffle(group)
            rows.extend(group)
            stats.add(f"{purpose} rows", len(group))
    return rows


def prepare(input_files: Sequence[str], output_dir: str, tokenizer,
            settings: PrepareSettings = PrepareSettings(),
            description: str = "") -> PrepareStats:
    """Raw texts -> output_dir/train.tsv, dev.tsv and README.txt.

    Args:
      input_files: UTF-8 files, one text per line.
      output_dir: where the files go (each written whole, then renamed).
      tokenizer: the model's tokenizer; slot sizes and length matching count
        its tokens.
      settings: PrepareSettings.
      description: a line for README.txt (how the tokenizer was chosen).

    Returns:
      The counts (also in README.txt).
    """
    settings.check()
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        fail(f"--output_dir {output_dir!r} is a file; choose a folder")
    stats = PrepareStats()
    texts = source_texts(read_texts(input_files), tokenizer, settings, stats)
    splits = split_texts(texts, settings)
    rows = {split: make_rows(splits[split], settings, split, stats)
            for split in ("train", "dev")}
    for split in ("train", "dev"):
        stats.add(f"{split} texts", len(splits[split]))
        write_lines(os.path.join(output_dir, f"{split}.tsv"),
                    ("\t".join(row) for row in rows[split]))
    readme = [
        "Text-rewrite rows made by `bert-ad data prepare rewrite` "
        "(bert_ad/data/rewrite_rows.py).",
        f"Input: {', '.join(input_files)}",
    ] + ([description] if description else []) + [
        "Rows: label<TAB>segment_index<TAB>candidate<TAB>text_with_slot; label 1 "
        "= the blanked segment, 0 = a segment of another text of the same split.",
        f"Settings: {dataclasses.asdict(settings)}",
        "",
    ] + [f"{key}: {value}" for key, value in stats.counts.items()]
    write_lines(os.path.join(output_dir, "README.txt"), readme)
    return stats
