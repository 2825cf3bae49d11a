"""`bert-ad predict` from a fine-tuned folder's checkpoint: on N towers, with TensorFlow.

A model folder without an export is scored from its newest model.ckpt-N.
Nothing here is new: the task is the one the folder's own command builds
from the folder's settings (bert_ad/cli/task_runner.py's flags, filled by
bert_ad/cli/model_folder_flags.py, as `bert-ad classifier --do_predict
--output_dir=OUT` would), its graph is what an export of it serves
(Task.serving_outputs, so the outputs have the export's names), built on
every tower by bert_ad/parallel/scoring.py's Scorer. A padded batch is split
into one share per tower (the last completed with copies of its first row,
dropped afterwards), so bert_ad/inference/streamed_predictions.py scores a
checkpoint as it scores an export, and bert_ad/inference/predictions.py
answers the same way.

Only `bert-ad predict` on a folder without an export imports this module
(and TensorFlow).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, List, Optional

import numpy as np
from absl import flags

from bert_ad.cli import builders, flag_checks, registry, task_runner
from bert_ad.cli.model_folder_flags import use_model_folder
from bert_ad.compat import list_checkpoint_variables
from bert_ad.errors import fail
from bert_ad.inference import layout
from bert_ad.model_folder import ModelSettings, read_model_settings
from bert_ad.parallel.checkpoints import resolve_checkpoint
from bert_ad.parallel.scoring import Scorer

log = logging.getLogger("bert_ad")

# What the folder's record does not say and its command cannot build without:
# the classifier's data layout (scoring reads no data file: any will do).
REQUIRED_FLAGS = {"classifier": ["--task_name=tsv"]}
CRF_VARIABLE = "crf/transitions"


@dataclasses.dataclass(frozen=True)
class FolderModel:
    """What bert_ad/inference/predictions.py reads of a model (ExportedModel's
    `metadata`, `tokenizer` and `where`), for a folder's checkpoint."""
    metadata: layout.ExportMetadata
    tokenizer: object
    where: str


def _task_flags(folder: str, record: ModelSettings, n_gpus: int, checkpoint: str):
    """(the folder's command, its flags) as `bert-ad COMMAND --do_predict --output_dir=FOLDER`
    parses them, with the settings the record leaves out (a CRF: from the checkpoint)."""
    declaration = registry.find(record.task)
    if declaration is None or declaration.kind != "task":
        fail(f"--model_dir={folder} holds a {record.task} model, which bert-ad predict "
             "does not answer; it answers classifier, ner, squad and features models")
    command = registry.command(declaration)
    fv = flags.FlagValues()
    task_runner.define_flags(command, fv)
    argv = ["bert-ad", f"--output_dir={folder}", f"--n_gpus={n_gpus}", "--do_predict"]
    argv += REQUIRED_FLAGS.get(declaration.name, [])
    if "use_crf" in fv and any(name == CRF_VARIABLE
                               for name, _ in list_checkpoint_variables(checkpoint)):
        argv.append("--use_crf")
    fv(argv)
    use_model_folder(fv)
    return command, fv


class TowerScorer:
    """Scores a padded batch on every tower of `scorer` (one share each)."""

    def __init__(self, scorer: Scorer, num_towers: int, complete_batch):
        self.scorer, self.num_towers = scorer, num_towers
        self.complete_batch = complete_batch

    def __call__(self, batch: dict) -> Dict[str, np.ndarray]:
        rows = len(batch["input_ids"])
        share = -(-rows // self.num_towers)
        # Filler rows (copies of the first) make every tower's share whole.
        order = np.concatenate([np.arange(rows), np.zeros(share * self.num_towers - rows,
                                                          np.int64)])
        shares: List[dict] = []
        for tower in range(self.num_towers):
            indices = order[tower * share:(tower + 1) * share]
            part = {name: np.asarray(value)[indices] for name, value in batch.items()}
            self.complete_batch(part)   # a share's own inputs (windows' document_index)
            shares.append(part)
        outputs = self.scorer.run(shares)
        return {name: np.concatenate([tower[name] for tower in outputs])[:rows]
                for name in outputs[0]}

    def close(self) -> None:
        self.scorer.__exit__(None, None, None)


def open_checkpoint_model(folder: str, n_gpus: int):
    """(FolderModel, its scorer factory) of a model folder's newest checkpoint.

    The scorer factory takes the task's Predictions (for complete_batch) and
    returns a TowerScorer: score(batch) -> outputs, close()."""
    record = read_model_settings(folder)
    checkpoint = resolve_checkpoint(folder, "--model_dir")
    command, fv = _task_flags(folder, record, n_gpus, checkpoint)
    text = flag_checks.model_text_from_flags(fv)
    placement = builders.placement_from_flags(fv)
    task = command.build(fv, builders.text_encoder_from_flags(fv, text))
    task = task.with_labels(record.labels) if record.labels is not None else task
    inputs = {name: task.feature_spec[name] for name in task.serving_inputs}
    log.info("predict: %s=%s, %s, from %s on %d tower(s)", "--model_dir", folder,
             record.describe(), checkpoint, placement.plan.num_towers)
    log.info("%s", placement.plan.describe())
    outputs: Dict[str, layout.TensorInfo] = {}

    def tower(features: dict, index: int) -> dict:
        served = task.serving_outputs(dict(features))
        outputs.update({name: layout.TensorInfo(name, "", []) for name in served})
        return served

    scorer = Scorer(placement.plan, inputs, tower, checkpoint,
                    placement.local_session_config())
    metadata = layout.ExportMetadata(
        format="checkpoint", precision="fp32", task=task.name, labels=record.labels,
        max_seq_length=record.max_seq_length, do_lower_case=record.do_lower_case,
        vocab_file=record.vocab_file, tokenizer=record.tokenizer,
        vocab_sha256=record.vocab_sha256, tensorflow_version="", checkpoint=checkpoint,
        global_step=record.global_step or -1,
        inputs={name: layout.TensorInfo(name, "int32", [-1, -1]) for name in inputs},
        outputs=outputs, settings=dict(record.settings),
        answer_settings=dict(record.answer_settings), label_names=record.label_names)
    model = FolderModel(metadata, task.encoder.tokenizer, f"--model_dir={folder}")

    def scorer_for(predictions: Optional[object]) -> TowerScorer:
        return TowerScorer(scorer, placement.plan.num_towers, predictions.complete_batch)

    return model, scorer_for
