"""run_pretraining_mgpu.py: multi-tower MLM/NSP pretraining (not implemented yet)."""

from __future__ import annotations

from bert_ad.planned import not_implemented

cli = not_implemented("run_pretraining_mgpu.py", "Pretraining on several GPUs")
