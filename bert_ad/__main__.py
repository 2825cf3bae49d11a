"""`python -m bert_ad COMMAND [flags]`: the same as the `bert-ad` command."""

from bert_ad.cli.entry_points import main

if __name__ == "__main__":
    main()
