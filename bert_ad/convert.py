"""`python -m bert_ad.convert` keeps working: the code is bert_ad/tools/convert.py."""

from bert_ad.tools.convert import cli

if __name__ == "__main__":
    cli()
