"""BERT in tf.compat.v1 graph mode, with the variable names of Google's checkpoints.

Reads top to bottom like Google's `modeling.py`: `BertModel` on a `BertConfig`
(bert_ad/bert_config.py), then the small pure functions it is built
from. Every variable is created with `tf.get_variable`, so a caller that opens
a variable scope with `reuse=True` (one per extra tower) gets the same
weights, and the names (`bert/encoder/layer_0/attention/self/query/kernel`,
...) are exactly those of the released checkpoints.
"""

from __future__ import annotations

import contextlib
import math

from bert_ad.choices import POOLINGS
from bert_ad.compat import erf, tf
# BertConfig is read and checked without TensorFlow (before a command imports
# it); it is modeling.BertConfig here, as in Google's modeling.py.
from bert_ad.bert_config import (ACTIVATION_NAMES, MAX_POSITION_EMBEDDINGS,  # noqa: F401
                                  BertConfig)


# Whether training encoders built now recompute their layers in the backward
# pass (recomputed_layers below); a stack, so blocks nest.
_RECOMPUTE_LAYERS = [False]


@contextlib.contextmanager
def recomputed_layers(enabled: bool = True):
    """Within this block, every BertModel built with is_training keeps only each
    layer's input for the backward pass and recomputes the layer's activations
    from it there (gradient checkpointing per layer, --recompute_activations).

    The training graph opens it around its towers (bert_ad/parallel/train_graph.py),
    so no task has to pass the setting down to its encoder.
    """
    _RECOMPUTE_LAYERS.append(enabled)
    try:
        yield
    finally:
        _RECOMPUTE_LAYERS.pop()


# How a whole text becomes one vector (BertModel.get_pooled_output):
#   cls:  Google's pooler, dense + tanh over the [CLS] position (bert/pooler/dense/*);
#   mean: the average of the last layer over the real tokens, no variables. Models
#         trained as sentence encoders (e5, sentence-transformers) are read this
#         way and ship without a pooler, whose fresh dense layer would start from noise.


def masked_mean(sequence, input_mask):
    """[B, S, H] averaged over the positions where input_mask is 1 -> [B, H].

    Summed in float32 (512 fp16 activations can overflow); a row with no real
    token gives zeros.
    """
    mask = tf.cast(input_mask, tf.float32)[:, :, tf.newaxis]                  # [B, S, 1]
    total = tf.reduce_sum(tf.cast(sequence, tf.float32) * mask, axis=1)        # [B, H]
    count = tf.maximum(tf.reduce_sum(mask, axis=1), 1.0)                       # [B, 1]
    return tf.cast(total / count, sequence.dtype)


