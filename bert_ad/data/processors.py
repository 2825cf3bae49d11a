"""Tasks as data: how to read a task's train/dev/test files into examples.

A task is a `TaskSpec` (file names, delimiter, header lines, which column
holds the label and the texts, the label list), not a class per task. The
registry `TASKS` holds:

  GLUE, in the official tsv layouts read by Google's run_classifier.py:
    cola, sst-2 (alias sst2), mrpc, qqp, mnli (dev_matched/test_matched),
    qnli, rte; test files carry an id column and no label.
    sts-b (alias stsb): index, genre, filename, year, old_index, source1,
    source2, sentence1, sentence2, score (test: without the score); a
    regression task (`target`): the label is the similarity score, 0-5.
  xnli: Google's XnliProcessor without the language filter: train from
    multinli/multinli.train.en.tsv (premise, hypo, label; "contradictory" read
    as "contradiction"), dev/test from xnli.dev.tsv / xnli.test.tsv
    (language, gold_label, ..., sentence1 in column 6, sentence2 in column 7).
  tsv / csv: generic `label<TAB>text` (or `label,text` with csv quoting), no
    header; the flags below set other columns.
  The predecessor's tasks. Only their names are known, so each is the
  generic `label<TAB>text` layout in train.tsv/dev.tsv/test.tsv (test files
  are labelled too) except:
    high_level  id, category, label, title (tab-separated, no header) in
                train_without_content_0515.txt and test_without_content_0515.txt
                (which also serves as the dev file); label = column 2,
                text = title (column 3).
    toutiao     the public toutiao news layout
                `id_!_code_!_category_!_title_!_keywords` in train.txt/dev.txt/
                test.txt; label = the category code (column 1), text = title.
  `sentiment` is what `scripts/prepare_data.py` writes.

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

from bert_ad.errors import UserError
from bert_ad.files import atomic_open

SPLITS = ("train", "dev", "test")
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


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """How one task's files look.

    Attributes:
      name: task name as given to --task_name.
      files: split ("train", "dev", "test") -> file name inside --data_dir.
      delimiter: "\\t" (plain split, no quoting, as Google's readers), "," (csv
        with double-quote quoting, records may span lines), or any other
        string split on literally (e.g. "_!_").
      header_lines: lines to skip at the top of the file.
      label_column: column of the label; None = unlabelled (labels are None).
      text_a_column, text_b_column: columns of the texts (text_b optional).
      id_column: column used as the example's guid; None = "<split>-<index>".
      num_columns: exact number of columns every row must have, or None.
      min_columns: least number of columns when num_columns is None; the
        columns used are always required.
      labels: fixed label list, or None = sorted unique training labels.
      label_map: raw label -> label (XNLI's "contradictory").
      lowercase: lowercase the texts here (normally --do_lower_case in the
        tokenizer does it; this is for a cased tokenizer on mixed-case data).
      strip_bom: drop a UTF-8 byte order mark at the start of line 1.
      split_overrides: split -> {field: value} where a split's layout differs
        (GLUE test files: an id column and no label).
      target: what the label column holds: "single_label" (a label of the
        list), or "regression" (a number, e.g. STS-B's score); --multi_label
        and --regression choose for a task that does not say.
    """

    name: str
    files: Mapping[str, str]
    delimiter: str = "\t"
    header_lines: int = 0
    label_column: Optional[int] = 0
    text_a_column: int = 1
    text_b_column: Optional[int] = None
    id_column: Optional[int] = None
    num_columns: Optional[int] = None
    min_columns: Optional[int] = None
    labels: Optional[Tuple[str, ...]] = None
    label_map: Mapping[str, str] = dataclasses.field(default_factory=dict)
    lowercase: bool = False
    strip_bom: bool = True
    split_overrides: Mapping[str, Mapping[str, Any]] = dataclasses.field(
        default_factory=dict)
    target: str = "single_label"

    def for_split(self, split: str) -> "TaskSpec":
        """This spec with `split`'s overrides applied (and none left)."""
        _check_split(split)
        return dataclasses.replace(self, split_overrides={},
                                   **dict(self.split_overrides.get(split, {})))

    def used_columns(self) -> List[int]:
        """Column indices this (flattened) spec reads."""
        return [c for c in (self.label_column, self.text_a_column,
                            self.text_b_column, self.id_column) if c is not None]

    def columns_needed(self) -> int:
        """Least number of columns a row needs for the columns used."""
        needed = [c + 1 if c >= 0 else -c for c in self.used_columns()]
        return max(needed + [self.min_columns or 0])


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")


# ---------------------------------------------------------------------------
# Registry.

_GLUE_BINARY = ("0", "1")
_NLI_LABELS = ("contradiction", "entailment", "neutral")
_ENTAILMENT = ("entailment", "not_entailment")


def _glue_files(dev: str = "dev.tsv", test: str = "test.tsv") -> Dict[str, str]:
    return {"train": "train.tsv", "dev": dev, "test": test}


def _label_text(name: str, files: Optional[Dict[str, str]] = None) -> TaskSpec:
    """The generic `label<TAB>text` layout, labels read from training data."""
    return TaskSpec(name=name, files=files or _glue_files(), label_column=0,
                    text_a_column=1, num_columns=2)


def _build_registry() -> Dict[str, TaskSpec]:
    tasks = [
        # CoLA: source, label, original label, sentence; no header. The test
        # file is `index<TAB>sentence` with a header.
        TaskSpec(name="cola", files=_glue_files(), label_column=1,
                 text_a_column=3, num_columns=4, labels=_GLUE_BINARY,
                 split_overrides={"test": dict(
                     header_lines=1, id_column=0, label_column=None,
                     text_a_column=1, num_columns=2)}),
        # SST-2: header `sentence<TAB>label`; test `index<TAB>sentence`.
        TaskSpec(name="sst-2", files=_glue_files(), header_lines=1,
                 label_column=1, text_a_column=0, num_columns=2,
                 labels=_GLUE_BINARY,
                 split_overrides={"test": dict(
                     id_column=0, label_column=None, text_a_column=1)}),
        # MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String; test has index
        # in place of Quality.
        TaskSpec(name="mrpc", files=_glue_files(), header_lines=1,
                 label_column=0, text_a_column=3, text_b_column=4,
                 num_columns=5, labels=_GLUE_BINARY,
                 split_overrides={"test": dict(id_column=0, label_column=None)}),
        # QQP: id, qid1, qid2, question1, question2, is_duplicate; test: id,
        # question1, question2.
        TaskSpec(name="qqp", files=_glue_files(), header_lines=1,
                 label_column=5, text_a_column=3, text_b_column=4, id_column=0,
                 num_columns=6, labels=_GLUE_BINARY,
                 split_overrides={"test": dict(
                     label_column=None, text_a_column=1, text_b_column=2,
                     num_columns=3)}),
        # MNLI: sentence1/2 in columns 8/9, gold label last (train 12 columns,
        # dev_matched 16 with five annotator labels, test_matched 10).
        TaskSpec(name="mnli",
                 files=_glue_files("dev_matched.tsv", "test_matched.tsv"),
                 header_lines=1, label_column=-1, text_a_column=8,
                 text_b_column=9, id_column=0, num_columns=12,
                 labels=_NLI_LABELS,
                 split_overrides={"dev": dict(num_columns=16),
                                  "test": dict(label_column=None,
                                               num_columns=10)}),
        # QNLI / RTE: index, text_a, text_b, label; test without the label.
        TaskSpec(name="qnli", files=_glue_files(), header_lines=1,
                 label_column=3, text_a_column=1, text_b_column=2, id_column=0,
                 num_columns=4, labels=_ENTAILMENT,
                 split_overrides={"test": dict(label_column=None,
                                               num_columns=3)}),
        # STS-B: the score (0-5) is the last of 10 columns; test has 9.
        TaskSpec(name="sts-b", files=_glue_files(), header_lines=1,
                 label_column=9, text_a_column=7, text_b_column=8, id_column=0,
                 num_columns=10, target="regression",
                 split_overrides={"test": dict(label_column=None, num_columns=9)}),
        TaskSpec(name="rte", files=_glue_files(), header_lines=1,
                 label_column=3, text_a_column=1, text_b_column=2, id_column=0,
                 num_columns=4, labels=_ENTAILMENT,
                 split_overrides={"test": dict(label_column=None,
                                               num_columns=3)}),
        # XNLI: train is MultiNLI (premise, hypo, label); dev/test are the
        # xnli tsv files (language, gold_label, ..., sentence1, sentence2, ...).
        TaskSpec(name="xnli",
                 files={"train": "multinli/multinli.train.en.tsv",
                        "dev": "xnli.dev.tsv", "test": "xnli.test.tsv"},
                 header_lines=1, label_column=2, text_a_column=0,
                 text_b_column=1, num_columns=3, labels=_NLI_LABELS,
                 label_map={"contradictory": "contradiction"},
                 split_overrides={s: dict(label_column=1, text_a_column=6,
                                          text_b_column=7, num_columns=None,
                                          min_columns=8)
                                  for s in ("dev", "test")}),
        # Generic layouts; columns and header come from flags.
        TaskSpec(name="tsv", files=_glue_files(), label_column=0,
                 text_a_column=1),
        TaskSpec(name="csv", files={"train": "train.csv", "dev": "dev.csv",
                                    "test": "test.csv"},
                 delimiter=",", label_column=0, text_a_column=1),
        # The predecessor's tasks.
        TaskSpec(name="high_level",
                 files={"train": "train_without_content_0515.txt",
                        "dev": "test_without_content_0515.txt",
                        "test": "test_without_content_0515.txt"},
                 label_column=2, text_a_column=3, id_column=0, num_columns=4),
        TaskSpec(name="toutiao", files={"train": "train.txt", "dev": "dev.txt",
                                        "test": "test.txt"},
                 delimiter="_!_", label_column=1, text_a_column=3,
                 id_column=0, min_columns=4),
    ]
    tasks += [_label_text(n) for n in ("title_audit", "abuse", "doc_lv1",
                                       "sentiment", "wos5736", "wos46985",
                                       "ad")]
    registry = {t.name: t for t in tasks}
    registry["sst2"] = registry["sst-2"]
    registry["stsb"] = registry["sts-b"]
    return dict(sorted(registry.items()))


TASKS: Dict[str, TaskSpec] = _build_registry()


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
        return UserError(f"{what} {path!r} does not exist; {hint}")
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
