"""What a task's model takes and answers, in the names export.json and a model folder's
model_settings.json share (bert_ad/inference/layout.py ExportMetadata,
bert_ad/model_folder.py ModelSettings): described once here, so the two records
cannot drift apart."""

from __future__ import annotations

import os
from typing import Dict

from bert_ad.data.tokenization import PieceListTokenizer, SentencePieceTokenizer
from bert_ad.files import file_digest
from bert_ad.model_folder import model_shape


def tokenizer_kind(tokenizer) -> str:
    """"wordpiece", "sentencepiece" or "unigram" (a piece list read through --vocab_file)."""
    if isinstance(tokenizer, SentencePieceTokenizer):
        return "sentencepiece"
    if isinstance(tokenizer, PieceListTokenizer):
        return "unigram"
    return "wordpiece"


def describe_model(task) -> Dict[str, object]:
    """{field: value} of the fields both records hold: task, labels, max_seq_length,
    do_lower_case, vocab_file, tokenizer, vocab_sha256, settings, answer_settings.

    A task on token ids (pretraining) has no tokenizer: its vocabulary fields are
    empty and its length is the task's (the length its records were made with)."""
    encoder = task.encoder
    tokenizer = getattr(encoder, "tokenizer", None)
    return {
        "task": task.name,
        "labels": list(task.labels) if task.labels is not None else None,
        # (a task on token ids has its records' length, or none of its own: the
        # model's positions bound it)
        "max_seq_length": int(getattr(encoder, "max_seq_length", None)
                              or getattr(task, "max_seq_length", None)
                              or encoder.config.max_position_embeddings),
        "do_lower_case": bool(getattr(encoder, "do_lower_case", False)),
        "vocab_file": os.path.basename(encoder.vocab_file) if tokenizer is not None else "",
        "tokenizer": tokenizer_kind(tokenizer) if tokenizer is not None else "",
        "vocab_sha256": file_digest(encoder.vocab_file) if tokenizer is not None else "",
        "settings": task.serving_settings(),
        "answer_settings": task.answer_settings(),
    }


def describe_shape(task) -> Dict[str, int]:
    """The shape of the model the task's checkpoints hold (a student's own)."""
    return model_shape(task.encoder.config)


def describe_run(task) -> Dict[str, object]:
    """The run identity (ModelSettings.identity) known before the labels are resolved:
    the task, how it trains, the model's shape and the vocabulary's digest."""
    tokenizer = getattr(task.encoder, "tokenizer", None)
    return {"task": task.name, "trained_by": task.trained_by,
            "model_shape": describe_shape(task),
            "vocab_sha256": file_digest(task.encoder.vocab_file) if tokenizer is not None
            else ""}
