"""Tools around the trainer (top layer): checkpoint converters, vocab transplant, data
preparation (`bert-ad data prepare`), the asset command."""
