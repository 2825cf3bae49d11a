"""Google's pretraining instances: tokenized documents -> masked training instances.

The algorithm and its random draws are Google's create_pretraining_data.py
(checked against Google's own functions in the tests); bert_ad/pretraining/
pipeline.py streams documents through it in chunks and workers, and the
launcher is bert_ad/cli/create_pretraining_data.py.
"""

from __future__ import annotations

import collections
import dataclasses
import random
from typing import (Iterable, List, NamedTuple, Optional,
                    Sequence)

from bert_ad.errors import fail
from bert_ad.pretraining.masking import mask_tokens
from bert_ad.data.tokenization import CLS, SEP
from bert_ad.data.truncation import check_max_seq_length

MODES = ("nsp", "mlm", "rewrite")
# [CLS] A [SEP] B [SEP] needs two tokens of text, and the short-sequence
# target is drawn from [2, max_seq_length - 3].
MIN_SEQ_LENGTH = 5
SPM_WORD_START = "\u2581"  # "▁": SentencePiece's mark of a word's first piece


# ----------------------------------------------------------------------------
# Settings
# ----------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class InstanceSettings:
    """How documents become instances (what each worker needs).

    Attributes are Google's flags of the same names, plus the tokenizer
    (vocab_file or spm_model_file), mode ("nsp" or "mlm") and
    chinese_whole_word (group masks by the space-separated words).
    """

    vocab_file: str = ""
    spm_model_file: str = ""
    do_lower_case: bool = True
    max_seq_length: int = 128
    max_predictions_per_seq: int = 20
    random_seed: int = 12345
    dupe_factor: int = 10
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    mode: str = "nsp"
    do_whole_word_mask: bool = False
    chinese_whole_word: bool = False

    def check(self) -> None:
        """Raise UserError for a value the algorithm cannot work with."""
        check_max_seq_length(self.max_seq_length)
        if self.max_seq_length < MIN_SEQ_LENGTH:
            fail(f"--max_seq_length={self.max_seq_length} is too small for "
                 f"pretraining instances; use {MIN_SEQ_LENGTH} or more")
        if self.max_predictions_per_seq < 1:
            fail(f"--max_predictions_per_seq={self.max_predictions_per_seq} "
                 f"must be at least 1")
        if not 0.0 < self.masked_lm_prob <= 1.0:
            fail(f"--masked_lm_prob={self.masked_lm_prob} must be in (0, 1], "
                 f"e.g. 0.15")
        wanted = int(round(self.max_seq_length * self.masked_lm_prob))
        if self.max_predictions_per_seq < wanted:
            fail(f"--max_predictions_per_seq={self.max_predictions_per_seq} is too small "
                 f"for --masked_lm_prob={self.masked_lm_prob} at --max_seq_length="
                 f"{self.max_seq_length} (up to {wanted} masked tokens); use at least "
                 f"{wanted} or lower --masked_lm_prob")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            fail(f"--short_seq_prob={self.short_seq_prob} must be in [0, 1]")
        if self.dupe_factor < 1:
            fail(f"--dupe_factor={self.dupe_factor} must be at least 1")
        if self.mode not in MODES:
            fail(f"--mode={self.mode} is not one of {', '.join(MODES)}")

    @property
    def whole_word(self) -> bool:
        return self.do_whole_word_mask or self.chinese_whole_word


# ----------------------------------------------------------------------------
# Tokenized documents and Google's instance algorithm
# ----------------------------------------------------------------------------

class Document(NamedTuple):
    """A tokenized document.

    segments: one token list per sentence (none empty).
    word_ids: None, or one list per segment with a word id per token;
      tokens with the same id are masked together. Ids only need to differ
      between neighbouring words.
    """

    segments: List[List[str]]
    word_ids: Optional[List[List[int]]] = None


class TrainingInstance(NamedTuple):
    """One pretraining example before ids: what Google's script builds."""

    tokens: List[str]               # [seq] with [CLS]/[SEP], masks applied
    segment_ids: List[int]          # [seq]
    masked_lm_positions: List[int]  # [n] ascending
    masked_lm_labels: List[str]     # [n] original tokens
    is_random_next: bool


WORD_IDS_FROM = (None, "spaces", "sentencepiece")


