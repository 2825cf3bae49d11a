"""bert_ad: multi-GPU BERT fine-tuning and pretraining in TensorFlow graph mode."""

__version__ = "0.1.0"
