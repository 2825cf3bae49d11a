"""Feature extraction and sentence embeddings: Google's extract_features.py as a task.

Input: one text per line, or a pair as `text_a ||| text_b` (Google's
format, the same regular expression). Each line is one row, tokenised as
Google does ([CLS] a [SEP] (b [SEP]), truncated to max_seq_length: a
single text keeps its head, a pair loses tokens from the longer text).

Outputs, computed in the graph on every tower (`build_model`):

  pooling none   the token vectors of each layer named in `layers`
                 (Google's `layer_output_J`: [batch, seq, hidden]); layer -1
                 is the last encoder layer, as in Google's
                 get_all_encoder_layers.
  pooling mean   one vector a row (`embedding` [batch, hidden]): the layer's
                 token vectors averaged over the real tokens, [CLS] and [SEP]
                 included (sentence-transformers' mean pooling:
                 sum(vectors * mask) / sum(mask)); the way sentence encoders
                 (MiniLM, e5) are trained to be read.
  pooling cls    the layer's [CLS] vector as it is (sentence-transformers'
                 cls pooling; not Google's pooler, whose dense + tanh was
                 trained for next-sentence prediction).

`normalize` divides a pooled vector by its L2 norm (cosine similarity is
then a dot product); `text_prefix` is put before every text (e5's "query: "
or "passage: "). An export serves `embedding` (serving_outputs).

The input file is read lazily (`InputLines`): rows are tokenised a window
at a time as they are scored (bert_ad/data/streamed_batches.py), so a file of
any length is never held in memory.
"""

from __future__ import annotations

import os
import re
from typing import Dict, Iterator, Optional, Tuple

from bert_ad.data.embedding_rows import encode_line
from bert_ad.data.streamed_batches import EncodedRow, StreamedBatches
from bert_ad.data.text_lines import text_lines
from bert_ad.errors import fail, require_file
# What a row becomes is read from the flags before TensorFlow loads; named here too.
from bert_ad.data.embedding_settings import (DEFAULT_LAYERS, EMBEDDING, POOLINGS,  # noqa: F401
                                            EmbeddingSettings, check_layers,
                                            layer_output_name, parse_layers)
from bert_ad.model.feature_specs import TEXT_FEATURE_SPEC
from bert_ad.tasks.base import SplitData, Task, TextEncoder

# Google's `text_a ||| text_b`, matched as its read_examples does.
PAIR_PATTERN = re.compile(r"^(.*) \|\|\| (.*)$")
# Global batches scored from one window of the input: per-token outputs
# ([seq, hidden] per layer and row) wait for their turn in fewer rows.
WINDOW_BATCHES_POOLED = 64
WINDOW_BATCHES_TOKENS = 4


def split_line(line: str) -> Tuple[str, Optional[str]]:
    """(text_a, text_b or None) of one stripped input line, as Google's read_examples."""
    match = PAIR_PATTERN.match(line)
    if match is None:
        return line, None
    return match.group(1), match.group(2)


class InputLines:
    """The lines of an input file as (text_a, text_b or None), read lazily.

    Made once the whole file has been checked (one pass, nothing kept): it
    must exist, hold at least one line and be UTF-8 text; lines are read as
    every command reads them (bert_ad/data/text_lines.py: `\n` ends a line, a
    byte order mark goes) and each is stripped as Google's. Every line is a
    row, an empty one too ([CLS] [SEP]): row i is line i + 1.
    """

    def __init__(self, path: str, flag: str = "--input_file"):
        self.path = require_file(path, flag)
        self.source = f"{flag}={path}"
        self.stamp = _stamp(path)
        with open(path, "rb") as f:
            count = sum(1 for _ in text_lines(f, self.source))
        if count == 0:
            fail(f"{flag}={path} is empty: give one text per line (or "
                 "`text_a ||| text_b`)")
        self.count = count
        self._check_unchanged(f"while it was counted ({count} lines)")

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Tuple[str, Optional[str]]]:
        """The counted lines; a file that gained or lost lines (or changed) since it
        was counted is one error line, not rows that no longer match the count."""
        read = 0
        with open(self.path, "rb") as f:
            for line in text_lines(f, self.source):
                read += 1
                if read > self.count:
                    self._changed(f"it now has more than the {self.count} lines counted "
                                  "at the start")
                yield split_line(line.strip())
        if read < self.count:
            self._changed(f"it now has {read} line{'' if read == 1 else 's'}, not the "
                          f"{self.count} counted at the start")
        self._check_unchanged("")

    def _check_unchanged(self, when: str) -> None:
        if _stamp(self.path) != self.stamp:
            self._changed(f"its size or modification time changed {when}".strip())

    def _changed(self, what: str) -> None:
        fail(f"{self.source} changed while it was read ({what}): nothing was written; "
             "run again once the file is complete (or on a copy of it)")


