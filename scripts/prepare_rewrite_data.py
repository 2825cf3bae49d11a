"""Make text-rewrite rows (train.tsv, dev.tsv) from raw texts, one per line.

  python scripts/prepare_rewrite_data.py --input_file=ads.txt \\
      --vocab_file=vocab.txt --output_dir=data/rewrite --negatives=3

Each text is cut into segments at 。！!？?，,：:, one segment (or
--slots_per_text) is blanked out as a slot of one [SLOT] per token, and rows
`label<TAB>segment_index<TAB>candidate<TAB>text_with_slot` are written:
label 1 for the original segment, 0 for --negatives segments of other texts
of the same split (length-matched in tokens unless --nolength_match). Texts
are split into train and dev before any row is made. See
bert_ad/data/rewrite_rows.py and docs/rewrite.md.
"""

from __future__ import annotations

import argparse
import os
import sys

# Runs from a checkout without installing bert_ad.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bert_ad.data import rewrite_rows  # noqa: E402
from bert_ad.errors import fail, run_cli  # noqa: E402
from bert_ad.data.tokenization import make_tokenizer  # noqa: E402


def _bool(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--input_file", required=True,
                        help="raw texts, one per line (a comma list of files)")
    parser.add_argument("--output_dir", required=True,
                        help="folder for train.tsv, dev.tsv and README.txt")
    parser.add_argument("--vocab_file", default="", help="the model's WordPiece vocab.txt")
    parser.add_argument("--spm_model_file", default="",
                        help="or the model's SentencePiece .model")
    parser.add_argument("--do_lower_case", type=_bool, default=True,
                        help="as the model was trained (default true)")
    defaults = rewrite_rows.PrepareSettings()
    parser.add_argument("--negatives", type=int, default=defaults.negatives,
                        help="label-0 candidates per slot")
    parser.add_argument("--length_match", type=_bool, default=defaults.length_match,
                        help="draw negatives with the original's token count "
                             "(nearest where none is left)")
    parser.add_argument("--dev_fraction", type=float, default=defaults.dev_fraction,
                        help="share of the texts that go to dev.tsv")
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--slots_per_text", type=int, default=defaults.slots_per_text,
                        help="segments blanked per text (0 = every segment)")
    parser.add_argument("--min_segments", type=int, default=defaults.min_segments,
                        help="skip texts with fewer segments (a lone segment "
                             "leaves no context around the slot)")
    parser.add_argument("--max_texts", type=int, default=None,
                        help="use only the first N usable texts")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    settings = rewrite_rows.PrepareSettings(
        negatives=args.negatives, length_match=args.length_match,
        dev_fraction=args.dev_fraction, seed=args.seed,
        slots_per_text=args.slots_per_text, min_segments=args.min_segments,
        max_texts=args.max_texts)
    settings.check()
    inputs = [p.strip() for p in args.input_file.split(",") if p.strip()]
    if not inputs:
        fail("--input_file names no file")
    tokenizer = make_tokenizer(args.vocab_file, args.do_lower_case, args.spm_model_file)
    description = (f"Tokens counted with {args.vocab_file or args.spm_model_file} "
                   f"(do_lower_case={args.do_lower_case}).")
    stats = rewrite_rows.prepare(inputs, args.output_dir, tokenizer, settings,
                                 description)
    for key, value in stats.counts.items():
        print(f"  {key}: {value}")
    print(f"wrote {os.path.join(args.output_dir, 'train.tsv')} and dev.tsv")
    return 0


if __name__ == "__main__":
    run_cli(main)
