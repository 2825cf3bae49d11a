"""benchmarks/gpu_scaling_model.py: its sizes and FLOPs against the real model's variables.

The model's parameter count must be the sum of every variable BertModel creates
(bert_ad.model.variable_shapes, which tests/test_convert.py holds to the graph),
and its FLOPs per token the sum over the encoder's real kernels (2 x rows x cols
each) plus attention; the published figures it is checked against are read back.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import gpu_scaling_model as paper
from bert_ad.model.modeling import BertConfig
from bert_ad.model.variable_shapes import google_variable_shapes


def config_of(model: paper.Model) -> BertConfig:
    return BertConfig(vocab_size=model.vocab, hidden_size=model.hidden,
                      num_hidden_layers=model.layers, intermediate_size=model.intermediate,
                      num_attention_heads=model.hidden // 64,
                      max_position_embeddings=model.positions,
                      type_vocab_size=model.token_types)


@pytest.mark.parametrize("model", [paper.BERT_BASE, paper.BERT_LARGE, paper.CHINESE])
def test_parameters_are_the_real_variables(model):
    shapes = google_variable_shapes(config_of(model))
    assert model.parameters() == sum(int(np.prod(s)) for s in shapes.values())
    assert model.word_embeddings() == int(np.prod(shapes["bert/embeddings/word_embeddings"]))
    layer = [s for name, s in shapes.items() if name.startswith("bert/encoder/layer_0/")]
    assert model.layer_parameters() == sum(int(np.prod(s)) for s in layer)


def test_the_sizes_the_issue_names():
    assert round(4 * paper.BERT_BASE.parameters() / 1e6) == 438      # "440 MB"
    # docs/chinese_model.md's trimmed checkpoint (no pooler), plus the fresh pooler.
    hidden = paper.CHINESE.hidden
    assert paper.CHINESE.parameters() == 44968704 + hidden * hidden + hidden


@pytest.mark.parametrize("seq", [128, 512])
def test_flops_are_the_encoder_kernels_plus_attention(seq):
    model = paper.BERT_BASE
    shapes = google_variable_shapes(config_of(model))
    kernels = [s for name, s in shapes.items()
               if name.startswith("bert/encoder/") and name.endswith("/kernel")]
    assert len(kernels) == 6 * model.layers
    dense = sum(2 * rows * cols for rows, cols in kernels)
    attention = model.layers * 2 * (2 * seq * model.hidden)   # scores and mixing
    assert model.train_flops(12, seq) == pytest.approx(3 * 12 * seq * (dense + attention))


def test_the_published_speedups_are_the_published_throughputs():
    published = {(m, p): eight / one for m, p, _, one, eight in paper.SQUAD_EIGHT_GPUS}
    # NVIDIA's README prints these (its FP32 / mixed-precision columns swapped).
    assert round(published[("32GB", "fp32")], 2) == 7.62
    assert round(published[("32GB", "amp")], 2) == 6.17
