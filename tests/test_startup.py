"""TensorFlow's import in every bert_ad process: Keras, which TensorFlow 2.16+
imports eagerly (and scikit-learn with it), is left out, and a user's
tf.keras in the same process is still the usual Keras."""

from __future__ import annotations


import pytest

from bert_ad.compat import TF_VERSION, _version_numbers
from helpers import fresh_python_lines

PROBE = """
import os, sys
from bert_ad import compat
print(sorted(m for m in ("keras", "sklearn") if m in sys.modules))
print(os.environ.get("TF_USE_LEGACY_KERAS"))
print(None in compat._tf.__path__)
import tensorflow as tf
print(type(tf.keras.layers.Dense(2)).__module__.split(".")[0])
from tensorflow.keras import layers
print(layers.Dense is tf.keras.layers.Dense)
"""


@pytest.mark.skipif(_version_numbers(TF_VERSION) < (2, 16),
                    reason="TensorFlow imports Keras eagerly from 2.16 on")
def test_keras_is_not_imported_and_tf_keras_still_works():
    assert fresh_python_lines(PROBE, 5, "TF_USE_LEGACY_KERAS") == [
        "[]", "None", "False", "keras", "True"]
