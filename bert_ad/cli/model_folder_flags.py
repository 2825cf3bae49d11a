"""The model flags of a command that uses a model folder, taken from the folder.

A fine-tuned output folder carries its config, vocabulary and settings record
(bert_ad/model_folder.py), so a command that uses it needs no model flag:
--bert_config_file, --vocab_file (or --spm_model_file), --do_lower_case,
--max_seq_length and the task's settings recorded in model_settings.json
(--pooling, --truncation, --long_text and its windows, --regression /
--multi_label) default to the folder's. Which folder: --teacher_dir when
distilling, else --output_dir when it holds a record (scoring it, or resuming
it), else --init_checkpoint when it is a model folder (continued training,
features, scoring into another output_dir).

A flag given that contradicts the folder is refused when scoring,
evaluating or exporting (one line naming both values): the model was trained
with the folder's. Training on from the folder may change what Google's
recipe changes (--max_seq_length 128 -> 512), said in the log; never the
vocabulary or the config, which the weights are of. Folders written before
the record existed have none: their commands take the flags, as before.
This is bert_ad/cli/flag_checks.py's `use_export_model_files` for a model
folder; no TensorFlow here.
"""

from __future__ import annotations

import logging
import os
from typing import Dict, Optional, Tuple

from absl import flags

from bert_ad.bert_config import BertConfig
from bert_ad.errors import fail
from bert_ad.files import file_digest
from bert_ad.model_folder import (BERT_CONFIG_FILE, SETTINGS_FILE, ModelSettings,
                                  is_model_folder, model_shape, read_model_settings)

log = logging.getLogger("bert_ad")

VOCAB_FLAGS = ("vocab_file", "spm_model_file")
# A recorded setting whose name is no flag: the flags that say it.
TARGET_FLAGS = {"single_label": {"regression": False, "multi_label": False},
                "regression": {"regression": True, "multi_label": False},
                "multi_label": {"regression": False, "multi_label": True}}


def model_folder_of_flags(f: flags.FlagValues) -> Optional[Tuple[str, str]]:
    """(flag, folder) of the model folder the command uses, or None."""
    training = "do_train" in f and f.do_train
    candidates = []
    if training and "teacher_dir" in f:
        candidates.append(("--teacher_dir", f.teacher_dir))
    if "output_dir" in f:
        candidates.append(("--output_dir", f.output_dir))
    init = f.init_checkpoint or ""
    # A checkpoint prefix inside a model folder (OUT/model.ckpt-5) is of that folder.
    candidates.append(("--init_checkpoint", init if os.path.isdir(init)
                       else os.path.dirname(init)))
    for flag, folder in candidates:
        if folder and is_model_folder(folder):
            return flag, folder
    return None


def flag_values(folder: str, record: ModelSettings, task_settings: bool = True
                ) -> Dict[str, object]:
    """{flag name: value} the folder says (the vocabulary and config as its own files);
    `task_settings`: the task's recorded settings too (--pooling, --truncation, ...)."""
    values: Dict[str, object] = {"bert_config_file": os.path.join(folder, BERT_CONFIG_FILE),
                                 "max_seq_length": record.max_seq_length}
    if record.vocab_file:
        vocab_flag = "spm_model_file" if record.tokenizer == "sentencepiece" else "vocab_file"
        values[vocab_flag] = os.path.join(folder, record.vocab_file)
        values["do_lower_case"] = record.do_lower_case
    if task_settings:
        values.update(settings_flag_values(record.settings))
    return values


def settings_flag_values(settings: Dict[str, object]) -> Dict[str, object]:
    """{flag name: value} of a task's recorded settings (a model folder's or an
    export's: Task.serving_settings), the target as the flags that say it."""
    values: Dict[str, object] = {}
    for key, value in settings.items():
        values.update(TARGET_FLAGS.get(value, {}) if key == "target" else {key: value})
    return values


def use_model_folder(f: flags.FlagValues, task_settings: bool = True) -> None:
    """The model flags not given take the model folder's values; a given one that
    contradicts the folder is refused when scoring and logged when training.

    `task_settings` False: the command reads the encoder only (features, whose
    --pooling is its own, not the classifier head's): config, vocabulary, casing
    and length come from the folder, the task's settings do not."""
    if "predict_from_export" in f and f.predict_from_export:
        return  # the export's files (flag_checks.use_export_model_files)
    found = model_folder_of_flags(f)
    if found is None:
        return
    flag, folder = found
    record = read_model_settings(folder)
    where = f"the model folder {flag}={folder}"
    training = "do_train" in f and f.do_train
    _check_model_files(f, folder, record, where)
    given = [name for name in VOCAB_FLAGS if name in f and f[name].present]
    for name, value in flag_values(folder, record, task_settings).items():
        if name not in f or (name in VOCAB_FLAGS and given):
            continue
        if not f[name].present:
            f[name].value = value
        elif name not in VOCAB_FLAGS + ("bert_config_file",) and f[name].value != value:
            if not training:
                fail(f"--{name}={f[name].value} contradicts {where}: it was trained with "
                     f"--{name}={value} ({SETTINGS_FILE}); leave --{name} out to use the "
                     "folder's")
            log.info("training on from %s with --%s=%s (it was trained with %s)", where,
                     name, f[name].value, value)


def _check_model_files(f: flags.FlagValues, folder: str, record: ModelSettings,
                       where: str) -> None:
    """A --vocab_file/--spm_model_file or --bert_config_file given must be the folder's:
    its weights are of that model and read through that vocabulary."""
    for name in VOCAB_FLAGS:
        if name in f and f[name].present and f[name].value and record.vocab_sha256 \
                and os.path.isfile(f[name].value) \
                and file_digest(f[name].value) != record.vocab_sha256:
            fail(f"--{name}={f[name].value} is another vocabulary than {where}'s "
                 f"{os.path.join(folder, record.vocab_file)}, which its weights were "
                 f"trained with; leave --{name} out to use the folder's")
    if "bert_config_file" in f and f["bert_config_file"].present and f.bert_config_file \
            and os.path.isfile(f.bert_config_file):
        shape = model_shape(BertConfig.from_json_file(f.bert_config_file))
        differ = [f"{key}={shape[key]} (the folder's {record.model_shape.get(key)})"
                  for key in shape if shape[key] != record.model_shape.get(key)]
        # distill's --bert_config_file is the teacher's; its student has its own.
        if differ and "teacher_dir" not in f:
            fail(f"--bert_config_file={f.bert_config_file} is another model than {where}: "
                 f"{', '.join(differ)}; leave --bert_config_file out to use the folder's")
