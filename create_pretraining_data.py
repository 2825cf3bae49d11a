"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/pretraining/instances.py.
"""

from bert_ad.pretraining.instances import cli

if __name__ == "__main__":
    cli()
