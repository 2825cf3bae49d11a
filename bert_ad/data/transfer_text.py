"""Unlabelled text a teacher labels for its student (`bert-ad distill --transfer_file`).

One row a line, read as every command reads lines (bert_ad/data/text_lines.py:
UTF-8, `\\n` ends a line, a byte order mark goes); blank lines are skipped.

* For a classifier, a line is one text, or a pair `text_a<TAB>text_b` when
  the task reads pairs (its files have a text_b column): the same tab as in
  the task's own files.
* For a token classifier, a line is one sentence. Its tokens are its
  whitespace-separated words, each Chinese character a token of its own (as
  BERT's basic tokenizer cuts Chinese, and as People's Daily's CoNLL files
  hold one character a line).

Every mistake is one `error:` line naming the file and line.
"""

from __future__ import annotations

from typing import Iterator, List, Tuple

from bert_ad.data.basic_tokenization import is_chinese_char
from bert_ad.data.conll import Sentence
from bert_ad.data.processors import InputExample
from bert_ad.data.text_lines import text_lines
from bert_ad.errors import fail, require_file

FLAG = "--transfer_file"


def _lines(path: str) -> Iterator[Tuple[int, str]]:
    """(line number, stripped line) of every non-blank line; a file without one is refused."""
    require_file(path, FLAG)
    found = False
    with open(path, "rb") as f:
        for number, line in enumerate(text_lines(f, f"{FLAG}={path}"), 1):
            if line.strip():
                found = True
                yield number, line.strip()
    if not found:
        fail(f"{FLAG}={path} holds no text: give one text a line")


def read_texts(path: str, pairs: bool) -> List[InputExample]:
    """The lines of `path` as unlabelled examples (text_b set when `pairs`)."""
    examples = []
    for number, line in _lines(path):
        fields = line.split("\t")
        if pairs and (len(fields) != 2 or not fields[0].strip() or not fields[1].strip()):
            fail(f"{FLAG}={path} line {number}: the task reads text pairs: give "
                 "text_a<TAB>text_b on every line")
        if not pairs and len(fields) != 1:
            fail(f"{FLAG}={path} line {number} holds a tab, but the task reads one text a "
                 "row: give one text a line (pairs are for tasks with a text_b column)")
        examples.append(InputExample(f"transfer-{number}", fields[0].strip(),
                                     fields[1].strip() if pairs else None, None, path, number))
    return examples


def sentence_tokens(line: str) -> List[str]:
    """The tokens of a sentence: whitespace-separated words, Chinese characters one each."""
    spaced = "".join(f" {char} " if is_chinese_char(ord(char)) else char for char in line)
    return spaced.split()


def read_sentences(path: str) -> List[Sentence]:
    """The lines of `path` as untagged sentences (for a token classifier)."""
    sentences = []
    for number, line in _lines(path):
        tokens = sentence_tokens(line)
        sentences.append(Sentence(tokens, None, [number] * len(tokens)))
    return sentences
