"""TensorFlow's import in every bert_ad process: Keras, which TensorFlow 2.16+
imports eagerly (and scikit-learn with it), is left out, and a user's
tf.keras in the same process is still the usual Keras."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bert_ad.compat import TF_VERSION, _version_numbers
from helpers import REPO, launcher_env

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


def probe(**env: str) -> list:
    full = launcher_env(**env)
    if "TF_USE_LEGACY_KERAS" not in env:
        full.pop("TF_USE_LEGACY_KERAS", None)
    run = subprocess.run([sys.executable, "-c", PROBE], cwd=REPO, env=full,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout.splitlines()[-5:]


@pytest.mark.skipif(_version_numbers(TF_VERSION) < (2, 16),
                    reason="TensorFlow imports Keras eagerly from 2.16 on")
def test_keras_is_not_imported_and_tf_keras_still_works():
    assert probe() == ["[]", "None", "False", "keras", "True"]
