"""Tools around the trainer: checkpoint converter, safetensors, real-asset fetcher,
data preparation (`bert-ad data prepare`), benchmarks."""
