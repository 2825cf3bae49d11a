"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/pretraining_data.py.
"""

from bert_ad.pretraining_data import cli

if __name__ == "__main__":
    cli()
