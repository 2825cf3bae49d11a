"""Scoring and serving an export without TensorFlow: its folder, scorers, answers, server."""
