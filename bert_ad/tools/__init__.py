"""Tools around the trainer: checkpoint converter, safetensors, real-asset fetcher, benchmarks."""
