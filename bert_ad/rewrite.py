"""rewrite_finetune.py: the text-rewrite slot classifier (not implemented yet)."""

from __future__ import annotations

from bert_ad.planned import not_implemented

cli = not_implemented("rewrite_finetune.py", "Text rewrite")
