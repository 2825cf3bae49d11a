"""Every task's per-tower inputs: {feature name: (dtype name, shape)}, None = any size.

Dtypes are names ("int32", "float32"), which tf.placeholder, tf.zeros and
numpy all take, so a task can say what it feeds without importing
TensorFlow: reading rows, batching them and writing results (everything
scoring with an ONNX export runs, bert_ad/inference/onnx_scorer.py) stay
TensorFlow-free. The heads that read these inputs are in heads.py and
span_head.py.
"""

from __future__ import annotations

# [batch, seq] ids and mask, [batch] labels and weights (weight 0 marks a
# filler row that completes the last batch).
FEATURE_SPEC = {
    "input_ids": ("int32", [None, None]),
    "input_mask": ("int32", [None, None]),
    "segment_ids": ("int32", [None, None]),
    "label_ids": ("int32", [None]),
    "example_weights": ("float32", [None]),
}

# The inputs each classifier objective adds to FEATURE_SPEC (the targets), and
# those of windows: a window's segment in this batch (its document's position
# among the batch's documents) and its document's index in the split.
TARGET_FEATURES = {
    "softmax": {},
    "sigmoid": {"multi_hot_labels": ("float32", [None, None])},
    "mse": {"targets": ("float32", [None])},
}
WINDOW_FEATURES = {
    "window_document": ("int32", [None]),
    "document_index": ("int32", [None]),
}

# Token classification (bert_ad/data/token_features.py's columns): [batch, seq]
# pieces; [batch, words] per word: the position of the piece it reads, its tag
# id, 1 for a real word.
TOKEN_FEATURE_SPEC = {
    "input_ids": ("int32", [None, None]),
    "input_mask": ("int32", [None, None]),
    "segment_ids": ("int32", [None, None]),
    "word_positions": ("int32", [None, None]),
    "word_tag_ids": ("int32", [None, None]),
    "word_mask": ("int32", [None, None]),
    "example_weights": ("float32", [None]),
}
# With `piece_offsets` (a piece list: words may share a piece) also each word's
# offset among the words reading its piece. A separate spec, so a WordPiece
# graph has exactly the placeholders (and, in TF 1.x, the op-derived seeds) it had.
PIECE_TOKEN_FEATURE_SPEC = dict(TOKEN_FEATURE_SPEC, word_offsets=("int32", [None, None]))

# Question answering: [batch, seq] pieces, [batch] targets and weights.
SPAN_FEATURE_SPEC = {
    "input_ids": ("int32", [None, None]),
    "input_mask": ("int32", [None, None]),
    "segment_ids": ("int32", [None, None]),
    "start_positions": ("int32", [None]),
    "end_positions": ("int32", [None]),
    "example_weights": ("float32", [None]),
}

# The three inputs of every row: what an export's signature takes by default.
TEXT_FEATURE_SPEC = {name: FEATURE_SPEC[name]
                     for name in ("input_ids", "input_mask", "segment_ids")}