def tokenize_document(sentences: Sequence[str], tokenizer,
                      word_ids_from: Optional[str] = None) -> Document:
    """Tokenize a document's sentences, dropping those with no tokens.

    Args:
      sentences: the document's sentences.
      tokenizer: a FullTokenizer or SentencePieceTokenizer.
      word_ids_from: None (no word ids), "spaces" (each space-separated word
        of the text is one word: every token of it gets its id; the words
        are tokenized one by one) or "sentencepiece" (a piece starting with
        "▁" starts a word).

    Returns:
      The Document; it has no segments if no sentence had a token.
    """
    if word_ids_from not in WORD_IDS_FROM:
        raise ValueError(f"word_ids_from={word_ids_from!r}")
    segments = []
    word_ids = [] if word_ids_from else None
    next_id = 0
    for sentence in sentences:
        if word_ids_from == "spaces":
            tokens, ids = [], []
            for word in sentence.split():
                pieces = tokenizer.tokenize(word)
                tokens.extend(pieces)
                ids.extend([next_id] * len(pieces))
                next_id += 1
        else:
            tokens = tokenizer.tokenize(sentence)
            ids = []
            if word_ids_from == "sentencepiece":
                for i, token in enumerate(tokens):
                    if i == 0 or token.startswith(SPM_WORD_START):
                        next_id += 1
                    ids.append(next_id)
                next_id += 1
        if tokens:
            segments.append(tokens)
            if word_ids is not None:
                word_ids.append(ids)
    return Document(segments, word_ids)


class _Span:
    """Tokens (and word ids) of consecutive segments, for A or B."""

    def __init__(self, document: Document, segment_indexes: Iterable[int]):
        self.tokens = []  # type: List[str]
        self.word_ids = [] if document.word_ids is not None else None
        for j in segment_indexes:
            self.tokens.extend(document.segments[j])
            if self.word_ids is not None:
                self.word_ids.extend(document.word_ids[j])

    def keep(self, start: int, end: int) -> None:
        self.tokens = self.tokens[start:end]
        if self.word_ids is not None:
            self.word_ids = self.word_ids[start:end]


def truncate_seq_pair(a: _Span, b: _Span, max_num_tokens: int,
                      rng: random.Random) -> None:
    """Google's truncate_seq_pair: while too long, drop a token from the
    longer one (b on a tie), from its front or back at random.

    Same random draws as Google's, one per dropped token, without its
    quadratic front deletions.
    """
    bounds = [[0, len(a.tokens)], [0, len(b.tokens)]]
    length = [len(a.tokens), len(b.tokens)]
    while length[0] + length[1] > max_num_tokens:
        k = 0 if length[0] > length[1] else 1
        if rng.random() < 0.5:
            bounds[k][0] += 1
        else:
            bounds[k][1] -= 1
        length[k] -= 1
    a.keep(*bounds[0])
    b.keep(*bounds[1])


