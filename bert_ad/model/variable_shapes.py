"""The shape of every variable BertModel creates, from its config alone.

For checking a checkpoint against a --bert_config_file before any graph is
built (bert_ad/parallel/checkpoints.py) and for the converters
(bert_ad/tools/weight_names.py); tests/test_convert.py holds it to the graph's
own variables.
"""

from __future__ import annotations

import re

from bert_ad.model.modeling import BertConfig

_LAYER = re.compile(r"^bert/encoder/layer_(\d+)/")


def google_variable_shapes(config: BertConfig, with_heads: bool = False
                           ) -> dict[str, list[int]]:
    """{Google variable name: shape} of BertModel (and the pre-training heads)."""
    h, i = config.hidden_size, config.intermediate_size
    shapes = {
        "bert/embeddings/word_embeddings": [config.vocab_size, h],
        "bert/embeddings/position_embeddings": [config.max_position_embeddings, h],
        "bert/embeddings/token_type_embeddings": [config.type_vocab_size, h],
        "bert/embeddings/LayerNorm/gamma": [h],
        "bert/embeddings/LayerNorm/beta": [h],
    }

    def dense(name, rows, cols):
        shapes[name + "/kernel"] = [rows, cols]
        shapes[name + "/bias"] = [cols]

    def layer_norm(name):
        shapes[name + "/gamma"] = [h]
        shapes[name + "/beta"] = [h]

    for n in range(config.num_hidden_layers):
        layer = f"bert/encoder/layer_{n}"
        for projection in ("query", "key", "value"):
            dense(f"{layer}/attention/self/{projection}", h, h)
        dense(f"{layer}/attention/output/dense", h, h)
        layer_norm(f"{layer}/attention/output/LayerNorm")
        dense(f"{layer}/intermediate/dense", h, i)
        dense(f"{layer}/output/dense", i, h)
        layer_norm(f"{layer}/output/LayerNorm")
    dense("bert/pooler/dense", h, h)
    if with_heads:
        dense("cls/predictions/transform/dense", h, h)
        layer_norm("cls/predictions/transform/LayerNorm")
        shapes["cls/predictions/output_bias"] = [config.vocab_size]
        shapes["cls/seq_relationship/output_weights"] = [2, h]
        shapes["cls/seq_relationship/output_bias"] = [2]
    return shapes


def config_fields_of(shapes: dict) -> dict:
    """The BertConfig fields a checkpoint's {name: shape} reveals (those it can).

    vocab_size, hidden_size, max_position_embeddings, type_vocab_size,
    intermediate_size and num_hidden_layers; not num_attention_heads, which
    shapes do not show.
    """
    fields = {}
    for name, field, axis in (("bert/embeddings/word_embeddings", "vocab_size", 0),
                              ("bert/embeddings/word_embeddings", "hidden_size", 1),
                              ("bert/embeddings/position_embeddings",
                               "max_position_embeddings", 0),
                              ("bert/embeddings/token_type_embeddings", "type_vocab_size", 0),
                              ("bert/encoder/layer_0/intermediate/dense/kernel",
                               "intermediate_size", 1)):
        shape = shapes.get(name)
        if shape is not None and len(shape) > axis:
            fields[field] = shape[axis]
    layers = {int(m.group(1)) for m in map(_LAYER.match, shapes) if m}
    if layers:
        fields["num_hidden_layers"] = max(layers) + 1
    return fields
