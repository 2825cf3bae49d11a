"""Metrics: predictions and labels in, `eval_results.txt` figures out (numpy only)."""
