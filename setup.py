"""Install with `pip install -e .` (add `[test]` for the test tools)."""

from setuptools import find_packages, setup

setup(
    name="bert_ad",
    version="0.1.0",
    description="Multi-GPU BERT fine-tuning and pretraining in TensorFlow graph mode",
    packages=find_packages(include=["bert_ad", "bert_ad.*"]),
    python_requires=">=3.7",
    install_requires=[
        "numpy",
        "absl-py",
        "sentencepiece",
        # One code base, two TensorFlow lanes: 2.x on current Python, and the
        # product card's TF 1.15 on Python 3.7 (which needs protobuf < 3.21).
        "tensorflow>=2.12; python_version >= '3.8'",
        "tensorflow==1.15.5; python_version < '3.8'",
        "protobuf<3.21; python_version < '3.8'",
    ],
    extras_require={
        "test": ["pytest"],
        # Independent references for tests and benchmarks, never needed to run.
        "reference": [
            "torch==2.13.0; python_version >= '3.11'",
            "transformers; python_version >= '3.11'",
            "safetensors; python_version >= '3.8'",
        ],
        "plot": ["matplotlib"],
    },
    entry_points={
        "console_scripts": [
            "bert-ad-classifier=bert_ad.cli.classifier:cli",
            "bert-ad-ner=bert_ad.cli.ner:cli",
            "bert-ad-pretrain=bert_ad.cli.pretrain:cli",
            "bert-ad-rewrite=bert_ad.cli.rewrite:cli",
            "bert-ad-create-pretraining-data=bert_ad.cli.create_pretraining_data:cli",
            "bert-ad-convert=bert_ad.cli.convert:cli",
            "bert-ad-vocab=bert_ad.vocab:cli",
        ],
    },
)
