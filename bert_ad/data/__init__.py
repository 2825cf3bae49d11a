"""Data: tokenizers, task readers (processors), features and their cache, batching,
real datasets."""
