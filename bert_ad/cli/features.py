"""extract_features.py: token vectors and sentence embeddings of every input line, on N towers.

Google's extract_features.py flags (--input_file, --output_file, --layers,
--vocab_file, --bert_config_file, --init_checkpoint, --max_seq_length,
--batch_size, --do_lower_case) and its output, exactly: JSON lines
{"linex_index": i, "features": [{"token": ..., "layers": [{"index": -1,
"values": [...]}, ...]}, ...]}. Plus --n_gpus: rows dealt over the towers,
--batch_size rows per tower, the output in input order.

Sentence embeddings: --pooling=mean (sentence-transformers, e5) or cls
reads one layer (the last, unless --layers names one other) and writes one
vector a line: to a .npy file (float32 [lines, hidden]), a .tsv file or JSON
lines ({"linex_index": i, "embedding": [...]}). --normalize makes each
vector unit length; --text_prefix is put before every text (e5: "query: ").
--do_export --export_dir=DIR writes a SavedModel serving the pooled
(normalised) `embedding` (docs/serving.md; --export_format=onnx for ONNX
Runtime); with no --input_file it only exports. --predict_from_export=DIR
embeds --input_file with such an export instead of --init_checkpoint (an
ONNX one in ONNX Runtime, bert_ad/inference/onnx_scorer.py).

The input is read and the output written as a stream: rows are written as
the towers finish them, under a temporary name renamed into place at the
end, so a file of any length works in flat memory and a failed run leaves
no output. Texts longer than --max_seq_length are truncated and counted in
the log. See docs/features.md.

--remove_padding is off by default here: windows sorted by length leave
little padding, and with it on the real-token count of each batch differs,
which makes memory creep up over a long file (docs/features.md).
"""

from __future__ import annotations

import logging
import time
from typing import Optional

from absl import flags

from bert_ad.cli import task_runner
from bert_ad.cli.registry import register_task
from bert_ad.cli.run_inputs import flag_inputs
from bert_ad.data.batching import prefetch
from bert_ad.data.embedding_files import NPY, EmbeddingFile, output_format
from bert_ad.data.embedding_settings import (DEFAULT_LAYERS, EMBEDDING, POOLINGS,
                                             EmbeddingSettings, layer_output_name,
                                             parse_layers)
from bert_ad.data.streamed_batches import ROW_INFO
from bert_ad.errors import fail
from bert_ad.path_overlaps import files_in, refuse_outputs_over_inputs
from bert_ad.data.scored_rows import rows_in_order
from bert_ad.placement import Placement

log = logging.getLogger("bert_ad")

# Log progress at most this often (seconds).
PROGRESS_SECONDS = 30.0
# Lines named in the truncation log line.
TRUNCATED_EXAMPLES = 5


def define_task_flags(fv: flags.FlagValues) -> None:
    """Google's extract_features.py flags (the model's are shared) and the pooling ones."""
    d = dict(flag_values=fv)
    flags.DEFINE_string("input_file", None,
                        "One text per line, or `text_a ||| text_b` (UTF-8).", **d)
    flags.DEFINE_string("output_file", None,
                        "Google's JSON lines (per-token vectors); with --pooling: .npy "
                        "(float32 [lines, hidden]), .tsv, or JSON lines for any other name.",
                        **d)
    flags.DEFINE_string("layers", ",".join(str(i) for i in DEFAULT_LAYERS),
                        "Encoder layers whose token vectors are written (-1: the last). "
                        "With --pooling: the one layer pooled (default -1).", **d)
    flags.DEFINE_integer("batch_size", 32, "Rows per tower per step.", **d)
    flags.DEFINE_enum("pooling", "none", list(POOLINGS),
                      "none: per-token vectors (Google's output); mean: the average over "
                      "the real tokens (sentence-transformers, e5); cls: the [CLS] vector.",
                      **d)
    flags.DEFINE_bool("normalize", False, "With --pooling: unit-length vectors (L2).", **d)
    flags.DEFINE_string("text_prefix", "",
                        "Put before every text, e.g. 'query: ' or 'passage: ' for e5.", **d)


def embedding_settings_from_flags(f: flags.FlagValues) -> EmbeddingSettings:
    """The rows' outputs the flags ask for (checked: one line naming the flag)."""
    layers = parse_layers(f.layers)
    if f.pooling != "none":
        if not f["layers"].present:
            layers = (-1,)
        elif len(layers) != 1:
            fail(f"--pooling={f.pooling} pools one layer but --layers={f.layers} names "
                 f"{len(layers)}; name one (e.g. --layers=-1) or leave --layers out for "
                 "the last")
    elif f.normalize:
        fail("--normalize makes pooled vectors unit length: set --pooling=mean or cls")
    return EmbeddingSettings(layers, f.pooling, f.normalize, f.text_prefix or "")


def check_flags(f: flags.FlagValues) -> None:
    """Everything about the command's own flags, before the model is read."""
    settings = embedding_settings_from_flags(f)
    if f.batch_size < 1:
        fail(f"--batch_size={f.batch_size} must be at least 1")
    if not f.input_file and not f.do_export:
        fail("--input_file is required (or --do_export alone, to export the model)")
    if f.input_file and not f.output_file:
        fail("--output_file is required: where the features of --input_file go")
    if f.output_file and not f.input_file:
        fail(f"--output_file={f.output_file} needs --input_file: the lines to embed")
    if f.output_file:
        output_format(f.output_file, settings.pooled)
        # Not the input text, the model's files (an export's too) or a flagfile,
        # however spelled.
        refuse_outputs_over_inputs([("--output_file", f.output_file)], flag_inputs(f) + [
            ("--predict_from_export", path) for path in files_in(f.predict_from_export or "")])
    if f.do_export and not settings.pooled:
        fail("--do_export serves one vector per text: set --pooling=mean or cls")
    if f.predict_from_export and not f.input_file:
        fail("--predict_from_export embeds --input_file: give one")
    if f.do_export and f.export_precision == "int8" and not f.input_file:
        fail("--export_precision=int8 compares the int8 model's vectors with fp32's on "
             "--input_file: give one")


