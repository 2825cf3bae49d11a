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

import numpy as np

from bert_ad.compat import list_checkpoint_variables, tf
from bert_ad.errors import fail
from bert_ad.parallel.checkpoint_files import checkpoint_step, step_checkpoints
from bert_ad.model.modeling import BertConfig
from bert_ad.model.variable_shapes import config_fields_of, google_variable_shapes

log = logging.getLogger("bert_ad")



def checkpoint_prefix(path: str) -> str:
    """The prefix of a checkpoint file name: `.../bert_model.ckpt.data-00000-of-00001`,
    `.index` and `.meta` all name `.../bert_model.ckpt`."""
    prefix = re.sub(r"\.data-\d+-of-\d+$", "", path)
    return re.sub(r"\.(index|meta)$", "", prefix)


def resolve_checkpoint(path: str, flag: str = "--init_checkpoint") -> str:
    """A readable checkpoint prefix from a prefix, one of its files, or a directory.

    A directory resolves to its newest readable `model.ckpt-N`, else
    `bert_model.ckpt`. UserError (one line naming the file) when there is
    none, or when the checkpoint is cut short, has a file missing or holds
    NaN or inf numbers.
    """
    if os.path.isdir(path):
        steps = step_checkpoints(path)
        if steps and all(checkpoint_problem(p) for p in reversed(steps)):
            # Not "a directory without a checkpoint": say what is wrong with it.
            fail(f"{flag}={path}: {checkpoint_problem(steps[-1])}")
        found = latest_checkpoint(path)
        if found is not None:
            return found
        if not os.path.exists(os.path.join(path, "bert_model.ckpt.index")):
            fail(f"{flag}={path} is a directory without a checkpoint "
                 "(no model.ckpt-N.index or bert_model.ckpt.index in it)")
        prefix = os.path.join(path, "bert_model.ckpt")
    else:
        prefix = checkpoint_prefix(path)
        if not os.path.exists(prefix + ".index"):
            fail(f"{flag}={path} is not a checkpoint: {prefix}.index does not exist; give "
                 "a prefix such as .../bert_model.ckpt")
    problem = checkpoint_problem(prefix)
    if problem:
        fail(f"{flag}={path}: {problem}")
    return prefix


# (file names, sizes, mtimes) of a checkpoint -> its problem: a checkpoint is
# read whole once per process, however often it is looked at.
_VERIFIED: dict = {}


def checkpoint_problem(prefix: str) -> str | None:
    """Why the checkpoint at `prefix` cannot be read whole, or None if it can.

    Reads every tensor once (as a restore would): a data file cut short or
    missing, or an index that is not one, is found here and not in the
    middle of a run.
    """
    directory = os.path.dirname(prefix) or "."
    files = sorted(f for f in os.listdir(directory)
                   if f.startswith(os.path.basename(prefix) + "."))
    if not any(".data-" in f for f in files):
        return f"{prefix}.data-00000-of-00001 is missing; the checkpoint is incomplete"
    key = tuple((f, os.stat(os.path.join(directory, f)).st_size,
                 os.stat(os.path.join(directory, f)).st_mtime_ns) for f in files)
    if key not in _VERIFIED:
        _VERIFIED[key] = _read_whole(prefix)
    return _VERIFIED[key]


def _read_whole(prefix: str) -> str | None:
    try:
        reader = tf.train.NewCheckpointReader(prefix)
        for name in sorted(reader.get_variable_to_shape_map()):
            # A NaN or inf weight (a damaged file, a diverged run saved by
            # another tool) would surface later as a "non-finite loss".
            summary = non_finite_summary(reader.get_tensor(name))
            if summary:
                return (f"the checkpoint {prefix} holds non-finite numbers: {name} {summary}; "
                        "it was damaged, or saved by a run that diverged: use an earlier "
                        "checkpoint")
    except Exception as e:  # noqa: BLE001 - TF's reader raises OpError, IndexError, ...
        cause = " ".join(str(getattr(e, "message", e)).split())
        return f"the checkpoint {prefix} cannot be read ({cause[:200]}); it was cut short " \
               "or a file is missing"
    return None


