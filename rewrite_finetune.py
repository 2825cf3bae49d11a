"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/cli/rewrite.py.
"""

from bert_ad.cli.entry_points import rewrite

if __name__ == "__main__":
    rewrite()
