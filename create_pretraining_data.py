"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/cli/create_pretraining_data.py.
"""

from bert_ad.cli.entry_points import create_pretraining_data

if __name__ == "__main__":
    create_pretraining_data()
