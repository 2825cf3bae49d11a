"""Launcher kept at the root so existing shell scripts keep working.

It runs the command registered with launcher=<this file's name>: see
`bert-ad --help` and bert_ad/cli/registry.py.
"""

from bert_ad.cli.entry_points import launcher

if __name__ == "__main__":
    launcher(__file__)
