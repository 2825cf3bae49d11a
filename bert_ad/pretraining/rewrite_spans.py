"""Span-masked pretraining instances from rewrite rows (create_pretraining_data.py --mode=rewrite).

`[CLS] candidate [SEP] text [SEP]` with the candidate put in the text's slot
and masked there as one span, so the model learns to fill slots the way the
rewrite task asks it to (bert_ad/tasks/rewrite.py, docs/rewrite.md).
"""

from __future__ import annotations

import collections
import random
import sys
import time
from typing import IO, Optional, Sequence

from bert_ad.data.rewrite_format import RewriteRow, fit_context, read_rows
from bert_ad.data.tokenization import CLS, SEP
from bert_ad.errors import fail
from bert_ad.pretraining.instances import Summary, TrainingInstance, instance_features
from bert_ad.pretraining.masking import replacement
from bert_ad.pretraining.records import ShardWriter, encode_example
from bert_ad.seeds import derive_seed


SKIP_EMPTY = "empty candidate"
SKIP_NO_CONTEXT = "candidate not shorter than the text"
SKIP_TOO_MANY = "candidate longer than --max_predictions_per_seq"
SKIP_TOO_LONG = "candidate longer than half of --max_seq_length - 3"


def span_tokens(row: RewriteRow, tokenizer, max_seq_length: int,
                max_predictions: int):
    """(candidate, before, after) tokens of a row, context cut to fit; or the
    reason (one of the SKIP_* strings) why the row cannot form a span."""
    candidate = tokenizer.tokenize(row.candidate)
    if not candidate:
        return SKIP_EMPTY
    before = tokenizer.tokenize(row.slot.before)
    after = tokenizer.tokenize(row.slot.after)
    if not before and not after:
        return SKIP_NO_CONTEXT
    if len(candidate) > max_predictions:
        return SKIP_TOO_MANY
    room = max_seq_length - 3 - 2 * len(candidate)
    if room < 0:
        return SKIP_TOO_LONG
    before, after = fit_context(before, after, room)
    return candidate, before, after


def span_instance(candidate: Sequence[str], before: Sequence[str],
                  after: Sequence[str], is_random_next: bool,
                  rng: random.Random, vocab_words: Sequence[str]):
    """A TrainingInstance whose masked positions are the candidate's span in B.

    Each span position is replaced as Google does (80% [MASK], 10% kept, 10%
    random), drawing from `rng` in position order.
    """
    start = len(candidate) + 2 + len(before)
    tokens = ([CLS] + list(candidate) + [SEP] + list(before) + list(candidate)
              + list(after) + [SEP])
    segment_ids = [0] * (len(candidate) + 2) + [1] * (len(tokens) - len(candidate) - 2)
    positions = list(range(start, start + len(candidate)))
    for p in positions:
        tokens[p] = replacement(tokens[p], rng, vocab_words)
    return TrainingInstance(tokens, segment_ids, positions, list(candidate),
                            is_random_next)


def write_span_instances(input_files: Sequence[str], output_files: Sequence[str],
                         settings, tokenizer, stream: Optional[IO[str]] = None):
    """create_pretraining_data for --mode=rewrite: rows -> span instances.

    Args:
      input_files: labelled rewrite row files (train.tsv of `prepare`).
      output_files: TFRecord files; instances go round-robin over them.
      settings: pretraining_data.InstanceSettings (max_seq_length,
        max_predictions_per_seq, random_seed, dupe_factor are used).
      tokenizer: the settings' tokenizer.
      stream: where the skipped-rows summary line goes (default stderr).

    Returns:
      pretraining_data.Summary (its "documents" are the rows used).
    """
    started = time.monotonic()
    spans = []
    skipped = collections.Counter()
    rows_read = 0
    for path in input_files:
        for row in read_rows(path, "input file", labelled=True,
                             allow_empty_candidate=True):
            rows_read += 1
            result = span_tokens(row, tokenizer, settings.max_seq_length,
                                 settings.max_predictions_per_seq)
            if isinstance(result, str):
                skipped[result] += 1
            else:
                spans.append(result + (row.label == "0",))
    if skipped:
        detail = ", ".join(f"{n} {reason}" for reason, n in skipped.most_common())
        print(f"create_pretraining_data: skipped {sum(skipped.values())} of "
              f"{rows_read} rows that cannot form a span: {detail}",
              file=stream or sys.stderr)
    if not spans:
        fail(f"no row of {', '.join(input_files)} can form a span; see the "
             f"skipped rows above")
    vocab_words = list(tokenizer.vocab.keys())
    instances = []
    for dupe in range(settings.dupe_factor):
        rng = random.Random(derive_seed(settings.random_seed, dupe, "rewrite-span"))
        for candidate, before, after, is_random_next in spans:
            instances.append(span_instance(candidate, before, after, is_random_next,
                                           rng, vocab_words))
    random.Random(derive_seed(settings.random_seed, 0, "rewrite-shuffle")).shuffle(
        instances)
    writer = ShardWriter(output_files)
    try:
        for instance in instances:
            writer.write(encode_example(instance_features(
                instance, tokenizer, settings.max_seq_length,
                settings.max_predictions_per_seq)))
        paths = writer.commit()
    except BaseException:
        writer.abort()
        raise
    return Summary(len(spans), len(instances),
                   sum(len(i.masked_lm_positions) for i in instances),
                   sum(1 for i in instances if i.is_random_next), paths,
                   time.monotonic() - started)
