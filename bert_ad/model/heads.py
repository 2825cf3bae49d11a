"""Heads on top of BertModel, one tower each, with Google's variable names.

* `classifier`: sequence classification from [CLS] (Google's `create_model`):
  `output_weights` [num_labels, hidden] and `output_bias` at the top level,
  as in Google's run_classifier.py, so fine-tuned checkpoints load in tools
  that expect that layout. Its objective is one of OBJECTIVES: softmax
  (one label a row), sigmoid (multi-label: any number of labels a row) or mse
  (regression: one output); with `window_pooling` a row is a window of a long
  document and the loss is on each document's pooled logits
  (bert_ad/model/windows.py).
* `masked_lm_head` (`cls/predictions/...`, output embedding tied to the
  input one) and `next_sentence_head` (`cls/seq_relationship/...`): Google's
  pretraining heads, so continued-pretraining checkpoints stay Google's.
* `token_classifier`: one tag per word from the piece it reads, softmax or a
  linear-chain CRF (token classification, run_ner_mgpu.py).

A head takes the encoder already built over its features (a task's
`encoder.model(...)`, bert_ad/tasks/base.py) and never builds BERT itself:
the run's precision and padding removal reach every head without it naming
them.
"""

from __future__ import annotations

from bert_ad.compat import tf
# The inputs these heads read (named here too, as callers know them).
from bert_ad.model.feature_specs import (FEATURE_SPEC, PIECE_TOKEN_FEATURE_SPEC,  # noqa: F401
                                         TARGET_FEATURES, TOKEN_FEATURE_SPEC, WINDOW_FEATURES)
from bert_ad.model.crf import crf_decode, crf_log_likelihood, crf_transitions
from bert_ad.model.losses import weighted_mean
from bert_ad.model.modeling import (ACTIVATIONS, BertConfig, BertModel, create_initializer,
                                    dense, dropout, layer_norm)
from bert_ad.model.windows import pool_windows, window_attention_scores

# The classifier's objectives: one label a row (softmax cross-entropy), any
# number of labels a row (sigmoid, binary cross-entropy averaged over the
# labels), one real value a row (mean squared error).
OBJECTIVES = ("softmax", "sigmoid", "mse")


class ClassifierOutputs:
    """per_example_loss [rows], logits [rows, outputs], probabilities, loss.

    `probabilities` is the softmax (softmax), the per-label sigmoid (sigmoid)
    or the value itself, [rows, 1] (mse). With windows, rows are documents
    (segments) and `window_scores` [windows] the attention scores (zeros for
    mean and max pooling); otherwise `window_scores` is None.
    """

    def __init__(self, per_example_loss, logits, probabilities, loss, window_scores=None):
        self.per_example_loss = per_example_loss
        self.logits = logits
        self.probabilities = probabilities
        self.loss = loss
        self.window_scores = window_scores


