"""RunSettings: what a run asks for, the one record of its shared settings and their defaults.

Plain data, no TensorFlow, importing nothing of bert_ad: the shared flags take
their defaults from it (bert_ad/cli/flag_groups.py) and it is built from them
once; the training graph's and the loop's settings (TrainSettings,
LoopSettings) take their defaults from it and their same-named fields from a
run's (`derive`), so a default is written once and a setting is never copied
field by field. bert_ad/driver.py's `schedule` turns it into the global batch,
the step counts and the learning rate, once for the whole cluster.
"""

from __future__ import annotations

import dataclasses
from typing import Optional


def derive(record_type, source, **fields):
    """A `record_type` dataclass from `source`'s fields of the same names, then `fields`.

    How the graph's and the loop's settings follow the run's without a list
    of fields copied one by one.
    """
    names = {field.name for field in dataclasses.fields(record_type)}
    values = {name: value for name, value in dataclasses.asdict(source).items()
              if name in names}
    values.update(fields)
    return record_type(**values)


@dataclasses.dataclass(frozen=True)
class RunSettings:
    """What a run asks for, from the flags every launcher shares.

    Batch sizes are per tower. `num_train_steps` > 0 fixes the step count
    (pretraining); otherwise it follows from the data and num_train_epochs.
    `num_warmup_steps` None means warmup_proportion of the steps.
    `predict_from_export` (a folder written by --do_export) makes --do_predict
    score with that export instead of a checkpoint.

    Evaluation during training: every `eval_every_steps` applied steps (0:
    never) the dev set is scored; `best_metric` ("" = the task's
    `main_metric`) picks the best evaluation, whose weights
    `keep_best_checkpoint` keeps in output_dir/best/; `early_stopping_patience`
    K > 0 stops after K evaluations in a row without improvement.
    `use_best_checkpoint` makes eval, predict and export use best/.
    `label_names` (a file, "" for none): a display name per label, kept in the
    model folder's record and in exports (bert_ad/model_folder.py).
    """
    output_dir: str
    init_checkpoint: str = ""
    train_batch_size: int = 32
    eval_batch_size: int = 8
    predict_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    num_train_epochs: float = 3.0
    num_train_steps: int = 0
    warmup_proportion: float = 0.1
    num_warmup_steps: Optional[int] = None
    learning_rate: float = 5e-5
    lr_scaling: str = "none"
    lr_reference_batch: int = 0
    optimizer: str = "adamw"
    sparse_embedding_updates: bool = False
    weight_decay_rate: float = 0.01
    clip_norm: float = 1.0
    seed: int = 12345
    precision: str = "fp32"
    recompute_activations: bool = False
    save_checkpoints_steps: int = 1000
    keep_checkpoint_max: int = 5
    log_every_n_steps: int = 10
    predict_from_export: str = ""
    eval_every_steps: int = 0
    keep_best_checkpoint: bool = False
    best_metric: str = ""
    early_stopping_patience: int = 0
    use_best_checkpoint: bool = False
    label_names: str = ""


# Every default in one place: the records below RunSettings' layer name theirs from here.
DEFAULTS = RunSettings(output_dir="")
