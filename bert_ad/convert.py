"""`python -m bert_ad.convert` keeps working: the command line is bert_ad/cli/convert.py."""

from bert_ad.cli.convert import cli

if __name__ == "__main__":
    cli()
