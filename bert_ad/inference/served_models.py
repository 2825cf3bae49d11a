"""The models a server answers for: --model_dir read, versions found, each export loaded.

`--model_dir` names one folder, or several as `NAME=DIR,NAME=DIR`. A folder
is an export (written by --do_export: it holds assets.extra/export.json) or a
TensorFlow Serving *model base path* such as OUTPUT_DIR/export, whose
numbered subfolders are versions of one model: the newest is served (and
with --poll_s, newer ones as they are published: model_versions.py).

An export is opened by bert_ad/inference/exported_model.py (metadata checked,
its tokenizer, its scorer: ONNX Runtime, or TensorFlow imported only for a
SavedModel or frozen graph).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import os
import re
from typing import Callable, List, Optional, Tuple

from bert_ad.errors import fail
from bert_ad.inference import layout
from bert_ad.inference.batching import DynamicBatcher
from bert_ad.inference.exported_model import ExportedModel
from bert_ad.data.scored_rows import stack_rows
from bert_ad.inference.predictions import Predictions, ServeOptions, predictions_for
from bert_ad.model_folder import is_model_folder

log = logging.getLogger("bert_ad")

FLAG = "--model_dir"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """One model as --model_dir names it: its name and folder as given."""
    name: str
    directory: str


def parse_model_dirs(value: str, model_name: str = "") -> List[ModelSpec]:
    """--model_dir's models: `DIR` (named --model_name, else after the folder) or
    `NAME=DIR,NAME=DIR`; UserError (one line) for a malformed list."""
    items = [item.strip() for item in (value or "").split(",") if item.strip()]
    if not items:
        fail(f"{FLAG} is required: an export folder (or OUTPUT_DIR/export), or "
             "NAME=DIR,NAME=DIR")
    if len(items) == 1 and "=" not in items[0]:
        if model_name and not NAME_PATTERN.match(model_name):
            fail(f"--model_name={model_name!r} is not usable in a URL: a name is letters, "
                 "digits, _ . and -, starting with a letter or digit")
        name = model_name or default_name(items[0])
        if not NAME_PATTERN.match(name):
            fail(f"the model name {name!r} (from {FLAG}={items[0]}) is not usable in a URL; "
                 "name it with --model_name (letters, digits, _ . -)")
        return [ModelSpec(name, items[0])]
    if model_name:
        fail(f"--model_name names the one model of {FLAG}=DIR; with several, name each as "
             f"{FLAG}=NAME=DIR,NAME=DIR")
    specs = []
    for item in items:
        name, _, directory = item.partition("=")
        if not directory or not NAME_PATTERN.match(name):
            fail(f"{FLAG}: {item!r} is not NAME=DIR (a name of letters, digits, _ . - and "
                 "a folder)")
        if name in {s.name for s in specs}:
            fail(f"{FLAG}: the model name {name!r} is given twice")
        specs.append(ModelSpec(name, directory))
    return specs


def default_name(directory: str) -> str:
    """The folder's name, passing over a version number and a folder named
    `export` (OUT/export/1200 and OUT/export are both served as OUT's name)."""
    parts = [p for p in os.path.abspath(directory).split(os.sep) if p]
    while len(parts) > 1 and (parts[-1].isdigit() or parts[-1] == "export"):
        parts.pop()
    return parts[-1] if parts else "model"


def resolve_version(directory: str) -> Tuple[str, int]:
    """(the export to serve, its version) of a folder --model_dir names: the
    folder itself when it is an export, a fine-tuned model folder's newest export
    (OUT/export/STEP), else its newest numbered export."""
    if is_model_folder(directory) and not os.path.isfile(layout.metadata_path(directory)):
        return _model_folder_export(directory)
    if os.path.isfile(layout.metadata_path(directory)):
        name = os.path.basename(os.path.normpath(directory))
        return directory, int(name) if name.isdigit() else -1
    if os.path.isdir(directory):
        versions = sorted(int(name) for name in os.listdir(directory) if name.isdigit()
                          and os.path.isfile(layout.metadata_path(os.path.join(directory,
                                                                               name))))
        if versions:
            return os.path.join(directory, str(versions[-1])), versions[-1]
    # The one line read_metadata gives for a folder that is no export.
    layout.read_metadata(directory, FLAG)
    raise AssertionError("read_metadata accepted a folder without export.json")


CHECKPOINT_INDEX = re.compile(r"^model\.ckpt-(\d+)\.index$")


def _model_folder_export(folder: str) -> Tuple[str, int]:
    """A fine-tuned folder's newest export (its export/STEP), with a warning when
    the folder holds a newer checkpoint than that export; one error line when it
    has none (exporting needs TensorFlow: this layer has none)."""
    exports = os.path.join(folder, "export")
    versions = sorted(int(name) for name in (os.listdir(exports) if os.path.isdir(exports)
                                             else ()) if name.isdigit()
                      and os.path.isfile(layout.metadata_path(os.path.join(exports, name))))
    if not versions:
        fail(f"{FLAG}={folder} is a fine-tuned model folder with no export in it: export it "
             f"first with its command's --do_export --output_dir={folder} (add "
             "--export_format=onnx to serve it on a machine without TensorFlow), then serve "
             f"{FLAG}={folder}")
    steps = [int(m.group(1)) for m in map(CHECKPOINT_INDEX.match, os.listdir(folder)) if m]
    if steps and max(steps) > versions[-1]:
        log.warning("warning: %s=%s holds model.ckpt-%d, newer than its newest export (%d), "
                    "which is served: export again with --do_export to serve the newer "
                    "weights", FLAG, folder, max(steps), versions[-1])
    return os.path.join(exports, str(versions[-1])), versions[-1]


@dataclasses.dataclass
class Usage:
    """What a request cost: feature rows (texts, windows) and their tokens."""
    rows: int = 0
    tokens: int = 0


@dataclasses.dataclass
class ServedModel:
    """One loaded model: its export, how it answers, its scorer and its batcher."""
    name: str
    version: int
    export_dir: str
    metadata: layout.ExportMetadata
    predictions: Predictions
    scorer: object
    batcher: Optional[DynamicBatcher] = None

    def score(self, batch: dict) -> dict:
        return self.scorer.run([batch])[0]

    def start_batching(self, max_batch_size: int, batch_timeout_ms: float,
                       on_batch: Optional[Callable[[int, int, float], None]] = None,
                       max_batch_tokens: Optional[int] = None,
                       max_request_rows: Optional[int] = None) -> None:
        self.batcher = DynamicBatcher(self.score, max_batch_size, batch_timeout_ms,
                                      max_batch_tokens, max_request_rows,
                                      self.predictions.batch_of, on_batch, self.name)

    def answer(self, parsed: list, pool: concurrent.futures.Executor,
               usage: Optional[Usage] = None) -> concurrent.futures.Future:
        """A future of the answers to a request's parsed instances; `usage`
        gets the rows and tokens they made. Cancelling the future (a deadline)
        drops the rows not scored yet.

        On `pool`'s threads: tokenise and queue the rows; once the batcher has
        scored them (its callback, on the scoring thread, only hands over),
        make the answers. Neither the event loop nor the scoring thread runs
        the task's Python code, and the loop wakes once, for the answers.
        """
        answered: concurrent.futures.Future = concurrent.futures.Future()

        def failed(error: BaseException) -> None:
            if not answered.done():
                answered.set_exception(error)

        def make_answers(featurized, scored: concurrent.futures.Future) -> None:
            try:
                outputs = stack_rows(enumerate(scored.result()))
                answered.set_result(self.predictions.predict(parsed, featurized, outputs))
            except BaseException as e:  # the request learns it (500)
                failed(e)

        def featurize() -> None:
            try:
                if answered.cancelled():
                    raise concurrent.futures.CancelledError()
                featurized = self.predictions.featurize(parsed)
                rows = featurized.rows()
            except BaseException as e:
                self.batcher.withdraw()
                failed(e)
                return
            if usage is not None:
                usage.rows, usage.tokens = len(rows), sum(len(r["input_ids"]) for r in rows)
            try:
                scored = self.batcher.submit(rows, announced=True)
            except BaseException as e:
                failed(e)
                return
            scored.add_done_callback(lambda scored: None if scored.cancelled() else
                                     pool.submit(make_answers, featurized, scored))
            answered.add_done_callback(lambda done: scored.cancel() if done.cancelled()
                                       else None)

        self.batcher.announce()   # a batch being formed may wait for these rows
        pool.submit(featurize)
        return answered

    def warm_up(self) -> None:
        """Score one instance: the first request is not the one that pays for
        TensorFlow's first run, and a model that cannot score fails at start."""
        self.predictions.answer_in_one_batch([self.predictions.sample], self.score)

    def close(self) -> None:
        """Stop its batcher and free its scorer (once: a second call does nothing)."""
        if self.scorer is None:
            return
        if self.batcher is not None:
            self.batcher.close()
        scorer, self.scorer = self.scorer, None
        scorer.close()


def load_model(spec: ModelSpec, options: ServeOptions) -> ServedModel:
    """Read, check and load one model (UserError, one line, when it is not a servable
    export)."""
    export_dir, version = resolve_version(spec.directory)
    return load_export(spec.name, export_dir, version, options)


def load_export(name: str, export_dir: str, version: int,
                options: ServeOptions) -> ServedModel:
    """One export read, checked, loaded and warmed (the version --poll_s finds
    too); UserError (one line) when it is not a servable export."""
    exported = ExportedModel.open(export_dir, FLAG)
    metadata = exported.metadata
    if version < 0:
        version = metadata.global_step
    predictions = predictions_for(exported, options)
    log.info("serve: loading %s version %d from %s (%s %s %s, max_seq_length %d)", name,
             version, export_dir, metadata.task, metadata.format, metadata.precision,
             metadata.max_seq_length)
    scorer = exported.open_scorer()
    model = ServedModel(name, version, export_dir, metadata, predictions, scorer)
    try:
        model.warm_up()
    except BaseException:
        scorer.close()
        raise
    return model


def versions_folder(directory: str) -> Optional[str]:
    """The folder whose numbered versions --poll_s watches: a model base path
    itself, a fine-tuned folder's export/; None for an export folder (one
    version, never replaced)."""
    if os.path.isfile(layout.metadata_path(directory)):
        return None
    if is_model_folder(directory):
        return os.path.join(directory, "export")
    return directory
