"""bert-ad predict: a file of texts in, one answer a line out, streaming (docs/predict.md).

    bert-ad predict --model_dir=OUT --input_file=titles.txt --output_file=answers.jsonl
    zcat ads.tsv.gz | bert-ad predict --model_dir=OUT/export --input_file=- \\
      --input_format=tsv --text_column=title --output_file=- --output_format=tsv

--model_dir is an export folder (ONNX: no TensorFlow needed; a SavedModel or
frozen graph: TensorFlow), a fine-tuned folder's export base (OUT/export:
its newest version), or a fine-tuned model folder: its newest export when it
has one, else its newest checkpoint, scored on --n_gpus towers with
TensorFlow. The model's settings come from the folder: no model flag.

The input is one text a line (--input_format=text, the default), a column of
a TSV or CSV (--text_column, and --text_b_column for a pair or a squad
context: a number from 0, or a name in the header line), or JSON lines
(the instances bert-ad serve takes, or --text_column's fields); `-` is
standard input, a .gz name is read as gzip. The output is one answer a line
in input order, the JSON bert-ad serve answers with (label and
probabilities, entities with character offsets, answer and span, embedding)
or a TSV of the same (--output_format, or a .tsv name); `-` is standard
output, a .gz name is written gzip. A file is
written under a temporary name and renamed when complete: a line that
cannot be read stops the run with its number and leaves no output, unless
--skip_bad_lines: then its answer line is its error ({"error": ...}, a TSV's
`error` column), so the output keeps one line per input line. From a file
into a file, Ctrl-C, SIGTERM or SIGHUP stops after the chunk being scored and
keeps the answers so far (OUTPUT.partial and OUTPUT.partial.json); the same
command goes on from there (bert_ad/inference/resumable_output.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import logging
import os
import sys
from typing import Sequence

from absl import flags

from bert_ad.cli import answer_flags, flag_groups
from bert_ad.cli.registry import register_tool
from bert_ad.cli.runner import configure_logging, parse_flags, require_flags, tool_cli
from bert_ad.errors import fail
from bert_ad.path_overlaps import is_inside, refuse_outputs_over_inputs
from bert_ad.inference.prediction_input import FORMATS as INPUT_FORMATS, line_number
from bert_ad.inference.prediction_output import FORMATS as OUTPUT_FORMATS
from bert_ad.inference.resumable_output import PARTIAL_SUFFIX, RECORD_SUFFIX

log = logging.getLogger("bert_ad")

USAGE = "--model_dir=DIR --input_file=FILE|- --output_file=FILE|- [--input_format=...] ..."


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("model_dir", None,
                        "An export folder, a fine-tuned folder's OUT/export (its newest "
                        "version), or a fine-tuned folder (its newest export, else its "
                        "checkpoint on --n_gpus towers, with TensorFlow).", **d)
    flags.DEFINE_string("input_file", None,
                        "The texts, one a line; - for standard input; .gz is read as gzip.",
                        **d)
    flags.DEFINE_string("output_file", None,
                        "The answers, one a line in input order; - for standard output. "
                        "Stopped by a signal, a run from a file keeps its answers so far in "
                        "OUTPUT.partial and the same command goes on from there.", **d)
    flags.DEFINE_enum("input_format", None, list(INPUT_FORMATS),
                      "text (a line is a text), tsv or csv (--text_column), jsonl (a line is "
                      "an instance as bert-ad serve takes it, or --text_column's field). "
                      "Default: the file name's extension (.tsv, .csv, .jsonl), else text.",
                      **d)
    flags.DEFINE_string("text_column", None,
                        "tsv/csv: the text's column, a number from 0 (default 0) or a name "
                        "in the header line; jsonl: the text's field. Squad: the question.",
                        **d)
    flags.DEFINE_string("text_b_column", None,
                        "The second text's column or field: a classifier's pair, a squad "
                        "question's context.", **d)
    flags.DEFINE_enum("output_format", None, list(OUTPUT_FORMATS),
                      "jsonl (bert-ad serve's answers) or tsv (a header, then the same "
                      "answers as columns). Default: tsv for a --output_file named .tsv "
                      "(or .tsv.gz), else jsonl.", **d)
    flags.DEFINE_bool("skip_bad_lines", False,
                      "Do not stop at a line that cannot be read (not UTF-8, a column "
                      "missing, not JSON): answer it with its error in its place "
                      "({\"error\": ...}; TSV: an error column) and count it in the log, "
                      "so the output keeps one line per input line.", **d)
    flags.DEFINE_integer("batch_size", 32, "Rows (texts, windows) scored in one call.", **d)
    flags.DEFINE_integer("chunk_size", 2048,
                         "Lines read, tokenised and answered together (memory grows with "
                         "it, not with the file).", **d)
    flags.DEFINE_integer("threads", 0,
                         "ONNX Runtime's threads (0: the cores this process may use).", **d)
    flags.DEFINE_float("progress_every_s", 10.0, "Seconds between progress lines.", **d)
    flag_groups.define(fv, ("n_gpus",),
                       notes={"n_gpus": "a fine-tuned folder scored from its checkpoint"})
    answer_flags.define_flags(fv)


def check_flags(f: flags.FlagValues) -> None:
    """Every flag checked before a model is read (one line naming the flag)."""
    require_flags(f, "model_dir", "input_file", "output_file")
    for name in ("batch_size", "chunk_size", "n_gpus"):
        if f[name].value < 1:
            fail(f"--{name}={f[name].value} must be at least 1")
    if f.threads < 0:
        fail(f"--threads={f.threads} must be at least 0 (0: every core)")
    if not f.progress_every_s > 0:
        fail(f"--progress_every_s={f.progress_every_s} must be more than 0 seconds")
    answer_flags.check_flags(f)
    if f.input_file != "-" and not os.path.isfile(f.input_file):
        fail(f"--input_file={f.input_file} is not a file; give a file of one text a line, "
             "or - for standard input")
    if f.output_file != "-":
        # However spelled (a symlink, a hard link): not the texts; and no file the
        # model folder holds (its weights, settings, checkpoints, a training run's
        # results: which are the model's is not for this command to guess).
        # (and not its partial or record: bert_ad/inference/resumable_output.py)
        refuse_outputs_over_inputs(
            [("--output_file", f.output_file),
             ("the answers kept when stopped,", f.output_file + PARTIAL_SUFFIX),
             ("their record,", f.output_file + RECORD_SUFFIX)],
            [("--input_file", f.input_file)], advice="give another --output_file")
        if is_inside(f.output_file, f.model_dir) and os.path.lexists(f.output_file):
            fail(f"--output_file={f.output_file} is a file in --model_dir={f.model_dir}; "
                 "this run would write over it: give another --output_file (or remove "
                 "that file first)")
        folder = os.path.dirname(os.path.abspath(f.output_file))
        if not os.path.isdir(folder):
            fail(f"--output_file={f.output_file}: its folder {folder} does not exist; "
                 "create it first")


def check_columns(input_format: str, f: flags.FlagValues, text_fields: Sequence[str],
                  task: str) -> None:
    """The columns the task needs for this input format (one line otherwise)."""
    if input_format == "text" and (f.text_column or f.text_b_column):
        fail("--text_column and --text_b_column name columns of --input_format=tsv, csv or "
             "jsonl; a text file's line is the text")
    if f.text_b_column and len(text_fields) < 2:
        fail(f"--text_b_column: a {task} model reads one text a line")
    if f.text_b_column and not f.text_column and input_format == "jsonl":
        fail("--text_b_column needs --text_column (the first text's field)")
    if text_fields[0] == "question" and input_format != "jsonl" and not f.text_b_column:
        fail("a squad model answers a question about a context: give --input_format=tsv "
             "or csv with --text_column (the question) and --text_b_column (the context), "
             "or jsonl lines of {\"question\": ..., \"context\": ...}")


def open_model(f: flags.FlagValues, options):
    """(the task's Predictions, score(batch) -> outputs, close(), the model's path)
    of --model_dir."""
    from bert_ad.inference.model_versions import published_versions
    from bert_ad.inference.predictions import predictions_for
    from bert_ad.model_folder import is_model_folder
    # A fine-tuned folder without an export (OUT/export/STEP with its export.json,
    # as the server lists versions) is scored from its checkpoint.
    if is_model_folder(f.model_dir) and not published_versions(
            os.path.join(f.model_dir, "export")):
        from bert_ad.cli.predict_checkpoint import open_checkpoint_model  # TensorFlow
        model, scorer_for = open_checkpoint_model(f.model_dir, f.n_gpus)
        predictions = predictions_for(model, options)
        scorer = scorer_for(predictions)
        return predictions, scorer, scorer.close, f.model_dir
    from bert_ad.inference.exported_model import ExportedModel
    from bert_ad.inference.served_models import resolve_version
    export_dir, _ = resolve_version(f.model_dir)
    exported = ExportedModel.open(export_dir, "--model_dir")
    predictions = predictions_for(exported, options)
    metadata = exported.metadata
    log.info("predict: %s (%s %s %s, step %d, max_seq_length %d)", export_dir,
             metadata.task, metadata.format, metadata.precision, metadata.global_step,
             metadata.max_seq_length)
    scorer = exported.open_scorer(threads=f.threads or None)
    return predictions, lambda batch: scorer.run([batch])[0], scorer.close, export_dir


def answer_identity(f: flags.FlagValues, predictions, model_path: str, input_format: str,
                    output_format: str) -> dict:
    """What must be the same for a stopped run's answers and this run's to be
    one output (bert_ad/inference/resumable_output.py compares it key by key)."""
    metadata = dataclasses.asdict(predictions.metadata)
    return {
        "model": {"path": os.path.realpath(model_path), "task": metadata["task"],
                  "format": metadata["format"], "precision": metadata["precision"],
                  "global_step": metadata["global_step"],
                  "checkpoint": metadata.get("checkpoint"),
                  "metadata": json_digest(metadata)},
        "flags": dict(dataclasses.asdict(answer_flags.options_from_flags(f)),
                      input_format=input_format, text_column=f.text_column or "",
                      text_b_column=f.text_b_column or "", output_format=output_format,
                      skip_bad_lines=f.skip_bad_lines),
    }


def json_digest(value) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def after_line(items, line: int):
    """The items of the lines after `line` (a resumed run's)."""
    return itertools.dropwhile(lambda item: line_number(item) <= line, items)


def main(argv: Sequence[str]) -> int:
    f = parse_flags(define_flags, argv, USAGE, __doc__)
    check_flags(f)
    configure_logging()
    from bert_ad.inference import prediction_input as inputs
    from bert_ad.inference import prediction_output as outputs
    from bert_ad.inference.resumable_output import HashedLines, ResumableOutput
    from bert_ad.inference.streamed_predictions import StreamSettings, predict_stream
    input_format = inputs.format_of(f.input_file, f.input_format)
    output_format = outputs.format_of(f.output_file, f.output_format)
    options = answer_flags.options_from_flags(f)
    predictions, score, close, model_path = open_model(f, options)
    before = 0   # answers a stopped run wrote, gone on from
    try:
        check_columns(input_format, f, predictions.text_fields, predictions.metadata.task)
        source = inputs.source_name(f.input_file)
        settings = StreamSettings(f.batch_size, f.chunk_size, f.skip_bad_lines,
                                  f.progress_every_s, source)
        read = inputs.InputSettings(input_format, f.text_column or "", f.text_b_column or "")
        total = inputs.count_lines(f.input_file)
        if f.output_file == "-":
            stream = inputs.open_input(f.input_file)
            items = inputs.read_instances(stream, source, read, predictions.text_fields)
            counts = predict_stream(items, predictions, score, sys.stdout, output_format,
                                    settings, total)
            sys.stdout.flush()
        elif f.input_file == "-":   # standard input cannot be read again: no resuming
            stream = inputs.open_input(f.input_file)
            items = inputs.read_instances(stream, source, read, predictions.text_fields)
            with outputs.open_output(f.output_file) as output:
                counts = predict_stream(items, predictions, score, output, output_format,
                                        settings, total)
        else:
            resumable = ResumableOutput(f.output_file, f.input_file, answer_identity(
                f, predictions, model_path, input_format, output_format))
            with resumable.writing() as (output, point):
                before = point.answers
                lines = HashedLines(inputs.open_input(f.input_file))
                items = after_line(inputs.read_instances(lines, source, read,
                                                         predictions.text_fields),
                                   point.input_lines)
                counts = predict_stream(
                    items, predictions, score, output, output_format, settings,
                    None if total is None else total - point.input_lines, point,
                    resumable.chunk_written, lines.mark)
    finally:
        close()
    log.info("predict: %d answer(s) written to %s%s", before + counts.answered + counts.skipped,
             "standard output" if f.output_file == "-" else f.output_file,
             f"; {counts.skipped} of them the errors of bad lines (--skip_bad_lines)"
             if counts.skipped else "")
    return 0


cli = tool_cli(main)


register_tool("predict", "a file of texts in, one answer a line out (JSONL/TSV), "
              "streaming; ONNX exports without TensorFlow", cli=cli,
              console_script="bert-ad-predict")