def non_finite_summary(value) -> str | None:
    """'holds 2 non-finite numbers (1 NaN, 1 inf), the first at [3, 5]', or None.

    For any array (non-float ones are always finite).
    """
    value = np.asarray(value)
    if not np.issubdtype(value.dtype, np.floating):
        return None
    bad = ~np.isfinite(value)
    count = int(bad.sum())
    if not count:
        return None
    nans = int(np.isnan(value).sum())
    kinds = ", ".join(f"{n} {kind}" for n, kind in ((nans, "NaN"), (count - nans, "inf"))
                      if n)
    first = [int(i) for i in np.unravel_index(int(np.argmax(bad.ravel())), value.shape)]
    return (f"holds {count} non-finite number{'' if count == 1 else 's'} ({kinds}), "
            f"the first at {first}")


def latest_checkpoint(directory: str, warn: bool = True) -> str | None:
    """Newest readable `model.ckpt-N` prefix in `directory` by step number, or None.

    A newest checkpoint that cannot be read whole (a killed save, a full
    disk, a file deleted by hand) is skipped (with a warning naming it,
    unless `warn` is False: the caller says it), and the next older
    readable one is used; nothing is deleted.
    """
    for prefix in reversed(step_checkpoints(directory)):
        problem = checkpoint_problem(prefix)
        if problem is None:
            return prefix
        if warn:
            log.warning("warning: %s; using an older checkpoint (the broken one is left "
                        "as it is)", problem)
    return None


def set_aside_newer(directory: str, resumed: str) -> list:
    """Rename the files of every checkpoint newer than `resumed` to `NAME.broken-K...`.

    Called when a run resumes from an older checkpoint because the newer ones
    could not be read: they are kept for the user, out of the way of the
    saves (and of the rotation that deletes old checkpoints).
    """
    moved = []
    step = checkpoint_step(resumed)
    for prefix in step_checkpoints(directory):
        if checkpoint_step(prefix) <= step:
            continue
        base = os.path.basename(prefix)
        k = 1
        while any(f.startswith(f"{base}.broken-{k}") for f in os.listdir(directory)):
            k += 1
        for name in sorted(os.listdir(directory)):
            if name.startswith(base + "."):
                target = f"{base}.broken-{k}{name[len(base):]}"
                os.rename(os.path.join(directory, name), os.path.join(directory, target))
                moved.append(target)
        log.warning("warning: kept the unreadable %s as %s.broken-%d.*", prefix, base, k)
    return moved


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


def config_mismatch(checkpoint: str, config: BertConfig) -> str | None:
    """How the encoder in `checkpoint` differs from the one `config` describes, or None.

    Every encoder variable is compared by shape, and the layer count; a
    checkpoint without BertModel's variables (another model's) is not
    compared. The answer names a variable, both shapes and the config fields
    that differ, e.g. "bert/embeddings/word_embeddings is [633, 32] there but
    [633, 64] by the config (the checkpoint's hidden_size=32; the config's
    hidden_size=64)".
    """
    saved = dict(list_checkpoint_variables(checkpoint))
    if not any(name.startswith("bert/") for name in saved):
        return None
    expected = google_variable_shapes(config)
    theirs, ours = config_fields_of(saved), config_fields_of(expected)
    differ = [field for field in ours if field in theirs and theirs[field] != ours[field]]
    fields = (" (the checkpoint's " + ", ".join(f"{k}={theirs[k]}" for k in differ)
              + "; the config's " + ", ".join(f"{k}={ours[k]}" for k in differ) + ")"
              if differ else "")
    for name, shape in expected.items():
        if name in saved and saved[name] != shape:
            return f"{name} is {saved[name]} there but {shape} by the config{fields}"
    missing = [name for name in expected if name not in saved
               and not name.startswith("bert/pooler/")]  # models saved without a pooler
    extra = sorted(name for name in saved if name.startswith("bert/encoder/")
                   and not is_optimizer_state(name) and name not in expected)
    if missing:
        return f"{missing[0]} {expected[missing[0]]} is not there{fields}"
    if extra:
        return f"{extra[0]} {saved[extra[0]]} is there but not in the config's model{fields}"
    return None


def check_fits_config(checkpoint: str, config: BertConfig, what: str, config_flag: str,
                      advice: str) -> None:
    """UserError (one line) unless `checkpoint` holds the encoder `config` describes.

    Args:
      checkpoint: a readable checkpoint prefix.
      config: the run's --bert_config_file.
      what: the checkpoint as the user knows it ("--init_checkpoint=...").
      config_flag: "--bert_config_file=...".
      advice: what to do about it.
    """
    mismatch = config_mismatch(checkpoint, config)
    if mismatch:
        fail(f"{what} does not fit {config_flag}: {mismatch}; {advice}")


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
                if name.endswith("word_embeddings") and \
                        graph_shape[0] != in_checkpoint[name][0]:
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
