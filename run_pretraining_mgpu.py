"""Launcher kept at the root so existing shell scripts keep working.

The code lives in bert_ad/tasks/pretraining.py.
"""

from bert_ad.tasks.pretraining import cli

if __name__ == "__main__":
    cli()
