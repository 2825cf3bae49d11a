"""What the shared flags alone can tell is wrong, said in one line before TensorFlow is imported.

Bad values, conflicting flags, missing required flags and model files that
cannot be read (the config, the vocabulary, their sizes) are refused here, in
a fraction of a second; what needs TensorFlow (a checkpoint's variables, this
lane's kernels, the devices) is checked when the records are built
(bert_ad/cli/builders.py). Each check lives here once: the layers below may
assert, they do not check again.
"""

from __future__ import annotations

import dataclasses
import math
import os

from absl import flags

from bert_ad.data.tokenization import (PieceListTokenizer, decide_do_lower_case,
                                       make_tokenizer, unused_rows_note, vocab_fits_rows)
from bert_ad.data.truncation import check_max_seq_length
from bert_ad.distributed.cluster_config import resolve_cluster
from bert_ad.errors import fail
from bert_ad.bert_config import BertConfig
from bert_ad.parallel.sparse_updates import check_sparse_embedding_updates
from bert_ad.inference import layout
from bert_ad.inference.exported_model import ExportedModel
from bert_ad.cli.model_folder_flags import settings_flag_values
from bert_ad.tasks.base import TextEncoder

EXPORT_DETAILS = ("export_dir", "export_format", "export_precision")


def check_training_flags(f: flags.FlagValues, *positive: str) -> None:
    """Refuse a bad shared flag of a training task (one line naming it)."""
    for name in ("output_dir", "bert_config_file"):
        if not f[name].value:
            fail(f"--{name} is required")
    check_towers(f)
    for name in ("train_batch_size", "eval_batch_size", "gradient_accumulation_steps",
                 "save_checkpoints_steps", "keep_checkpoint_max",
                 "log_every_n_steps") + positive:
        if f[name].value < 1:
            fail(f"--{name}={f[name].value} must be at least 1")
    _check_evaluation_flags(f)
    _check_number(f, "learning_rate", low=0.0, low_open=True)
    _check_number(f, "weight_decay_rate", low=0.0)
    _check_number(f, "clip_norm", low=0.0, note="0 turns clipping off")
    if "num_train_epochs" in f:
        _check_number(f, "num_train_epochs", low=0.0, low_open=True, high=1e6)
    if "warmup_proportion" in f:
        _check_number(f, "warmup_proportion", low=0.0, high=1.0)
    for name in ("max_train_examples", "max_eval_examples"):
        if name in f and f[name].value is not None and f[name].value < 1:
            fail(f"--{name}={f[name].value} must be at least 1 (leave it out to use "
                 "every row)")
    if "predict_file" in f and f.predict_file and not f.do_predict:
        fail(f"--predict_file={f.predict_file} is only read with --do_predict; add "
             "--do_predict, or leave --predict_file out")
    if f.sparse_embedding_updates:
        check_sparse_embedding_updates(f.optimizer, f.gradient_accumulation_steps, 1)
        if f.variable_update == "replicated":
            fail("--sparse_embedding_updates does not work with --variable_update="
                 "replicated (the all-reduced gradient is dense); leave one of them out")
    _check_cluster(f)
    if f.lr_reference_batch < 0:
        fail(f"--lr_reference_batch={f.lr_reference_batch} must be positive, or 0 for "
             "--train_batch_size")
    if os.path.exists(f.output_dir) and not os.path.isdir(f.output_dir):
        fail(f"--output_dir={f.output_dir} exists and is not a directory")


def _check_cluster(f: flags.FlagValues) -> None:
    """A cluster (--worker_hosts or TF_CONFIG) the flags can run in."""
    spec = resolve_cluster(f.worker_hosts, f.task_index)
    if spec is None:
        return
    if f.variable_update == "replicated":
        # Replicas on each worker plus a cross-worker exchange would need a
        # hierarchical all-reduce; out of scope (docs/gpu_scaling.md).
        fail("--variable_update=replicated works on one machine; a cluster (--worker_hosts "
             "or TF_CONFIG) averages on each worker's CPU: leave --variable_update out")
    if f.sparse_embedding_updates:
        check_sparse_embedding_updates(f.optimizer, f.gradient_accumulation_steps,
                                       spec.num_workers)


