"""`python -m bert_ad.assets` keeps working: the command is bert_ad/tools/assets.py."""

from bert_ad.cli.entry_points import assets

if __name__ == "__main__":
    assets()
