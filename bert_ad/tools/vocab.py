"""Move a BERT checkpoint onto another vocabulary, or add words to its own.

  python -m bert_ad.vocab transplant --checkpoint CKPT --target_vocab vocab.txt \\
      --output_dir OUT [--source_vocab pieces.tsv|vocab.txt]
  python -m bert_ad.vocab extend --checkpoint CKPT --words words.txt --output_dir OUT

`transplant` rebuilds `bert/embeddings/word_embeddings` (and
`cls/predictions/output_bias` when present) row by row for the target vocab,
from the source model's rows: copied from the source's own piece, averaged
over the pieces the source tokenizer cuts the token into, or fresh (the rules
are bert_ad/tools/vocab_sources.py). Fresh rows are drawn like BERT's
initializer (truncated normal, stddev initializer_range) and a fresh output
bias is 0. All other variables are copied unchanged; optimizer state
(adam_m/adam_v, global_step) is left behind, since it belongs to the old
vocab's training run. The output folder gets bert_model.ckpt.*,
bert_config.json (new vocab_size), the target vocab.txt and
transplant_report.txt (the counts, then one line per target token: id,
token, how, source pieces).

`extend` adds domain words (one per line) to a model's vocab.txt and
checkpoint: each new row is the mean of the rows of the word's current
pieces (the MLM output bias likewise), in Google's `[unusedN]` slots first,
then appended (vocab_size grows). Words already in the vocab are reported,
not added twice. Every other row stays as it was, so the model's outputs on
text without the new words do not change. Note that BERT's basic tokenizer
splits CJK characters and punctuation apart before WordPiece: such a word
gets its row, but the tokenizer will not produce it (the report says which).

A piece list (`pieces.tsv`) is extended by bert_ad/tools/vocab_extend.py,
which also picks between the two. Both write through a staging folder renamed
into place; transplant refuses an existing --output_dir, extend replaces one
only with --overwrite.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Dict, List, NamedTuple, Optional

import numpy as np

from bert_ad.parallel.checkpoints import config_mismatch, is_optimizer_state, resolve_checkpoint
from bert_ad.compat import list_checkpoint_variables, load_checkpoint_tensor, tf
from bert_ad.tools.convert import (
    CHECKPOINT_NAME, GOOGLE_CONFIG, VOCAB, staged_output, write_tf_checkpoint)
from bert_ad.errors import fail, require_file
from bert_ad.files import cannot_write
from bert_ad.folders import publish_directory, refuse_foreign_entries, staging_directory
from bert_ad.model.modeling import BertConfig
from bert_ad.data.basic_tokenization import strip_accents
from bert_ad.data.tokenization import (MAX_INPUT_CHARS_PER_WORD, UNK, FullTokenizer, load_vocab,
                                       unused_rows_note, vocab_fits_rows)
from bert_ad.data.unigram import NORMALIZATION_FILE
from bert_ad.tools.vocab_sources import (AVERAGED, COPIED, FRESH, SPECIAL_TOKENS, RowPlan,
                                         load_source, plan_row)

WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"
OUTPUT_BIAS = "cls/predictions/output_bias"
TRANSPLANT_REPORT = "transplant_report.txt"
EXTEND_REPORT = "extend_report.txt"
PIECES = "pieces.tsv"
SPM_MODEL = "sentencepiece.model"
# What `extend` writes (for a WordPiece vocab or a piece list): all its
# --overwrite may replace.
EXTEND_OUTPUTS = (CHECKPOINT_NAME + ".index", CHECKPOINT_NAME + ".data-00000-of-00001",
                  GOOGLE_CONFIG, VOCAB, PIECES, NORMALIZATION_FILE, SPM_MODEL,
                  EXTEND_REPORT)
_UNUSED = re.compile(r"^\[unused\d+\]$")
DEFAULT_SEED = 12345

# --- Checkpoints -----------------------------------------------------------------------

def model_paths(checkpoint: str, bert_config_file: Optional[str]) -> tuple:
    if not checkpoint:
        fail("--checkpoint is not set")
    prefix = resolve_checkpoint(checkpoint, flag="--checkpoint")
    folder = os.path.dirname(os.path.abspath(prefix))
    if not bert_config_file:
        bert_config_file = os.path.join(folder, GOOGLE_CONFIG)
        if not os.path.isfile(bert_config_file):
            fail(f"no {GOOGLE_CONFIG} next to checkpoint {prefix}; pass --bert_config_file")
    return prefix, folder, BertConfig.from_json_file(bert_config_file), bert_config_file


def read_weights(prefix: str, config: BertConfig, config_path: str) -> tuple:
    """({name: array} of the model variables, #optimizer-state variables left out).

    Raises:
      UserError: no word embeddings, or a row count other than vocab_size.
    """
    try:
        variables = list_checkpoint_variables(prefix)
    except (tf.errors.OpError, ValueError) as e:
        fail(f"checkpoint {prefix} cannot be read: {str(e).splitlines()[0]}")
    names = [name for name, _ in variables if not is_optimizer_state(name)]
    if WORD_EMBEDDINGS not in names:
        fail(f"checkpoint {prefix} has no {WORD_EMBEDDINGS}; give a BERT checkpoint")
    weights = {name: np.asarray(load_checkpoint_tensor(prefix, name)) for name in names}
    rows = weights[WORD_EMBEDDINGS].shape[0]
    if rows != config.vocab_size:
        fail(f"checkpoint {prefix} has {rows} word embeddings but vocab_size in "
             f"{config_path} is {config.vocab_size}; give the config of this checkpoint")
    # The folder written carries this config: it must describe these weights.
    mismatch = config_mismatch(prefix, config)
    if mismatch:
        fail(f"--checkpoint={prefix} does not fit --bert_config_file={config_path}: "
             f"{mismatch}; give the bert_config.json the checkpoint was trained with")
    bias = weights.get(OUTPUT_BIAS)
    if bias is not None and bias.shape != (rows,):
        fail(f"checkpoint {prefix}: {OUTPUT_BIAS} has shape {list(bias.shape)}, not [{rows}]")
    return weights, len(variables) - len(names)


def check_piece_rows(pieces_file: str, pieces: int, rows: int, config_path: str) -> None:
    """One line unless the piece list `pieces_file` belongs to the checkpoint whose
    config (`config_path`) gives it `rows` word embeddings (tokenization.vocab_fits_rows)."""
    if not vocab_fits_rows(pieces, rows, piece_list=True):
        fail(f"{pieces_file} has {pieces} pieces but the checkpoint "
             f"{'only ' if pieces > rows else ''}{rows} word embeddings ({config_path})"
             f"{unused_rows_note(pieces, rows, True)}; give the piece list of this model")


def truncated_normal(rows: int, cols: int, stddev: float, seed: int) -> np.ndarray:
    """BERT's initializer in numpy: normal draws beyond 2 stddev drawn again."""
    rng = np.random.RandomState(seed)
    values = rng.standard_normal((rows, cols))
    outside = np.abs(values) > 2.0
    while outside.any():
        values[outside] = rng.standard_normal(int(outside.sum()))
        outside = np.abs(values) > 2.0
    return (values * stddev).astype(np.float32)


def check_output_dir(output_dir: str, overwrite: Optional[bool] = None) -> None:
    """`overwrite`: None for a command without --overwrite (never replaces); with
    it, a folder holding anything `extend` does not write is refused."""
    if not output_dir:
        fail("--output_dir is not set")
    if os.path.exists(output_dir) and not overwrite:
        fail(f"--output_dir {output_dir!r} already exists; give a new folder " +
             ("(nothing is ever overwritten)" if overwrite is None
              else "or pass --overwrite to replace it"))
    refuse_foreign_entries(output_dir, EXTEND_OUTPUTS)


def write_model(output_dir: str, weights: Dict[str, np.ndarray], config: BertConfig,
                files: Dict[str, object], overwrite: bool = False) -> None:
    """Checkpoint, config and `files` ({name: bytes, a source path or a list of
    lines}), built in a staging folder and renamed into place: a new output_dir
    in one step; an existing one (only with `overwrite`) replaced as a whole,
    if it holds nothing but what `extend` writes (bert_ad/folders.py)."""
    if not (overwrite and os.path.exists(output_dir)):
        with staged_output(output_dir, CHECKPOINT_NAME + ".") as staging:
            _write_files(staging, weights, config, files)
        return
    staging = staging_directory(output_dir)
    try:
        _write_files(staging, weights, config, files)
        publish_directory(staging, output_dir, EXTEND_OUTPUTS)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, (OSError, tf.errors.OpError)):
            raise cannot_write(output_dir, e) from e
        raise


