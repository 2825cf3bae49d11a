"""An independent BERT forward pass in float64 numpy, shared by the model tests.

Written from the Hugging Face layout (Linear weights [out, in], names such as
`encoder.layer.0.attention.self.query.weight`), so that it does not share a
line of code with bert_ad/model/modeling.py.
"""

from __future__ import annotations

import math

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def numpy_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def numpy_layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + eps) * gamma + beta


def numpy_bert(weights: dict, num_layers: int, num_heads: int, input_ids,
               input_mask, token_type_ids, eps: float = 1e-12) -> tuple:
    """BERT in float64 numpy from Hugging Face-named weights (Linear is [out, in]).

    `embeddings.word_embeddings.weight` may hold only some rows as a dict
    {id: row} (enough for the ids used), to spare a 250,000-row table.

    Returns ([B, S, H] sequence output, [B, H] pooled output or None when
    the weights have no pooler).
    """
    w = {name: value if isinstance(value, dict) else value.astype(np.float64)
         for name, value in weights.items()}
    batch, seq = input_ids.shape
    words = w["embeddings.word_embeddings.weight"]
    if isinstance(words, dict):
        word_rows = np.array([[words[int(i)] for i in row] for row in input_ids], np.float64)
    else:
        word_rows = words[input_ids]

    def linear(x, name):
        # 2-D so that numpy hands the product to BLAS.
        flat = x.reshape(-1, x.shape[-1]) @ w[name + ".weight"].T
        return flat.reshape(x.shape[:-1] + (-1,)) + w[name + ".bias"]

    def norm(x, name):
        return numpy_layer_norm(x, w[name + ".weight"], w[name + ".bias"], eps)

    x = (word_rows +
         w["embeddings.token_type_embeddings.weight"][token_type_ids] +
         w["embeddings.position_embeddings.weight"][:seq][None])
    x = norm(x, "embeddings.LayerNorm")
    hidden = x.shape[-1]
    head = hidden // num_heads
    # [B, 1, 1, S]: keys that are padding get -10000 before the softmax.
    bias = (1.0 - input_mask[:, None, None, :].astype(np.float64)) * -10000.0

    def heads(t):  # [B, S, H] -> [B, heads, S, head]
        return t.reshape(batch, seq, num_heads, head).transpose(0, 2, 1, 3)

    for n in range(num_layers):
        p = f"encoder.layer.{n}."
        q, k, v = (heads(linear(x, p + "attention.self." + m))
                   for m in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head) + bias
        scores -= scores.max(-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        attended = norm(linear(context, p + "attention.output.dense") + x,
                        p + "attention.output.LayerNorm")
        inner = numpy_gelu(linear(attended, p + "intermediate.dense"))
        x = norm(linear(inner, p + "output.dense") + attended, p + "output.LayerNorm")
    if "pooler.dense.weight" not in w:
        return x, None
    pooled = np.tanh(linear(x[:, 0], "pooler.dense"))
    return x, pooled
