"""The model: BERT with Google's variable names, the task heads, activation precision."""
