"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/rewrite.py.
"""

from bert_ad.rewrite import cli

if __name__ == "__main__":
    cli()