def _write_files(staging: str, weights: Dict[str, np.ndarray], config: BertConfig,
                 files: Dict[str, object]) -> None:
    write_tf_checkpoint(weights, os.path.join(staging, CHECKPOINT_NAME))
    with open(os.path.join(staging, GOOGLE_CONFIG), "w", encoding="utf-8") as f:
        f.write(config.to_json_string())
    for name, content in files.items():
        target = os.path.join(staging, name)
        if isinstance(content, bytes):
            with open(target, "wb") as f:
                f.write(content)
        elif isinstance(content, str):
            shutil.copyfile(content, target)
        else:
            with open(target, "w", encoding="utf-8", newline="\n") as f:
                f.write("".join(line + "\n" for line in content))


def with_vocab_size(config: BertConfig, vocab_size: int) -> BertConfig:
    values = config.to_dict()
    values["vocab_size"] = vocab_size
    return BertConfig.from_dict(values)


# --- transplant ------------------------------------------------------------------------

class TransplantResult(NamedTuple):
    output_dir: str
    counts: Dict[str, int]   # copied / averaged / fresh
    plans: List[RowPlan]     # per target id
    left_out: int            # optimizer-state variables not carried over

    def summary(self) -> str:
        total = sum(self.counts.values())
        line = (f"wrote {self.output_dir}: {total} rows, {self.counts[COPIED]} copied, "
                f"{self.counts[AVERAGED]} averaged, {self.counts[FRESH]} fresh")
        if self.left_out:
            line += f" (left out {self.left_out} optimizer-state variables)"
        return line


