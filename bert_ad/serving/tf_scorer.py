"""Scoring with an export instead of a checkpoint (`--predict_from_export=DIR`).

`ExportScorer` has the interface of bert_ad.parallel.scoring.Scorer (a
context manager whose `run(per_tower_batches)` returns one {name: array} per
batch), so the driver scores an export through the same tokenizer, batching
and result files as a checkpoint. It feeds the export's signature only: the
inputs it names, by their tensor names, and fetches its outputs. Both formats
load in graph mode through tf.compat.v1 (TF 1.15 and TF 2.x alike): a
SavedModel with `saved_model.loader.load`, a frozen graph with
`import_graph_def`.

Whether an export belongs to the run's task and tokenizer is checked before
(bert_ad/inference/compatibility.py).
"""

from __future__ import annotations

import json
import os
from typing import Dict, List, Optional

from bert_ad.compat import TF_VERSION, tf
from bert_ad.errors import fail
from bert_ad.files import tensorflow_cause
from bert_ad.inference import layout
from bert_ad.parallel.checkpoints import checkpoint_problem


class ExportScorer:
    """An export loaded into its own graph and session.

    Args:
      export_dir: a folder written by --do_export.
      metadata: its metadata (layout.read_metadata).
      session_config: a ConfigProto, or None.
      threads, model_file: OnnxScorer's (the same call opens either).
      flag: the flag that named the folder, for messages.
    """

    def __init__(self, export_dir: str, metadata: layout.ExportMetadata,
                 session_config=None, flag: str = "--predict_from_export",
                 threads: Optional[int] = None, model_file: Optional[str] = None):
        # threads, model_file: ONNX Runtime's (OnnxScorer's); TensorFlow's threads
        # are in session_config, and its exports have one model file.
        assert model_file is None, "a TensorFlow export has one model file"
        self.metadata = metadata
        self.flag = flag
        self.graph = tf.Graph()
        self.session = tf.Session(graph=self.graph, config=session_config)
        try:
            with self.graph.as_default():
                if metadata.format == "saved_model":
                    inputs, outputs = self._load_saved_model(export_dir)
                else:
                    inputs, outputs = self._load_frozen_graph(export_dir)
        except BaseException:
            self.session.close()
            raise
        self.inputs = {name: self.graph.get_tensor_by_name(t) for name, t in inputs.items()}
        self.outputs = {name: self.graph.get_tensor_by_name(t) for name, t in outputs.items()}

    def _load_saved_model(self, export_dir: str):
        try:
            meta_graph = tf.saved_model.loader.load(self.session, [layout.SERVE_TAG],
                                                    export_dir)
        except (tf.errors.OpError, RuntimeError, ValueError, OSError) as e:
            damaged = _damaged_variables(export_dir)
            if damaged:
                fail(f"{self.flag}={export_dir}: {damaged}; export the model again")
            fail(f"{self.flag}={export_dir}: the SavedModel does not load here "
                 f"(TensorFlow {TF_VERSION}): {_first_line(e)}")
        if layout.SIGNATURE_KEY not in meta_graph.signature_def:
            fail(f"{self.flag}={export_dir}: the SavedModel has no "
                 f"{layout.SIGNATURE_KEY!r} signature")
        signature = meta_graph.signature_def[layout.SIGNATURE_KEY]
        return ({k: v.name for k, v in signature.inputs.items()},
                {k: v.name for k, v in signature.outputs.items()})

    def _load_frozen_graph(self, export_dir: str):
        path = os.path.join(export_dir, layout.FROZEN_GRAPH_FILE)
        graph_def = tf.GraphDef()
        try:
            with open(path, "rb") as f:
                graph_def.ParseFromString(f.read())
            tf.import_graph_def(graph_def, name="")
        except (tf.errors.OpError, ValueError, OSError) as e:
            fail(f"{self.flag}={export_dir}: {layout.FROZEN_GRAPH_FILE} does not "
                 f"load here (TensorFlow {TF_VERSION}): {_first_line(e)}")
        names_file = os.path.join(export_dir, layout.TENSOR_NAMES_FILE)
        with open(names_file, encoding="utf-8") as f:
            names = json.load(f)
        return ({k: v["tensor"] for k, v in names["inputs"].items()},
                {k: v["tensor"] for k, v in names["outputs"].items()})

    def run(self, batches: List[dict]) -> List[Dict[str, "object"]]:
        """One {output name: array} per batch dict (each holding every input name)."""
        results = []
        for batch in batches:
            feed = {tensor: batch[name] for name, tensor in self.inputs.items()}
            results.append(self.session.run(self.outputs, feed))
        return results

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "ExportScorer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _damaged_variables(export_dir: str) -> str:
    """Why a SavedModel's variables (a checkpoint) cannot be read whole, or ""."""
    if not os.path.isdir(os.path.join(export_dir, "variables")):
        return ""
    return checkpoint_problem(os.path.join(export_dir, "variables", "variables")) or ""


def _first_line(error: BaseException) -> str:
    if isinstance(error, tf.errors.OpError):  # TF 2.x's first line: "Graph execution error:"
        return tensorflow_cause(error)
    text = str(getattr(error, "message", "") or error).strip()
    return text.splitlines()[0] if text else type(error).__name__
