"""Tools around the trainer (top layer): checkpoint converters, vocab transplant, the asset
command, benchmarks."""