def check_inference_flags(f: flags.FlagValues) -> None:
    """Refuse a bad shared flag of an inference-only command (one line naming it)."""
    scoring_export = f.predict_from_export and not f.do_export
    for name in ("bert_config_file", "init_checkpoint"):
        if not f[name].value and not scoring_export:
            fail(f"--{name} is required")
    if f.predict_from_export and f.do_export:
        fail("--predict_from_export scores with an export and --do_export writes one "
             "from --init_checkpoint: run them one at a time")
    check_towers(f)
    if f.do_export and not f.export_dir:
        fail("--do_export needs --export_dir: the folder the export is written into")


def check_towers(f: flags.FlagValues) -> None:
    if f.n_gpus < 1:
        fail(f"--n_gpus={f.n_gpus}: need at least 1 tower")


def check_export_flags(f: flags.FlagValues) -> None:
    """--export_dir, --export_format and --export_precision need --do_export;
    --predict_from_export needs --do_predict."""
    if not f.do_export:
        for name in EXPORT_DETAILS:
            if f[name].present:
                fail(f"--{name} is for --do_export: set --do_export too")
    else:
        # The format and precision checked first (one line naming both), then a missing
        # converter found now, not after hours of training.
        layout.ExportSettings(format=f.export_format, precision=f.export_precision)
        layout.require_export_modules(f.export_format, f.export_precision)
    if "do_predict" in f and f.predict_from_export and not f.do_predict:
        fail("--predict_from_export scores the --do_predict file: set --do_predict too")
    if "do_predict" in f and f.predict_from_export:
        others = [f"--{name}" for name in ("do_train", "do_eval", "do_export")
                  if name in f and f[name].value]
        if others:
            fail(f"--predict_from_export scores the --do_predict file with an export; "
                 f"{' and '.join(others)} {'work' if len(others) > 1 else 'works'} on "
                 "checkpoints: run them without it")


def _check_evaluation_flags(f: flags.FlagValues) -> None:
    """--eval_every_steps and the flags that need it."""
    for name in ("eval_every_steps", "early_stopping_patience"):
        if f[name].value < 0:
            fail(f"--{name}={f[name].value} must be at least 0 (0: off)")
    if f.eval_every_steps:
        if not f.do_train:
            fail(f"--eval_every_steps={f.eval_every_steps} evaluates while training: set "
                 "--do_train too")
        return
    for name in ("keep_best_checkpoint", "early_stopping_patience", "best_metric"):
        if f[name].value:
            fail(f"--{name} works on the evaluations during training: set "
                 "--eval_every_steps=N (and give a dev set)")


def _check_number(f: flags.FlagValues, name: str, low: float, high: float = math.inf,
                  low_open: bool = False, note: str = "") -> None:
    """Refuse nan, inf and values outside [low, high] (or (low, high])."""
    value = f[name].value
    too_low = value <= low if low_open else value < low
    if not math.isfinite(value) or too_low or value > high:
        bounds = (f"{'above' if low_open else 'at least'} {low:g}" if high == math.inf
                  else f"between {low:g} and {high:g}")
        fail(f"--{name}={value} must be a finite number {bounds}"
             + (f" ({note})" if note else ""))


