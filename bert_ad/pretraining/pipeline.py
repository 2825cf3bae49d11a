"""Raw text to BERT pretraining TFRecord shards: the streamed, multi-process run.

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
  rewrite  rewrite rows (bert-ad data prepare rewrite), not documents:
       [CLS] candidate [SEP] text [SEP] with the candidate put in the text's
       slot and masked there as one span; see bert_ad/data/rewrite_format.py.

Masking is Google's create_masked_lm_predictions (bert_ad.pretraining.masking), with
--do_whole_word_mask ("##" pieces go with their word; SentencePiece pieces go
with the "▁" piece that starts their word, a unigram piece list's too) and
--chinese_whole_word: the text
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
import multiprocessing
import os
import random
import time
from typing import IO, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from bert_ad.data.tokenization import PieceListTokenizer, SentencePieceTokenizer, make_tokenizer
from bert_ad.errors import fail
from bert_ad.limits import check_worker_count
from bert_ad.pretraining.instances import (Document, InstanceMaker, InstanceSettings,
                                           Summary, TrainingInstance, instance_features,
                                           tokenize_document)
from bert_ad.pretraining.records import ShardWriter, check_outputs, encode_example
from bert_ad.pretraining.rewrite_spans import write_span_instances
from bert_ad.pretraining.text import chunked, read_documents
from bert_ad.seeds import derive_seed


# ----------------------------------------------------------------------------
# Chunks: what one worker does with a list of raw documents
# ----------------------------------------------------------------------------

class ChunkResult(NamedTuple):
    index: int
    documents: int        # documents with at least one token
    records: List[bytes]  # serialized tf.train.Example, in output order
    masked_tokens: int
    random_next: int      # instances with next_sentence_labels 1


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
              and isinstance(self.tokenizer, (SentencePieceTokenizer, PieceListTokenizer))):
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
    check_worker_count(num_workers)
    if not input_files:
        fail("no input files")
    for path in input_files:
        if not os.path.isfile(path):
            fail(f"input file {path!r} does not exist")
    tokenizer = make_tokenizer(settings.vocab_file, settings.do_lower_case,
                               settings.spm_model_file)
    check_outputs(output_files, input_files, overwrite, output_dir)
    if settings.mode == "rewrite":  # rows, not documents: bert_ad.data.rewrite_format
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