def build(f: flags.FlagValues, encoder):
    """The FeatureExtractionTask the flags describe."""
    from bert_ad.tasks.features import FeatureExtractionTask  # TensorFlow: once run
    return FeatureExtractionTask(encoder, f.input_file or "", embedding_settings_from_flags(f))


def run(task, f: flags.FlagValues, placement: Optional[Placement]) -> int:
    """Embed --input_file into --output_file (with --init_checkpoint or
    --predict_from_export), then export (--do_export); an int8 export is measured
    on --input_file. `placement` is None when an ONNX export scores (no towers)."""
    from bert_ad.inference.compatibility import check_compatible
    from bert_ad.inference.exported_model import ExportedModel
    data = task.read("predict") if f.input_file else None
    if f.predict_from_export:
        exported = ExportedModel.open(f.predict_from_export)
        check_compatible(exported, task)
        session_config = placement.local_session_config() if placement is not None else None
        extract(task, data, f.output_file,
                lambda: exported.open_scorer(session_config=session_config), 1, f.batch_size)
        return 0
    from bert_ad.parallel.checkpoints import check_fits_config, resolve_checkpoint
    from bert_ad.parallel.scoring import Scorer
    from bert_ad.serving.export import ExportSettings, export_model, refuse_existing
    checkpoint = resolve_checkpoint(f.init_checkpoint)
    # Before the input is read: a checkpoint of another shape was refused only when
    # restored, advising to "train first", which features cannot.
    check_fits_config(checkpoint, task.encoder.config, f"--init_checkpoint={f.init_checkpoint}",
                      f"--bert_config_file={f.bert_config_file}", "give the bert_config.json "
                      "the checkpoint was trained with, or the checkpoint of this config")
    if f.do_export:
        refuse_existing(f.export_dir)
    if data is not None:

        def tower(features, i):
            return task.build_model(features, is_training=False)

        extract(task, data, f.output_file,
                lambda: Scorer(placement.plan, task.feature_spec, tower, checkpoint,
                               placement.local_session_config()),
                placement.plan.num_towers, f.batch_size)
    if f.do_export:
        export_model(task, checkpoint, ExportSettings(f.export_dir, f.export_format,
                                                      f.export_precision), "", dev=data,
                     dev_batch_size=f.batch_size)
    return 0


def extract(task, data, output_file: str, scorer, towers: int, batch_size: int) -> None:
    """Score every line of `data` (a SplitData) with `task` (a FeatureExtractionTask) on
    every tower and write it, in input order, as it is ready.

    `scorer()` makes the Scorer (a checkpoint on `towers` towers) or an
    export's scorer (one tower) the lines are scored with."""
    settings = task.settings
    format_ = output_format(output_file, settings.pooled)
    hidden = task.encoder.config.hidden_size
    log.info("features: %d lines of %s -> %s (%s), %s, %d tower(s) x %d rows", len(data),
             data.source, output_file, "float32 .npy" if format_ == NPY else format_,
             f"{settings.pooling} pooling of layer {settings.layers[0]}"
             + (", normalised" if settings.normalize else "") if settings.pooled
             else f"token vectors of layers {','.join(map(str, settings.layers))}",
             towers, batch_size)
    truncated = []
    started = last_log = time.time()
    # The output's temporary file is made first: an unwritable output fails now.
    with EmbeddingFile(output_file, format_, len(data), hidden) as out:
        with scorer() as running:
            # Tokenised in a background thread while the towers compute.
            batches = prefetch(task.batches(data).scoring(batch_size, towers))
            for index, row in rows_in_order(running, batches, carry=(ROW_INFO,)):
                line = row[ROW_INFO]
                if line.truncated:
                    truncated.append(index)
                if settings.pooled:
                    out.write_vector(index, row[EMBEDDING])
                else:
                    out.write_tokens(index, line.tokens, [
                        (layer, row[layer_output_name(j)][:len(line.tokens)])
                        for j, layer in enumerate(settings.layers)])
                if time.time() - last_log > PROGRESS_SECONDS:
                    last_log = time.time()
                    log.info("features: %d of %d lines (%.1f lines/sec)", index + 1,
                             len(data), (index + 1) / (last_log - started))
    seconds = time.time() - started
    log.info("features: wrote %d lines to %s in %.1f s (%.1f lines/sec)", len(data),
             output_file, seconds, len(data) / max(seconds, 1e-9))
    if truncated:
        shown = ", ".join(str(i + 1) for i in truncated[:TRUNCATED_EXAMPLES])
        log.warning("warning: features: %d of %d lines were longer than --max_seq_length=%d "
                    "and were truncated (line %s%s)", len(truncated), len(data),
                    task.encoder.max_seq_length, shown,
                    ", ..." if len(truncated) > TRUNCATED_EXAMPLES else "")
    else:
        log.info("features: no line was truncated (--max_seq_length=%d)",
                 task.encoder.max_seq_length)


COMMAND = register_task(
    "features", "token vectors and sentence embeddings of text lines (Google's "
    "extract_features)", define_flags=define_task_flags, build=build, check_flags=check_flags,
    run=run, actions=(), flag_defaults=(("remove_padding", False),), description=__doc__,
    aliases=("extract_features",),
    launcher="extract_features.py", console_script="bert-ad-features")


# The launcher's contract (run_classifier_mgpu.py-style callers and tests).
define_flags, main, cli = task_runner.launcher_functions(COMMAND)