def load_target_vocab(path: str) -> List[str]:
    """The tokens of the target vocab.txt, checked for the five special tokens."""
    require_file(path, "--target_vocab")
    vocab = load_vocab(path)
    missing = [t for t in SPECIAL_TOKENS if t not in vocab]
    if missing:
        fail(f"target vocab {path!r} lacks {', '.join(missing)}; a transplant needs "
             f"{', '.join(SPECIAL_TOKENS)}")
    return list(vocab)


def transplant(checkpoint: str, target_vocab: str, output_dir: str,
               source_vocab: Optional[str] = None, bert_config_file: Optional[str] = None,
               source_do_lower_case: bool = False, seed: int = DEFAULT_SEED
               ) -> TransplantResult:
    """Write `checkpoint` moved onto `target_vocab` into the new `output_dir`.

    Args:
      checkpoint: a checkpoint prefix, or a folder holding bert_model.ckpt.
      target_vocab: the new WordPiece vocab.txt (LF or CRLF).
      output_dir: a folder that does not exist yet.
      source_vocab: the checkpoint's tokenizer: a WordPiece vocab.txt or a
        unigram `piece<TAB>score` list; default vocab.txt, else pieces.tsv,
        beside the checkpoint.
      bert_config_file: default bert_config.json beside the checkpoint.
      source_do_lower_case: lower-case target tokens before looking them up
        in a WordPiece source (an uncased source).
      seed: for the fresh rows.
    Returns:
      TransplantResult; the per-row plan is also in transplant_report.txt.
    """
    check_output_dir(output_dir)
    prefix, folder, config, config_path = model_paths(checkpoint, bert_config_file)
    if not source_vocab:
        source_vocab = next((os.path.join(folder, name) for name in (VOCAB, PIECES)
                             if os.path.isfile(os.path.join(folder, name))), None)
        if source_vocab is None:
            fail(f"no {VOCAB} or {PIECES} next to checkpoint {prefix}; pass --source_vocab")
    source = load_source(source_vocab, source_do_lower_case)
    tokens = load_target_vocab(target_vocab)
    weights, left_out = read_weights(prefix, config, config_path)
    piece_list = source.kind == "unigram"
    if not vocab_fits_rows(source.size, config.vocab_size, piece_list):
        fail(f"--source_vocab {source_vocab} has {source.size} entries but the checkpoint "
             f"{'only ' if source.size > config.vocab_size else ''}{config.vocab_size} word "
             f"embeddings{unused_rows_note(source.size, config.vocab_size, piece_list)}; "
             "give the tokenizer of this model")

    plans = [plan_row(source, token) for token in tokens]
    old_rows = weights[WORD_EMBEDDINGS]
    new_rows = truncated_normal(len(tokens), old_rows.shape[1], config.initializer_range, seed)
    old_bias = weights.get(OUTPUT_BIAS)
    new_bias = np.zeros(len(tokens), np.float32)
    for target_id, plan in enumerate(plans):
        if plan.source_ids:
            new_rows[target_id] = old_rows[plan.source_ids].mean(0)
            if old_bias is not None:
                new_bias[target_id] = old_bias[plan.source_ids].mean()
    weights[WORD_EMBEDDINGS] = new_rows
    if old_bias is not None:
        weights[OUTPUT_BIAS] = new_bias

    counts = {how: sum(p.how == how for p in plans) for how in (COPIED, AVERAGED, FRESH)}
    report = [f"# transplant of {prefix} ({source.kind} tokenizer {source_vocab}) onto "
              f"{target_vocab}"]
    report += [f"{how}\t{counts[how]}" for how in (COPIED, AVERAGED, FRESH)]
    report.append("# id\ttoken\thow\tsource pieces")
    report += [f"{i}\t{token}\t{plan.how}\t" + " ".join(source.pieces[j] for j in plan.source_ids)
               for i, (token, plan) in enumerate(zip(tokens, plans))]
    write_model(output_dir, weights, with_vocab_size(config, len(tokens)),
                 {VOCAB: target_vocab, TRANSPLANT_REPORT: report})
    return TransplantResult(output_dir, counts, plans, left_out)


