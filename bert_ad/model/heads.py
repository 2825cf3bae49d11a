"""The sequence-classification head on one tower (Google's `create_model`).

Variables `output_weights` [num_labels, hidden] and `output_bias` sit at the
top level, as in Google's run_classifier.py, so fine-tuned checkpoints load in
tools that expect that layout.
"""

from __future__ import annotations

from bert_ad.compat import tf
from bert_ad.model.modeling import BertConfig, BertModel, create_initializer, dropout

# Per-tower inputs: [batch, seq] ids and mask, [batch] labels and weights
# (weight 0 marks a filler row that completes the last batch).
FEATURE_SPEC = {
    "input_ids": (tf.int32, [None, None]),
    "input_mask": (tf.int32, [None, None]),
    "segment_ids": (tf.int32, [None, None]),
    "label_ids": (tf.int32, [None]),
    "example_weights": (tf.float32, [None]),
}


class ClassifierOutputs:
    """per_example_loss [batch], logits [batch, num_labels], probabilities."""

    def __init__(self, per_example_loss, logits, probabilities, loss):
        self.per_example_loss = per_example_loss
        self.logits = logits
        self.probabilities = probabilities
        self.loss = loss


def classifier(config: BertConfig, features: dict, num_labels: int,
               is_training: bool, compute_dtype=tf.float32) -> ClassifierOutputs:
    """BERT pooled output -> dropout -> dense -> softmax cross-entropy.

    `loss` is the mean over real rows (example_weights > 0). The encoder runs
    in `compute_dtype`; the head and the loss in float32.
    """
    model = BertModel(config, is_training, features["input_ids"],
                      features["input_mask"], features["segment_ids"],
                      compute_dtype=compute_dtype)
    pooled = tf.cast(model.get_pooled_output(), tf.float32)  # [batch, hidden]
    hidden = config.hidden_size
    output_weights = tf.get_variable("output_weights", [num_labels, hidden],
                                     tf.float32, create_initializer(0.02))
    output_bias = tf.get_variable("output_bias", [num_labels], tf.float32,
                                  tf.zeros_initializer())
    if is_training:  # Google hard-codes 0.1; the config's rate lets tests turn it off.
        pooled = dropout(pooled, config.hidden_dropout_prob)
    logits = tf.nn.bias_add(tf.matmul(pooled, output_weights, transpose_b=True),
                            output_bias)  # [batch, num_labels]
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(features["label_ids"], depth=num_labels, dtype=tf.float32)
    per_example_loss = -tf.reduce_sum(one_hot * log_probs, axis=-1)
    weights = features["example_weights"]
    loss = tf.reduce_sum(per_example_loss * weights) / tf.maximum(
        tf.reduce_sum(weights), 1.0)
    return ClassifierOutputs(per_example_loss, logits, tf.exp(log_probs), loss)
