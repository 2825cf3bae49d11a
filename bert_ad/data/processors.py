"""Reading a task's train/dev/test files into examples, and its label list.

The task's layout is a `TaskSpec` of the registry in bert_ad/data/task_specs.py.
Every file name and column is overridable by flags (`get_task` overrides):
--train_file, --dev_file, --test_file, --label_column, --text_a_column,
--text_b_column, --delimiter, --has_header and --labels. Columns count from 0;
negative numbers count from the end (-1 = last column).

Labels: a task either fixes its label list (GLUE) or takes the sorted unique
labels of its training data; `save_label_list` / `load_label_list` keep that
list in labels.txt so eval- and predict-only runs use the training run's list.
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from bert_ad.data.task_specs import SPLITS, TASKS, TaskSpec
from bert_ad.errors import MissingFile, UserError
from bert_ad.files import atomic_open

# The flag that sets each split's file, named in "file not found" errors.
FILE_FLAGS = {"train": "--train_file", "dev": "--dev_file", "test": "--test_file"}
OVERRIDE_KEYS = ("train_file", "dev_file", "test_file", "label_column",
                 "text_a_column", "text_b_column", "delimiter", "has_header",
                 "labels")
_BOM = "\ufeff"


@dataclasses.dataclass
class InputExample:
    """One example: text_a, optional text_b, label (None when unlabelled).

    `source` and `line` (1-based, the first line of the record) say where it
    came from, for error messages further down the pipeline.
    """

    guid: str
    text_a: str
    text_b: Optional[str] = None
    label: Optional[str] = None
    source: str = ""
    line: int = 0


# ---------------------------------------------------------------------------
# Flag overrides.


def _given(value: Any) -> bool:
    """Flags left at their default arrive as None or ""."""
    return value is not None and not (isinstance(value, str) and value == "")


def _column(flag: str, value: Any, allow_none: bool) -> Optional[int]:
    if allow_none and isinstance(value, str) and value.strip().lower() == "none":
        return None
    try:
        if isinstance(value, bool):
            raise ValueError
        return int(str(value).strip())
    except ValueError:
        extra = " or 'none'" if allow_none else ""
        raise UserError(f"--{flag} must be a column number (0 = first, -1 = "
                        f"last){extra}, got {value!r}") from None


def _delimiter(value: str) -> str:
    named = {"tab": "\t", "\\t": "\t", "comma": ",", "csv": ",", "tsv": "\t"}
    value = str(value)
    return named.get(value.lower(), value)


def _bool(flag: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise UserError(f"--{flag} must be true or false, got {value!r}")


def parse_labels(value: Any) -> Tuple[str, ...]:
    """`--labels` as a tuple: a comma list (or a sequence) of distinct labels."""
    items = value.split(",") if isinstance(value, str) else list(value)
    labels = tuple(str(x).strip() for x in items)
    if not labels or any(not x for x in labels):
        raise UserError(f"--labels must be a comma-separated list of non-empty "
                        f"labels, got {value!r}")
    duplicates = sorted({x for x in labels if labels.count(x) > 1})
    if duplicates:
        raise UserError(f"--labels lists {duplicates[0]!r} more than once")
    return labels


def get_task(name: str, overrides: Optional[Mapping[str, Any]] = None) -> TaskSpec:
    """The registered spec of task `name` with flag overrides applied.

    Args:
      name: --task_name (case-insensitive).
      overrides: flag name -> value for any of OVERRIDE_KEYS; None or "" means
        the flag was not given. Columns are ints (or their strings; "none"
        unsets text_b_column / label_column), delimiter is a string ("tab",
        "comma", "\\t", ",", "_!_"), has_header a bool (or "true"/"false"),
        labels a comma list. A flag wins over every split's own layout, except
        that --label_column leaves unlabelled splits (GLUE test) unlabelled.

    Returns:
      A fresh TaskSpec (changing it does not change the registry).
    """
    key = (name or "").strip().lower()
    if key not in TASKS:
        raise UserError(f"unknown --task_name {name!r}; known tasks: "
                        f"{', '.join(TASKS)}")
    spec = copy.deepcopy(TASKS[key])
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDE_KEYS))
    if unknown:
        raise ValueError(f"unknown task overrides {unknown}; "
                         f"known: {OVERRIDE_KEYS}")
    given = {k: v for k, v in overrides.items() if _given(v)}
    if not given:
        return spec

    files = dict(spec.files)
    base: Dict[str, Any] = {}  # fields set for every split
    for split in SPLITS:
        if f"{split}_file" in given:
            files[split] = str(given[f"{split}_file"])
    if "delimiter" in given:
        base["delimiter"] = _delimiter(given["delimiter"])
    if "has_header" in given:
        base["header_lines"] = 1 if _bool("has_header", given["has_header"]) else 0
    for flag in ("text_a_column", "text_b_column"):
        if flag in given:
            base[flag] = _column(flag, given[flag], allow_none=flag != "text_a_column")
    if base.get("text_a_column", 0) is None:
        raise UserError("--text_a_column cannot be 'none'")
    label_column = (_column("label_column", given["label_column"], True)
                    if "label_column" in given else "unset")
    if "labels" in given:
        base["labels"] = parse_labels(given["labels"])

    per_split = {}
    for split in SPLITS:
        split_fields = dict(spec.split_overrides.get(split, {}))
        for field in base:
            split_fields.pop(field, None)
        if label_column != "unset":
            # An unlabelled split (GLUE test) stays unlabelled.
            if spec.for_split(split).label_column is not None or label_column is None:
                split_fields["label_column"] = label_column
        per_split[split] = split_fields
    spec = dataclasses.replace(spec, files=files, split_overrides=per_split, **base)

    # An exact column count from the registry stays only while the columns
    # the flags chose fit in it; otherwise the columns used set the minimum.
    for split in SPLITS:
        flat = spec.for_split(split)
        if flat.num_columns is not None and flat.columns_needed() > flat.num_columns:
            fields = dict(spec.split_overrides[split], num_columns=None)
            spec = dataclasses.replace(spec, split_overrides=dict(
                spec.split_overrides, **{split: fields}))
    return spec


# ---------------------------------------------------------------------------
# Reading.


def _describe_delimiter(delimiter: str) -> str:
    return {"\t": "tab", ",": "comma"}.get(delimiter, repr(delimiter))


def _iter_plain_rows(path: str, delimiter: str) -> Iterator[Tuple[int, List[str]]]:
    """(1-based line, fields) of a file split literally on `delimiter`.

    Binary iteration splits on b"\\n" only, so a stray "\\r" or U+2028 inside
    a text never starts a new row; CRLF endings lose their "\\r".
    """
    with open(path, "rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise UserError(f"{path} line {number}: not valid UTF-8 "
                                f"(byte {e.start}); save the file as UTF-8") from None
            yield number, line.rstrip("\n").rstrip("\r").split(delimiter)


def _iter_csv_rows(path: str, delimiter: str,
                   strip_bom: bool) -> Iterator[Tuple[int, List[str]]]:
    """(1-based first line, fields) of a csv file; quoted fields may span lines.

    The BOM goes before parsing: a BOM in front of a quote would make the
    first field unquoted.
    """
    encoding = "utf-8-sig" if strip_bom else "utf-8"
    with open(path, encoding=encoding, newline="") as f:
        reader = csv.reader(f, delimiter=delimiter, quotechar='"', strict=True)
        start = 1
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as e:
                raise UserError(f"{path} line {start}: bad csv ({e}); "
                                f"check the quoting") from None
            except UnicodeDecodeError:
                raise UserError(f"{path} near line {start}: not valid UTF-8; "
                                f"save the file as UTF-8") from None
            yield start, row
            start = reader.line_num + 1


def _missing_file_error(path: str, what: str, flag: str) -> UserError:
    hint = f"set {flag}" if flag == "--predict_file" else f"set --data_dir or {flag}"
    if not os.path.exists(path):
        return MissingFile(f"{what} {path!r} does not exist; {hint}")
    return UserError(f"{what} {path!r} is not a readable file; {hint}")


def read_examples(spec: TaskSpec, data_dir: str, split: str,
                  path: Optional[str] = None,
                  labels: Optional[Sequence[str]] = None,
                  keep_blank_lines: bool = False,
                  empty_label_ok: bool = False) -> List[InputExample]:
    """Read one split of a task into examples.

    Args:
      spec: the task (from `get_task`).
      data_dir: --data_dir; the split's file name is joined to it.
      split: "train", "dev" or "test".
      path: a file to read instead of the split's file (--predict_file), in
        the split's layout.
      labels: label list to check labels against when the spec has none
        fixed (the training run's list, for dev/test).
      keep_blank_lines: a blank line (after the header) is an example with
        an empty text and no label, so that predictions line up with the
        file line by line; otherwise blank lines are skipped.
      empty_label_ok: an empty label cell is the label "" (multi-label: none
        of the labels) instead of an error.

    Returns:
      The examples in file order; label None when the split is unlabelled.

    Raises:
      UserError naming the file and 1-based line: missing file, no examples,
      wrong column count, empty text or label, label not in the list, bad
      UTF-8 or csv quoting.
    """
    flat = spec.for_split(split)
    if path:
        what, flag = "predict file", "--predict_file"
    else:
        path = os.path.join(data_dir or "", flat.files[split])
        what, flag = f"{split} file", FILE_FLAGS[split]
    if not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise _missing_file_error(path, what, flag)

    rows = (_iter_csv_rows(path, flat.delimiter, flat.strip_bom)
            if flat.delimiter == ","
            else _iter_plain_rows(path, flat.delimiter))
    needed = flat.columns_needed()
    kind = f"{_describe_delimiter(flat.delimiter)}-separated"
    examples: List[InputExample] = []
    skipped = 0
    for number, fields in rows:
        if number == 1 and flat.strip_bom and fields and fields[0].startswith(_BOM):
            fields[0] = fields[0][len(_BOM):]
        blank = not fields or all(not x.strip() for x in fields)
        if blank and not (keep_blank_lines and skipped >= flat.header_lines):
            continue  # a spacer line: nothing lines up with it
        if skipped < flat.header_lines:
            skipped += 1
            continue
        if blank:  # scored as an empty text: one prediction per input line
            examples.append(InputExample(guid=f"{split}-{len(examples)}", text_a="",
                                         text_b=None if flat.text_b_column is None else "",
                                         label=None, source=path, line=number))
            continue
        where = f"{path} line {number}"
        if flat.num_columns is not None and len(fields) != flat.num_columns:
            raise UserError(f"{where}: expected {flat.num_columns} {kind} "
                            f"columns, found {len(fields)}")
        if len(fields) < needed:
            raise UserError(f"{where}: expected at least {needed} {kind} "
                            f"columns, found {len(fields)}")
        text_a = _text(fields, flat.text_a_column, "text_a", where, flat.lowercase)
        text_b = (None if flat.text_b_column is None else
                  _text(fields, flat.text_b_column, "text_b", where, flat.lowercase))
        label = None
        if flat.label_column is not None:
            label = fields[flat.label_column].strip()
            if not label and not empty_label_ok:
                raise UserError(f"{where}: empty label in column {flat.label_column}")
            label = flat.label_map.get(label, label)
        if flat.id_column is not None:
            guid = fields[flat.id_column].strip() or f"{split}-{len(examples)}"
        else:
            guid = f"{split}-{len(examples)}"
        examples.append(InputExample(guid=guid, text_a=text_a, text_b=text_b,
                                     label=label, source=path, line=number))
    if not any(e.text_a for e in examples):
        header = f" after {flat.header_lines} header line(s)" if flat.header_lines else ""
        hint = flag if flag == "--predict_file" else f"--data_dir and {flag}"
        raise UserError(f"{what} {path!r} has no examples{header}; check {hint}")
    check = flat.labels if flat.labels is not None else labels
    if check is not None:
        check_labels(examples, check)
    return examples


def _text(fields: List[str], column: int, name: str, where: str,
          lowercase: bool) -> str:
    text = fields[column].strip()
    if not text:
        raise UserError(f"{where}: empty text in column {column} ({name})")
    return text.lower() if lowercase else text


def check_labels(examples: Sequence[InputExample], labels: Sequence[str]) -> None:
    """UserError at the first labelled example whose label is not in `labels`."""
    known = set(labels)
    for e in examples:
        if e.label is not None and e.label not in known:
            raise UserError(f"{e.source} line {e.line}: label {e.label!r} is not "
                            f"one of {list(labels)}; set --labels or fix the file")


# ---------------------------------------------------------------------------
# Label lists.


def label_list(spec: TaskSpec, train_examples: Sequence[InputExample]) -> List[str]:
    """The task's fixed labels, or the sorted unique labels of the training data.

    Raises:
      UserError if the training data has fewer than two distinct labels.
    """
    if spec.labels is not None:
        return list(spec.labels)
    found = sorted({e.label for e in train_examples if e.label is not None})
    source = train_examples[0].source if train_examples else "the training data"
    if len(found) < 2:
        raise UserError(f"{source} has {len(found)} distinct label(s) "
                        f"{found}; a classifier needs at least 2: fix the file "
                        f"or list them with --labels")
    # Nearly one label per row is a text column read as the label column.
    if len(train_examples) >= 10 and len(found) > 0.5 * len(train_examples):
        raise UserError(f"{source} has {len(found)} distinct labels in "
                        f"{len(train_examples)} rows (e.g. {found[0]!r}): is "
                        f"--label_column={spec.label_column} the text column? Fix "
                        "--label_column, or list the labels with --labels")
    return found


def save_label_list(path: str, labels: Sequence[str]) -> None:
    """Write labels.txt, one label a line, atomically (bert_ad.files)."""
    labels = list(labels)
    bad = [x for x in labels if not x or x != x.strip() or "\n" in x or "\r" in x]
    if not labels or bad or len(set(labels)) != len(labels):
        raise ValueError(f"cannot save label list {labels!r}: labels must be "
                         f"distinct, non-empty and without surrounding space")
    with atomic_open(path, newline="\n") as f:
        f.write("".join(x + "\n" for x in labels))


def load_label_list(path: str) -> List[str]:
    """Read a labels.txt written by `save_label_list` (BOM and CRLF tolerated)."""
    if not os.path.isfile(path):
        raise UserError(f"label list {path!r} does not exist; train into this "
                        f"--output_dir first or set --labels")
    with open(path, encoding="utf-8-sig", newline="") as f:
        lines = [x.rstrip("\r") for x in f.read().split("\n")]
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise UserError(f"label list {path!r} is empty; delete it and train "
                        f"again, or set --labels")
    for number, label in enumerate(lines, start=1):
        if not label.strip():
            raise UserError(f"{path} line {number}: empty label")
    labels = [x.strip() for x in lines]
    if len(set(labels)) != len(labels):
        raise UserError(f"label list {path!r} repeats a label; delete it and "
                        f"train again, or set --labels")
    return labels
