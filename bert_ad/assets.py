"""`python -m bert_ad.assets` keeps working: the same as `bert-ad assets`."""

from bert_ad.cli.entry_points import module_command

if __name__ == "__main__":
    module_command("assets", "python -m bert_ad.assets")
