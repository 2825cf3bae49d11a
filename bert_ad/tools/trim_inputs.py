"""What `bert-ad vocab trim` reads besides the model: corpora and script names.

Corpora (`--corpus`, a comma list): each entry is
  * a file: every line is one text (whatever its extension);
  * a folder (our data folders, `bert-ad data prepare` output): every `.txt`
    and `.tsv` file directly in it, sorted by name. A `.txt` line is one
    text. A `.tsv` line gives the fields that hold free text: those with a
    space or a character outside ASCII (a review, a sentence, a Chinese
    token of a CoNLL file); labels, ids, numbers, tags and header names
    (`sentence1`) hold neither and are skipped.

Word lists (`--keep_words`, a comma list of files): the first field of every
line is a word (Brill's lexicon `word TAG ...`, a frequency list `word count`,
or one word a line); blank lines and lines starting with `#` or `;` are
comments.

Scripts (`--keep_scripts`, `--keep_all_pieces_of`, `--short_pieces_of`): Unicode ranges by name,
`SCRIPTS` below. A piece belongs to a set of scripts when every character of
it, the word-start mark `▁` aside, lies in their ranges.
"""

from __future__ import annotations

import os
from typing import Dict, Iterator, List, Sequence, Tuple

from bert_ad.data.text_lines import text_lines
from bert_ad.errors import fail

# name -> inclusive code point ranges.
SCRIPTS: Dict[str, Tuple[Tuple[int, int], ...]] = {
    # CJK Unified Ideographs, Extension A, B-F and the compatibility ideographs,
    # the radicals (Kangxi and supplement), 〆〇々 live in cjk_punct.
    "han": ((0x2E80, 0x2FDF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
            (0x20000, 0x2FA1F)),
    # CJK Symbols and Punctuation (、。〈〉《》「」【】〜), vertical and CJK
    # compatibility forms.
    "cjk_punct": ((0x3000, 0x303F), (0xFE10, 0xFE1F), (0xFE30, 0xFE4F)),
    # Halfwidth and Fullwidth Forms (，！？（）ａ１).
    "fullwidth": ((0xFF00, 0xFFEF),),
    # General Punctuation: “ ” ‘ ’ … — ‰ and the spaces/marks of U+2000-206F.
    "general_punct": ((0x2000, 0x206F),),
    # Printable ASCII; its digits; its punctuation and symbols (XLM-R's
    # normalisation turns fullwidth ，（１ into ASCII ,(1).
    "ascii": ((0x21, 0x7E),),
    "digits": ((0x30, 0x39),),
    "ascii_punct": ((0x21, 0x2F), (0x3A, 0x40), (0x5B, 0x60), (0x7B, 0x7E)),
    # ASCII, Latin-1 Supplement, Latin Extended-A and -B.
    "latin": ((0x21, 0x7E), (0xA0, 0x24F)),
    # Hiragana and Katakana; Bopomofo (ㄅㄆ, and ㄧ written for 一 in reviews).
    "kana": ((0x3040, 0x30FF),),
    "bopomofo": ((0x3100, 0x312F), (0x31A0, 0x31BF)),
    # Every character: `--keep_scripts any` keeps every single-character piece, so no
    # character the full list knows becomes `<unk>` (names in Greek, Cyrillic, Arabic,
    # kana inside English and Chinese text; 15,396 pieces of multilingual-e5's 250,002).
    "any": ((0x0, 0x10FFFF),),
}
WORD_START = "\u2581"
TEXT_SUFFIXES = (".txt", ".tsv")


def parse_scripts(value: str, flag: str) -> List[str]:
    """The script names of a comma list, checked against SCRIPTS."""
    names = [name.strip() for name in (value or "").split(",") if name.strip()]
    unknown = [name for name in names if name not in SCRIPTS]
    if unknown:
        fail(f"{flag}: unknown script {unknown[0]!r}; choose from "
             f"{', '.join(sorted(SCRIPTS))}")
    return names


def in_scripts(char: str, names: Sequence[str]) -> bool:
    point = ord(char)
    return any(low <= point <= high for name in names for low, high in SCRIPTS[name])


def piece_chars(piece: str) -> str:
    """The characters of a piece without its word-start marks."""
    return piece.replace(WORD_START, "")


def piece_of_scripts(piece: str, names: Sequence[str]) -> bool:
    """Every character of `piece` (word starts aside) is in one of `names`."""
    chars = piece_chars(piece)
    return bool(chars) and all(in_scripts(c, names) for c in chars)


def single_of_scripts(piece: str, names: Sequence[str]) -> bool:
    """`piece` is one character of `names`, bare or word-initial (`中`, `▁中`)."""
    return len(piece_chars(piece)) == 1 and piece_of_scripts(piece, names)


# --- corpora ------------------------------------------------------------------------

def corpus_entries(value: str) -> List[str]:
    entries = [entry.strip() for entry in (value or "").split(",") if entry.strip()]
    if not entries:
        fail("--corpus is not set; give text files or data folders, comma separated")
    for entry in entries:
        if not os.path.exists(entry):
            fail(f"--corpus {entry!r} does not exist; give a text file or a data folder")
    return entries


def _free_text(field: str) -> bool:
    return " " in field.strip() or any(ord(c) > 0x7E for c in field)


def _file_texts(path: str, tsv_fields: bool, flag: str = "--corpus") -> Iterator[str]:
    """A file's texts, its lines read as every command reads them
    (bert_ad/data/text_lines.py: a lone `\r` does not end a line)."""
    try:
        with open(path, "rb") as f:
            for line in text_lines(f, f"{flag} file {path!r}"):
                if not tsv_fields:
                    yield line
                    continue
                for field in line.split("\t"):
                    if _free_text(field):
                        yield field
    except OSError as e:
        fail(f"{flag} file {path!r} cannot be read: {e.strerror or e}")


def corpus_files(entry: str) -> List[str]:
    """The files of one --corpus entry (itself, or a folder's .txt/.tsv files)."""
    if not os.path.isdir(entry):
        return [entry]
    return [os.path.join(entry, name) for name in sorted(os.listdir(entry))
            if name.endswith(TEXT_SUFFIXES) and os.path.isfile(os.path.join(entry, name))]


def corpus_texts(entry: str) -> Iterator[str]:
    """The texts of one --corpus entry, as the module docstring says."""
    for path in corpus_files(entry):
        yield from _file_texts(path, os.path.isdir(entry) and path.endswith(".tsv"))


# --- word lists ---------------------------------------------------------------------

def word_list_words(value: str) -> List[str]:
    """The words of a --keep_words comma list of files (see the module docstring).

    Raises:
      UserError: a missing or unreadable file, or one that gives no word.
    """
    words = []  # type: List[str]
    for path in [entry.strip() for entry in (value or "").split(",") if entry.strip()]:
        if not os.path.isfile(path):
            fail(f"--keep_words file {path!r} does not exist; give word lists, comma separated")
        lines = _file_texts(path, tsv_fields=False, flag="--keep_words")
        found = [line.split()[0] for line in lines
                 if line.strip() and not line.lstrip().startswith(("#", ";"))]
        if not found:
            fail(f"--keep_words file {path!r} holds no word (one per line, first field)")
        words.extend(found)
    return words


def word_forms(word: str) -> List[str]:
    """The forms a word takes in running text: as given, capitalised at the start of a
    sentence (only the first letter: `iPhone` stays `IPhone`, not `Iphone`) and in capitals
    (headlines, acronyms)."""
    forms = [word, word[:1].upper() + word[1:], word.upper()]
    return list(dict.fromkeys(forms))
