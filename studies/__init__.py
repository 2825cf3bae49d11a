"""Studies of bert_ad, run from a checkout: `python -m studies.NAME --help`.

Accuracy and quality: real models fine-tuned over seeds and settings, each run
a launcher process, its record appended to a JSON-lines file committed in
docs/ (a stopped study resumes from it). Not part of the wheel. What they
share with the benchmarks is benchmarks/measuring.py;
studies/README.md says what each one answers.
"""
