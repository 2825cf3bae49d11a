"""`python -m bert_ad.vocab`: transplant or extend a vocabulary (bert_ad/tools/vocab.py)."""
from bert_ad.cli.entry_points import vocab

if __name__ == "__main__":
    vocab()