# --- extend ----------------------------------------------------------------------------


def not_added_note(present: Dict[str, int], reason: str) -> str:
    """The `; REASON, not added: a, b, ... and N more` part of a summary line ("" if none)."""
    if not present:
        return ""
    note = f"; {reason}, not added: {', '.join(list(present)[:8])}"
    if len(present) > 8:
        note += f" and {len(present) - 8} more"
    return note


class ExtendResult(NamedTuple):
    output_dir: str
    added: Dict[str, int]         # word -> its new id
    present: Dict[str, int]       # word already in the vocab -> its id
    split_apart: List[str]        # added, but FullTokenizer never produces them
    vocab_size: int

    def summary(self) -> str:
        line = (f"wrote {self.output_dir}: added {len(self.added)} word(s), vocab_size "
                f"{self.vocab_size}")
        line += not_added_note(self.present, "already in the vocab")
        if self.split_apart:
            line += (f"; {len(self.split_apart)} added word(s) hold CJK characters or "
                     "punctuation, which the basic tokenizer splits apart (see "
                     f"{EXTEND_REPORT})")
        return line


def read_words(path: str) -> List[str]:
    """The words of a one-word-per-line file; blank lines are skipped."""
    require_file(path, "--words")
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        fail(f"--words {path!r} is not UTF-8 (byte {e.start}); save it as UTF-8")
    words = []
    for number, line in enumerate(text.split("\n"), start=1):
        word = line.strip()
        if not word:
            continue
        if len(word.split()) > 1:
            fail(f"--words {path!r} line {number} holds whitespace ({word!r}); a vocab "
                 "token is one word, give one per line")
        if len(word) > MAX_INPUT_CHARS_PER_WORD:
            # WordPiece reads a longer word as [UNK]; a piece list bounds its pieces alike.
            fail(f"--words {path!r} line {number} holds a word of {len(word):,} characters "
                 f"({word[:20]!r}...); a vocab entry is at most {MAX_INPUT_CHARS_PER_WORD} "
                 "characters: give words, one per line")
        words.append(word)
    if not words:
        fail(f"--words {path!r} has no words; give one word per line")
    return words


def _vocab_lines(path: str) -> tuple:
    """(raw lines without their line end, the line end to use for new lines)."""
    with open(path, "rb") as f:
        data = f.read()
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    newline = b"\r\n" if lines and lines[0].endswith(b"\r") else b"\n"
    return [line[:-1] if line.endswith(b"\r") else line for line in lines], newline