class BertModel:
    """The BERT encoder and pooler, built once per tower.

    Variables are fetched with `tf.get_variable` under `scope` ("bert"), so
    towers built under a reusing variable scope share them. `config` is kept:
    a head on the model reads its width and dropout rate there.
    """

    def __init__(self, config: BertConfig, is_training: bool, input_ids,
                 input_mask=None, token_type_ids=None, scope: str = "bert",
                 compute_dtype=tf.float32, pooling: str = "cls",
                 remove_padding: bool = True):
        """
        Args:
          config: the model's hyper-parameters.
          is_training: dropout is applied only when True.
          input_ids: int32 [batch_size, seq_length].
          input_mask: int32 [batch_size, seq_length], 1 for real tokens.
          token_type_ids: int32 [batch_size, seq_length], segment ids.
          scope: outer variable scope; "bert" matches Google's checkpoints.
          compute_dtype: dtype of activations and matmuls (fp16/bf16 for
            mixed precision); variables always stay float32.
          pooling: one of POOLINGS, what get_pooled_output() reads.
          remove_padding: run the position-wise layers (dense, GELU, layer
            norm, dropout) on the real tokens only (TokenLayout); the outputs
            on real tokens are the same either way. Off under XLA, which
            would compile a program for every token count.
        """
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.config = config
        hidden_dropout = config.hidden_dropout_prob if is_training else 0.0
        attention_dropout = config.attention_probs_dropout_prob if is_training else 0.0
        batch_size, seq_length = get_shape_list(input_ids, expected_rank=2)
        if input_mask is None:  # every position real: nothing to remove
            remove_padding = False
            input_mask = tf.ones([batch_size, seq_length], dtype=tf.int32)
        if token_type_ids is None:
            token_type_ids = tf.zeros([batch_size, seq_length], dtype=tf.int32)

        with tf.variable_scope(scope):
            with tf.variable_scope("embeddings"):
                # [batch_size, seq_length, hidden_size]
                self.embedding_output, self.embedding_table = embeddings(
                    config, input_ids, token_type_ids, hidden_dropout)
                self.embedding_output = tf.cast(self.embedding_output, compute_dtype)

            with tf.variable_scope("encoder"):
                # [batch_size, 1, 1, seq_length]: 0 where attended, -10000 else.
                attention_bias = attention_bias_from_mask(input_mask, compute_dtype)
                layout = TokenLayout(input_mask if remove_padding else None,
                                     batch_size, seq_length)
                token_layers = transformer_model(
                    layout.to_tokens(self.embedding_output), attention_bias, config,
                    hidden_dropout, attention_dropout, layout,
                    recompute=is_training and _RECOMPUTE_LAYERS[-1])
                # Built lazily by the graph: a layer nobody reads is never scattered.
                self.all_encoder_layers = [layout.to_padded(x) for x in token_layers]
            # [batch_size, seq_length, hidden_size]
            self.sequence_output = self.all_encoder_layers[-1]

            if pooling == "mean":
                # [batch_size, hidden_size]: no pooler variables are made.
                self.pooled_output = masked_mean(self.sequence_output, input_mask)
            else:
                with tf.variable_scope("pooler"):
                    # [batch_size, hidden_size]: the [CLS] vector through dense+tanh.
                    first_token = self.sequence_output[:, 0, :]
                    self.pooled_output = tf.tanh(dense(
                        first_token, config.hidden_size, "dense",
                        config.initializer_range))

    def get_pooled_output(self):
        return self.pooled_output

    def get_sequence_output(self):
        return self.sequence_output

    def get_all_encoder_layers(self):
        return self.all_encoder_layers

    def get_embedding_output(self):
        return self.embedding_output

    def get_embedding_table(self):
        return self.embedding_table


def gelu(x):
    """GELU with the exact erf, as in Google's BERT and Hugging Face's "gelu".

    Written as Google's modeling.py writes it, x * cdf: the form ONNX
    Runtime recognises and fuses into one Gelu kernel in an ONNX export.
    """
    cdf = 0.5 * (1.0 + erf(x / math.sqrt(2.0)))
    return x * cdf


def gelu_tanh(x):
    """The tanh approximation of GELU ("gelu_new" in Hugging Face configs)."""
    return 0.5 * x * (1.0 + tf.tanh(math.sqrt(2.0 / math.pi) *
                                    (x + 0.044715 * tf.pow(x, 3))))


# One function per name BertConfig accepts (bert_config.ACTIVATION_NAMES).
ACTIVATIONS = {
    "gelu": gelu,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": tf.nn.relu,
    "tanh": tf.tanh,
}


def create_initializer(initializer_range: float = 0.02):
    return tf.truncated_normal_initializer(stddev=initializer_range)


def dense(x, units: int, name: str, initializer_range: float = 0.02,
          activation=None):
    """x @ kernel + bias over the last axis, with variables `name/kernel`, `name/bias`.

    Works on any rank: [..., in_width] -> [..., units]. The variables are float32;
    they are cast to x's dtype so the same code serves mixed precision.
    """
    in_width = x.shape[-1]
    in_width = int(in_width) if in_width is not None else tf.shape(x)[-1]
    with tf.variable_scope(name):
        kernel = tf.get_variable("kernel", [in_width, units], tf.float32,
                                 create_initializer(initializer_range))
        bias = tf.get_variable("bias", [units], tf.float32,
                               tf.zeros_initializer())
        kernel, bias = tf.cast(kernel, x.dtype), tf.cast(bias, x.dtype)
        shape = get_shape_list(x)
        flat = tf.reshape(x, [-1, in_width])
        out = tf.nn.bias_add(tf.matmul(flat, kernel), bias)
        out = tf.reshape(out, shape[:-1] + [units])
    return activation(out) if activation is not None else out


