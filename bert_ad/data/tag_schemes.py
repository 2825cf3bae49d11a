"""Tagging schemes (BIO, BIOES, BMES, IO), tag validation and span extraction.

A tag is a position letter, optionally followed by `-TYPE`: `B-PER`, `I-LOC`,
`O`, or bare `B`/`M`/`E`/`S` for word segmentation, where every span is a
word and has no type.

  BIO    B = begin, I = inside, O = outside
  BIOES  adds E = end and S = single-token span
  BMES   BIOES with M (middle) for I, as Chinese word segmentation writes it;
         O is allowed too (BMES-tagged NER data)
  IO     I and O only; adjacent spans of one type cannot be told apart

Spans follow the conlleval definition as implemented by `seqeval` in its
default (non-strict) mode, so our entity metrics equal seqeval's: a span ends
at E or S, before B, S or O, or where the type changes; a span starts at B or
S, at I or E after O, E or S, or where the type changes. Ill-formed sequences
are read leniently, not rejected: `O I-PER` starts a PER span at the I,
`B-PER I-LOC` is two spans. M is read as I.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from bert_ad.errors import UserError

OUTSIDE = "O"


class Span(NamedTuple):
    """Tokens [start, end) form one span of `type` ("" for typeless tags)."""

    type: str
    start: int
    end: int


@dataclass(frozen=True)
class TagScheme:
    """A scheme: its name and the position letters its tags may use."""

    name: str
    letters: str

    def describe(self) -> str:
        """'B-TYPE, I-TYPE, O (or bare B, I)' for messages."""
        typed = [f"{x}-TYPE" for x in self.letters if x != OUTSIDE]
        bare = [x for x in self.letters if x != OUTSIDE]
        outside = [OUTSIDE] if OUTSIDE in self.letters else []
        return f"{', '.join(typed + outside)} (or bare {', '.join(bare)})"


SCHEMES: Dict[str, TagScheme] = {
    "BIO": TagScheme("BIO", "BIO"),
    "BIOES": TagScheme("BIOES", "BIOES"),
    "BMES": TagScheme("BMES", "BMESO"),
    "IO": TagScheme("IO", "IO"),
}
# Label-list order inside one type.
_LETTER_ORDER = {letter: rank for rank, letter in enumerate("BIMES")}


def parse_tag(tag: str) -> Optional[Tuple[str, str]]:
    """(letter, type) of a tag: "B-PER" -> ("B", "PER"), "S" -> ("S", "");
    None if the tag has neither form ("PER", "B-", "O-PER", "")."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    if len(tag) == 1 and tag in "BIMES":
        return tag, ""
    if len(tag) > 2 and tag[0] in "BIMES" and tag[1] == "-":
        return tag[0], tag[2:]
    return None


def get_scheme(name: str) -> TagScheme:
    """The scheme called `name` (case-insensitive), for --tag_scheme."""
    key = (name or "").strip().upper()
    if key not in SCHEMES:
        raise UserError(f"unknown --tag_scheme {name!r}; known: {', '.join(SCHEMES)}")
    return SCHEMES[key]


def detect_scheme(tags: Iterable[str], source: str = "the training file") -> TagScheme:
    """The scheme the letters of `tags` use: BMES if any M, else BIOES if any
    E or S, else BIO if any B, else IO (only I and O). A file with only O
    is BIO. Tags that do not parse are left to `validate_tags`.

    Raises:
      UserError if `source` mixes I and M (two schemes at once).
    """
    letters = set()
    for tag in tags:
        parsed = parse_tag(tag)
        if parsed:
            letters.add(parsed[0])
    if "M" in letters:
        if "I" in letters:
            raise UserError(f"{source} has both I and M tags; use one scheme "
                            f"(BIOES with I, or BMES with M)")
        return SCHEMES["BMES"]
    if letters & {"E", "S"}:
        return SCHEMES["BIOES"]
    if "B" in letters or letters <= {OUTSIDE}:
        return SCHEMES["BIO"]
    return SCHEMES["IO"]


def fits_scheme(tag: str, scheme: TagScheme) -> bool:
    parsed = parse_tag(tag)
    return parsed is not None and parsed[0] in scheme.letters


