"""Pretraining data: raw text, instances, masking, TFRecord shards."""
