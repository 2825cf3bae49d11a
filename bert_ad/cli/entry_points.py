"""Every way a user starts bert_ad: console scripts, root launchers, `python -m bert_ad.X`.

A launcher module imports TensorFlow (through bert_ad.compat) as it is
imported, and pip's console-script wrapper imports its target before any of
our code runs; so each function here imports its launcher inside
`errors.run_cli`. A missing, broken or too old TensorFlow is then one
`error:` line with the install commands (exit 2), not a traceback.

`--version` anywhere on the command line prints the package version and the
TensorFlow found (version, distribution, CUDA or CPU build), then exits 0.
"""

from __future__ import annotations

import sys
from typing import Callable, Optional, Sequence

from bert_ad.errors import run_cli

VERSION_FLAG = "--version"


def version_text() -> str:
    """'bert_ad 0.1.0, TensorFlow 2.21.0 (tensorflow-cpu, CPU build)'.

    Raises:
      TensorFlowUnavailable: no usable TensorFlow (run_cli shows it).
    """
    from bert_ad import __version__
    from bert_ad.compat import tensorflow_description
    return f"bert_ad {__version__}, {tensorflow_description()}"


def launch(load_cli: Callable[[], Callable[[], None]],
           argv: Optional[Sequence[str]] = None) -> None:
    """Answer --version, else import the launcher (`load_cli()`) and run it; exits.

    Args:
      load_cli: imports the launcher module and returns its `cli` (which
        reads sys.argv and exits through its own run_cli).
      argv: the command line (default sys.argv), only read for --version.
    """
    argv = sys.argv if argv is None else argv

    def main() -> int:
        if VERSION_FLAG in argv[1:]:
            print(version_text())
            return 0
        load_cli()()
        return 0

    run_cli(main)


# One function per command. Each imports its launcher only when called.

def classifier() -> None:
    """bert-ad-classifier, run_classifier_mgpu.py."""
    def load():
        from bert_ad.cli.classifier import cli
        return cli
    launch(load)


def ner() -> None:
    """bert-ad-ner, run_ner_mgpu.py."""
    def load():
        from bert_ad.cli.ner import cli
        return cli
    launch(load)


def pretrain() -> None:
    """bert-ad-pretrain, run_pretraining_mgpu.py."""
    def load():
        from bert_ad.cli.pretrain import cli
        return cli
    launch(load)


def rewrite() -> None:
    """bert-ad-rewrite, rewrite_finetune.py."""
    def load():
        from bert_ad.cli.rewrite import cli
        return cli
    launch(load)


def create_pretraining_data() -> None:
    """bert-ad-create-pretraining-data, create_pretraining_data.py."""
    def load():
        from bert_ad.cli.create_pretraining_data import cli
        return cli
    launch(load)


def convert() -> None:
    """bert-ad-convert, python -m bert_ad.convert."""
    def load():
        from bert_ad.cli.convert import cli
        return cli
    launch(load)


def vocab() -> None:
    """bert-ad-vocab, python -m bert_ad.vocab."""
    def load():
        from bert_ad.tools.vocab import cli
        return cli
    launch(load)


def assets() -> None:
    """python -m bert_ad.assets: needs no TensorFlow to fetch; --version still reports it."""
    def load():
        from bert_ad.tools.assets import cli
        return cli
    launch(load)
