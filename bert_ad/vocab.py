"""`python -m bert_ad.vocab` keeps working: the same as `bert-ad vocab`."""

from bert_ad.cli.entry_points import module_command

if __name__ == "__main__":
    module_command("vocab", "python -m bert_ad.vocab")
