"""What bert_ad reads besides its code: downloaded assets, files shipped in the package,
and Hugging Face's safetensors weights. Standard library and numpy only (bottom layer)."""
