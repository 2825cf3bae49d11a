"""An export's folder: where every file lives, and the metadata that describes it.

Every format shares one layout, so a server or `--predict_from_export` finds
the tokenizer, the labels and the model's settings in the same places:

  saved_model.pb + variables/     --export_format=saved_model (the default)
  frozen_graph.pb                 --export_format=frozen_graph: variables folded
  frozen_graph.json                 into constants; the input/output tensor names
  model.onnx                      --export_format=onnx: the same graph for ONNX
                                  Runtime (fp32, or int8 with int8_accuracy.json)
  assets/<vocab>                  the vocab.txt (or SentencePiece model, or piece
                                  list + normalization.tsv) as trained
  assets/labels.txt               the label list, one a line, in the head's order
  assets.extra/bert_config.json   the model's config
  assets.extra/export.json        ExportMetadata: task, labels, max_seq_length,
                                  do_lower_case, precision, TensorFlow version,
                                  the signature's tensors, the answer settings
  assets.extra/int8_accuracy.json an int8 ONNX export: its dev figures against
                                  the fp32 model's (bert_ad/serving/quantization.py)

TensorFlow Serving copies `assets/` with a SavedModel and ignores
`assets.extra/`, which is the place TensorFlow reserves for files like ours.
`ExportSettings` is what --do_export asks for (where, format, precision),
checked here: this module imports no TensorFlow, so flags and a scoring
process without TensorFlow can read it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from typing import Dict, List, Optional

from bert_ad.errors import fail

SIGNATURE_KEY = "serving_default"   # what TF Serving calls when none is named
SERVE_TAG = "serve"                 # tf.saved_model.SERVING
SAVED_MODEL_FILE = "saved_model.pb"
FROZEN_GRAPH_FILE = "frozen_graph.pb"
TENSOR_NAMES_FILE = "frozen_graph.json"
ASSETS_DIR = "assets"
EXTRA_DIR = "assets.extra"
METADATA_FILE = "export.json"
BERT_CONFIG_FILE = "bert_config.json"
LABELS_FILE = "labels.txt"

ONNX_FILE = "model.onnx"
INT8_ACCURACY_FILE = "int8_accuracy.json"

FORMATS = {"saved_model": SAVED_MODEL_FILE, "frozen_graph": FROZEN_GRAPH_FILE,
           "onnx": ONNX_FILE}
PRECISIONS = ("fp32", "fp16", "int8")
# The precisions each format has: fp16 runs in TensorFlow's graphs, int8 in ONNX
# Runtime's quantized kernels.
FORMAT_PRECISIONS = {"saved_model": ("fp32", "fp16"), "frozen_graph": ("fp32", "fp16"),
                     "onnx": ("fp32", "int8")}
LAYOUT_VERSION = 1


@dataclasses.dataclass
class TensorInfo:
    """One input or output of the signature: `tensor` is its graph name ("name:0")."""
    tensor: str
    dtype: str          # "int32", "float32", ...
    shape: List[int]    # -1 for a dynamic dimension


@dataclasses.dataclass
class ExportMetadata:
    """assets.extra/export.json: everything a server needs besides the graph.

    Attributes:
      format: "saved_model", "frozen_graph" or "onnx".
      precision: "fp32", "fp16" (weights and compute) or "int8" (ONNX: int8
        weights, activations quantized as they come); outputs are float32.
      task: the task's name ("classifier", "rewrite", ...).
      labels: the label list (labels.txt), or None for a task without one.
      label_names: a display name per label (--label_names), or None.
      max_seq_length, do_lower_case: the tokenizer settings it was trained with.
      vocab_file: the vocab's file name in assets/.
      tokenizer: "wordpiece", "sentencepiece" or "unigram" (a piece list,
        read through --vocab_file like a vocab.txt; its normalization.tsv
        sits beside it in assets/).
      vocab_sha256: the vocab file's digest (a different vocab is refused).
      tensorflow_version: the TensorFlow that wrote (or, for ONNX, froze) it.
      checkpoint, global_step: where the weights came from.
      inputs, outputs: {name: TensorInfo} of the `serving_default` signature
        (ONNX: the model's input and output names, the same as the signature's).
      settings: how the task cut text into rows, {flag name: value}
        (Task.serving_settings: the classifier's truncation or windows);
        empty in exports written before it was recorded.
      answer_settings: how the outputs become answers, {flag name: value}
        (Task.answer_settings: squad's null_score_diff_threshold): a server
        answers with them, and so does --predict_from_export where the run
        does not set the flag; empty for a task without any, and in exports
        written before they were recorded.
      onnx: an ONNX export's converter and runtime versions, opset, and for
        int8 the fusions and quantization applied; empty otherwise.
    """
    format: str
    precision: str
    task: str
    labels: Optional[List[str]]
    max_seq_length: int
    do_lower_case: bool
    vocab_file: str
    tokenizer: str
    vocab_sha256: str
    tensorflow_version: str
    checkpoint: str
    global_step: int
    inputs: Dict[str, TensorInfo]
    outputs: Dict[str, TensorInfo]
    layout_version: int = LAYOUT_VERSION
    settings: Dict[str, object] = dataclasses.field(default_factory=dict)
    answer_settings: Dict[str, object] = dataclasses.field(default_factory=dict)
    onnx: Dict[str, object] = dataclasses.field(default_factory=dict)
    label_names: Optional[List[str]] = None

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, values: dict) -> "ExportMetadata":
        values = dict(values)
        for key in ("inputs", "outputs"):
            values[key] = {name: TensorInfo(**info) for name, info in values[key].items()}
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class ExportSettings:
    """What --do_export asks for.

    Attributes:
      export_dir: where the export goes; "" = OUTPUT_DIR/export/<global step>.
      format: "saved_model", "frozen_graph" or "onnx".
      precision: "fp32", "fp16" (TensorFlow formats) or "int8" (onnx).
    """
    export_dir: str = ""
    format: str = "saved_model"
    precision: str = "fp32"

    def __post_init__(self):
        if self.format not in FORMATS:
            fail(f"--export_format={self.format} is not one of {', '.join(FORMATS)}")
        if self.precision not in PRECISIONS:
            fail(f"--export_precision={self.precision} is not one of "
                 f"{', '.join(PRECISIONS)}")
        has = FORMAT_PRECISIONS[self.format]
        if self.precision not in has:
            others = [f for f, p in FORMAT_PRECISIONS.items() if self.precision in p]
            fail(f"--export_precision={self.precision} is not a precision of "
                 f"--export_format={self.format} (it has {', '.join(has)}); "
                 f"{self.precision} is for --export_format={' or '.join(others)}")


# What an export needs besides TensorFlow, by format and precision: tf2onnx
# converts with onnx, ONNX Runtime checks (and quantizes) the result, and its
# quantizer's shape inference needs sympy, which onnxruntime does not pull in.
ONNX_MODULES = ("onnx", "onnxruntime", "tf2onnx")
INT8_MODULES = ONNX_MODULES + ("sympy",)
ONNX_EXTRA = 'pip install "bert_ad[onnx]" (Python 3.8+ with TensorFlow 2.x)'


def importable(module: str) -> bool:
    """`module` can be imported here (without importing it; one blocked in
    sys.modules, as tests block one, cannot)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    return importlib.util.find_spec(module) is not None


def require_export_modules(export_format: str, precision: str) -> None:
    """UserError (one line naming the extra) when a module the export needs is
    missing: checked with the flags, before a training run's first step."""
    if export_format != "onnx":
        return
    needed = INT8_MODULES if precision == "int8" else ONNX_MODULES
    missing = [name for name in needed if not importable(name)]
    if missing:
        python = ".".join(str(v) for v in sys.version_info[:2])
        flag = ("--export_precision=int8" if precision == "int8"
                else "--export_format=onnx")
        fail(f"{flag} needs {', '.join(needed[:-1])} and {needed[-1]} ({', '.join(missing)} "
             f"{'is' if len(missing) == 1 else 'are'} missing; this is Python {python}): "
             f"{ONNX_EXTRA}")


def metadata_path(export_dir: str) -> str:
    return os.path.join(export_dir, EXTRA_DIR, METADATA_FILE)


def asset_path(export_dir: str, name: str) -> str:
    return os.path.join(export_dir, ASSETS_DIR, name)


def bert_config_path(export_dir: str) -> str:
    return os.path.join(export_dir, EXTRA_DIR, BERT_CONFIG_FILE)


def read_metadata(export_dir: str, flag: str = "--predict_from_export") -> ExportMetadata:
    """The metadata of the export in `export_dir`; UserError (one line) if it is none.

    Args:
      export_dir: a folder written by --do_export.
      flag: the flag that named it, for the message.
    Returns:
      The ExportMetadata, its model file checked to exist.
    """
    where = f"{flag}={export_dir}"
    if not os.path.isdir(export_dir):
        fail(f"{where} is not a directory; give a folder written by --do_export "
             "(e.g. OUTPUT_DIR/export/STEP)")
    path = metadata_path(export_dir)
    if not os.path.isfile(path):
        fail(f"{where} is not an export of bert_ad: it has no {EXTRA_DIR}/{METADATA_FILE}; "
             "give a folder written by --do_export (e.g. OUTPUT_DIR/export/STEP)")
    try:
        with open(path, encoding="utf-8") as f:
            values = json.load(f)
        problem = metadata_problem(values)
        metadata = None if problem else ExportMetadata.from_dict(values)
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, RecursionError) as e:
        problem = f"{type(e).__name__}: {e}"
    if problem:
        fail(f"{where}: {path} cannot be read as an export's metadata ({problem}); "
             "export again with --do_export")
    model_file = FORMATS[metadata.format]
    required = [model_file, os.path.join(ASSETS_DIR, metadata.vocab_file)]
    if metadata.format == "frozen_graph":
        required.append(TENSOR_NAMES_FILE)
    for name in required:
        if not os.path.isfile(os.path.join(export_dir, name)):
            fail(f"{where} is an incomplete export: {name} is missing; export again "
                 "with --do_export")
    return metadata


def _whole(value, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _tensors(value) -> bool:
    """{name: {"tensor": str, "dtype": str, "shape": [int, ...]}} with at least one."""
    return isinstance(value, dict) and bool(value) and all(
        isinstance(name, str) and isinstance(info, dict)
        and set(info) == {"tensor", "dtype", "shape"}
        and isinstance(info["tensor"], str) and isinstance(info["dtype"], str)
        and isinstance(info["shape"], list) and all(_whole(d, -1) for d in info["shape"])
        for name, info in value.items())


# export.json's fields: name -> (what it must be, a check of the value).
TOKENIZERS = ("wordpiece", "sentencepiece", "unigram")
_STRING = ("a string", lambda v: isinstance(v, str))
_FIELDS = {
    "format": (f"one of {', '.join(FORMATS)}", lambda v: v in FORMATS),
    "precision": (f"one of {', '.join(PRECISIONS)}", lambda v: v in PRECISIONS),
    "task": ("a task's name", lambda v: isinstance(v, str) and bool(v)),
    "labels": ("null or a list of distinct strings", lambda v: v is None or (
        isinstance(v, list) and all(isinstance(x, str) for x in v)
        and len(set(v)) == len(v) and bool(v))),
    "label_names": ("null or a list of strings, one per label", lambda v: v is None or (
        isinstance(v, list) and all(isinstance(x, str) for x in v))),
    "max_seq_length": ("a whole number of at least 3", lambda v: _whole(v) and v >= 3),
    "do_lower_case": ("true or false", lambda v: isinstance(v, bool)),
    "vocab_file": ("a file name in assets/", lambda v: isinstance(v, str) and bool(v)
                   and os.path.basename(v) == v and v not in (".", "..")),
    "tokenizer": (f"one of {', '.join(TOKENIZERS)}", lambda v: v in TOKENIZERS),
    "vocab_sha256": _STRING,
    "tensorflow_version": _STRING,
    "checkpoint": _STRING,
    "global_step": ("a whole number", lambda v: _whole(v, -1)),
    "inputs": ("an object of tensors", _tensors),
    "outputs": ("an object of tensors", _tensors),
    "layout_version": ("a whole number", _whole),
    "settings": ("an object", lambda v: isinstance(v, dict)),
    "answer_settings": ("an object", lambda v: isinstance(v, dict)),
    "onnx": ("an object", lambda v: isinstance(v, dict)),
}
_OPTIONAL = ("layout_version", "settings", "answer_settings", "onnx", "label_names")


def metadata_problem(values) -> str:
    """What is wrong with export.json's parsed values ("" when nothing): the one
    check of a (perhaps hand-edited) export.json, before anything uses it."""
    if not isinstance(values, dict):
        return "it is not a JSON object"
    unknown = sorted(set(values) - set(_FIELDS))
    if unknown:
        return f"unknown field(s) {', '.join(map(repr, unknown))}"
    for name, (what, ok) in _FIELDS.items():
        if name not in values:
            if name in _OPTIONAL:
                continue
            return f"{name!r} is missing"
        if not ok(values[name]):
            return f"{name!r} is {json.dumps(values[name])[:60]}, not {what}"
    names = values.get("label_names")
    if names is not None and len(names) != len(values["labels"] or ()):
        return (f"'label_names' has {len(names)} names for {len(values['labels'] or ())} "
                "labels")
    return ""
