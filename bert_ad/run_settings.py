"""What a run asks for and where it runs: RunSettings and Placement, without TensorFlow.

RunSettings is the one record of a run's shared settings: the shared flags
take their defaults from it (bert_ad/cli/flag_groups.py) and it is built from
them once; the training graph's and the loop's settings (TrainSettings,
LoopSettings) take their same-named fields from it (`derive`), so a setting is
never copied field by field. bert_ad/driver.py's `schedule` turns it into the
global batch, the step counts and the learning rate, once for the whole
cluster.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only named: this module is read before TensorFlow is imported
    from bert_ad.distributed.cluster import ClusterRuntime
    from bert_ad.parallel.towers import DevicePlan


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


@dataclasses.dataclass
class Placement:
    """Where this process computes: its towers and, in a cluster, its place."""
    plan: DevicePlan
    cluster: Optional[ClusterRuntime] = None
    use_xla: bool = False

    @property
    def num_workers(self) -> int:
        return 1 if self.cluster is None else self.cluster.num_workers

    @property
    def worker_index(self) -> int:
        return 0 if self.cluster is None else self.cluster.task_index

    @property
    def is_chief(self) -> bool:
        """True on a single machine and on worker 0: who reads checkpoints and writes."""
        return self.cluster is None or self.cluster.is_chief

    def local_session_config(self):
        """This machine's towers only (scoring; training without a cluster)."""
        from bert_ad.compat import session_config  # TensorFlow: only once a run starts
        return session_config(self.plan.num_cpu_devices, use_xla=self.use_xla,
                              collective_nccl=self.plan.replicated and self.plan.uses_gpu)
