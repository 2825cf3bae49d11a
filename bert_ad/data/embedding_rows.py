"""One text line (or pair) as the ids extract_features and an embedding export score, no TensorFlow.

bert_ad/tasks/features.py reads a file's lines into these rows; the inference
layer (bert_ad/inference/predictions.py) makes the same rows of a request's texts.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional

from bert_ad.data.features import row_ids
from bert_ad.data.streamed_batches import EncodedRow
from bert_ad.data.truncation import truncate_pair, truncate_tokens


@dataclasses.dataclass(frozen=True)
class LineTokens:
    """What a row's scores need besides them: its tokens ([CLS] ... [SEP]) and
    whether the text was cut to fit max_seq_length."""
    tokens: List[str]
    truncated: bool


def encode_line(tokenizer, text_a: str, text_b: Optional[str], max_seq_length: int,
                text_prefix: str = "") -> EncodedRow:
    """One line's input_ids and segment_ids, as Google's convert_examples_to_features.

    A pair's text_b that is empty, or has no tokens, makes a single text.
    """
    tokens_a = tokenizer.tokenize(text_prefix + text_a)
    tokens_b = tokenizer.tokenize(text_prefix + text_b) if text_b else []
    if tokens_b:
        truncated = len(tokens_a) + len(tokens_b) > max_seq_length - 3
        tokens_a, tokens_b = truncate_pair(tokens_a, tokens_b, max_seq_length - 3)
    else:
        truncated = len(tokens_a) > max_seq_length - 2
        tokens_a = truncate_tokens(tokens_a, max_seq_length - 2)
    input_ids, segment_ids = row_ids(tokenizer, tokens_a, tokens_b)
    tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + (tokens_b + ["[SEP]"] if tokens_b else [])
    return EncodedRow({"input_ids": input_ids, "segment_ids": segment_ids},
                      LineTokens(tokens, truncated))