def classifier(model: BertModel, features: dict, num_labels: int, is_training: bool,
               objective: str = "softmax", window_pooling: str = "") -> ClassifierOutputs:
    """BERT pooled output -> dropout -> dense -> [pool windows] -> the objective's loss.

    `loss` is the mean over real rows (example_weights > 0). The encoder runs
    in whatever dtype it was built with (--precision); the head and the loss
    in float32.

    Args:
      model: the encoder built over `features` (a task's `encoder.model(...)`,
        bert_ad/tasks/base.py: the run's precision, padding removal and
        pooling); the head reads its pooled output and config.
      features: FEATURE_SPEC's inputs plus TARGET_FEATURES[objective] (and
        WINDOW_FEATURES with window_pooling); label_ids, example_weights and
        the targets are per document when windows are pooled.
      num_labels: outputs of the dense layer (1 for mse).
      objective: one of OBJECTIVES.
      window_pooling: "" (a row is a whole text) or one of
        bert_ad.model.windows.WINDOW_POOLINGS.
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")
    config = model.config
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
    weights = features["example_weights"]
    window_scores = None
    if window_pooling:
        window_scores = (window_attention_scores(pooled, hidden)
                         if window_pooling == "attention"
                         else tf.zeros_like(logits[:, 0]))          # [windows]
        logits = pool_windows(logits, window_scores, features["window_document"],
                              tf.shape(weights)[0], window_pooling)  # [documents, labels]
    per_example_loss, probabilities = objective_loss(logits, features, objective)
    loss = weighted_mean(per_example_loss, weights)
    return ClassifierOutputs(per_example_loss, logits, probabilities, loss, window_scores)


def objective_loss(logits, features: dict, objective: str):
    """(per-row loss [rows], probabilities [rows, outputs]) of `objective` (OBJECTIVES).

    softmax: -log p(label_ids); sigmoid: binary cross-entropy against
    `multi_hot_labels`, averaged over the labels; mse: (logit - targets)^2.
    """
    if objective == "sigmoid":
        losses = tf.nn.sigmoid_cross_entropy_with_logits(
            labels=features["multi_hot_labels"], logits=logits)
        return tf.reduce_mean(losses, axis=-1), tf.sigmoid(logits)
    if objective == "mse":
        return tf.square(logits[:, 0] - features["targets"]), logits
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    one_hot = tf.one_hot(features["label_ids"], depth=logits.shape.as_list()[-1],
                         dtype=tf.float32)
    return -tf.reduce_sum(one_hot * log_probs, axis=-1), tf.exp(log_probs)


def gather_positions(sequence, positions):
    """[B, S, H] and [B, P] positions -> [B*P, H]."""
    batch = tf.shape(sequence)[0]
    seq_length = tf.shape(sequence)[1]
    width = sequence.shape[-1]
    offsets = tf.reshape(tf.range(batch) * seq_length, [-1, 1])
    flat_positions = tf.reshape(positions + offsets, [-1])
    return tf.gather(tf.reshape(sequence, [-1, width]), flat_positions)


def masked_lm_head(config: BertConfig, sequence_output, embedding_table, positions):
    """Log-probabilities [B*P, vocab] at the masked positions (`cls/predictions`)."""
    with tf.variable_scope("cls/predictions"):
        hidden = gather_positions(sequence_output, positions)
        with tf.variable_scope("transform"):
            hidden = dense(hidden, config.hidden_size, "dense", config.initializer_range,
                           ACTIVATIONS[config.hidden_act])
            hidden = layer_norm(hidden, config.layer_norm_eps)
        # The output embedding is tied to the input one, as in Google's BERT.
        output_bias = tf.get_variable("output_bias", [config.vocab_size], tf.float32,
                                      tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(hidden, embedding_table, transpose_b=True),
                                output_bias)
        return tf.nn.log_softmax(logits, axis=-1)


def next_sentence_head(config: BertConfig, pooled_output):
    """Log-probabilities [B, 2] of "B follows A" (0) vs "random" (1) (`cls/seq_relationship`)."""
    with tf.variable_scope("cls/seq_relationship"):
        weights = tf.get_variable("output_weights", [2, config.hidden_size], tf.float32,
                                  create_initializer(config.initializer_range))
        bias = tf.get_variable("output_bias", [2], tf.float32, tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(pooled_output, weights, transpose_b=True), bias)
        return tf.nn.log_softmax(logits, axis=-1)


# --- token classification ------------------------------------------------------------

# Rows of `output_offset_embeddings`: word offsets 1..7 inside a piece (a larger
# offset shares the last row; 8 characters in one piece is rare even in Chinese).
PIECE_OFFSET_ROWS = 7


class TokenClassifierOutputs:
    """One tower's token classification.

    Attributes:
      logits: [batch, words, num_tags] float32 (the CRF's emissions).
      predicted: [batch, words] int32 tag ids (Viterbi path with a CRF,
        argmax otherwise); positions past a row's words hold anything.
      per_example_loss: [batch] the window's negative log-likelihood: the sum
        of its words' cross-entropies, or the CRF's sequence NLL.
      loss: mean of per_example_loss over the real rows (example_weights > 0).
    """

    def __init__(self, logits, predicted, per_example_loss, loss):
        self.logits = logits
        self.predicted = predicted
        self.per_example_loss = per_example_loss
        self.loss = loss


def offset_vectors(offsets, hidden: int):
    """[batch, words] offsets inside a piece -> [batch, words, hidden]: zeros at
    offset 0, row min(k, PIECE_OFFSET_ROWS) - 1 of `output_offset_embeddings`
    at offset k."""
    table = tf.get_variable("output_offset_embeddings", [PIECE_OFFSET_ROWS, hidden],
                            tf.float32, tf.zeros_initializer())
    rows = tf.concat([tf.zeros([1, hidden], tf.float32), table], 0)
    return tf.gather(rows, tf.minimum(offsets, PIECE_OFFSET_ROWS))


def token_classifier(model: BertModel, features: dict, num_tags: int, is_training: bool,
                     use_crf: bool = False, piece_offsets: bool = False
                     ) -> TokenClassifierOutputs:
    """BERT sequence output at the piece each word reads [+ its offset's vector]
    -> dropout -> dense -> tags.

    Variables: `output_weights` [num_tags, hidden] and `output_bias` at the top
    level (as the classifier's), `crf/transitions` [num_tags, num_tags] with
    `use_crf` (bert_ad/model/crf.py), and with `piece_offsets`
    `output_offset_embeddings` [PIECE_OFFSET_ROWS, hidden] (features as
    PIECE_TOKEN_FEATURE_SPEC, else TOKEN_FEATURE_SPEC).

    piece_offsets: words that share a piece (a unigram piece list segmenting a
    sentence as a whole: `中国` for `中`, `国`) read the same vector, so a
    softmax would give them the same tag. With it, a word at offset k >= 1 in
    its piece (`word_offsets`) gets a learned vector for k added before the
    classifier, so `国` can be `I-LOC` after `中`'s `B-LOC`. Offset 0 adds
    nothing and the rows start at zero: the first word of a piece always, and
    every word before training, reads exactly what the plain head reads.

    The loss of a window is its negative log-likelihood (summed over its
    words; a CRF scores the whole tag path), and a tower's loss the mean over
    its windows. A mean over rows, like the classifier's, is what makes N
    towers x B rows train exactly like 1 tower x N*B: the towers' gradients
    are averaged with equal weights, which a per-tower mean over words (towers
    hold different word counts) would break. model: the encoder built over
    `features` (see `classifier`); the head reads its sequence output.
    """
    config = model.config
    sequence = tf.cast(model.get_sequence_output(), tf.float32)  # [batch, seq, hidden]
    positions = features["word_positions"]                        # [batch, words]
    batch, words = tf.shape(positions)[0], tf.shape(positions)[1]
    hidden = config.hidden_size
    word_vectors = tf.reshape(gather_positions(sequence, positions), [batch, words, hidden])
    if piece_offsets:
        word_vectors += offset_vectors(features["word_offsets"], hidden)
    if is_training:
        word_vectors = dropout(word_vectors, config.hidden_dropout_prob)
    output_weights = tf.get_variable("output_weights", [num_tags, hidden], tf.float32,
                                     create_initializer(0.02))
    output_bias = tf.get_variable("output_bias", [num_tags], tf.float32,
                                  tf.zeros_initializer())
    logits = tf.nn.bias_add(tf.matmul(tf.reshape(word_vectors, [-1, hidden]), output_weights,
                                      transpose_b=True), output_bias)
    logits = tf.reshape(logits, [batch, words, num_tags])         # [batch, words, tags]
    word_mask = tf.cast(features["word_mask"], tf.float32)
    tag_ids = features["word_tag_ids"]
    if use_crf:
        lengths = tf.cast(tf.reduce_sum(word_mask, 1), tf.int32)
        transitions = crf_transitions(num_tags)
        per_example_loss = -crf_log_likelihood(logits, tag_ids, lengths, transitions)
        predicted, _ = crf_decode(logits, lengths, transitions)
    else:
        log_probs = tf.nn.log_softmax(logits, axis=-1)
        one_hot = tf.one_hot(tag_ids, depth=num_tags, dtype=tf.float32)
        per_word = -tf.reduce_sum(one_hot * log_probs, axis=-1)  # [batch, words]
        per_example_loss = tf.reduce_sum(per_word * word_mask, 1)
        predicted = tf.argmax(logits, axis=-1, output_type=tf.int32)
    weights = features["example_weights"]
    loss = weighted_mean(per_example_loss, weights)
    return TokenClassifierOutputs(logits, predicted, per_example_loss, loss)
