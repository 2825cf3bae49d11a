"""Finding checkpoints and warm-starting a graph from one (`--init_checkpoint`).

Graph variables are matched to checkpoint variables by name. Google's released
checkpoints and ours share the names, so either loads; what does not match is
reported, not hidden: new variables (a fresh classifier head, optimizer slots
a released checkpoint never had) and checkpoint variables the graph does not
use (the MLM head when fine-tuning). A shape mismatch stops the run before any
training, naming the variable and both shapes.
"""

from __future__ import annotations

import logging
import os
import re

from bert_ad.compat import list_checkpoint_variables, tf
from bert_ad.errors import fail

log = logging.getLogger("bert_ad")

_STEP_RE = re.compile(r"model\.ckpt-(\d+)\.index$")


def resolve_checkpoint(path: str, flag: str = "--init_checkpoint") -> str:
    """A checkpoint prefix from a prefix or a directory; UserError if there is none.

    A directory resolves to its newest `model.ckpt-N`, else `bert_model.ckpt`.
    """
    if os.path.isdir(path):
        found = latest_checkpoint(path)
        if found is None and os.path.exists(os.path.join(path, "bert_model.ckpt.index")):
            found = os.path.join(path, "bert_model.ckpt")
        if found is None:
            fail(f"{flag}={path} is a directory without a checkpoint "
                 "(no model.ckpt-N.index or bert_model.ckpt.index in it)")
        return found
    if not os.path.exists(path + ".index"):
        hint = ""
        if path.endswith((".index", ".meta")) or ".data-" in path:
            hint = f"; give the prefix {path.split('.data-')[0].rsplit('.', 1)[0]!r}"
        fail(f"{flag}={path} is not a checkpoint: {path}.index does not exist"
             f"{hint or '; give a prefix such as .../bert_model.ckpt'}")
    return path


def step_checkpoints(directory: str) -> list:
    """Every `model.ckpt-N` prefix in `directory`, oldest step first."""
    if not os.path.isdir(directory):
        return []
    steps = sorted(int(m.group(1)) for m in map(_STEP_RE.match, os.listdir(directory))
                   if m)
    return [os.path.join(directory, f"model.ckpt-{step}") for step in steps]


def latest_checkpoint(directory: str) -> str | None:
    """Newest `model.ckpt-N` prefix in `directory` by step number, or None."""
    found = step_checkpoints(directory)
    return found[-1] if found else None


def checkpoint_step(prefix: str) -> int:
    match = re.search(r"-(\d+)$", prefix)
    return int(match.group(1)) if match else 0


def variable_name(variable) -> str:
    """`bert/pooler/dense/kernel:0` -> `bert/pooler/dense/kernel`."""
    return variable.name.split(":")[0]


def require_variables(checkpoint: str, variables: list, what: str = "checkpoint",
                      advice: str = "train first, or point to the right checkpoint"
                      ) -> None:
    """UserError unless `checkpoint` holds every variable with the graph's shape."""
    saved = dict(list_checkpoint_variables(checkpoint))
    for variable in variables:
        name = variable_name(variable)
        shape = variable.shape.as_list()
        if name not in saved:
            fail(f"{what} {checkpoint} is not of this model (it lacks {name}); {advice}")
        if saved[name] != shape:
            fail(f"{what} {checkpoint} is of a different model shape ({name} is "
                 f"{saved[name]} there, {shape} here); {advice}")


class WarmStart:
    """The plan for loading `init_checkpoint` into a graph's variables.

    Build it after the graph (so every variable exists), then call `restore`
    on a session after the variables are initialised.
    """

    def __init__(self, init_checkpoint: str, variables: list | None = None):
        self.checkpoint = resolve_checkpoint(init_checkpoint)
        if variables is None:
            variables = tf.global_variables()
        in_checkpoint = dict(list_checkpoint_variables(self.checkpoint))
        self.assignment = {}
        self.new = []
        for variable in variables:
            name = variable_name(variable)
            # Only model weights are warm-started: a pretraining checkpoint's
            # step, data position and optimizer slots belong to that run.
            if is_optimizer_state(name) or name not in in_checkpoint:
                self.new.append(name)
                continue
            graph_shape = variable.shape.as_list()
            if graph_shape != in_checkpoint[name]:
                hint = ""
                if name.endswith("word_embeddings"):
                    hint = ("; vocab_size in --bert_config_file must match the "
                            "checkpoint and --vocab_file")
                fail(f"--init_checkpoint={self.checkpoint}: variable {name} has "
                     f"shape {in_checkpoint[name]} in the checkpoint but "
                     f"{graph_shape} in the model{hint}")
            self.assignment[name] = variable
        used = set(self.assignment)
        self.unused = sorted(n for n in in_checkpoint
                             if n not in used and not is_optimizer_state(n))
        self._saver = tf.train.Saver(var_list=self.assignment) if self.assignment else None

    def restore(self, session) -> None:
        if self._saver is not None:
            self._saver.restore(session, self.checkpoint)

    def log_summary(self) -> None:
        log.info("init_checkpoint %s: loaded %d variables", self.checkpoint,
                 len(self.assignment))
        # Optimizer state a released checkpoint never has is expected; list
        # the model variables that start fresh (e.g. a new head) by name.
        bookkeeping = [n for n in self.new if is_optimizer_state(n)]
        fresh = [n for n in self.new if not is_optimizer_state(n)]
        if fresh:
            log.info("  not in the checkpoint, freshly initialised (%d): %s",
                     len(fresh), ", ".join(_abbreviate(fresh)))
        if bookkeeping:
            log.info("  optimizer state and step counters starting fresh: %d",
                     len(bookkeeping))
        if self.unused:
            log.info("  in the checkpoint but unused (%d): %s", len(self.unused),
                     ", ".join(_abbreviate(self.unused)))


def is_optimizer_state(name: str) -> bool:
    return (name.endswith(("/adam_m", "/adam_v", "/step")) or name.startswith(
        ("accumulators/", "loss_scale")) or name in ("global_step", "examples_seen"))


def _abbreviate(names: list, limit: int = 12) -> list:
    if len(names) <= limit:
        return list(names)
    return list(names[:limit]) + [f"... {len(names) - limit} more"]