def layer_norm(x, epsilon: float = 1e-12, name: str = "LayerNorm"):
    """Layer normalisation over the last axis (variables `LayerNorm/beta|gamma`).

    Statistics are computed in float32 even under mixed precision (and with
    float16 weights, as in an fp16 export: bert_ad/serving/export.py).
    """
    width = int(x.shape[-1])
    with tf.variable_scope(name):
        beta = tf.get_variable("beta", [width], tf.float32, tf.zeros_initializer())
        gamma = tf.get_variable("gamma", [width], tf.float32, tf.ones_initializer())
        beta, gamma = tf.cast(beta, tf.float32), tf.cast(gamma, tf.float32)
        x32 = tf.cast(x, tf.float32)
        mean, variance = tf.nn.moments(x32, axes=[-1], keep_dims=True)
        # Google's layer norm (tf.contrib.layers.layer_norm): the form ONNX
        # Runtime fuses into one LayerNormalization kernel in an ONNX export.
        out = tf.nn.batch_normalization(x32, mean, variance, beta, gamma, epsilon)
    return tf.cast(out, x.dtype)


class RandomDropout:
    """Dropout whose masks come from 16 random bits an entry, not 32.

    At 512 tokens drawing the masks was 12% of a training step (the attention
    probabilities' are [B, heads, S, S] a layer; docs/benchmarks.md), and the
    random numbers are what it costs: two entries' bits from one random int32
    draw them in 0.6x the time of a float each. An entry is kept when its 16
    bits, as an int16, are at least round(rate * 2^16) - 2^15: with probability
    1 - round(rate * 2^16) / 2^16 (0.899994 for rate 0.1), which the kept values
    are divided by, so the expectation is exact. `keep` is the mask alone:
    attention_layer puts the division on the smaller product.
    """

    def __call__(self, x, rate: float):
        if not rate:
            return x
        keep, keep_probability = self.keep(tf.shape(x), rate, x.shape)
        return tf.where_v2(keep, x * tf.cast(1.0 / keep_probability, x.dtype),
                           tf.zeros([], x.dtype))

    @staticmethod
    def keep(shape, rate: float, static_shape=None) -> tuple:
        """(a boolean mask of `shape`, the probability an entry is true)."""
        dropped = int(round(rate * 2 ** 16))
        known = tf.TensorShape(static_shape)
        if known.ndims is None or not any(d is not None and d % 2 == 0
                                          for d in known.as_list()):
            # Pairs of entries need a count known to be even: a float each otherwise.
            return tf.random.uniform(shape) >= rate, 1.0 - rate
        pairs = tf.reduce_prod(shape) // 2
        # (maxval is exclusive: one int32 of 2^32 never drawn, a 2^-32 bias)
        bits = tf.random.uniform([pairs], minval=-2 ** 31, maxval=2 ** 31 - 1, dtype=tf.int32)
        halves = tf.reshape(tf.bitcast(bits, tf.int16), shape)
        return halves >= dropped - 2 ** 15, 1.0 - dropped / 2 ** 16


dropout = RandomDropout()


# Seeds of SeededDropout stay below this, so seed + [0, call] stays an int32.
_SEED_LIMIT = 2 ** 31 - 2 ** 16


class SeededDropout:
    """Dropout whose masks are a function of a seed tensor and the call's order.

    A recomputed layer (recomputed_layers) runs its forward pass twice; with
    stateless random ops both passes draw the same masks, which tf.nn.dropout's
    stateful ones would not.
    """

    def __init__(self, seed):
        self.seed, self.calls = seed, 0  # seed: int32 [2]

    def __call__(self, x, rate: float):
        if not rate:
            return x
        keep, keep_probability = self.keep(tf.shape(x), rate)
        return x * tf.cast(keep, x.dtype) * tf.cast(1.0 / keep_probability, x.dtype)

    def keep(self, shape, rate: float, static_shape=None) -> tuple:
        """(the next call's boolean mask of `shape`, the probability an entry is
        true). A float an entry: TensorFlow 1.15 has no stateless full-range ints."""
        self.calls += 1
        seed = self.seed + tf.constant([0, self.calls], tf.int32)
        return tf.random.stateless_uniform(shape, seed=seed) >= rate, 1.0 - rate


