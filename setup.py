"""Install with `pip install -e ".[tf]"` (add `test` for the test tools).

TensorFlow is an extra, never a hard requirement: a GPU or vendor build the
user installed first (tensorflow-gpu, tensorflow-cpu, tensorflow[and-cuda],
an NVIDIA container's build) is another distribution name to pip, and a hard
`tensorflow` requirement would install the plain package over its files. Plain
`pip install bert_ad` uses whichever TensorFlow is importable; bert_ad.compat
says in one line how to get one when none is.

The checkout's configs/ and data/ ship inside the wheel as bert_ad/configs and
bert_ad/samples (bert_ad/resources/samples.py finds them in either place).
"""

import importlib.util
import os
import re
import sys

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "bert_ad", "__init__.py"), encoding="utf-8") as f:
    VERSION = re.search(r'^__version__ = "([^"]+)"', f.read(), re.M).group(1)



def registered_console_scripts() -> list:
    """`bert-ad` and every command's console script, from the command registry.

    bert_ad/cli/registry.py reads the registration lines without importing
    them (pip builds the wheel without TensorFlow), so it is loaded by path.
    """
    path = os.path.join(HERE, "bert_ad", "cli", "registry.py")
    spec = importlib.util.spec_from_file_location("_bert_ad_registry", path)
    registry = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = registry  # dataclasses look their module up there
    spec.loader.exec_module(registry)
    return registry.console_scripts(os.path.join(HERE, "bert_ad"))


# TensorFlow 1.15 reads protobuf's generated code the old way: protobuf 3.21+
# fails at `import tensorflow`.
TF1_PROTOBUF = "protobuf<3.21"
PY38 = "; python_version >= '3.8'"
# Serving: aiohttp's server (and benchmarks/serve_load.py's client), the /metrics
# text, and ONNX Runtime for ONNX exports. Python 3.7 (the TF 1.15 lane) has
# aiohttp 3.8 but no onnxruntime that fits TF 1.15's protobuf: there serve
# takes SavedModels and frozen graphs, and an ONNX export is one error line.
SERVE = ["aiohttp>=3.8", "prometheus_client>=0.17", "onnxruntime>=1.32" + PY38]
# tf2onnx converts (onnx 1.23, onnxruntime 1.32, tf2onnx 1.17 are the versions
# tested); int8's quantizer runs ONNX Runtime's symbolic shape inference, which
# needs sympy, a package onnxruntime does not depend on.
ONNX_EXPORT = ["onnx>=1.15" + PY38, "tf2onnx>=1.17" + PY38, "sympy" + PY38,
               "ml_dtypes" + PY38]

setup(
    name="bert_ad",
    version=VERSION,
    description="Multi-GPU BERT fine-tuning and pretraining in TensorFlow graph mode",
    packages=find_packages(include=["bert_ad", "bert_ad.*"])
    + ["bert_ad.configs", "bert_ad.samples"],
    package_dir={"bert_ad.configs": "configs", "bert_ad.samples": "data"},
    package_data={"bert_ad.configs": ["*.json"],
                  "bert_ad.samples": ["*/*.txt", "*/*.tsv", "*/*.json"]},
    python_requires=">=3.7",
    install_requires=[
        "numpy",
        "absl-py",
        "sentencepiece",
    ],
    extras_require={
        # Pick one TensorFlow (README: which one for which machine), or none
        # to keep the one already installed.
        "tf": ["tensorflow>=2.12"],
        "tf1": ["tensorflow==1.15.5", TF1_PROTOBUF],
        "tf1-gpu": ["tensorflow-gpu==1.15.5", TF1_PROTOBUF],
        # pytest-xdist: the README's test command runs two workers (CI has 2 cores).
        "test": ["pytest", "pytest-xdist"],
        # Independent references for tests and benchmarks, never needed to run.
        # seqeval 1.2.2 is an sdist whose setup_requires (setuptools_scm) only
        # builds under PEP 517: install with `pip install --use-pep517`.
        "reference": [
            "torch==2.13.0; python_version >= '3.11'",
            "transformers; python_version >= '3.11'",
            "safetensors; python_version >= '3.8'",
            "seqeval==1.2.2; python_version >= '3.8'",
        ],
        "plot": ["matplotlib"],
        # A scoring / serving machine, no TensorFlow: bert-ad serve, bert-ad predict,
        # --predict_from_export and bert-ad features on ONNX exports, --version.
        "serve": SERVE,
        # An exporting machine (with a TensorFlow extra): --export_format=onnx and
        # --export_precision=int8 on top of serve (docs/serving.md).
        "onnx": SERVE + ONNX_EXPORT,
    },
    entry_points={
        # `bert-ad` and one `bert-ad-NAME` per registered command, all through
        # cli/entry_points.py: the command (and TensorFlow) is imported under
        # run_cli, so a missing TensorFlow is one `error:` line.
        "console_scripts": registered_console_scripts(),
    },
)
