"""BertConfig: a BERT model's hyper-parameters (the `bert_config.json` file), without TensorFlow.

Checked when read, so a bad config is one `error:` line before TensorFlow is
imported; bert_ad/model/modeling.py builds the graph from it (and names it
`modeling.BertConfig`, as Google's modeling.py does).
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

from bert_ad.errors import fail

MAX_POSITION_EMBEDDINGS = 512
# The hidden_act values modeling.ACTIVATIONS implements (a test keeps the two equal).
ACTIVATION_NAMES = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "tanh")


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class BertConfig:
    """Hyper-parameters of a BERT model (the `bert_config.json` file)."""

    REQUIRED = ("vocab_size", "hidden_size", "num_hidden_layers",
                "num_attention_heads", "intermediate_size")
    DEFAULTS = {
        "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1,
        "attention_probs_dropout_prob": 0.1,
        "max_position_embeddings": MAX_POSITION_EMBEDDINGS,
        "type_vocab_size": 2,
        "initializer_range": 0.02,
        "layer_norm_eps": 1e-12,
    }

    def __init__(self, vocab_size: int, hidden_size: int = 768,
                 num_hidden_layers: int = 12, num_attention_heads: int = 12,
                 intermediate_size: int = 3072, **kwargs: Any):
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        for key, default in self.DEFAULTS.items():
            setattr(self, key, kwargs.pop(key, default))
        # Keys other tools write (directionality, pooler_fc_size, model_type,
        # ...) are kept so that to_dict() gives them back unchanged.
        self.extra = kwargs
        self.validate()

    def validate(self, source: str = "bert config") -> None:
        # Types first: a "32" (a string) must not fail later as arithmetic.
        for key in self.REQUIRED + ("max_position_embeddings", "type_vocab_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                fail(f"{source}: {key} must be a positive integer, got {value!r}")
        for key in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, key)
            if not _is_number(value) or not 0.0 <= value < 1.0:
                fail(f"{source}: {key} must be a number in [0, 1), got {value!r}")
        for key in ("initializer_range", "layer_norm_eps"):
            value = getattr(self, key)
            if not _is_number(value) or not 0.0 < value < float("inf"):
                fail(f"{source}: {key} must be a positive number, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            fail(f"{source}: hidden_size {self.hidden_size} is not a multiple "
                 f"of num_attention_heads {self.num_attention_heads}")
        if self.hidden_act not in ACTIVATION_NAMES:
            fail(f"{source}: hidden_act {self.hidden_act!r} is not one of "
                 f"{sorted(ACTIVATION_NAMES)}")

    @classmethod
    def from_dict(cls, values: dict, source: str = "bert config") -> "BertConfig":
        missing = [key for key in cls.REQUIRED if key not in values]
        if missing:
            fail(f"{source} lacks the field(s) {', '.join(missing)}; "
                 "give a complete BERT config (see configs/)")
        config = cls.__new__(cls)
        try:
            cls.__init__(config, **values)
        except TypeError as e:
            fail(f"{source}: {e}")
        config.validate(source)
        return config

    @classmethod
    def from_json_file(cls, path: str) -> "BertConfig":
        source = f"bert_config_file {path!r}"
        if not path:
            fail("--bert_config_file is not set")
        if os.path.isdir(path):
            fail(f"{source} is a directory; give the bert_config.json file in it")
        if not os.path.isfile(path):
            fail(f"{source} does not exist")
        try:
            with open(path, encoding="utf-8") as f:
                values = json.load(f)
        except (OSError, UnicodeDecodeError) as e:
            fail(f"{source} cannot be read: {e}")
        except json.JSONDecodeError as e:
            fail(f"{source} is not valid JSON (line {e.lineno}): {e.msg}")
        except RecursionError:  # lists or objects nested past Python's JSON reader
            fail(f"{source} nests JSON deeper than a config can be; give the model's "
                 "bert_config.json (one object of numbers and names)")
        if not isinstance(values, dict):
            fail(f"{source} must hold a JSON object")
        return cls.from_dict(values, source)

    def to_dict(self) -> dict:
        out = copy.deepcopy(self.extra)
        for key in self.REQUIRED + tuple(self.DEFAULTS):
            out[key] = getattr(self, key)
        return out

    def to_json_string(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
