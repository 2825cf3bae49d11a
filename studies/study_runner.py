"""What the studies share beyond measuring.py: a run's test predictions, resuming.

A study (accuracy_study.py, long_text_study.py) is a grid of runs. Each run
is one run_classifier_mgpu.py process (--do_train --do_eval --do_predict) in
a fresh output folder (measuring.run_launcher); the study turns how it ended
into a record (one JSON object) and appends it to its records file
(measuring.append_run; docs/accuracy_runs.jsonl and docs/long_text_runs.jsonl
are committed) as soon as the run ends. A stopped study started again skips
the runs its records file already holds (`recorded`), and its report reads
that file alone (--report_only), so the tables need none of the run folders.

Nothing here imports TensorFlow: the study process only starts launchers.
"""

from __future__ import annotations

import os
from typing import Callable, Hashable, Iterable, List, Optional, Set, Tuple


def read_test_predictions(data_dir: str, output_dir: str, limit: Optional[int] = None,
                          labels_dir: Optional[str] = None) -> Tuple[List[str], list, List[int]]:
    """(the run's labels.txt, test.tsv's examples, predict.txt's label indices).

    `limit`: only test.tsv's first `limit` rows were scored (the run was
    given a shortened copy). `labels_dir`: the folder of labels.txt when it is
    not output_dir (predictions from an export). Raises RuntimeError when
    predict.txt has another number of rows.
    """
    from bert_ad.data import processors    # the study itself stays light
    labels = processors.load_label_list(os.path.join(labels_dir or output_dir, "labels.txt"))
    examples = processors.read_examples(processors.get_task("sentiment"), data_dir, "test")
    examples = examples[:limit]
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        predicted = [int(line) for line in f if line.strip()]
    if len(predicted) != len(examples):
        scored = "test.tsv" if limit is None else f"test.tsv's first {limit} rows"
        raise RuntimeError(f"{output_dir}/predict.txt has {len(predicted)} rows, "
                           f"{scored} {len(examples)}")
    return labels, examples, predicted


def recorded(records: Iterable[dict], key: Callable[[dict], Hashable],
             failed_too: bool) -> Set[Hashable]:
    """The runs a resumed study skips: `key` of every record, or of the
    successful ones only (a failed run is then tried again)."""
    return {key(r) for r in records if failed_too or r.get("status") == "ok"}
