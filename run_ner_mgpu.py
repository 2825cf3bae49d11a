"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/cli/ner.py.
"""

from bert_ad.cli.entry_points import ner

if __name__ == "__main__":
    ner()
