"""create_pretraining_data.py: raw text to pretraining TFRecords (not implemented yet)."""

from __future__ import annotations

from bert_ad.planned import not_implemented

cli = not_implemented("create_pretraining_data.py", "Pretraining on several GPUs")
