"""An export folder opened for scoring: the one object every reader of an export asks.

`ExportedModel.open(DIR)` reads and checks the folder once (its export.json,
validated in bert_ad/inference/layout.py; its bert_config.json; the
vocabulary it names), and answers what `--predict_from_export`, `bert-ad
serve`, `bert-ad features` and `bert-ad predict` need of it:

  metadata          export.json (task, labels, settings, tensors, ...)
  config            its BertConfig
  tokenizer         its own vocabulary, casing and piece rules
  needs_tensorflow  whether its format is scored by TensorFlow: the one place
                    that decides it (SavedModel, frozen graph) vs ONNX Runtime
  open_scorer()     a scorer: `run([batch]) -> [{output: array}]`, `close()`

The scorers are named, not imported: ONNX Runtime's (this package) or
TensorFlow's (bert_ad/serving/tf_scorer.py, on the training side), imported
only when an export of that format is opened, so a machine without
TensorFlow opens, scores and serves ONNX exports and says in one line what a
SavedModel needs. Nothing in this package imports TensorFlow
(tests/test_inference_layer.py).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import logging
import os
from typing import Optional

from bert_ad.bert_config import BertConfig
from bert_ad.data.scored_rows import score_rows
from bert_ad.data.tokenization import make_tokenizer
from bert_ad.errors import fail
from bert_ad.inference import layout

log = logging.getLogger("bert_ad")

# export.json's format -> "module:class" of its scorer. Both classes take
# (export_dir, metadata, flag=, threads=, session_config=, model_file=).
SCORERS = {"onnx": "bert_ad.inference.onnx_scorer:OnnxScorer",
           "saved_model": "bert_ad.serving.tf_scorer:ExportScorer",
           "frozen_graph": "bert_ad.serving.tf_scorer:ExportScorer"}
TENSORFLOW_FORMATS = ("saved_model", "frozen_graph")
TENSORFLOW_INSTALL = ('pip install "bert_ad[tf]" (TensorFlow 2.x), or export the model with '
                      '--export_format=onnx, which ONNX Runtime scores without TensorFlow')


@dataclasses.dataclass(frozen=True)
class ExportedModel:
    """An export, read and checked (see the module docstring).

    Attributes:
      directory: the export's folder.
      metadata: its export.json.
      config: its bert_config.json.
      flag: the flag that named it, for messages ("--predict_from_export").
    """
    directory: str
    metadata: layout.ExportMetadata
    config: BertConfig
    flag: str = "--predict_from_export"

    @classmethod
    def open(cls, directory: str, flag: str = "--predict_from_export") -> "ExportedModel":
        """Read and check the export in `directory` (one `error:` line when it is not
        a usable export: missing files, a hand-edited export.json, a config that
        contradicts it)."""
        metadata = layout.read_metadata(directory, flag)
        where = f"{flag}={directory}"
        config_path = layout.bert_config_path(directory)
        if not os.path.isfile(config_path):
            fail(f"{where} is an incomplete export: {layout.EXTRA_DIR}/"
                 f"{layout.BERT_CONFIG_FILE} is missing; export again with --do_export")
        config = BertConfig.from_json_file(config_path)
        if metadata.max_seq_length > config.max_position_embeddings:
            fail(f"{where}: {layout.METADATA_FILE} says max_seq_length="
                 f"{metadata.max_seq_length}, more than the model's "
                 f"max_position_embeddings={config.max_position_embeddings} "
                 f"({layout.BERT_CONFIG_FILE}); export again with --do_export")
        return cls(directory, metadata, config, flag)

    @property
    def where(self) -> str:
        return f"{self.flag}={self.directory}"

    @property
    def needs_tensorflow(self) -> bool:
        """Scored by TensorFlow (a SavedModel or frozen graph), not ONNX Runtime."""
        return self.metadata.format in TENSORFLOW_FORMATS

    @property
    def vocab_path(self) -> str:
        return layout.asset_path(self.directory, self.metadata.vocab_file)

    @functools.cached_property
    def tokenizer(self):
        """The export's own tokenizer (its vocabulary and casing, nothing outside
        its folder)."""
        spm = self.metadata.tokenizer == "sentencepiece"
        return make_tokenizer("" if spm else self.vocab_path, self.metadata.do_lower_case,
                              self.vocab_path if spm else "")

    def open_scorer(self, threads: Optional[int] = None, session_config=None,
                    model_file: Optional[str] = None):
        """The export's scorer (its format's); UserError (one line) when this
        machine cannot score that format.

        Args:
          threads: ONNX Runtime's intra-op threads (default: the cores this
            process may use).
          session_config: TensorFlow's ConfigProto for a SavedModel / frozen graph.
          model_file: another model file of the folder (an int8 export's fp32 twin).
        """
        module_name, _, class_name = SCORERS[self.metadata.format].partition(":")
        if self.needs_tensorflow and importlib.util.find_spec("tensorflow") is None:
            fail(f"{self.where} is a {self.metadata.format} export, which TensorFlow "
                 f"scores, and no TensorFlow is installed here: {TENSORFLOW_INSTALL}")
        scorer_class = getattr(importlib.import_module(module_name), class_name)
        return scorer_class(self.directory, self.metadata, flag=self.flag, threads=threads,
                            session_config=session_config, model_file=model_file)


def needs_tensorflow(export_dir: str, flag: str = "--predict_from_export") -> bool:
    """Whether the export in `export_dir` is scored by TensorFlow (one error line
    when it is no export)."""
    return layout.read_metadata(export_dir, flag).format in TENSORFLOW_FORMATS


def score_split(exported: ExportedModel, task, data, batch_size: int,
                session_config=None, model_file: Optional[str] = None) -> dict:
    """The export's outputs for every feature row of `data` (a task's SplitData:
    `task.batches(data)` makes its rows), in input order, as a checkpoint's
    scoring gives them (bert_ad/evaluation.py).

    The model is opened first, so a damaged one is refused before the features
    are made; the batches are the task's own (grouped by length, dynamically
    padded), one "tower": the runtime spreads a batch over the cores itself.
    """
    with exported.open_scorer(session_config=session_config, model_file=model_file) as scorer:
        batches = task.batches(data)
        rows = batches.num_examples if batches.num_examples is not None else "the"
        log.info("%s: scoring %s rows with the export %s (%s %s, step %d)", data.split, rows,
                 exported.directory, exported.metadata.format, exported.metadata.precision,
                 exported.metadata.global_step)
        return score_rows(scorer, batches, batch_size)