class InstanceMaker:
    """Google's create_instances_from_document (nsp) and the mlm packing.

    Args:
      settings: InstanceSettings.
      vocab_words: the vocab in id order (random replacements).
    """

    def __init__(self, settings: InstanceSettings, vocab_words: Sequence[str]):
        self.settings = settings
        self.vocab_words = list(vocab_words)

    def from_document(self, documents: Sequence[Document], document_index: int,
                      rng: random.Random) -> List[TrainingInstance]:
        """The instances of documents[document_index].

        Args:
          documents: the chunk; random next sentences come from it.
          document_index: which document.
          rng: the generator, advanced as Google's.
        """
        if self.settings.mode == "mlm":
            return self._mlm_instances(documents[document_index], rng)
        return self._nsp_instances(documents, document_index, rng)

    def _target_length(self, max_num_tokens: int, rng: random.Random) -> int:
        # Mostly full sequences; sometimes (short_seq_prob) shorter ones, to
        # look more like fine-tuning inputs. A soft target, not a limit.
        if rng.random() < self.settings.short_seq_prob:
            return rng.randint(2, max_num_tokens)
        return max_num_tokens

    def _nsp_instances(self, documents, document_index, rng):
        document = documents[document_index]
        max_num_tokens = self.settings.max_seq_length - 3
        target_seq_length = self._target_length(max_num_tokens, rng)
        instances = []
        chunk = []  # indexes of the segments gathered so far
        current_length = 0
        i = 0
        while i < len(document.segments):
            chunk.append(i)
            current_length += len(document.segments[i])
            if i == len(document.segments) - 1 or current_length >= target_seq_length:
                a_end = 1  # how many of the chunk's segments go to A
                if len(chunk) >= 2:
                    a_end = rng.randint(1, len(chunk) - 1)
                a = _Span(document, chunk[:a_end])
                if len(chunk) == 1 or rng.random() < 0.5:
                    is_random_next = True
                    target_b_length = target_seq_length - len(a.tokens)
                    # Another document, if ten draws find one (Google's loop).
                    for _ in range(10):
                        random_index = rng.randint(0, len(documents) - 1)
                        if random_index != document_index:
                            break
                    other = documents[random_index]
                    start = rng.randint(0, len(other.segments) - 1)
                    b_indexes = []
                    b_length = 0
                    for j in range(start, len(other.segments)):
                        b_indexes.append(j)
                        b_length += len(other.segments[j])
                        if b_length >= target_b_length:
                            break
                    b = _Span(other, b_indexes)
                    # The segments meant for B are put back for the next one.
                    i -= len(chunk) - a_end
                else:
                    is_random_next = False
                    b = _Span(document, chunk[a_end:])
                truncate_seq_pair(a, b, max_num_tokens, rng)
                instances.append(self._instance(a, b, is_random_next, rng))
                chunk = []
                current_length = 0
            i += 1
        return instances

    def _mlm_instances(self, document, rng):
        max_num_tokens = self.settings.max_seq_length - 2
        target_seq_length = self._target_length(max_num_tokens, rng)
        instances = []
        chunk = []  # type: List[int]
        current_length = 0
        for i, segment in enumerate(document.segments):
            # Flush before overshooting: a full sequence loses no tokens.
            if chunk and current_length + len(segment) > target_seq_length:
                instances.append(self._mlm_instance(document, chunk,
                                                    max_num_tokens, rng))
                chunk = []
                current_length = 0
            chunk.append(i)
            current_length += len(segment)
        if chunk:
            instances.append(self._mlm_instance(document, chunk, max_num_tokens,
                                                rng))
        return instances

    def _mlm_instance(self, document, chunk, max_num_tokens, rng):
        a = _Span(document, chunk)
        truncate_seq_pair(a, _Span(document, []), max_num_tokens, rng)
        return self._instance(a, None, False, rng)

    def _instance(self, a: _Span, b: Optional[_Span], is_random_next: bool,
                  rng: random.Random) -> TrainingInstance:
        tokens = [CLS] + a.tokens + [SEP]
        segment_ids = [0] * len(tokens)
        word_ids = None
        if a.word_ids is not None:
            word_ids = [None] + a.word_ids + [None]
        if b is not None:
            tokens += b.tokens + [SEP]
            segment_ids += [1] * (len(b.tokens) + 1)
            if word_ids is not None:
                word_ids += b.word_ids + [None]
        settings = self.settings
        tokens, positions, labels = mask_tokens(
            tokens, rng, settings.masked_lm_prob,
            settings.max_predictions_per_seq, self.vocab_words,
            whole_word=settings.whole_word, word_ids=word_ids)
        return TrainingInstance(tokens, segment_ids, positions, labels,
                                is_random_next)


def instance_features(instance: TrainingInstance, tokenizer, max_seq_length: int,
                      max_predictions_per_seq: int) -> "collections.OrderedDict":
    """Google's seven features of one instance, padded (see module doc)."""
    input_ids = tokenizer.convert_tokens_to_ids(instance.tokens)
    n = len(input_ids)
    pad = max_seq_length - n
    positions = list(instance.masked_lm_positions)
    m = len(positions)
    pad_m = max_predictions_per_seq - m
    features = collections.OrderedDict()
    features["input_ids"] = input_ids + [0] * pad
    features["input_mask"] = [1] * n + [0] * pad
    features["segment_ids"] = list(instance.segment_ids) + [0] * pad
    features["masked_lm_positions"] = positions + [0] * pad_m
    features["masked_lm_ids"] = (tokenizer.convert_tokens_to_ids(
        instance.masked_lm_labels) + [0] * pad_m)
    features["masked_lm_weights"] = [1.0] * m + [0.0] * pad_m
    features["next_sentence_labels"] = [1 if instance.is_random_next else 0]
    return features


class Summary(NamedTuple):
    documents: int
    instances: int
    masked_tokens: int
    random_next: int
    paths: List[str]
    seconds: float

    def describe(self) -> str:
        share = self.random_next / max(self.instances, 1)
        return (f"wrote {self.instances} instances from {self.documents} "
                f"documents into {len(self.paths)} file(s), "
                f"{self.masked_tokens} masked tokens, {share:.1%} random-next, "
                f"in {self.seconds:.1f} s: {', '.join(self.paths)}")