def extend(checkpoint: str, words_file: str, output_dir: str,
           vocab_file: Optional[str] = None, bert_config_file: Optional[str] = None,
           do_lower_case: bool = True, seed: int = DEFAULT_SEED,
           overwrite: bool = False) -> ExtendResult:
    """Add the words of `words_file` to a model's WordPiece vocab and checkpoint.

    Args:
      checkpoint: a checkpoint prefix, or a folder holding bert_model.ckpt.
      words_file: one word per line (UTF-8).
      output_dir: a folder that does not exist yet.
      vocab_file, bert_config_file: default vocab.txt / bert_config.json
        beside the checkpoint.
      do_lower_case: the model's tokenizer lower-cases (an uncased model); the
        words are then added lower-cased and without accents.
      seed: for words none of whose pieces is known (their row starts fresh).
      overwrite: replace an existing output_dir.
    Returns:
      ExtendResult; per word details are in extend_report.txt.
    """
    check_output_dir(output_dir, overwrite)
    prefix, folder, config, config_path = model_paths(checkpoint, bert_config_file)
    vocab_file = vocab_file or os.path.join(folder, VOCAB)
    require_file(vocab_file, "--vocab_file")
    tokenizer = FullTokenizer(vocab_file, do_lower_case)
    words = read_words(words_file)
    weights, left_out = read_weights(prefix, config, config_path)
    if tokenizer.vocab_size != config.vocab_size:
        fail(f"vocab mismatch: {vocab_file} has {tokenizer.vocab_size} lines but "
             f"vocab_size in {config_path} is {config.vocab_size}")

    # Means come from the rows as they were; slots are filled in a copy.
    old_rows, old_bias = weights[WORD_EMBEDDINGS], weights.get(OUTPUT_BIAS)
    rows = old_rows.copy()
    bias = None if old_bias is None else old_bias.copy()
    free_slots = [i for token, i in tokenizer.vocab.items() if _UNUSED.match(token)]
    lines, newline = _vocab_lines(vocab_file)
    added, present, split_apart, report = {}, {}, [], []
    new_rows, new_bias = [], []
    fresh = truncated_normal(len(words), rows.shape[1], config.initializer_range, seed)
    for n, word in enumerate(words):
        token = strip_accents(word.lower()) if do_lower_case else word
        if token in added:
            report.append(f"{token}\t{added[token]}\trepeated in --words\t")
            continue
        if token in tokenizer.vocab:
            present[token] = tokenizer.vocab[token]
            report.append(f"{token}\t{present[token]}\talready in the vocab\t")
            continue
        pieces = [p for p in tokenizer.tokenize(token) if p != UNK]
        ids = tokenizer.convert_tokens_to_ids(pieces)
        row = old_rows[ids].mean(0) if ids else fresh[n]
        row_bias = float(old_bias[ids].mean()) if ids and old_bias is not None else 0.0
        if free_slots:
            new_id = free_slots.pop(0)
            how = f"slot {tokenizer.inv_vocab[new_id]}"
            rows[new_id] = row
            if bias is not None:
                bias[new_id] = row_bias
            lines[new_id] = token.encode("utf-8")
        else:
            new_id = len(lines)
            how = "appended"
            new_rows.append(row)
            new_bias.append(row_bias)
            lines.append(token.encode("utf-8"))
        added[token] = new_id
        if tokenizer.basic_tokenize(token) != [token]:
            split_apart.append(token)
            how += " (split apart by the basic tokenizer)"
        report.append(f"{token}\t{new_id}\t{how}\t{' '.join(pieces) or 'fresh'}")

    weights[WORD_EMBEDDINGS] = np.concatenate([rows, np.array(new_rows, np.float32)
                                               .reshape(-1, rows.shape[1])])
    if bias is not None:
        weights[OUTPUT_BIAS] = np.concatenate([bias, np.array(new_bias, np.float32)])
    header = [f"# extend of {prefix} ({vocab_file}) with {words_file}",
              f"added\t{len(added)}", f"present\t{len(present)}",
              "# word\tid\thow\tpieces its row is the mean of"]
    write_model(output_dir, weights, with_vocab_size(config, len(lines)),
                {VOCAB: newline.join(lines) + newline, EXTEND_REPORT: header + report},
                overwrite)
    return ExtendResult(output_dir, added, present, split_apart, len(lines))
