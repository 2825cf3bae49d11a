"""create_pretraining_data.py: raw text to BERT pretraining TFRecord shards.

Google's create_pretraining_data.py, streamed and spread over processes.

Input (--input_file: files, globs, or a comma list of them), UTF-8:
  * Google's format: one sentence per line, a blank line between documents.
    Each file also starts a new document.
  * --doc_per_line: one document per line, cut into sentences after . ! ?
    (and … ...) followed by a space or the line end, and after 。！？ anywhere;
    closing quotes and brackets stay with their sentence. A naive splitter:
    pre-split the text with a real one and use Google's format where it
    matters.

Output: --output_file (a comma list) or --output_dir with --num_shards
(pretrain-00000-of-00004.tfrecord, ...). Instances go round-robin over the
files. Each file is written under a temporary name and renamed when all are
done; an error leaves no output behind, and existing outputs are refused
unless --overwrite.

Each record is a tf.train.Example with Google's seven features (FEATURE_NAMES):
  input_ids, input_mask, segment_ids   int64 [max_seq_length], padded with 0
  masked_lm_positions, masked_lm_ids   int64 [max_predictions_per_seq], 0-padded
  masked_lm_weights                    float [max_predictions_per_seq], 1.0 real
  next_sentence_labels                 int64 [1]: 1 = B is a random sentence,
                                       0 = B is the actual continuation

Modes (--mode):
  nsp  Google's: [CLS] A [SEP] B [SEP]; half of the B segments are the actual
       continuation of A, half start at a random sentence of another
       document; the segments of the document that such a random B leaves
       unused are put back for the next instance.
  mlm  one segment, no next-sentence task (RoBERTa style): [CLS] S [SEP],
       where S packs consecutive sentences of one document up to the target
       length; segment_ids and next_sentence_labels are all 0. A sentence
       longer than the sequence is cut, from the front or the back at random.
  rewrite  rewrite rows (scripts/prepare_rewrite_data.py), not documents:
       [CLS] candidate [SEP] text [SEP] with the candidate put in the text's
       slot and masked there as one span; see bert_ad/data/rewrite_rows.py.

Masking is Google's create_masked_lm_predictions (bert_ad.pretraining.masking), with
--do_whole_word_mask ("##" pieces go with their word; SentencePiece pieces go
with the "▁" piece that starts their word) and --chinese_whole_word: the text
is pre-segmented (words separated by spaces, as the People's Daily corpus
once its /POS tags are stripped) and all characters of a word are masked
together. --chinese_whole_word only changes how the masks are grouped; the
model still sees one token per character.

Streaming, and where it departs from Google (which reads the whole corpus
into memory):
  * documents are read lazily and handled in chunks of --chunk_documents;
    memory holds a few chunks per worker, whatever the corpus size.
  * the random next sentence comes from another document of the same chunk
    (Google draws from the whole corpus).
  * instances are shuffled within their chunk (Google shuffles all of them);
    chunks are written in input order.
  * every chunk gets its own random generators, seeded from (--random_seed,
    chunk index, dupe index): the output is byte for byte the same whatever
    --num_workers is. The dupes of a chunk run one after the other, as
    Google's loop over dupe_factor does for the whole corpus.
  * within a chunk, the algorithm and its random draws are Google's: the same
    documents and generator state give Google's instances.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import multiprocessing
import os
import random
import sys
import time
from typing import (IO, Iterable, Iterator, List, NamedTuple, Optional,
                    Sequence, Tuple)

from bert_ad.errors import UserError, fail, run_cli
from bert_ad.pretraining.masking import mask_tokens
from bert_ad.pretraining.records import (ShardWriter, check_outputs, encode_example,
                                         output_paths)
from bert_ad.pretraining.text import chunked, expand_input_files, read_documents
from bert_ad.data.tokenization import (CLS, SEP, SentencePieceTokenizer,
                                  check_max_seq_length, make_tokenizer)

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


# ----------------------------------------------------------------------------
# Chunks: what one worker does with a list of raw documents
# ----------------------------------------------------------------------------

class ChunkResult(NamedTuple):
    index: int
    documents: int        # documents with at least one token
    records: List[bytes]  # serialized tf.train.Example, in output order
    masked_tokens: int
    random_next: int      # instances with next_sentence_labels 1


def derive_seed(random_seed: int, chunk_index: int, purpose: str) -> int:
    """A 64-bit seed for one chunk's generator, the same in every process
    and Python version."""
    text = f"{random_seed}/{chunk_index}/{purpose}".encode("ascii")
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big")


class ChunkProcessor:
    """Raw documents of one chunk -> serialized, shuffled examples."""

    def __init__(self, settings: InstanceSettings, tokenizer=None):
        self.settings = settings
        self.tokenizer = tokenizer or make_tokenizer(
            settings.vocab_file, settings.do_lower_case, settings.spm_model_file)
        self.maker = InstanceMaker(settings, list(self.tokenizer.vocab.keys()))
        self.word_ids_from = None
        if settings.chinese_whole_word:
            self.word_ids_from = "spaces"
        elif (settings.do_whole_word_mask
              and isinstance(self.tokenizer, SentencePieceTokenizer)):
            self.word_ids_from = "sentencepiece"

    def instances(self, chunk_index: int, raw_documents: Sequence[List[str]]
                  ) -> Tuple[List[Document], List[TrainingInstance]]:
        """Tokenized documents and their instances, shuffled."""
        documents = [tokenize_document(d, self.tokenizer, self.word_ids_from)
                     for d in raw_documents]
        documents = [d for d in documents if d.segments]
        instances = []
        for dupe in range(self.settings.dupe_factor):
            rng = random.Random(derive_seed(self.settings.random_seed,
                                            chunk_index, f"dupe{dupe}"))
            for document_index in range(len(documents)):
                instances.extend(self.maker.from_document(documents,
                                                          document_index, rng))
        random.Random(derive_seed(self.settings.random_seed, chunk_index,
                                  "shuffle")).shuffle(instances)
        return documents, instances

    def __call__(self, chunk_index: int, raw_documents: Sequence[List[str]]
                 ) -> ChunkResult:
        documents, instances = self.instances(chunk_index, raw_documents)
        s = self.settings
        records = [encode_example(instance_features(
            inst, self.tokenizer, s.max_seq_length, s.max_predictions_per_seq))
            for inst in instances]
        return ChunkResult(
            index=chunk_index, documents=len(documents), records=records,
            masked_tokens=sum(len(i.masked_lm_positions) for i in instances),
            random_next=sum(1 for i in instances if i.is_random_next))


_WORKER = {}  # type: Dict[str, object]


def _init_worker(settings: InstanceSettings) -> None:
    try:
        _WORKER["processor"] = ChunkProcessor(settings)
    except Exception as e:
        # Raised by the first task instead: a failing initializer would
        # make the pool start new workers forever.
        _WORKER["error"] = e


def _process_chunk(task: Tuple[int, List[List[str]]]) -> ChunkResult:
    if "error" in _WORKER:
        raise _WORKER["error"]
    return _WORKER["processor"](*task)


def process_chunks(chunks: Iterable[List[List[str]]], settings: InstanceSettings,
                   num_workers: int = 1, tokenizer=None) -> Iterator[ChunkResult]:
    """ChunkResults of `chunks`, in order, from `num_workers` processes.

    At most 2 * num_workers chunks are in flight, so the input is read only
    as fast as it is used. Worker processes are spawned (not forked from a
    process that may hold TensorFlow's threads) and load the tokenizer once.
    """
    tasks = enumerate(chunks)
    if num_workers <= 1:
        processor = ChunkProcessor(settings, tokenizer)
        for index, chunk in tasks:
            yield processor(index, chunk)
        return
    context = multiprocessing.get_context("spawn")
    with context.Pool(num_workers, initializer=_init_worker,
                      initargs=(settings,)) as pool:
        pending = collections.deque()
        for task in tasks:
            pending.append(pool.apply_async(_process_chunk, (task,)))
            if len(pending) >= 2 * num_workers:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


# ----------------------------------------------------------------------------
# The whole run
# ----------------------------------------------------------------------------

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


class Progress:
    """A line on `stream` every `interval` seconds: documents and instances
    so far, and per second."""

    def __init__(self, stream: Optional[IO[str]], interval: float):
        self.stream = stream
        self.interval = interval
        self.start = self.last = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def update(self, documents: int, instances: int) -> None:
        now = time.monotonic()
        if self.stream is None or now - self.last < self.interval:
            return
        self.last = now
        seconds = max(now - self.start, 1e-9)
        print(f"create_pretraining_data: {documents} documents "
              f"({documents / seconds:.0f}/s), {instances} instances "
              f"({instances / seconds:.0f}/s), {seconds:.0f} s",
              file=self.stream, flush=True)


def create_pretraining_data(input_files: Sequence[str], output_files: Sequence[str],
                            settings: InstanceSettings, doc_per_line: bool = False,
                            chunk_documents: int = 1000, num_workers: int = 1,
                            overwrite: bool = False, output_dir: str = "",
                            progress_seconds: float = 5.0,
                            stream: Optional[IO[str]] = None) -> Summary:
    """Raw text files -> TFRecord files of pretraining instances.

    Args:
      input_files: text files (see the module doc for the formats).
      output_files: the files to write, instances round-robin over them.
      settings: InstanceSettings.
      doc_per_line: one document per line.
      chunk_documents: documents per chunk (random-next pool, shuffle unit).
      num_workers: processes that build instances.
      overwrite: replace existing output files.
      output_dir: the shard folder, when output_files are its shards (for the
        stale-shard check).
      progress_seconds: seconds between progress lines on `stream`.
      stream: where progress goes (None: nowhere).

    Returns:
      A Summary.

    Raises:
      UserError: bad settings, unreadable or empty input, outputs in the way.
        No output file is left behind.
    """
    settings.check()
    if chunk_documents < 1:
        fail(f"--chunk_documents={chunk_documents} must be at least 1")
    if num_workers < 1:
        fail(f"--num_workers={num_workers} must be at least 1")
    if not input_files:
        fail("no input files")
    for path in input_files:
        if not os.path.isfile(path):
            fail(f"input file {path!r} does not exist")
    tokenizer = make_tokenizer(settings.vocab_file, settings.do_lower_case,
                               settings.spm_model_file)
    check_outputs(output_files, input_files, overwrite, output_dir)
    if settings.mode == "rewrite":  # rows, not documents: bert_ad.data.rewrite_rows
        from bert_ad.data.rewrite_rows import write_span_instances
        return write_span_instances(input_files, output_files, settings, tokenizer,
                                    stream)
    progress = Progress(stream, progress_seconds)
    chunks = chunked(read_documents(input_files, doc_per_line), chunk_documents)
    documents = masked = random_next = 0
    writer = ShardWriter(output_files)
    results = process_chunks(chunks, settings, num_workers, tokenizer)
    try:
        for result in results:
            for record in result.records:
                writer.write(record)
            documents += result.documents
            masked += result.masked_tokens
            random_next += result.random_next
            progress.update(documents, writer.count)
        if documents == 0:
            fail(f"the input holds no text to make instances from "
                 f"({', '.join(input_files[:3])}"
                 f"{', ...' if len(input_files) > 3 else ''}): every line is "
                 f"blank or has no token")
        if documents == 1 and settings.mode == "nsp":
            # NSP's "random next sentence" must come from another document.
            fail(f"the input ({', '.join(input_files[:3])}) is a single document (no "
                 "blank line between documents) but NSP needs several; use "
                 "--mode=mlm, separate documents with blank lines, or --doc_per_line")
        instances = writer.count
        paths = writer.commit()
    except BaseException:
        writer.abort()
        raise
    finally:
        results.close()  # stops the worker pool now, not when collected
    return Summary(documents, instances, masked, random_next, paths,
                   progress.elapsed())


# ----------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------

def _define_flags(flag_values) -> None:
    from absl import flags
    fv = dict(flag_values=flag_values)
    # Google's flags.
    flags.DEFINE_string("input_file", None, "Raw text: files, globs, or a comma "
                        "list. One sentence per line, blank line between "
                        "documents (or --doc_per_line).", **fv)
    flags.DEFINE_string("output_file", None, "Output TFRecord file(s), comma "
                        "list; instances go round-robin over them.", **fv)
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt.", **fv)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case the text (uncased "
                      "models).", **fv)
    flags.DEFINE_bool("do_whole_word_mask", False, "Mask all pieces of a word "
                      "together.", **fv)
    flags.DEFINE_integer("max_seq_length", 128, "Tokens per instance, [CLS] "
                         "and [SEP] included.", **fv)
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Most masked "
                         "positions per instance.", **fv)
    flags.DEFINE_integer("random_seed", 12345, "Seed; the output depends on "
                         "it and on --chunk_documents, not on --num_workers.",
                         **fv)
    flags.DEFINE_integer("dupe_factor", 10, "Passes over the data, each with "
                         "other masks.", **fv)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Share of tokens masked.", **fv)
    flags.DEFINE_float("short_seq_prob", 0.1, "Share of documents whose "
                       "instances aim at a random shorter length.", **fv)
    # Ours.
    flags.DEFINE_string("spm_model_file", None, "SentencePiece .model "
                        "(instead of --vocab_file).", **fv)
    flags.DEFINE_string("output_dir", None, "Write --num_shards files "
                        "pretrain-NNNNN-of-NNNNN.tfrecord here (instead of "
                        "--output_file).", **fv)
    flags.DEFINE_integer("num_shards", 1, "Files in --output_dir.", **fv)
    flags.DEFINE_enum("mode", "nsp", list(MODES), "nsp: Google's sentence "
                      "pairs with next-sentence labels; mlm: one segment of "
                      "packed sentences, labels all 0; rewrite: rewrite rows, "
                      "the candidate masked as one span in its slot.", **fv)
    flags.DEFINE_bool("doc_per_line", False, "One document per line, split "
                      "into sentences at . ! ? 。！？", **fv)
    flags.DEFINE_bool("chinese_whole_word", False, "The text is segmented "
                      "into words by spaces; mask all characters of a word "
                      "together (implies whole-word masking).", **fv)
    flags.DEFINE_integer("chunk_documents", 1000, "Documents per chunk: the "
                         "pool of random next sentences and the shuffle unit.",
                         **fv)
    flags.DEFINE_integer("num_workers", 1, "Processes building instances.",
                         **fv)
    flags.DEFINE_bool("overwrite", False, "Replace existing output files.",
                      **fv)
    flags.DEFINE_float("progress_seconds", 5.0, "Seconds between progress "
                       "lines on stderr.", **fv)


def parse_flags(argv: Sequence[str]):
    """Parse `argv` (argv[0] is the program) into a fresh absl FlagValues."""
    from absl import flags

    from bert_ad.cli.help import flag_error_message, print_help, wants_help
    flag_values = flags.FlagValues()
    _define_flags(flag_values)
    if wants_help(argv):
        print_help(f"{os.path.basename(argv[0])} --input_file=... --vocab_file=... "
                   "(--output_file=... | --output_dir=...)", __doc__, flag_values)
    try:
        rest = flag_values(list(argv))
    except flags.Error as e:
        raise UserError(flag_error_message(e)) from None
    if len(rest) > 1:
        fail(f"unexpected argument {rest[1]!r}; flags look like --name=value")
    return flag_values


def main(argv: Optional[Sequence[str]] = None) -> int:
    f = parse_flags(sys.argv if argv is None else argv)
    settings = InstanceSettings(
        vocab_file=f.vocab_file or "", spm_model_file=f.spm_model_file or "",
        do_lower_case=f.do_lower_case, max_seq_length=f.max_seq_length,
        max_predictions_per_seq=f.max_predictions_per_seq,
        random_seed=f.random_seed, dupe_factor=f.dupe_factor,
        masked_lm_prob=f.masked_lm_prob, short_seq_prob=f.short_seq_prob,
        mode=f.mode, do_whole_word_mask=f.do_whole_word_mask,
        chinese_whole_word=f.chinese_whole_word)
    settings.check()
    outputs = output_paths(f.output_file or "", f.output_dir or "", f.num_shards)
    input_files = expand_input_files(f.input_file)
    summary = create_pretraining_data(
        input_files, outputs, settings, doc_per_line=f.doc_per_line,
        chunk_documents=f.chunk_documents, num_workers=f.num_workers,
        overwrite=f.overwrite, output_dir=f.output_dir or "",
        progress_seconds=f.progress_seconds, stream=sys.stderr)
    print(f"create_pretraining_data: {summary.describe()}", file=sys.stderr)
    return 0


def cli(argv: Optional[Sequence[str]] = None) -> None:
    """Console entry point (create_pretraining_data.py, setup.py's script)."""
    run_cli(lambda: main(argv))
