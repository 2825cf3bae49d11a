"""create_pretraining_data.py: raw text to BERT pretraining TFRecord shards.

Google's create_pretraining_data.py, streamed and spread over processes (see
bert_ad/pretraining/pipeline.py for the formats, modes and how it departs
from Google's).

Input (--input_file: files, globs, or a comma list of them), UTF-8: one
sentence per line and a blank line between documents (Google's format), or
--doc_per_line. Output: --output_file (a comma list) or --output_dir with
--num_shards (pretrain-00000-of-00004.tfrecord, ...), each record a
tf.train.Example with Google's seven features. Existing outputs are refused
unless --overwrite; an error leaves no output behind.
"""

from __future__ import annotations

import sys

from absl import flags

from bert_ad.cli import flag_groups
from bert_ad.cli.registry import register_tool
from bert_ad.cli.run_inputs import flag_inputs
from bert_ad.cli.runner import run_launcher
from bert_ad.data.tokenization import decide_do_lower_case
from bert_ad.path_overlaps import refuse_outputs_over_inputs
from bert_ad.pretraining.instances import MODES, InstanceSettings
from bert_ad.pretraining.pipeline import create_pretraining_data
from bert_ad.pretraining.records import output_paths
from bert_ad.pretraining.text import expand_input_files

USAGE = "--input_file=... --vocab_file=... (--output_file=... | --output_dir=...)"


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    # Google's flags.
    flags.DEFINE_string("input_file", None, "Raw text: files, globs, or a comma list. One "
                        "sentence per line, blank line between documents (or "
                        "--doc_per_line).", **d)
    flags.DEFINE_string("output_file", None, "Output TFRecord file(s), comma list; "
                        "instances go round-robin over them.", **d)
    flag_groups.define(fv, ("vocab_file", "do_lower_case", "max_seq_length", "spm_model_file"))
    flags.DEFINE_bool("do_whole_word_mask", False, "Mask all pieces of a word together.",
                      **d)
    flags.DEFINE_integer("max_predictions_per_seq", 20, "Most masked positions per "
                         "instance.", **d)
    flags.DEFINE_integer("random_seed", 12345, "Seed; the output depends on it and on "
                         "--chunk_documents, not on --num_workers.", **d)
    flags.DEFINE_integer("dupe_factor", 10, "Passes over the data, each with other masks.",
                         **d)
    flags.DEFINE_float("masked_lm_prob", 0.15, "Share of tokens masked.", **d)
    flags.DEFINE_float("short_seq_prob", 0.1, "Share of documents whose instances aim at a "
                       "random shorter length.", **d)
    # Ours.
    flags.DEFINE_string("output_dir", None, "Write --num_shards files "
                        "pretrain-NNNNN-of-NNNNN.tfrecord here (instead of --output_file).",
                        **d)
    flags.DEFINE_integer("num_shards", 1, "Files in --output_dir.", **d)
    flags.DEFINE_enum("mode", "nsp", list(MODES), "nsp: Google's sentence pairs with "
                      "next-sentence labels; mlm: one segment of packed sentences, labels "
                      "all 0; rewrite: rewrite rows, the candidate masked as one span in "
                      "its slot.", **d)
    flags.DEFINE_bool("doc_per_line", False, "One document per line, split into sentences "
                      "at . ! ? 。！？", **d)
    flags.DEFINE_bool("chinese_whole_word", False, "The text is segmented into words by "
                      "spaces; mask all characters of a word together (implies whole-word "
                      "masking).", **d)
    flags.DEFINE_integer("chunk_documents", 1000, "Documents per chunk: the pool of random "
                         "next sentences and the shuffle unit.", **d)
    flags.DEFINE_integer("num_workers", 1, "Processes building instances.", **d)
    flags.DEFINE_bool("overwrite", False, "Replace existing output files.", **d)
    flags.DEFINE_float("progress_seconds", 5.0, "Seconds between progress lines on stderr.",
                       **d)


def main(f: flags.FlagValues) -> int:
    settings = InstanceSettings(
        vocab_file=f.vocab_file or "", spm_model_file=f.spm_model_file or "",
        do_lower_case=decide_do_lower_case(f.vocab_file or "", f.spm_model_file or "",
                                           f.do_lower_case, f["do_lower_case"].present),
        max_seq_length=f.max_seq_length, max_predictions_per_seq=f.max_predictions_per_seq,
        random_seed=f.random_seed, dupe_factor=f.dupe_factor,
        masked_lm_prob=f.masked_lm_prob, short_seq_prob=f.short_seq_prob,
        mode=f.mode, do_whole_word_mask=f.do_whole_word_mask,
        chinese_whole_word=f.chinese_whole_word)
    settings.check()
    outputs = output_paths(f.output_file or "", f.output_dir or "", f.num_shards)
    input_files = expand_input_files(f.input_file)
    # --overwrite would replace the text it is reading (or the vocab, a flagfile).
    refuse_outputs_over_inputs(
        [("--output_file" if f.output_file else "the shard", path) for path in outputs],
        [("--input_file", path) for path in input_files] + flag_inputs(f),
        advice="write the records elsewhere")
    summary = create_pretraining_data(
        input_files, outputs, settings, doc_per_line=f.doc_per_line,
        chunk_documents=f.chunk_documents, num_workers=f.num_workers,
        overwrite=f.overwrite, output_dir=f.output_dir or "",
        progress_seconds=f.progress_seconds, stream=sys.stderr)
    print(f"create_pretraining_data: {summary.describe()}", file=sys.stderr)
    return 0


def cli(argv=None) -> None:
    """create_pretraining_data.py, bert-ad-create-pretraining-data,
    bert-ad create-pretraining-data."""
    run_launcher(define_flags, main, __doc__, USAGE, argv=argv)


register_tool("create-pretraining-data",
              "raw text -> pretraining TFRecord shards (Google's create_pretraining_data)",
              cli=cli, aliases=("create_pretraining_data",),
              launcher="create_pretraining_data.py",
              console_script="bert-ad-create-pretraining-data")
