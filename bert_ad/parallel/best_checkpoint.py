"""The best checkpoint by a dev metric, and early stopping, across resumed runs.

Evaluation during training (--eval_every_steps) hands every evaluation to a
`BestCheckpoint`: the step and the value of the chosen metric. It keeps

  output_dir/best/model.ckpt-N.*   the model weights (no optimizer slots) of
                                   the best evaluation so far, with
                                   --keep_best_checkpoint
  output_dir/best/best.json        the metric, which way is better, the best
                                   step and value, and every evaluation
                                   [step, value] of the run so far

beside the usual last-N checkpoints in output_dir. A better evaluation
publishes a complete new folder (weights and best.json) in one rename
(bert_ad.folders.replace_directory); any other evaluation rewrites best.json
atomically. A resumed run reads best.json and so remembers the best value and
how many evaluations passed without improvement (early stopping's count).

"Better" is strict: a tie with the best value is no improvement, so the
earliest step of equal value stays best. A metric is better lower when its
name says it is a cost (`lower_is_better`: loss, mse, error, perplexity) and
higher otherwise (accuracy, F1, correlation).
"""

from __future__ import annotations

import json
import logging
import math
import os
from typing import Callable, List, Optional, Tuple

from bert_ad.errors import fail
from bert_ad.files import atomic_open
from bert_ad.folders import replace_directory, restore_directory
from bert_ad.parallel.checkpoint_files import step_checkpoints

log = logging.getLogger("bert_ad")

BEST_DIR = "best"
STATE_FILE = "best.json"
# A metric whose name holds one of these is better when lower.
COST_WORDS = ("loss", "mse", "error", "perplexity")


def lower_is_better(metric: str) -> bool:
    """True for a cost (eval_loss, eval_mse, ...), False for a score (eval_accuracy)."""
    return any(word in metric.lower() for word in COST_WORDS)


def best_directory(output_dir: str) -> str:
    return os.path.join(output_dir, BEST_DIR)


def best_checkpoint(output_dir: str) -> Optional[str]:
    """The `best/model.ckpt-N` prefix kept in `output_dir`, or None."""
    found = step_checkpoints(best_directory(output_dir))
    return found[-1] if found else None


class BestCheckpoint:
    """The best evaluation of a training run, kept on disk.

    Args:
      output_dir: the run's output_dir (locked by this run).
      metric: the name of the metric in the task's eval figures.
      patience: early stopping after this many evaluations in a row without
        improvement (0: never).
      keep_weights: keep the best evaluation's weights in best/
        (--keep_best_checkpoint); without it only best.json is kept.
    """

    def __init__(self, output_dir: str, metric: str, patience: int = 0,
                 keep_weights: bool = True):
        self.directory = best_directory(output_dir)
        self.metric = metric
        self.higher_is_better = not lower_is_better(metric)
        self.patience = patience
        self.keep_weights = keep_weights
        self.evaluations: List[Tuple[int, float]] = []
        self.best_step: Optional[int] = None
        self.best_value: Optional[float] = None
        for name in restore_directory(self.directory):
            log.info("removed or restored %s, left by a run stopped while it replaced %s",
                     name, self.directory)
        self._load()

    @property
    def direction(self) -> str:
        return "higher is better" if self.higher_is_better else "lower is better"

    def _load(self) -> None:
        path = os.path.join(self.directory, STATE_FILE)
        if not os.path.isfile(path):
            return
        try:
            with open(path, encoding="utf-8") as f:
                state = json.load(f)
            metric = state["metric"]
            # A non-finite evaluation is kept as null (JSON has no NaN).
            evaluations = [(int(s), math.nan if v is None else float(v))
                           for s, v in state["evaluations"]]
            best_step = state["best_step"]
            best_value = state["best_value"]
        except (ValueError, KeyError, TypeError) as e:
            fail(f"{path} is not a best-checkpoint record ({e}); move the folder "
                 f"{self.directory} away to start the record afresh")
        if metric != self.metric:
            fail(f"{path} keeps the best {metric}, but this run asks for --best_metric="
                 f"{self.metric}; use --best_metric={metric} or a new --output_dir")
        self.evaluations = evaluations
        self.best_step = None if best_step is None else int(best_step)
        self.best_value = None if best_value is None else float(best_value)
        log.info("best so far: %s %s at step %s (%s), %d evaluation(s) since", self.metric,
                 _format(self.best_value), self.best_step, self.direction,
                 self.evaluations_since_best)

    def state(self) -> dict:
        """What best.json holds."""
        return {"metric": self.metric, "higher_is_better": self.higher_is_better,
                "best_step": self.best_step, "best_value": self.best_value,
                "evaluations": [[s, v if math.isfinite(v) else None]
                                for s, v in self.evaluations]}

    def is_improvement(self, value: float) -> bool:
        """Whether `value` beats the best so far (strictly; a NaN never does)."""
        if not math.isfinite(value):
            return False
        if self.best_value is None:
            return True
        return value > self.best_value if self.higher_is_better else value < self.best_value

    @property
    def evaluations_since_best(self) -> int:
        """Finite evaluations after the best one (all finite ones if there is no best).

        A non-finite one (NaN: e.g. a Pearson correlation of constant dev
        targets) says nothing about progress: it is never the best and does
        not count toward early stopping.
        """
        return sum(1 for step, value in self.evaluations
                   if math.isfinite(value) and (self.best_step is None
                                                or step > self.best_step))

    def should_stop(self) -> bool:
        """Early stopping: `patience` evaluations in a row without improvement."""
        return self.patience > 0 and self.evaluations_since_best >= self.patience

    @property
    def last_step(self) -> Optional[int]:
        return self.evaluations[-1][0] if self.evaluations else None

    def record(self, step: int, value: float, staged_weights: Optional[str] = None) -> bool:
        """Take the evaluation at `step`; returns whether it is the new best.

        An evaluation at a step already recorded or before it (a resumed run
        redoing steps an interrupted one had evaluated) replaces those
        records. With `keep_weights` and an improvement, `staged_weights` (a
        folder from bert_ad.folders.staging_directory(self.directory) holding
        this step's model.ckpt-N) becomes best/, with best.json written into
        it first; the caller removes it otherwise.
        """
        self.evaluations = [(s, v) for s, v in self.evaluations if s < step]
        self.evaluations.append((step, float(value)))
        improved = self.is_improvement(value)
        if improved:
            self.best_step, self.best_value = step, float(value)
        if improved and self.keep_weights:
            if staged_weights is None:
                raise ValueError("an improvement with keep_weights needs the staged weights")
            self._write_state(staged_weights)
            replace_directory(staged_weights, self.directory)
        else:
            self._write_state(self.directory)
        return improved

    def _write_state(self, directory: str) -> None:
        with atomic_open(os.path.join(directory, STATE_FILE)) as f:
            json.dump(self.state(), f, indent=1, allow_nan=False)
            f.write("\n")

    def describe(self) -> str:
        """`best eval_accuracy 0.9000 at step 20 (higher is better)`."""
        return (f"best {self.metric} {_format(self.best_value)} at step {self.best_step} "
                f"({self.direction})")


def _format(value: Optional[float]) -> str:
    return "none" if value is None else f"{value:.4f}"


# The evaluation hook of the training loop: (step, save_weights) -> (figures to
# summarise, stop now?). save_weights(folder) saves the model's weights at this
# step into folder and returns the checkpoint prefix.
EvaluationHook = Callable[[int, Callable[[str], str]], Tuple[dict, bool]]