def _stamp(path: str) -> Tuple[int, int, int]:
    """What tells a file's contents changed: (inode, size, modification time in ns)."""
    status = os.stat(path)
    return status.st_ino, status.st_size, status.st_mtime_ns


class FeatureExtractionTask(Task):
    """Token vectors or pooled sentence vectors of every line of an input file."""

    name = "features"
    feature_spec = TEXT_FEATURE_SPEC

    def __init__(self, encoder: TextEncoder, input_file: str, settings: EmbeddingSettings):
        check_layers(settings.layers, encoder.config.num_hidden_layers)
        if settings.pooled and len(settings.layers) != 1:
            raise ValueError("a pooled embedding reads exactly one layer")
        if settings.pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {settings.pooling!r}")
        self.encoder = encoder
        self.input_file = input_file
        self.settings = settings

    def read(self, split: str) -> SplitData:
        """The input file's lines (every split is the one input file)."""
        return SplitData(split, InputLines(self.input_file), self.input_file)

    def batches(self, data: SplitData) -> StreamedBatches:
        encoder, prefix = self.encoder, self.settings.text_prefix

        def rows() -> Iterator[EncodedRow]:
            for text_a, text_b in data.rows:
                yield encode_line(encoder.tokenizer, text_a, text_b, encoder.max_seq_length,
                                  prefix)

        window = WINDOW_BATCHES_POOLED if self.settings.pooled else WINDOW_BATCHES_TOKENS
        return StreamedBatches(rows, len(data), encoder.padding, window)

    def build_model(self, features: Dict[str, object], is_training: bool
                    ) -> Dict[str, object]:
        """Per-row outputs: `embedding` [batch, hidden] when pooled, else
        layer_output_J [batch, seq, hidden] per named layer; float32, no dropout."""
        del is_training  # features are always read with dropout off
        from bert_ad.compat import tf  # graph code: tasks/base.py
        # "mean": no pooler variables (the task pools the layers it reads itself).
        layers = self.encoder.model(features, False, pooling="mean").get_all_encoder_layers()
        if not self.settings.pooled:
            return {layer_output_name(j): tf.cast(layers[index], tf.float32)
                    for j, index in enumerate(self.settings.layers)}
        return {EMBEDDING: pool(layers[self.settings.layers[0]], features["input_mask"],
                                self.settings.pooling, self.settings.normalize)}

    def serving_outputs(self, features: Dict[str, object]) -> Dict[str, object]:
        """`embedding` [batch, hidden] float32: the pooled (normalised) vector."""
        if not self.settings.pooled:
            raise ValueError("an export serves a pooled embedding: set a pooling")
        return {EMBEDDING: self.build_model(features, is_training=False)[EMBEDDING]}

    def serving_settings(self) -> Dict[str, object]:
        return {"layers": ",".join(str(layer) for layer in self.settings.layers),
                "pooling": self.settings.pooling, "normalize": self.settings.normalize,
                "text_prefix": self.settings.text_prefix}


def pool(layer, input_mask, pooling: str, normalize: bool):
    """[batch, seq, hidden] token vectors -> [batch, hidden] float32.

    mean: over the positions where input_mask is 1; cls: position 0.
    normalize: divided by max(L2 norm, 1e-12), as torch's F.normalize.
    """
    from bert_ad.compat import tf
    from bert_ad.model.modeling import masked_mean
    layer = tf.cast(layer, tf.float32)
    vector = layer[:, 0, :] if pooling == "cls" else masked_mean(layer, input_mask)
    if normalize:
        # epsilon bounds the squared norm: 1e-24 = (1e-12)^2.
        vector = tf.nn.l2_normalize(vector, axis=-1, epsilon=1e-24)
    return vector
