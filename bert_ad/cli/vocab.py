"""bert-ad vocab: move a checkpoint onto another vocabulary, or add words to its own.

  transplant  checkpoint + its tokenizer + a new vocab.txt -> a checkpoint for
              the new vocab (bert_ad/tools/vocab.py)
  extend      add domain words to a model's vocab: a WordPiece vocab.txt
              (bert_ad/tools/vocab.py) or a unigram piece list
              (bert_ad/tools/vocab_extend.py)
  trim        keep only the pieces of a unigram vocab that corpora use (and
              chosen scripts): bert_ad/tools/vocab_trim.py

Also `bert-ad-vocab` and `python -m bert_ad.vocab`.
"""

from __future__ import annotations

from typing import Optional, Sequence

from absl import flags

from bert_ad.cli import flag_groups
from bert_ad.cli.registry import register_tool
from bert_ad.cli.run_inputs import flag_inputs
from bert_ad.cli.runner import Subcommand, run_subcommand, tool_cli
from bert_ad.path_overlaps import refuse_outputs_over_inputs
from bert_ad.tools import vocab, vocab_extend, vocab_trim

PROGRAM = "python -m bert_ad.vocab"
CONFIG_BESIDE = "default: bert_config.json beside the checkpoint"
DESCRIPTION = ("Move a BERT checkpoint onto another vocab (transplant), add words to its "
               "own (extend), or trim a unigram vocab to the pieces corpora use (trim).")


def _model_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("checkpoint", None, "Checkpoint prefix, or a folder holding "
                        "bert_model.ckpt (required).", **d)
    flags.DEFINE_string("output_dir", None, "A new folder (required).", **d)
    flag_groups.define(fv, ("bert_config_file", "seed"), {"seed": vocab.DEFAULT_SEED},
                       notes={"bert_config_file": CONFIG_BESIDE,
                              "seed": "here: the freshly initialised rows"})


def _transplant_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("target_vocab", None, "The new vocab.txt (required).", **d)
    flags.DEFINE_string("source_vocab", None,
                        "The checkpoint's tokenizer: WordPiece vocab.txt or a unigram "
                        "pieces.tsv (default: vocab.txt, else pieces.tsv beside it).", **d)
    flags.DEFINE_bool("source_do_lower_case", False,
                      "Lower-case target tokens for an uncased WordPiece source.", **d)
    _model_flags(fv)


def _extend_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("words", None, "One word per line (required).", **d)
    flag_groups.define(fv, ("vocab_file", "do_lower_case"),
                       notes={"vocab_file": "default: vocab.txt, else pieces.tsv beside "
                              "the checkpoint"})
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.", **d)
    _model_flags(fv)


def _trim_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("checkpoint", None, "Checkpoint prefix, or a folder holding "
                        "bert_model.ckpt, with pieces.tsv (+ normalization.tsv) beside "
                        "it (required).", **d)
    flag_groups.define(fv, ("bert_config_file",), notes={"bert_config_file": CONFIG_BESIDE})
    flags.DEFINE_string("output_dir", None, "The new model folder (required).", **d)
    flags.DEFINE_string("corpus", None, "Comma list of text files (a text per line) and "
                        "data folders (their .txt/.tsv files) (required).", **d)
    flags.DEFINE_integer("min_count", 1, "Keep a piece the corpora use this often.", **d)
    flags.DEFINE_string("keep_scripts", vocab_trim.DEFAULT_SCRIPTS,
                        "Keep every single-character piece of these scripts (han, "
                        "cjk_punct, fullwidth, general_punct, ascii, digits, ascii_punct, "
                        "latin, kana, bopomofo).", **d)
    flags.DEFINE_string("keep_all_pieces_of", "", "Keep every piece made only of "
                        "characters of these scripts (e.g. han,cjk_punct,fullwidth,"
                        "general_punct: Chinese segments exactly as before).", **d)
    flags.DEFINE_string("keep_words", "", "Comma list of word lists (first field of a "
                        "line): keep every piece their words use, as given, capitalised "
                        "and in capitals (e.g. an English lexicon).", **d)
    flags.DEFINE_integer("keep_short_pieces", 0, "Keep every piece of at most this many "
                         "characters of --short_pieces_of (acronyms, fragments).", **d)
    flags.DEFINE_string("short_pieces_of", "ascii", "The scripts of --keep_short_pieces.",
                        **d)
    flags.DEFINE_bool("overwrite", False, "Replace an existing --output_dir.", **d)


def refuse_inputs_in_output_dir(f: flags.FlagValues) -> None:
    """The model (or corpus, word list, flagfile) a run reads must not lie in the
    --output_dir its --overwrite replaces: `vocab extend --output_dir=MODEL_DIR
    --overwrite` replaced the model it extended."""
    replaced = [("--output_dir", f.output_dir)] if "overwrite" in f and f.overwrite else []
    refuse_outputs_over_inputs((), flag_inputs(f), replaced)


def _trim(f: flags.FlagValues) -> int:
    refuse_inputs_in_output_dir(f)
    print(vocab_trim.trim(f.checkpoint, f.corpus, f.output_dir, f.min_count, f.keep_scripts,
                          f.keep_all_pieces_of, f.bert_config_file, f.overwrite,
                          keep_words=f.keep_words, keep_short_pieces=f.keep_short_pieces,
                          short_pieces_of=f.short_pieces_of).summary())
    return 0


def _transplant(f: flags.FlagValues) -> int:
    refuse_inputs_in_output_dir(f)
    print(vocab.transplant(f.checkpoint, f.target_vocab, f.output_dir, f.source_vocab,
                           f.bert_config_file, f.source_do_lower_case, f.seed).summary())
    return 0


def _extend(f: flags.FlagValues) -> int:
    refuse_inputs_in_output_dir(f)
    print(vocab_extend.extend(f.checkpoint, f.words, f.output_dir, f.vocab_file,
                              f.bert_config_file, f.do_lower_case, f["do_lower_case"].present,
                              f.seed, f.overwrite).summary())
    return 0


SUBCOMMANDS = (
    Subcommand("transplant", "checkpoint + its tokenizer + a new vocab.txt -> a checkpoint "
               "for the new vocab", _transplant_flags, _transplant,
               required=("checkpoint", "target_vocab", "output_dir")),
    Subcommand("extend", "add domain words to a model's vocab (vocab.txt or pieces.tsv)",
               _extend_flags, _extend,
               required=("checkpoint", "words", "output_dir")),
    Subcommand("trim", "keep the pieces of a unigram vocab that corpora use (and chosen "
               "scripts)", _trim_flags, _trim,
               required=("checkpoint", "corpus", "output_dir")),
)


def main(argv: Optional[Sequence[str]] = None, program: str = PROGRAM) -> int:
    """`argv`: the arguments after the program name (extend --words=...)."""
    return run_subcommand(SUBCOMMANDS, [program] + list(argv or ()), DESCRIPTION)


# bert-ad vocab, bert-ad-vocab, python -m bert_ad.vocab.
cli = tool_cli(lambda argv: main(argv[1:], argv[0]))


register_tool("vocab", "vocabularies: transplant a model onto another vocab, extend or trim one",
              cli=cli, console_script="bert-ad-vocab")
