"""Scoring with an export instead of a checkpoint (`--predict_from_export=DIR`).

`ExportScorer` has the interface of bert_ad.parallel.scoring.Scorer (a
context manager whose `run(per_tower_batches)` returns one {name: array} per
batch), so the driver scores an export through the same tokenizer, batching
and result files as a checkpoint. It feeds the export's signature only: the
inputs it names, by their tensor names, and fetches its outputs. Both formats
load in graph mode through tf.compat.v1 (TF 1.15 and TF 2.x alike): a
SavedModel with `saved_model.loader.load`, a frozen graph with
`import_graph_def`.

`check_compatible` refuses an export that does not belong to the run's task
or tokenizer before anything is scored.
"""

from __future__ import annotations

import json
import os
from typing import Dict, List

from bert_ad.compat import TF_VERSION, tf
from bert_ad.errors import fail
from bert_ad.data.feature_cache import file_digest
from bert_ad.serving import layout
from bert_ad.tasks.base import Task


class ExportScorer:
    """An export loaded into its own graph and session.

    Args:
      export_dir: a folder written by --do_export.
      metadata: its metadata (layout.read_metadata).
      session_config: a ConfigProto, or None.
      flag: the flag that named the folder, for messages.
    """

    def __init__(self, export_dir: str, metadata: layout.ExportMetadata,
                 session_config=None, flag: str = "--predict_from_export"):
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


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "message", "") or error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def check_compatible(export_dir: str, metadata: layout.ExportMetadata, task: Task) -> None:
    """UserError (one line) unless the export can score this run's rows.

    The export must be of the same task, cut text into rows as the run does
    (Task.serving_settings), take every input the task feeds, and have been
    trained with the run's tokenizer (the same vocab file
    content, casing and max_seq_length).
    """
    where = f"--predict_from_export={export_dir}"
    if metadata.task != task.name:
        fail(f"{where} is an export of the {metadata.task} task, not {task.name}; "
             "score it with that task's launcher")
    # How text became rows (truncation, windows) must match, or the rows
    # scored are not the ones the export was trained on.
    mine = task.serving_settings()
    for key, value in metadata.settings.items():
        if mine.get(key) != value:
            fail(f"{where} was exported with --{key}={value} but this run has "
                 f"--{key}={mine.get(key)}; set --{key}={value}")
    missing = [name for name in task.serving_inputs if name not in metadata.inputs]
    if missing:
        fail(f"{where} does not take the input(s) {', '.join(missing)}")
    encoder = task.encoder
    if encoder is None:
        return
    if file_digest(encoder.vocab_file) != metadata.vocab_sha256:
        fail(f"{where} was trained with another vocab than {encoder.vocab_file}; leave "
             "--vocab_file/--spm_model_file out to use the export's own")
    for key, value in (("do_lower_case", bool(encoder.do_lower_case)),
                       ("max_seq_length", encoder.max_seq_length)):
        if getattr(metadata, key) != value:
            fail(f"{where} was exported with {key}={getattr(metadata, key)} but this run "
                 f"has --{key}={value}; leave --{key} out to use the export's")
