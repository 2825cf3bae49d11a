"""Tasks: what one objective owns (data, head, loss, metrics, result files) on the driver."""