def use_export_model_files(f: flags.FlagValues) -> None:
    """With --predict_from_export, the model flags not given come from the export.

    --bert_config_file, --vocab_file (or --spm_model_file), --do_lower_case
    and --max_seq_length default to what the export was made with, so
    scoring with an export needs no other model file. Flags given anyway are
    checked against the export when the run starts (bert_ad/serving/tf_scorer.py).
    """
    if "predict_from_export" not in f or not f.predict_from_export:
        return
    export_dir = f.predict_from_export
    exported = ExportedModel.open(export_dir)   # checked once, here, for every reader
    metadata = exported.metadata
    vocab_flag = "spm_model_file" if metadata.tokenizer == "sentencepiece" else "vocab_file"
    defaults = {"bert_config_file": layout.bert_config_path(export_dir),
                vocab_flag: exported.vocab_path,
                "do_lower_case": metadata.do_lower_case,
                "max_seq_length": metadata.max_seq_length}
    # The task's recorded settings too (--long_text, --pooling, --token_split, ...):
    # a flag given anyway is checked against the export (compatibility.py).
    defaults.update((name, value) for name, value in settings_flag_values(
        metadata.settings).items() if name in f)
    given = [name for name in ("vocab_file", "spm_model_file") if f[name].present]
    for name, value in defaults.items():
        if name in ("vocab_file", "spm_model_file") and given:
            continue
        if not f[name].present:
            f[name].value = value


@dataclasses.dataclass(frozen=True)
class ModelText:
    """The model's config and tokenizer, read from the flags and checked against each
    other; bert_ad/cli/builders.py makes the TextEncoder of it."""
    config: BertConfig
    tokenizer: object
    vocab_file: str
    do_lower_case: bool


def model_text_from_flags(f: flags.FlagValues) -> ModelText:
    """--bert_config_file and --vocab_file / --spm_model_file, read and checked."""
    config = BertConfig.from_json_file(f.bert_config_file)
    check_max_seq_length(f.max_seq_length, config.max_position_embeddings)
    do_lower_case = decide_do_lower_case(f.vocab_file or "", f.spm_model_file or "",
                                         f.do_lower_case, f["do_lower_case"].present)
    tokenizer = make_tokenizer(f.vocab_file or "", do_lower_case, f.spm_model_file or "")
    # A vocab of another model maps tokens to the wrong rows silently.
    piece_list = isinstance(tokenizer, PieceListTokenizer)
    if not vocab_fits_rows(tokenizer.vocab_size, config.vocab_size, piece_list):
        vocab_flag = "--spm_model_file" if f.spm_model_file else "--vocab_file"
        fail(f"{vocab_flag} has {tokenizer.vocab_size} tokens but --bert_config_file "
             f"says vocab_size={config.vocab_size}"
             f"{unused_rows_note(tokenizer.vocab_size, config.vocab_size, piece_list)}; use "
             "the vocab the model was trained with")
    return ModelText(config, tokenizer, f.vocab_file or f.spm_model_file or "",
                     do_lower_case)


def text_encoder(f: flags.FlagValues, text: ModelText, compute_dtype=None,
                 remove_padding: bool = False) -> TextEncoder:
    """The encoder of a text task: the checked config and tokenizer, how batches are
    padded and cached. How its graph runs (`compute_dtype`, `remove_padding`) is
    bert_ad/cli/builders.py's to add; scoring an ONNX export needs neither."""
    fixed_padding = "padding" in f and f.padding != "dynamic"
    return TextEncoder(
        config=text.config, tokenizer=text.tokenizer, vocab_file=text.vocab_file,
        do_lower_case=text.do_lower_case, max_seq_length=f.max_seq_length,
        padding=f.max_seq_length if fixed_padding else "dynamic",
        bucket_by_length="bucket_by_length" in f and f.bucket_by_length,
        cache_dir=cache_dir_from_flags(f), compute_dtype=compute_dtype,
        remove_padding=remove_padding)


def cache_dir_from_flags(f: flags.FlagValues) -> str:
    """The feature cache's folder ("" for a command without --output_dir: an
    inference-only command streams its rows)."""
    if "output_dir" not in f:
        return ""
    cache_dir = f.cache_dir or os.path.join(f.output_dir, "cache")
    if os.path.exists(cache_dir) and not os.path.isdir(cache_dir):
        fail(f"--cache_dir={cache_dir} is not a directory (a file is in the way); "
             "give a folder for the feature cache")
    return cache_dir
