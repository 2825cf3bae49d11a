"""The tasks tests/test_onnx.py exports and scores, built without flags or TensorFlow.

The same settings as the command lines test_onnx.py runs (FLAGS), so a task
built here reads and cuts its rows as the launcher's did; the fresh process
that scores the ONNX exports with no TensorFlow imports this module too.
"""

from __future__ import annotations

import os

from bert_ad.data import processors
from bert_ad.data.features import WindowSettings
from bert_ad.data.squad_features import SquadWindowSettings
from bert_ad.tasks.classification import ClassificationTask
from bert_ad.tasks.features import EmbeddingSettings, FeatureExtractionTask
from bert_ad.tasks.rewrite import RewriteTask
from bert_ad.tasks.squad import SquadFiles, SquadTask
from bert_ad.answers.squad import AnswerSettings
from bert_ad.tasks.token_classification import ConllFormat, TokenClassificationTask

MAX_SEQ = 24
WINDOW_STRIDE = 9
MAX_WINDOWS = 16    # the launcher's default
NER_LABELS = ("O", "B-LONG", "I-LONG")
SQUAD_WINDOWS = SquadWindowSettings(max_seq_length=48, doc_stride=16, max_query_length=16)
# Each task's own flags on the command lines (the model flags are shared).
FLAGS = {
    "classifier": {"task_name": "sentiment", "labels": "0,1"},
    "windows": {"task_name": "sentiment", "labels": "0,1", "long_text": "windows",
                "window_stride": WINDOW_STRIDE, "window_pooling": "attention"},
    "ner": {"labels": ",".join(NER_LABELS), "use_crf": True},
    "ner_softmax": {"labels": ",".join(NER_LABELS), "use_crf": False},   # ner's default
    "squad": {"max_seq_length": SQUAD_WINDOWS.max_seq_length,
              "doc_stride": SQUAD_WINDOWS.doc_stride,
              "max_query_length": SQUAD_WINDOWS.max_query_length},
    "features": {"pooling": "mean", "normalize": True},
    "rewrite": {},
}
TASKS = tuple(FLAGS)


def build(key: str, encoder, data: dict):
    """The task `key` scoring data[key] (a data_dir, a SQuAD file or a text file)."""
    if key == "rewrite":
        return RewriteTask(encoder, data_dir=data[key]).with_labels(["0", "1"])
    if key in ("classifier", "windows"):
        windows = WindowSettings(WINDOW_STRIDE, MAX_WINDOWS) if key == "windows" else None
        return ClassificationTask(encoder, processors.get_task("sentiment"), data[key],
                                  windows=windows,
                                  window_pooling="attention" if windows else "mean"
                                  ).with_labels(["0", "1"])
    if key in ("ner", "ner_softmax"):
        return TokenClassificationTask(encoder, ConllFormat(data_dir=data[key]),
                                       labels=NER_LABELS,
                                       doc_stride=max(1, (encoder.max_seq_length - 2) // 2),
                                       use_crf=FLAGS[key]["use_crf"]
                                       ).with_labels(list(NER_LABELS))
    if key == "squad":
        return SquadTask(encoder, SquadFiles(predict_file=data[key]), SQUAD_WINDOWS,
                         AnswerSettings())
    return FeatureExtractionTask(encoder, data[key], EmbeddingSettings((-1,), "mean", True))


def prediction_lines(task, split, outputs) -> dict:
    """{file name: its lines} the task writes for the scored rows (features: the
    vectors, one line of numbers a row)."""
    if isinstance(task, FeatureExtractionTask):
        return {"embedding": [" ".join(f"{v:.7f}" for v in row)
                              for row in outputs["embedding"]]}
    return {os.path.basename(name): list(lines)
            for name, lines in task.prediction_files(split, outputs).items()}
