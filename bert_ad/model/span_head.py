"""The extractive question-answering head: start and end logits over a window's pieces.

Google's run_squad.py `create_model`, with its variable names, so a
fine-tuned checkpoint loads where Google's does (and converts to Hugging
Face's `qa_outputs`, a Linear(hidden, 2): weight = output_weights, bias =
output_bias):

  cls/squad/output_weights  [2, hidden]  row 0 start, row 1 end
  cls/squad/output_bias     [2]

Two differences, both for the N towers = 1 tower equivalence and neither
changing a real position's logit: positions past a row's length (padding)
get -10000, so a softmax over a row does not depend on how far its batch
is padded; and the loss is a mean over rows weighted by example_weights (a
filler row of the last batch counts 0) instead of a plain mean.
"""

from __future__ import annotations

from bert_ad.compat import tf
from bert_ad.model.feature_specs import SPAN_FEATURE_SPEC  # noqa: F401 (its inputs)
from bert_ad.model.modeling import BertModel, create_initializer

# Added to the logits of padding positions.
PADDING_LOGIT = -10000.0


class SpanOutputs:
    """start_logits, end_logits [batch, seq] float32; per_example_loss [batch]
    (the mean of the start and end cross-entropies); loss (weighted mean)."""

    def __init__(self, start_logits, end_logits, per_example_loss, loss):
        self.start_logits = start_logits
        self.end_logits = end_logits
        self.per_example_loss = per_example_loss
        self.loss = loss


def span_logits(model: BertModel, features: dict) -> tuple:
    """(start_logits, end_logits), each [batch, seq] float32, padding at PADDING_LOGIT.

    `model`: the encoder built over `features` (a task's `encoder.model(...)`).
    """
    config = model.config
    sequence = tf.cast(model.get_sequence_output(), tf.float32)  # [batch, seq, hidden]
    batch, seq = tf.shape(sequence)[0], tf.shape(sequence)[1]
    hidden = config.hidden_size
    output_weights = tf.get_variable("cls/squad/output_weights", [2, hidden], tf.float32,
                                     create_initializer(0.02))
    output_bias = tf.get_variable("cls/squad/output_bias", [2], tf.float32,
                                  tf.zeros_initializer())
    logits = tf.nn.bias_add(tf.matmul(tf.reshape(sequence, [-1, hidden]), output_weights,
                                      transpose_b=True), output_bias)
    logits = tf.reshape(logits, [batch, seq, 2])                 # [batch, seq, 2]
    padding = 1.0 - tf.cast(features["input_mask"], tf.float32)  # [batch, seq]
    start_logits = logits[:, :, 0] + PADDING_LOGIT * padding
    end_logits = logits[:, :, 1] + PADDING_LOGIT * padding
    return start_logits, end_logits


def span_head(model: BertModel, features: dict) -> SpanOutputs:
    """The logits and Google's loss: (CE(start) + CE(end)) / 2 per row, against
    `start_positions` / `end_positions` (0 = [CLS]: no answer in this window).

    `model`: the encoder built over `features` (a task's `encoder.model(...)`);
    the head has no dropout of its own (Google's neither).
    """
    start_logits, end_logits = span_logits(model, features)

    def cross_entropy(logits, positions):
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot = tf.one_hot(positions, depth=tf.shape(logits)[1], dtype=tf.float32)
        return -tf.reduce_sum(one_hot * log_probs, axis=-1)      # [batch]

    per_example_loss = 0.5 * (cross_entropy(start_logits, features["start_positions"])
                              + cross_entropy(end_logits, features["end_positions"]))
    weights = features["example_weights"]
    loss = tf.reduce_sum(per_example_loss * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)
    return SpanOutputs(start_logits, end_logits, per_example_loss, loss)
