"""Raw pretraining text: files -> lines -> documents (lists of sentences) -> chunks.

Input of create_pretraining_data.py (see bert_ad/pretraining/instances.py for the
two input formats). Documents are read lazily, so a corpus of any size streams.
"""

from __future__ import annotations

import glob
import itertools
import os
import re
from typing import Iterable, Iterator, List, Sequence

from bert_ad.errors import fail

_SENTENCE_END = re.compile(
    # Latin terminators count only before a space or the end ("3.14" stays).
    r"(?:[.!?\u2026]+)[\"'\u201d\u2019\u00bb)\]]*(?=\s|$)"
    # CJK terminators end a sentence wherever they are.
    r"|[\u3002\uff01\uff1f\uff61]+[\"'\u201d\u2019\u300d\u300f\uff09\u300b)\]]*")


def split_sentences(text: str) -> List[str]:
    """Cut one document's text into sentences, keeping their punctuation.

    >>> split_sentences("It rained. Did it?  Yes! 天晴了。走吧")
    ['It rained.', 'Did it?', 'Yes!', '天晴了。', '走吧']
    """
    sentences = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        sentences.append(text[start:match.end()])
        start = match.end()
    sentences.append(text[start:])
    return [s.strip() for s in sentences if s.strip()]


def documents_from_lines(lines: Iterable[str], doc_per_line: bool = False
                         ) -> Iterator[List[str]]:
    """Documents (lists of sentence strings) from text lines, lazily.

    Args:
      lines: the lines of one file, with or without their line ends.
      doc_per_line: one document per line (split with `split_sentences`)
        instead of Google's one sentence per line, blank line between
        documents.

    Yields:
      Non-empty lists of non-empty, stripped sentences.
    """
    document = []  # type: List[str]
    for line in lines:
        line = line.strip()
        if doc_per_line:
            sentences = split_sentences(line)
            if sentences:
                yield sentences
        elif line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def _file_lines(path: str) -> Iterator[str]:
    """The lines of a UTF-8 file, one at a time; bad UTF-8 is a UserError."""
    try:
        with open(path, "rb") as f:
            for line_number, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    fail(f"input file {path!r} line {line_number} is not valid "
                         f"UTF-8 ({e.reason} at byte {e.start}); convert the "
                         f"file to UTF-8 (e.g. iconv -f GBK -t UTF-8)")
                if line_number == 1 and line.startswith("\ufeff"):
                    line = line[1:]
                yield line
    except OSError as e:
        fail(f"cannot read input file {path!r}: {e.strerror or e}")


def read_documents(paths: Sequence[str], doc_per_line: bool = False
                   ) -> Iterator[List[str]]:
    """Documents of all `paths` in order, read lazily (see
    `documents_from_lines`); a document never spans two files."""
    for path in paths:
        yield from documents_from_lines(_file_lines(path), doc_per_line)


def chunked(items: Iterable, size: int) -> Iterator[list]:
    """Consecutive lists of `size` items (the last may be shorter), taking
    only what each list needs from `items`."""
    iterator = iter(items)
    while True:
        chunk = list(itertools.islice(iterator, size))
        if not chunk:
            return
        yield chunk


def expand_input_files(spec: str) -> List[str]:
    """Files named by --input_file: a comma list of paths and globs.

    Globs are expanded in sorted order; the list keeps the order given.

    Raises:
      UserError: an empty spec, a glob that matches no file, a path that does
        not exist, or a folder.
    """
    entries = [e.strip() for e in (spec or "").split(",") if e.strip()]
    if not entries:
        fail("--input_file is not set; give a text file, a glob such as "
             "'corpus/*.txt', or a comma list of them")
    files = []
    for entry in entries:
        if glob.has_magic(entry):
            matches = sorted(p for p in glob.glob(entry) if os.path.isfile(p))
            if not matches:
                fail(f"--input_file pattern {entry!r} matches no file")
            files.extend(matches)
        elif os.path.isdir(entry):
            fail(f"--input_file {entry!r} is a folder; give its files, e.g. "
                 f"{os.path.join(entry, '*.txt')!r}")
        elif not os.path.exists(entry):
            fail(f"input file {entry!r} does not exist")
        else:
            files.append(entry)
    return files
