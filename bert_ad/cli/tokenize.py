"""bert-ad tokenize: each input line as the model's tokenizer cuts it.

For each line of --input_file (default: standard input), or each TEXT
argument, one line of space-separated pieces; with --ids, their ids instead.
The tokenizer is the one a fine-tuning run builds from the same flags
(WordPiece vocab.txt, a unigram piece list, or a SentencePiece .model).
"""

from __future__ import annotations

import sys
from typing import Iterator, List, Optional, Sequence

from absl import flags

from bert_ad.cli import flag_groups
from bert_ad.cli.registry import register_tool
from bert_ad.cli.runner import parse_flags_and_arguments, tool_cli
from bert_ad.data.tokenization import decide_do_lower_case, make_tokenizer
from bert_ad.data.text_lines import text_lines
from bert_ad.errors import fail, require_file

USAGE = "--vocab_file=FILE [--ids] [--input_file=FILE | TEXT ...]"


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flag_groups.define(fv, ("vocab_file", "spm_model_file", "do_lower_case"))
    flags.DEFINE_bool("ids", False, "Print the pieces' ids instead of the pieces.", **d)
    flags.DEFINE_string("input_file", None,
                        "Text to tokenize, one text a line (default: standard input, or "
                        "the TEXT arguments).", **d)


def _lines(input_file: Optional[str], texts: List[str]) -> Iterator[str]:
    """The texts: the arguments, or the lines of --input_file or standard input,
    both read by the one line reader (bert_ad/data/text_lines.py)."""
    if texts and input_file:
        fail("give texts as arguments or --input_file, not both")
    if texts:
        yield from texts
        return
    if input_file in (None, "", "-"):
        yield from text_lines(sys.stdin.buffer, "standard input")
        return
    require_file(input_file, "--input_file")
    with open(input_file, "rb") as f:
        yield from text_lines(f, f"--input_file={input_file}")


def main(argv: Sequence[str]) -> int:
    f, texts = parse_flags_and_arguments(define_flags, argv, USAGE, __doc__)
    do_lower_case = decide_do_lower_case(f.vocab_file or "", f.spm_model_file or "",
                                         f.do_lower_case, f["do_lower_case"].present)
    tokenizer = make_tokenizer(f.vocab_file or "", do_lower_case, f.spm_model_file or "")
    for text in _lines(f.input_file, texts):
        pieces = tokenizer.tokenize(text)
        if f.ids:
            print(" ".join(str(i) for i in tokenizer.convert_tokens_to_ids(pieces)))
        else:
            print(" ".join(pieces))
    return 0


cli = tool_cli(main)


register_tool("tokenize", "print each input line's pieces (or ids, --ids) as a model's "
              "tokenizer cuts it", cli=cli)
