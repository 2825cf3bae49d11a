"""`python -m bert_ad.vocab`: transplant or extend a vocabulary (bert_ad/tools/vocab.py)."""
from bert_ad.tools.vocab import cli

if __name__ == "__main__":
    cli()
