"""`python -m bert_ad.convert` keeps working: the command line is bert_ad/cli/convert.py."""

from bert_ad.cli.entry_points import convert

if __name__ == "__main__":
    convert()
