"""Google's basic tokenization (steps 1-4 of bert_ad/data/tokenization.py), character by character.

Before WordPiece, Google's BERT cleans the text (drops NUL, U+FFFD and
control characters, maps whitespace to " "), puts spaces around every CJK
ideograph, splits on whitespace, lower-cases and strips accents (uncased
models) and splits off every punctuation character. The character classes
are Google's own, which differ from Unicode's in places (see each one).
"""

from __future__ import annotations

import re
import unicodedata
from typing import List, Union


def basic_tokenize(text: Union[str, bytes], do_lower_case: bool) -> List[str]:
    """Words and punctuation marks of `text` (str, or UTF-8 bytes), as Google's
    BasicTokenizer cuts them."""
    text = to_text(text)
    if text.isascii():
        return _ascii_basic_tokenize(text, do_lower_case)
    text = _clean_text(text)
    text = _space_out_chinese_chars(text)
    words = []
    for word in text.split():
        if do_lower_case:
            word = strip_accents(word.lower())
        words.extend(_split_on_punctuation(word))
    # Stripping accents can leave a word empty (a lone combining mark).
    return [w for w in words if w]


# ASCII text, the steps in C (str.translate, a regex) rather than a character at a
# time: its control characters (0-31 and 127, Cc) are dropped, except tab, newline
# and CR, which become spaces; it has no CJK ideograph and no accent; and every
# printable character but the space is a letter or digit or one of Google's
# punctuation marks (33-47, 58-64, 91-96, 123-126). The same words as the general
# path (tests/test_tokenization.py compares the two).
_ASCII_CLEAN = {code: None for code in list(range(32)) + [127]}
_ASCII_CLEAN.update({9: " ", 10: " ", 13: " "})
_ASCII_WORDS = re.compile(r"[0-9A-Za-z]+|[^0-9A-Za-z ]")


def _ascii_basic_tokenize(text: str, do_lower_case: bool) -> List[str]:
    text = text.translate(_ASCII_CLEAN)
    return _ASCII_WORDS.findall(text.lower() if do_lower_case else text)


# ----------------------------------------------------------------------------
# Character classes (Google's definitions)
# ----------------------------------------------------------------------------

def _is_whitespace(char: str) -> bool:
    # Tab, newline and CR are control characters to Unicode; we treat them
    # as spaces, like Google.
    if char in (" ", "\t", "\n", "\r"):
        return True
    return unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    if char in ("\t", "\n", "\r"):
        return False
    # Google's test is Cc/Cf only: private-use (Co) and unassigned (Cn)
    # characters stay, and become [UNK].
    return unicodedata.category(char) in ("Cc", "Cf")


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    # All non-letter/number ASCII counts, even "^", "$" and "`" which Unicode
    # calls symbols.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def is_chinese_char(cp: int) -> bool:
    """CJK Unified Ideographs (and extensions, compatibility ideographs).

    Hangul, Hiragana and Katakana are not in these blocks: those scripts
    separate words with spaces and are tokenized like any other language.
    """
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF
            or 0x20000 <= cp <= 0x2A6DF or 0x2A700 <= cp <= 0x2B73F
            or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


def to_text(text: Union[str, bytes]) -> str:
    """`text` as str: str as is, bytes decoded as UTF-8 (undecodable bytes dropped)."""
    if isinstance(text, str):
        return text
    if isinstance(text, bytes):
        return text.decode("utf-8", "ignore")  # as Google's convert_to_unicode
    raise TypeError(f"expected str or bytes, got {type(text).__name__}")


# ----------------------------------------------------------------------------
# The steps
# ----------------------------------------------------------------------------

def _clean_text(text: str) -> str:
    out = []
    for char in text:
        if char == "\x00" or char == "\ufffd" or _is_control(char):
            continue
        out.append(" " if _is_whitespace(char) else char)
    return "".join(out)


def _space_out_chinese_chars(text: str) -> str:
    out = []
    for char in text:
        if is_chinese_char(ord(char)):
            out.extend((" ", char, " "))
        else:
            out.append(char)
    return "".join(out)


def strip_accents(word: str) -> str:
    """`word` without its accents: NFD, then the nonspacing marks (Mn) dropped."""
    return "".join(c for c in unicodedata.normalize("NFD", word)
                   if unicodedata.category(c) != "Mn")


def _split_on_punctuation(word: str) -> List[str]:
    out = []  # type: List[str]
    current = []  # type: List[str]
    for char in word:
        if _is_punctuation(char):
            if current:
                out.append("".join(current))
                current = []
            out.append(char)
        else:
            current.append(char)
    if current:
        out.append("".join(current))
    return out
