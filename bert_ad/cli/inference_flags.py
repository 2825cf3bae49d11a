"""The shared flags of an inference-only command (TaskCommand.run: extract_features.py).

A command that only runs a model over text has no output_dir, optimizer,
epochs or cluster: it gets the model files, the tokenizer, the towers, the
activation precision and the export flags, named and meaning as in every
other command (bert_ad/cli/flags.py), and nothing else, so its --help lists
only what it reads. `text_encoder_from_flags` builds its TextEncoder from
them like any task's.
"""

from __future__ import annotations

from typing import Mapping, Optional

from absl import flags

from bert_ad.errors import fail
from bert_ad.model.precision import PRECISIONS, compute_dtype
from bert_ad.parallel.checkpoints import resolve_checkpoint
from bert_ad.parallel.towers import plan_from_environment
from bert_ad.run_settings import Placement
from bert_ad.serving.layout import FORMATS
from bert_ad.serving.layout import PRECISIONS as EXPORT_PRECISIONS


def define_inference_flags(fv: flags.FlagValues,
                           defaults: Optional[Mapping[str, object]] = None) -> None:
    """Model, tokenizer, towers, precision and --do_export.

    `defaults`: {flag: default} where the command's differ (TaskCommand.flag_defaults).
    """
    d = dict(flag_values=fv)
    defaults = dict(defaults or {})
    flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model.", **d)
    flags.DEFINE_string("init_checkpoint", None,
                        "Checkpoint prefix (or folder) of the model's weights.", **d)
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt of the model (or an "
                        "XLM-R piece list, pieces.tsv).", **d)
    flags.DEFINE_string("spm_model_file", None,
                        "SentencePiece model instead of --vocab_file.", **d)
    flags.DEFINE_bool("do_lower_case", True, "Lower-case (uncased models).", **d)
    flags.DEFINE_integer("max_seq_length", 128,
                         "Longest sequence after WordPiece; longer texts are truncated "
                         "(and counted in the log).", **d)
    flags.DEFINE_integer("n_gpus", 1, "Towers: one per visible GPU (round-robin if more "
                         "towers than cards), or logical CPU devices without GPUs.", **d)
    flags.DEFINE_enum("precision", "fp32", list(PRECISIONS),
                      "Activation precision of the encoder (outputs are float32).", **d)
    flags.DEFINE_bool("use_xla", False, "Session-level XLA JIT (off by default on CPU).", **d)
    flags.DEFINE_bool("remove_padding", defaults.get("remove_padding", True),
                      "Run the encoder's dense layers, GELU and layer norm on the real "
                      "tokens only: the same outputs, less work with padded batches. Off "
                      "under --use_xla.", **d)
    flags.DEFINE_bool("do_export", False,
                      "Export the model for serving (a SavedModel into --export_dir).", **d)
    flags.DEFINE_string("export_dir", None, "Where the export goes; never written over.",
                        **d)
    flags.DEFINE_enum("export_format", "saved_model", list(FORMATS),
                      "saved_model (TensorFlow Serving), frozen_graph (one .pb, "
                      "weights as constants) or onnx (ONNX Runtime; bert_ad[onnx]).", **d)
    flags.DEFINE_enum("export_precision", "fp32", list(EXPORT_PRECISIONS),
                      "fp16: float16 encoder weights and compute (TensorFlow formats); "
                      "int8: int8 encoder matrices (onnx). Outputs stay float32.", **d)
    flags.DEFINE_string("predict_from_export", None,
                        "Score with this export (a folder written by --do_export; ONNX "
                        "ones in ONNX Runtime) instead of --init_checkpoint; its vocab, "
                        "config, casing and max_seq_length are used unless given.", **d)


def check_inference_flags(f: flags.FlagValues) -> None:
    """Refuse a bad shared flag (one line naming it) before any work."""
    scoring_export = f.predict_from_export and not f.do_export
    for name in ("bert_config_file", "init_checkpoint"):
        if not f[name].value and not scoring_export:
            fail(f"--{name} is required")
    if f.n_gpus < 1:
        fail(f"--n_gpus={f.n_gpus}: need at least 1 tower")
    compute_dtype(f.precision)  # refuses what this lane cannot run
    if f.do_export and not f.export_dir:
        fail("--do_export needs --export_dir: the folder the export is written into")
    if not f.do_export:
        for name in ("export_dir", "export_format", "export_precision"):
            if f[name].present:
                fail(f"--{name} is for --do_export: set --do_export too")
    if f.predict_from_export and f.do_export:
        fail("--predict_from_export scores with an export and --do_export writes one "
             "from --init_checkpoint: run them one at a time")
    if not scoring_export:
        resolve_checkpoint(f.init_checkpoint)  # a missing or torn checkpoint, now


def inference_placement_from_flags(f: flags.FlagValues) -> Placement:
    """This process's towers (an inference run is one process: no cluster)."""
    return Placement(plan_from_environment(f.n_gpus), None, f.use_xla)
