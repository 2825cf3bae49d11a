"""Every shared flag, defined once and without TensorFlow, and the groups commands compose.

A shared flag (`--vocab_file`, `--n_gpus`, `--precision`, ...) is one `Flag`
in SHARED below: one type, one default, one help, whichever command has it. A
command picks groups (GROUPS: model files, towers, speed, export, training,
evaluation, cluster, ...) or single names with `define`; a task may give other
defaults (TaskCommand.flag_defaults, e.g. pretraining's learning rate) and a
tool may add a note to a flag's help where its default differs (`notes`:
"default: beside the checkpoint"). Defaults RunSettings holds come from it
(bert_ad/run_settings.py), so a default is written once.

Nothing here imports TensorFlow: `bert-ad COMMAND --helpfull` and a bad flag
value answer in a fraction of a second (bert_ad/cli/flag_checks.py checks what
the flags alone can tell; bert_ad/cli/builders.py makes records of them once
TensorFlow is loaded).
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Sequence, Tuple

from absl import flags

from bert_ad import choices
from bert_ad.data.truncation import TRUNCATION_STRATEGIES
from bert_ad.run_settings import DEFAULTS as RUN_DEFAULTS
from bert_ad.inference import layout

_FROM_RUN_SETTINGS = object()


@dataclasses.dataclass(frozen=True)
class Flag:
    """One shared flag: absl type ("string", "bool", "integer", "float", "enum"),
    default (RunSettings' when it holds the name), help, and an enum's values."""
    kind: str
    help: str
    default: object = _FROM_RUN_SETTINGS
    choices: Tuple[str, ...] = ()

    def default_for(self, name: str):
        if self.default is _FROM_RUN_SETTINGS:
            return getattr(RUN_DEFAULTS, name)
        return self.default


SHARED: Dict[str, Flag] = {
    # --- the model's files ------------------------------------------------------------
    "bert_config_file": Flag("string", "bert_config.json of the model.", None),
    "init_checkpoint": Flag("string", "Checkpoint prefix (or a folder holding one) of the "
                            "model's weights: what training starts from, or what "
                            "scoring reads.", None),
    "read_while_training": Flag("bool", "Read a model folder (--init_checkpoint, "
                                "--teacher_dir) that a live run is still training, at its "
                                "newest complete checkpoint, with a warning (default: "
                                "refused, naming the run).", False),
    "vocab_file": Flag("string", "The model's vocabulary: WordPiece vocab.txt, or an XLM-R "
                       "unigram piece list (pieces.tsv).", None),
    "spm_model_file": Flag("string", "SentencePiece .model of the model, instead of "
                           "--vocab_file.", None),
    "do_lower_case": Flag("bool", "Lower-case and strip accents (uncased models; "
                          "--do_lower_case=false for cased ones). With a piece list, "
                          "unset means: as the list is cased.", True),
    "max_seq_length": Flag("integer", "Longest sequence in pieces, [CLS] and [SEP] "
                           "included; longer texts are truncated (or cut into windows "
                           "where the task can), shorter ones padded per batch.", 128),
    # --- towers ------------------------------------------------------------------------
    "n_gpus": Flag("integer", "Towers: one per visible GPU (round-robin if more towers "
                   "than cards), or logical CPU devices without GPUs.", 1),
    "variable_update": Flag(
        "enum", "parameter_server (default): variables on the CPU, tower gradients "
        "averaged and applied there once. replicated: a copy of the variables on every "
        "tower, gradients all-reduced between the towers (NCCL on GPUs), one apply per "
        "tower; one tower per card, one machine (docs/gpu_scaling.md).",
        choices.PARAMETER_SERVER, choices.VARIABLE_UPDATES),
    # --- precision and speed -----------------------------------------------------------
    "precision": Flag("enum", "Activation precision of the encoder; weights, optimizer "
                      "slots, checkpoints and outputs stay float32. fp16 trains with "
                      "dynamic loss scaling; bf16 pays on GPUs and on CPUs with AMX or "
                      "AVX512_BF16 (docs/benchmarks.md).", choices=choices.PRECISIONS),
    "use_xla": Flag("bool", "Session-level XLA JIT (off by default on CPU).", False),
    "remove_padding": Flag("bool", "Run the encoder's dense layers, GELU, layer norm and "
                           "dropout on the real tokens only (attention still sees the "
                           "padded batch): the same outputs, less work with padded "
                           "batches. Off under --use_xla.", True),
    "recompute_activations": Flag("bool", "Keep only each encoder layer's input for the "
                                  "backward pass and recompute the layer there (gradient "
                                  "checkpointing): a second forward pass of every layer "
                                  "for a much smaller activation memory, e.g. to fit "
                                  "max_seq_length 512 on a smaller card "
                                  "(docs/benchmarks.md, Memory)."),
    # --- export ------------------------------------------------------------------------
    "do_export": Flag("bool", "Export the model for serving (after training, or alone: "
                      "output_dir's newest checkpoint, else --init_checkpoint).", False),
    "export_dir": Flag("string", "Where the export goes (default: "
                       "output_dir/export/<global step>); never written over.", None),
    "export_format": Flag("enum", "saved_model (TensorFlow Serving), frozen_graph (one "
                          ".pb, weights as constants) or onnx (model.onnx for ONNX "
                          "Runtime; bert_ad[onnx]).", "saved_model", tuple(layout.FORMATS)),
    "export_precision": Flag("enum", "fp16: float16 encoder weights and compute "
                             "(saved_model, frozen_graph); int8: int8 encoder matrices "
                             "(onnx), measured against fp32 on the dev split. Outputs "
                             "stay float32.", "fp32", layout.PRECISIONS),
    "predict_from_export": Flag("string", "Score with this export (a folder written by "
                                "--do_export; ONNX ones in ONNX Runtime) instead of a "
                                "checkpoint: the --do_predict file, or features' "
                                "--input_file; its vocab, config, casing and "
                                "max_seq_length are used unless given.", None),
    # --- a run: what to do, where it goes ----------------------------------------------
    "output_dir": Flag("string", "Where checkpoints and results go.", None),
    "do_train": Flag("bool", "Train.", False),
    "do_eval": Flag("bool", "Evaluate.", False),
    "do_predict": Flag("bool", "Score --predict_file (default: the test file).", False),
    "seed": Flag("integer", "Seed of everything random in the run: data order and "
                 "shuffles, initial weights, dropout."),
    # --- training ----------------------------------------------------------------------
    "train_batch_size": Flag("integer", "Batch size PER TOWER."),
    "eval_batch_size": Flag("integer", "Eval batch size per tower."),
    "predict_batch_size": Flag("integer", "Predict batch size per tower."),
    "learning_rate": Flag("float", "Peak learning rate (before --lr_scaling)."),
    "num_train_epochs": Flag("float", "Epochs over the training file."),
    "warmup_proportion": Flag("float", "Share of steps with linear warmup."),
    "num_train_steps": Flag("integer", "Applied steps.", 100000),
    "num_warmup_steps": Flag("integer", "Linear warmup steps.", 10000),
    "save_checkpoints_steps": Flag("integer", "Checkpoint every N steps."),
    "gradient_accumulation_steps": Flag("integer", "Micro-batches per applied step."),
    "optimizer": Flag("enum", "adamw = Google's AdamWeightDecay; adam = with bias "
                      "correction; lamb for large batches.", choices=choices.OPTIMIZERS),
    "weight_decay_rate": Flag("float", "Decoupled weight decay."),
    "sparse_embedding_updates": Flag(
        "bool", "Update only the word-embedding rows the batch uses (lazy Adam): rows not "
        "in the batch keep their weights and Adam moments (no momentum step, no weight "
        "decay), unlike Google's dense AdamW, which moves every row every step. Faster "
        "with large vocabularies; not with lamb, gradient accumulation or several "
        "workers."),
    "clip_norm": Flag("float", "Clip gradients to this global norm (0: off)."),
    # docs/accuracy.md: none and sqrt keep the same accuracy at 4-16x the batch,
    # linear made AdamW diverge; none stays the default (Google's behaviour).
    "lr_scaling": Flag("enum", "Scale --learning_rate by (global batch / "
                       "--lr_reference_batch): none (default), sqrt, or linear (see "
                       "docs/accuracy.md).", choices=choices.LR_SCALING_MODES),
    "lr_reference_batch": Flag("integer", "Batch --learning_rate was tuned for (0: "
                               "--train_batch_size, i.e. one tower without "
                               "accumulation)."),
    "keep_checkpoint_max": Flag("integer", "Checkpoints kept in output_dir."),
    "log_every_n_steps": Flag("integer", "Log and summarise every N steps."),
    # --- evaluation during training (bert_ad/parallel/best_checkpoint.py) --------------
    "eval_every_steps": Flag("integer", "Score the dev set on all towers every N steps "
                             "and at the last one, with --do_train (0: never)."),
    "keep_best_checkpoint": Flag("bool", "With --eval_every_steps: keep the weights of the "
                                 "best evaluation in output_dir/best/ (and the record in "
                                 "best/best.json)."),
    "best_metric": Flag("string", "The dev figure that decides the best checkpoint "
                        "(default: the task's main one, e.g. eval_accuracy). Lower is "
                        "better for names with loss, mse, error or perplexity; higher "
                        "otherwise.", None),
    "early_stopping_patience": Flag("integer", "With --eval_every_steps: stop after K "
                                    "evaluations in a row without improvement (0: "
                                    "never)."),
    "use_best_checkpoint": Flag("bool", "Eval, predict and export with output_dir/best/ "
                                "instead of the newest checkpoint."),
    # --- several machines (docs/multi_worker.md); TF_CONFIG works as well --------------
    "worker_hosts": Flag("string", "Multi-worker: every worker's host:port, "
                         "comma-separated, the chief (worker 0) first; the same list on "
                         "every worker.", None),
    "task_index": Flag("integer", "Multi-worker: this worker's position in "
                       "--worker_hosts.", None),
    "collective_implementation": Flag("enum", "Cross-worker all-reduce: ring (gRPC), nccl "
                                      "(GPUs), auto = nccl with GPU towers, else ring.",
                                      "auto", choices.COLLECTIVE_IMPLEMENTATIONS),
    "collective_pack_mb": Flag("float", "Gradients cross the network in buffers of about "
                               "this many MiB.", 32.0),
    "collective_fp16": Flag("bool", "Exchange gradients between workers as float16 (half "
                            "the bytes).", False),
    "collective_timeout_s": Flag("float", "A step waiting this long for another worker "
                                 "stops the run.", 300.0),
    "cluster_start_timeout_s": Flag("float", "Every worker must be up and in step within "
                                    "this many seconds.", 600.0),
    # --- a task's text data ------------------------------------------------------------
    "predict_file": Flag("string", "File to score with --do_predict.", None),
    "max_train_examples": Flag("integer", "Use only the first N training rows.", None),
    "max_eval_examples": Flag("integer", "Use only the first N dev rows.", None),
    # A task's own default (classifier 1, NER 100, squad 1): its command passes it.
    "head_learning_rate_multiplier": Flag(
        "float", "The task's freshly initialised head (its output layer; a CRF's "
        "transitions) learns at this many times --learning_rate (1: Google's single rate).",
        1.0),
    "padding": Flag("enum", "Pad each batch to its longest row (dynamic) or to "
                    "max_seq_length.", "dynamic", ("dynamic", "max_length")),
    "bucket_by_length": Flag("bool", "Train on batches of similar lengths (less padding); "
                             "eval and predict always group by length and restore the "
                             "input order.", False),
    "cache_dir": Flag("string", "Feature cache (default: output_dir/cache).", None),
    "label_names": Flag("string", "A file of display names for the labels, one a line in "
                        "labels.txt's order: kept in the model folder's "
                        "model_settings.json and in exports, when training or later "
                        "against a trained folder (docs/model_folder.md)."),
    "truncation": Flag("enum", "Which tokens survive when a text is too long.", "head",
                       TRUNCATION_STRATEGIES),
    "truncation_head_fraction": Flag("float", "head+tail: share of the budget kept from "
                                     "the start.", 0.25),
}

GROUPS: Dict[str, Tuple[str, ...]] = {
    "model_files": ("bert_config_file", "init_checkpoint", "read_while_training", "vocab_file",
                    "spm_model_file", "do_lower_case", "max_seq_length"),
    "towers": ("n_gpus", "variable_update"),
    "speed": ("precision", "use_xla", "remove_padding", "recompute_activations"),
    "export": ("do_export", "export_dir", "export_format", "export_precision",
               "predict_from_export"),
    "run": ("output_dir", "do_train", "do_eval", "seed"),
    "training": ("train_batch_size", "eval_batch_size", "learning_rate",
                 "save_checkpoints_steps", "gradient_accumulation_steps", "optimizer",
                 "weight_decay_rate", "sparse_embedding_updates", "clip_norm", "lr_scaling",
                 "lr_reference_batch", "keep_checkpoint_max", "log_every_n_steps"),
    "epochs": ("num_train_epochs", "warmup_proportion"),
    "evaluation": ("eval_every_steps", "keep_best_checkpoint", "best_metric",
                   "early_stopping_patience", "use_best_checkpoint"),
    "cluster": ("worker_hosts", "task_index", "collective_implementation",
                "collective_pack_mb", "collective_fp16", "collective_timeout_s",
                "cluster_start_timeout_s"),
    "text_data": ("do_predict", "predict_batch_size", "predict_file", "max_train_examples",
                  "max_eval_examples", "padding", "bucket_by_length", "cache_dir",
                  "label_names"),
    "truncation": ("truncation", "truncation_head_fraction"),
}

# What each kind of command has: a task that trains on token ids (pretraining:
# no tokenizer, no export), one that reads text (every fine-tuning task), and an
# inference-only command (extract_features.py: model files, towers, precision
# and export; no checkpoint of its own, no training).
TOKEN_ID_TASK_GROUPS = ("model_files", "towers", "speed", "run", "training", "evaluation",
                        "cluster")
TOKEN_ID_TASK_LEAVES_OUT = ("vocab_file", "spm_model_file", "do_lower_case")
TEXT_TASK_GROUPS = TOKEN_ID_TASK_GROUPS + ("epochs", "text_data", "export")
INFERENCE_GROUPS = ("model_files", "towers", "speed", "export")
INFERENCE_LEAVES_OUT = ("variable_update", "recompute_activations")

_DEFINE = {"string": flags.DEFINE_string, "bool": flags.DEFINE_bool,
           "integer": flags.DEFINE_integer, "float": flags.DEFINE_float}


def define(fv: flags.FlagValues, names: Sequence[str],
           defaults: Optional[Mapping[str, object]] = None,
           notes: Optional[Mapping[str, str]] = None) -> None:
    """Define the shared flags `names` on `fv`.

    Args:
      defaults: {name: default} where this command's differ.
      notes: {name: text} added to a flag's help where this command reads it
        differently (a default found beside the checkpoint).
    """
    defaults = dict(defaults or {})
    notes = dict(notes or {})
    for name in names:
        spec = SHARED[name]
        default = defaults.get(name, spec.default_for(name))
        help_text = spec.help + (f" ({notes[name]})" if name in notes else "")
        if spec.kind == "enum":
            flags.DEFINE_enum(name, default, list(spec.choices), help_text, flag_values=fv)
        else:
            _DEFINE[spec.kind](name, default, help_text, flag_values=fv)


def define_groups(fv: flags.FlagValues, groups: Sequence[str],
                  defaults: Optional[Mapping[str, object]] = None,
                  leave_out: Sequence[str] = (),
                  notes: Optional[Mapping[str, str]] = None) -> None:
    """Define every flag of `groups` (but `leave_out`) on `fv`; see `define`."""
    names = [name for group in groups for name in GROUPS[group] if name not in leave_out]
    define(fv, names, defaults, notes)
