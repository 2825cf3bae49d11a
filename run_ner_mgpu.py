"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/cli/ner.py.
"""

from bert_ad.cli.ner import cli

if __name__ == "__main__":
    cli()
