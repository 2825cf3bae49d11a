"""Scoring with an ONNX export in ONNX Runtime, with no TensorFlow in the process.

`OnnxScorer` has the interface of bert_ad.parallel.scoring.Scorer and
bert_ad/serving/tf_scorer.ExportScorer (`run(batches)` -> one {output name:
array} per batch), so the task's own tokenizer, length-sorted batches,
windows, answer search, CRF decoding (in the exported graph) and result files
are the same as checkpoint scoring's. ExportedModel.open_scorer
(bert_ad/inference/exported_model.py) opens it for an ONNX export.

ONNX Runtime runs on as many threads as this process may use cores
(`os.sched_getaffinity`, so `taskset` and container limits count), with every
graph optimisation on and its threads waiting without spinning
(`SPINNING_OFF`); on a machine whose onnxruntime build has CUDA
(`onnxruntime-gpu`) the CUDA provider is chosen first (docs/serving.md).
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Dict, List, Optional

import numpy as np

from bert_ad.errors import fail
from bert_ad.inference import layout

log = logging.getLogger("bert_ad")

EXTRA = 'pip install "bert_ad[onnx]" (onnxruntime; Python 3.8+)'
# Tried in this order when the onnxruntime build has them.
PROVIDERS = ("CUDAExecutionProvider", "CPUExecutionProvider")
# ONNX Runtime's intra-op threads busy-wait for work by default: under load that
# takes the cores from the threads that tokenise, answer and send the next batch
# (bert-ad serve at 16 clients, MiniLM int8 on 2 cores: 1.15-1.28x the rows/sec
# with it off, one client unchanged; bert-ad predict unchanged; docs/serving.md).
SPINNING_OFF = {"session.intra_op.allow_spinning": "0"}


def require_onnxruntime(where: str):
    """The onnxruntime module, or a UserError naming the extra to install.

    Args:
      where: what asked for it, for the message ("--predict_from_export=DIR").
    """
    try:
        import onnxruntime
    except ImportError:
        python = ".".join(str(v) for v in sys.version_info[:2])
        fail(f"{where} is an ONNX export, which ONNX Runtime scores, and onnxruntime is "
             f"not installed (Python {python}): {EXTRA}")
    return onnxruntime


def cpu_cores() -> int:
    """The cores this process may run on (its affinity), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


class OnnxScorer:
    """An ONNX export in an ONNX Runtime session.

    Args:
      export_dir: a folder written by --do_export --export_format=onnx.
      metadata: its metadata (layout.read_metadata).
      model_file: another model file in the folder (the fp32 twin an int8
        export is compared with); default the export's own.
      threads: intra-op threads; default cpu_cores().
      flag: the flag that named the folder, for messages.
      session_config: TensorFlow's (ExportScorer's); not read here.
    """

    def __init__(self, export_dir: str, metadata: layout.ExportMetadata,
                 model_file: Optional[str] = None, threads: Optional[int] = None,
                 flag: str = "--predict_from_export", session_config=None):
        where = f"{flag}={export_dir}"
        ort = require_onnxruntime(where)
        path = model_file or os.path.join(export_dir, layout.ONNX_FILE)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or cpu_cores()
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        for key, value in SPINNING_OFF.items():
            options.add_session_config_entry(key, value)
        available = ort.get_available_providers()
        self.providers = [p for p in PROVIDERS if p in available]
        try:
            self.session = ort.InferenceSession(path, options, providers=self.providers)
        except Exception as e:  # onnxruntime's own error classes (Fail, InvalidGraph, ...)
            fail(f"{where}: {os.path.basename(path)} does not load in ONNX Runtime "
                 f"{ort.__version__} ({_first_line(e)}); export again with --do_export")
        self.inputs = {value.name: value for value in self.session.get_inputs()}
        self.outputs = [value.name for value in self.session.get_outputs()]
        expected = (sorted(metadata.inputs), sorted(metadata.outputs))
        if (sorted(self.inputs), sorted(self.outputs)) != expected:
            fail(f"{where}: {os.path.basename(path)} takes {', '.join(sorted(self.inputs))} "
                 f"and answers {', '.join(sorted(self.outputs))}, not what export.json "
                 f"lists ({', '.join(expected[0])}; {', '.join(expected[1])}); export again "
                 "with --do_export")
        self.dtypes = {name: np.dtype(metadata.inputs[name].dtype) for name in self.inputs}
        log.info("ONNX Runtime %s: %s, %d thread(s), %s", ort.__version__,
                 os.path.basename(path), options.intra_op_num_threads,
                 ", ".join(self.providers))

    def run(self, batches: List[dict]) -> List[Dict[str, np.ndarray]]:
        """One {output name: array} per batch dict (each holding every input name)."""
        results = []
        for batch in batches:
            feed = {name: np.asarray(batch[name], self.dtypes[name]) for name in self.inputs}
            results.append(dict(zip(self.outputs, self.session.run(self.outputs, feed))))
        return results

    def __enter__(self) -> "OnnxScorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Let go of the ONNX Runtime session (bert-ad serve closes its scorers)."""
        self.session = None


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