def embeddings(config: BertConfig, input_ids, token_type_ids, dropout_rate: float):
    """Word + token-type + position embeddings, layer-normed.

    Returns ([batch_size, seq_length, hidden_size] output, word embedding table).
    `tf.gather` keeps the word-embedding gradient sparse (IndexedSlices), so
    only the rows a batch used travel between tower and CPU.
    """
    width = config.hidden_size
    init = create_initializer(config.initializer_range)
    word_table = tf.get_variable("word_embeddings", [config.vocab_size, width],
                                 tf.float32, init)
    type_table = tf.get_variable("token_type_embeddings",
                                 [config.type_vocab_size, width], tf.float32, init)
    position_table = tf.get_variable(
        "position_embeddings", [config.max_position_embeddings, width],
        tf.float32, init)
    seq_length = get_shape_list(input_ids)[1]
    # The lookups run where the tables live (the CPU in a multi-tower graph):
    # only the rows a batch uses travel to the tower, and TensorFlow requires
    # a resource gather and its gradient to sit with the variable anyway.
    with tf.colocate_with(word_table):
        output = tf.gather(word_table, input_ids)
    with tf.colocate_with(type_table):
        output += tf.gather(type_table, token_type_ids)
    # [1, seq_length, width], broadcast over the batch.
    output += tf.expand_dims(position_table[:seq_length], 0)
    output = layer_norm(output, config.layer_norm_eps)
    return dropout(output, dropout_rate), word_table


def attention_bias_from_mask(input_mask, dtype=tf.float32):
    """[batch_size, seq_length] 0/1 mask -> [batch_size, 1, 1, seq_length] additive bias."""
    mask = tf.cast(input_mask, dtype)[:, tf.newaxis, tf.newaxis, :]
    return (1.0 - mask) * tf.cast(-10000.0, dtype)


class TokenLayout:
    """Where the encoder's tokens sit between attention and the position-wise layers.

    Dense layers, GELU, layer norm and dropout treat every position alike, so
    they can run on the real tokens alone, [tokens, H], instead of on
    [B * S, H] with padding: with dynamic padding a batch is padded to its
    longest row, and that padding was a third or more of the matmul work.
    Only attention needs the [B, S] grid; to_padded scatters the tokens into
    it (zeros where padding: padded keys are masked out by the attention bias
    anyway) and to_tokens gathers them back. Without a mask the layout is
    the padded one itself, [B * S, H].
    """

    def __init__(self, input_mask, batch_size, seq_length):
        self.batch_size, self.seq_length = batch_size, seq_length
        self.indices = None
        if input_mask is not None:
            # [tokens] positions of the real tokens in the flattened [B * S] grid.
            flat = tf.reshape(input_mask, [-1])
            self.indices = tf.reshape(tf.where(tf.not_equal(flat, 0)), [-1])

    def to_tokens(self, x):
        """[B, S, W] -> [tokens, W]."""
        flat = tf.reshape(x, [-1, get_shape_list(x)[-1]])
        return flat if self.indices is None else tf.gather(flat, self.indices)

    def to_padded(self, x):
        """[tokens, W] -> [B, S, W]."""
        width = get_shape_list(x)[-1]
        if self.indices is not None:
            x = tf.scatter_nd(self.indices[:, tf.newaxis], x,
                              tf.cast([self.batch_size * self.seq_length, width], tf.int64))
        return tf.reshape(x, [self.batch_size, self.seq_length, width])


def attention_layer(x, attention_bias, config: BertConfig, dropout_rate: float,
                    layout: TokenLayout, drop=dropout):
    """Multi-head self-attention (scope `self`): [tokens, H] -> [tokens, H]."""
    batch_size, seq_length = layout.batch_size, layout.seq_length
    width = config.hidden_size
    heads = config.num_attention_heads
    head_size = config.hidden_size // heads

    def split_heads(t):
        # [tokens, H] -> [B, heads, S, head_size]
        t = tf.reshape(layout.to_padded(t), [batch_size, seq_length, heads, head_size])
        return tf.transpose(t, [0, 2, 1, 3])

    init_range = config.initializer_range
    query = split_heads(dense(x, config.hidden_size, "query", init_range))
    key = split_heads(dense(x, config.hidden_size, "key", init_range))
    value = split_heads(dense(x, config.hidden_size, "value", init_range))

    # At 512 tokens half a training step is the [B, heads, S, S] tensors of
    # attention (docs/benchmarks.md): the two scalings are done on the
    # [B, heads, S, head_size] ones instead, S / head_size times fewer multiplies
    # for the same products. 1/sqrt(head_size) on the query, before QK^T:
    query = query * tf.cast(1.0 / math.sqrt(head_size), query.dtype)
    scores = tf.matmul(query, key, transpose_b=True) + attention_bias  # [B, heads, S, S]
    # Softmax in float32: fp16's range would overflow its exponentials.
    probs = tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32)), scores.dtype)
    if dropout_rate:
        # Dropout's mask on the probabilities, its 1 / keep probability on the context.
        keep, keep_probability = drop.keep(tf.shape(probs), dropout_rate, probs.shape)
        probs = tf.where_v2(keep, probs, tf.zeros([], probs.dtype))
    context = tf.matmul(probs, value)    # [B, heads, S, head_size]
    if dropout_rate:
        context = context * tf.cast(1.0 / keep_probability, context.dtype)
    # -> [B, S, H] -> [tokens, H]
    context = tf.transpose(context, [0, 2, 1, 3])
    return layout.to_tokens(tf.reshape(context, [batch_size, seq_length, width]))


