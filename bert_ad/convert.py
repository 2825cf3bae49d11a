"""`python -m bert_ad.convert` keeps working: the same as `bert-ad convert`."""

from bert_ad.cli.entry_points import module_command

if __name__ == "__main__":
    module_command("convert", "python -m bert_ad.convert")
