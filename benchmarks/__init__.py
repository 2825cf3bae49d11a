"""Micro-benchmarks of bert_ad, run from a checkout: `python -m benchmarks.NAME --help`.

Speed, memory and bytes: each configuration timed in a fresh worker process,
markdown tables of medians that name the machine. Not part of the wheel
(setup.py packages bert_ad only). What they share with the studies is
benchmarks/measuring.py; benchmarks/README.md says what each one
measures.
"""
