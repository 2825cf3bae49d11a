"""Studies and benchmarks of bert_ad, run from a checkout: `python -m benchmarks.NAME --help`.

Not part of the wheel (setup.py packages bert_ad only); they import the
installed bert_ad and start this checkout's launchers. benchmarks/README.md
says what each one measures.
"""