def validate_tags(conll, scheme: TagScheme,
                  known_tags: Optional[Sequence[str]] = None) -> None:
    """Check every tag of a ConllFile (bert_ad.data.conll) against the scheme
    and, for dev/test files, against the tags seen in training.

    Args:
      conll: a ConllFile with tags.
      scheme: the scheme in use.
      known_tags: the label list; None skips that check (training file).

    Raises:
      UserError naming the file and line of the first bad tag.
    """
    known = None if known_tags is None else set(known_tags)
    for sentence in conll.sentences:
        for tag, number in zip(sentence.tags or (), sentence.line_numbers):
            if not fits_scheme(tag, scheme):
                raise UserError(f"{conll.path} line {number}: tag {tag!r} is not a "
                                f"{scheme.name} tag ({scheme.describe()}); fix it or "
                                f"set --tag_scheme")
            if known is not None and tag not in known:
                raise UserError(f"{conll.path} line {number}: tag {tag!r} was not seen "
                                f"in training (known: {', '.join(known_tags)}); fix it "
                                f"or add it to --labels")


def validate_label_list(labels: Sequence[str], scheme: TagScheme) -> None:
    """Every label of --labels must be a tag of the scheme."""
    for label in labels:
        if not fits_scheme(label, scheme):
            raise UserError(f"--labels: {label!r} is not a {scheme.name} tag "
                            f"({scheme.describe()})")


def label_list(tags: Iterable[str]) -> List[str]:
    """The distinct tags in a stable order: O first (if present), then by
    type, and inside a type B, I, M, E, S. Tags that do not parse go last."""
    distinct = set(tags)

    def key(tag):
        parsed = parse_tag(tag)
        if parsed is None:
            return (2, "", 0, tag)
        letter, kind = parsed
        if letter == OUTSIDE:
            return (0, "", 0, tag)
        return (1, kind, _LETTER_ORDER[letter], tag)

    return sorted(distinct, key=key)


def _ends(previous: str, current: str, previous_type: str, current_type: str) -> bool:
    """A span ended at the previous token (seqeval's end_of_chunk)."""
    return (previous in "ES"
            or (previous in "BI" and current in "BSO")
            or (previous != OUTSIDE and previous_type != current_type))


def _starts(previous: str, current: str, previous_type: str, current_type: str) -> bool:
    """A span starts at the current token (seqeval's start_of_chunk)."""
    return (current in "BS"
            or (current in "EI" and previous in "ESO")
            or (current != OUTSIDE and previous_type != current_type))


def extract_spans(tags: Sequence[str]) -> List[Span]:
    """The spans of one sentence's tags, left to right.

    Args:
      tags: tags of any scheme (see the module docstring for ill-formed ones).

    Returns:
      Spans with end exclusive, e.g. ["B-PER", "I-PER", "O", "S-LOC"] ->
      [Span("PER", 0, 2), Span("LOC", 3, 4)].
    """
    spans: List[Span] = []
    previous, previous_type, start = OUTSIDE, "", 0
    for index, tag in enumerate(list(tags) + [OUTSIDE]):
        parsed = parse_tag(tag)
        if parsed is None:
            raise ValueError(f"not a tag: {tag!r}")
        letter, kind = parsed
        letter = "I" if letter == "M" else letter
        if _ends(previous, letter, previous_type, kind):
            spans.append(Span(previous_type, start, index))
        if _starts(previous, letter, previous_type, kind):
            start = index
        previous, previous_type = letter, kind
    return spans


def span_types(tags: Iterable[str]) -> List[str]:
    """The sorted distinct non-empty types of `tags` (e.g. a label list)."""
    types = set()
    for tag in tags:
        parsed = parse_tag(tag)
        if parsed and parsed[1]:
            types.add(parsed[1])
    return sorted(types)


def span_records(tokens: Sequence[str], tags: Sequence[str],
                 separator: str = " ") -> List[dict]:
    """The spans of one sentence as JSON-ready records (predict_entities.jsonl).

    Args:
      tokens, tags: one sentence.
      separator: put between the tokens of a span's text: " " for words, ""
        for one character per token (see conll.token_separator).

    Returns:
      [{"type": ..., "start": ..., "end": ..., "text": ...}], end exclusive,
      type "" for typeless tags.
    """
    return [{"type": span.type, "start": span.start, "end": span.end,
             "text": separator.join(tokens[span.start:span.end])}
            for span in extract_spans(tags)]
