"""Pieces per sentence of a CoNLL data set, token by token vs the sentence as a whole.

  python -m studies.ner_pieces --data_dir=DIR --vocab_file=pieces.tsv \
      [--splits=train,dev,test] [--max_seq_length=128] [--doc_stride=63]

With a unigram piece list (multilingual-e5's pieces.tsv), token classification
used to segment every input token on its own ("before": each Chinese character
its own word, `▁` + the character) and now segments the sentence as a whole
(bert_ad/data/token_pieces.py, "after"). For each split this prints a markdown
table: pieces per sentence (mean, median, 95th percentile, max), pieces in all,
lone `▁` pieces, `<unk>`, sentences longer than one window and the windows
(`--max_seq_length`, `--doc_stride`), and for "after" how tokens share pieces
and how many entities start or end inside a piece (their tokens read one
piece with a token outside the entity). No model, no training: statistics only
(docs/ner.md).
"""

from __future__ import annotations

import argparse
import collections
import os
import time
from typing import Dict, List

import numpy as np

from bert_ad.data.conll import read_conll
from bert_ad.data.tag_schemes import extract_spans
from bert_ad.data.token_features import window_spans
from bert_ad.data.token_pieces import SentencePieces, sentence_pieces, word_pieces
from bert_ad.data.tokenization import PieceListTokenizer
from bert_ad.data.unigram import UNK_PIECE, WORD_START

UNKNOWN = (UNK_PIECE, "[UNK]")


def token_by_token(tokens, tokenizer, cache) -> SentencePieces:
    """What token classification did before: every token segmented on its own."""
    per_token = word_pieces(tokens, tokenizer, cache)
    first = np.cumsum([0] + [len(p) for p in per_token[:-1]]).astype(np.int64)
    return SentencePieces([p for token in per_token for p in token], first)


def split_statistics(sentences, tokenizer, max_seq_length: int, doc_stride: int) -> Dict:
    cache: Dict[str, List[str]] = {}
    stats = {}
    for name, segment in (("before", lambda t: token_by_token(t, tokenizer, cache)),
                          ("after", lambda t: sentence_pieces(t, tokenizer))):
        started = time.process_time()
        counts, lone, unknown, windows, long = [], 0, 0, 0, 0
        sharing = collections.Counter()  # tokens reading one piece -> pieces
        inside = 0
        entities = 0
        for sentence in sentences:
            pieces = segment(sentence.tokens)
            counts.append(len(pieces.pieces))
            lone += sum(p == WORD_START for p in pieces.pieces)
            unknown += sum(p in UNKNOWN for p in pieces.pieces)
            spans = window_spans(len(pieces.pieces), max_seq_length - 2, doc_stride)
            windows += len(spans)
            long += len(spans) > 1
            sharing.update(collections.Counter(pieces.first_piece.tolist()).values())
            if sentence.tags is not None:
                first = pieces.first_piece
                for span in extract_spans(sentence.tags):
                    entities += 1
                    starts_inside = span.start > 0 and first[span.start] == first[span.start - 1]
                    ends_inside = span.end < len(first) and first[span.end] == first[span.end - 1]
                    inside += starts_inside or ends_inside
        counts = np.array(counts)
        stats[name] = {"pieces": int(counts.sum()), "mean": counts.mean(),
                       "median": float(np.median(counts)),
                       "p95": float(np.percentile(counts, 95)), "max": int(counts.max()),
                       "lone": lone, "unknown": unknown, "windows": windows, "long": long,
                       "sharing": sharing, "entities": entities, "inside": inside,
                       "seconds": time.process_time() - started}
    return stats


def report(split: str, sentences, stats: Dict, max_seq_length: int) -> str:
    tokens = sum(len(s.tokens) for s in sentences)
    lines = [f"### {split}: {len(sentences):,} sentences, {tokens:,} tokens", "",
             "| segmentation | pieces | per sentence: mean | median | p95 | max | lone `▁` "
             f"| `<unk>` | sentences > {max_seq_length - 2} pieces | windows | CPU seconds |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name, label in (("before", "token by token (before)"),
                        ("after", "sentence as a whole (after)")):
        s = stats[name]
        lines.append(f"| {label} | {s['pieces']:,} | {s['mean']:.1f} | {s['median']:.0f} | "
                     f"{s['p95']:.0f} | {s['max']} | {s['lone']:,} | {s['unknown']:,} | "
                     f"{s['long']:,} | {s['windows']:,} | {s['seconds']:.1f} |")
    before, after = stats["before"], stats["after"]
    lines.append("")
    lines.append(f"after / before: {after['pieces'] / before['pieces']:.3f} of the pieces "
                 f"({before['pieces'] / tokens:.3f} -> {after['pieces'] / tokens:.3f} "
                 "pieces per token)")
    sharing = after["sharing"]
    pieces_read = sum(sharing.values())
    shared_tokens = sum(k * n for k, n in sharing.items() if k > 1)
    lines.append(f"tokens reading a piece with other tokens: {shared_tokens:,} of {tokens:,} "
                 f"({shared_tokens / tokens:.1%}); pieces read by k tokens: " + ", ".join(
                     f"{k}: {n:,}" for k, n in sorted(sharing.items())) +
                 f" ({pieces_read:,} pieces read)")
    if after["entities"]:
        lines.append(f"entities starting or ending inside a piece: {after['inside']:,} of "
                     f"{after['entities']:,} ({after['inside'] / after['entities']:.2%}); "
                     f"token by token: {before['inside']}")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data_dir", required=True,
                        help="CoNLL files (`bert-ad data prepare peoples_daily_ner`)")
    parser.add_argument("--vocab_file", required=True, help="a unigram piece list (pieces.tsv)")
    parser.add_argument("--splits", default="train,dev,test")
    parser.add_argument("--max_seq_length", type=int, default=128)
    parser.add_argument("--doc_stride", type=int, default=0,
                        help="0: half a window, as run_ner_mgpu.py")
    parser.add_argument("--do_lower_case", action="store_true")
    args = parser.parse_args(argv)
    tokenizer = PieceListTokenizer(args.vocab_file, do_lower_case=args.do_lower_case)
    args.doc_stride = args.doc_stride or max(1, (args.max_seq_length - 2) // 2)
    print(f"piece list {args.vocab_file} ({tokenizer.vocab_size:,} pieces), "
          f"max_seq_length {args.max_seq_length}, doc_stride {args.doc_stride}\n")
    for split in args.splits.split(","):
        sentences = read_conll(os.path.join(args.data_dir, f"{split}.txt")).sentences
        stats = split_statistics(sentences, tokenizer, args.max_seq_length, args.doc_stride)
        print(report(split, sentences, stats, args.max_seq_length) + "\n")


if __name__ == "__main__":
    main()