def transformer_model(x, attention_bias, config: BertConfig, hidden_dropout: float,
                      attention_dropout: float, layout: TokenLayout,
                      recompute: bool = False) -> list:
    """The encoder stack (scopes `layer_N`) over [tokens, H] (see TokenLayout);
    returns every layer's [tokens, H] output. `recompute`: see recomputed_layers."""
    outputs = []
    for index in range(config.num_hidden_layers):
        with tf.variable_scope(f"layer_{index}"):
            if recompute:
                x = recomputed_layer(x, attention_bias, config, hidden_dropout,
                                     attention_dropout, layout)
            else:
                x = transformer_layer(x, attention_bias, config, hidden_dropout,
                                      attention_dropout, layout, dropout)
        outputs.append(x)
    return outputs


def transformer_layer(x, attention_bias, config: BertConfig, hidden_dropout: float,
                      attention_dropout: float, layout: TokenLayout, drop=dropout):
    """One encoder layer in the current variable scope: [tokens, H] -> [tokens, H].
    `drop` applies dropout: `dropout` (RandomDropout), or a SeededDropout."""
    activation = ACTIVATIONS[config.hidden_act]
    init_range = config.initializer_range
    eps = config.layer_norm_eps
    with tf.variable_scope("attention"):
        with tf.variable_scope("self"):
            context = attention_layer(x, attention_bias, config, attention_dropout,
                                      layout, drop)
        with tf.variable_scope("output"):
            attended = dense(context, config.hidden_size, "dense", init_range)
            attended = layer_norm(drop(attended, hidden_dropout) + x, eps)
    with tf.variable_scope("intermediate"):
        inner = dense(attended, config.intermediate_size, "dense", init_range, activation)
    with tf.variable_scope("output"):
        out = dense(inner, config.hidden_size, "dense", init_range)
        return layer_norm(drop(out, hidden_dropout) + attended, eps)


def recomputed_layer(x, attention_bias, config: BertConfig, hidden_dropout: float,
                     attention_dropout: float, layout: TokenLayout, seed=None):
    """transformer_layer whose backward pass recomputes its activations from x.

    The forward pass keeps nothing of the layer but its output; the gradient
    builds the layer again (the same variables, the same dropout masks from
    the same seed) once the output's gradient has arrived, and differentiates
    that copy. The memory of the activations of one layer, instead of all of
    them, for a second forward pass of each layer. `seed` (int32 [2]) draws
    the dropout masks; by default a fresh one per step.
    """
    scope = tf.get_variable_scope()
    if seed is None:
        seed = tf.random.uniform([2], maxval=_SEED_LIMIT, dtype=tf.int32)

    def layer(inputs, layer_seed):
        return transformer_layer(inputs, attention_bias, config, hidden_dropout,
                                 attention_dropout, layout, SeededDropout(layer_seed))

    @tf.custom_gradient
    def checkpointed(inputs, layer_seed):
        def backward(d_output, variables=None):
            # Without the dependency the executor could run the copy as soon as
            # x exists, during the forward pass, and hold it until here.
            with tf.control_dependencies([d_output]):
                inputs_again = tf.identity(inputs)
            with tf.variable_scope(scope, reuse=True):
                output_again = layer(inputs_again, layer_seed)
            variables = list(variables or [])
            grads = tf.gradients(output_again, [inputs_again] + variables,
                                 grad_ys=d_output)
            return (grads[0], None), grads[1:]
        return layer(inputs, layer_seed), backward

    return checkpointed(x, seed)


def get_shape_list(tensor, expected_rank: int | None = None) -> list:
    """The tensor's shape, static ints where known and scalar tensors elsewhere."""
    static = tensor.shape.as_list()
    if expected_rank is not None and len(static) != expected_rank:
        raise ValueError(f"{tensor.name} has rank {len(static)}, "
                         f"expected {expected_rank}")
    dynamic = tf.shape(tensor)
    return [dim if dim is not None else dynamic[i] for i, dim in enumerate(static)]
