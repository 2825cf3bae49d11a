"""What `bert-ad vocab extend` changed in a unigram model's segmentation (issue 32).

  python -m studies.extend_segmentation OLD_DIR NEW_DIR CORPUS[,CORPUS...]

OLD_DIR holds the model's pieces.tsv (+ normalization.tsv), NEW_DIR the
extended folder (its pieces.tsv and sentencepiece.model). CORPUS entries are
read as `bert-ad vocab trim --corpus` reads them (a file: a text per line; a
data folder: its .txt lines and the free-text fields of its .tsv files).
Prints: the lines; those holding no new piece's text and, of them, those
whose ids are the same as before (all of them, by construction); the lines
where the sentencepiece.model gives our reader's ids; then, per new piece, the
lines holding its text and the lines read with the new piece.
"""

from __future__ import annotations

import os
import sys
from typing import Dict, List, Sequence

from bert_ad.data.unigram import WORD_START, UnigramTokenizer
from bert_ad.tools.trim_inputs import corpus_entries, corpus_texts


def compare(old_dir: str, new_dir: str, texts: Sequence[str]) -> Dict[str, object]:
    """The counts the module docstring lists, as a dict."""
    import sentencepiece as spm
    old = UnigramTokenizer.from_file(os.path.join(old_dir, "pieces.tsv"))
    new = UnigramTokenizer.from_file(os.path.join(new_dir, "pieces.tsv"))
    sp = spm.SentencePieceProcessor()
    sp.Load(os.path.join(new_dir, "sentencepiece.model"))
    added = new.pieces[old.vocab_size:]
    per_piece = {piece: [0, 0] for piece in added}   # lines holding it, lines using it
    without = same = spm_same = 0
    for text in texts:
        normalized = new.normalize(text)
        ids = new.encode(text)
        spm_same += list(sp.EncodeAsIds(text)) == ids
        holding = [p for p in added if p in normalized]
        if not holding:
            without += 1
            same += old.encode(text) == ids
        for piece in holding:
            per_piece[piece][0] += 1
            per_piece[piece][1] += new.piece_ids[piece] in ids
    return dict(lines=len(texts), without_new=without, same_ids=same,
                sentencepiece_same=spm_same, per_piece=per_piece)


def report(counts: Dict[str, object]) -> List[str]:
    lines = [f"lines\t{counts['lines']}",
             f"lines without a new piece's text\t{counts['without_new']}",
             f"  of them with the same ids as before\t{counts['same_ids']}",
             f"sentencepiece.model = our reader\t{counts['sentencepiece_same']}",
             "# new piece\tlines holding its text\tlines read with it"]
    for piece, (holding, used) in counts["per_piece"].items():
        lines.append(f"{piece.replace(WORD_START, '_')}\t{holding}\t{used}")
    return lines


def main(argv: Sequence[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    old_dir, new_dir, corpus = argv
    texts = [text for entry in corpus_entries(corpus) for text in corpus_texts(entry)]
    print("\n".join(report(compare(old_dir, new_dir, texts))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
