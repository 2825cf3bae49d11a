"""oneDNN on by default on x86, the user's TF_ENABLE_ONEDNN_OPTS respected, and the
CPU/ISA line of the benchmark tables."""

from __future__ import annotations

import os
import platform

import pytest

from bert_ad.compat import IS_TF1
from benchmarks import measuring
from bert_ad.model import precision
from helpers import (SAMPLE_SENTIMENT, fresh_python_lines, run_launcher_in_process,
                     tiny_model)

PROBE = ("import os; from bert_ad.compat import onednn; "
         "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS')); print(onednn.onednn_enabled()); "
         "print(onednn.onednn_state())")


def probe(**env: str) -> list:
    """[TF_ENABLE_ONEDNN_OPTS after import, IsMklEnabled, the log's state] in a fresh
    process (the variable only counts before TensorFlow's import)."""
    return fresh_python_lines(PROBE, 3, "TF_ENABLE_ONEDNN_OPTS", **env)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="the default applies to x86 only")
def test_onednn_is_on_by_default_on_x86():
    value, enabled, state = probe()
    assert value == "1"
    if IS_TF1:  # the pip wheel has no oneDNN: the variable cannot turn it on
        assert enabled == "False"
        assert state.startswith("off (TensorFlow 1.15") and "no effect" in state
    else:
        assert enabled == "True"
        assert state == "on (TF_ENABLE_ONEDNN_OPTS=1, bert_ad's default on x86)"


def test_the_users_setting_is_left_alone():
    value, enabled, state = probe(TF_ENABLE_ONEDNN_OPTS="0")
    assert (value, enabled) == ("0", "False")
    if not IS_TF1:
        assert state == "off (TF_ENABLE_ONEDNN_OPTS=0, from the environment)"


def test_cpu_isa_and_vector_class(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: Some CPU\n"
                       "flags\t\t: fpu sse4_2 avx avx2 fma avx512f avx512_vnni amx_tile\n")
    isa = measuring.cpu_isa(str(cpuinfo))
    assert isa == "sse4_2 avx avx2 fma avx512f avx512_vnni amx_tile"
    assert measuring.vector_class(isa) == "AMX"
    assert measuring.vector_class("sse4_2 avx avx2 fma avx512f") == "AVX-512"
    assert measuring.vector_class("sse4_2 avx avx2 fma f16c") == "AVX2"
    assert measuring.cpu_isa(str(tmp_path / "missing")) == "unknown"
    line = measuring.cpu_line("on (TF_ENABLE_ONEDNN_OPTS=1, bert_ad's default on x86)")
    assert line.startswith(f"CPU: {measuring.cpu_model()}, {os.cpu_count()} cores, ")
    assert line.endswith("; TensorFlow oneDNN on (TF_ENABLE_ONEDNN_OPTS=1, bert_ad's "
                         "default on x86)")


@pytest.mark.parametrize("flags_line, fast, says", [
    ("fpu sse4_2 avx avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile", True, "AMX tiles"),
    ("fpu sse4_2 avx avx2 fma avx512f avx512_vnni avx512_bf16", True, "AVX512_BF16"),
    ("fpu sse4_2 avx avx2 fma f16c", False, "neither AMX nor AVX512_BF16"),
    ("fpu sse4_2 avx avx2 fma avx512f avx512_vnni", False, "neither AMX nor AVX512_BF16"),
])
def test_the_bf16_path_follows_the_cpus_flags(tmp_path, flags_line, fast, says):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags_line}\n\n"
                       f"processor\t: 1\nflags\t\t: {flags_line}\n")
    found_fast, line = precision.bf16_path(False, str(cpuinfo))
    assert found_fast is fast and says in line and line.startswith("precision bf16: ")
    if not fast:
        assert "--precision=fp32 is the better choice" in line
    # A GPU decides, whatever the CPU; no cpuinfo (not Linux) is the slow path.
    assert precision.bf16_path(True, str(cpuinfo))[0] is True
    assert precision.bf16_path(False, str(tmp_path / "missing"))[0] is False


@pytest.mark.skipif(IS_TF1, reason="bf16 needs TensorFlow 2.x (refused on TF 1.15)")
def test_the_start_up_log_says_how_bf16_runs_here(tmp_path):
    """The launcher's log names the bf16 path of the machine it runs on (a warning
    where bf16 cannot pay); fp32 runs say nothing about it."""
    _, expected = precision.bf16_path(False)
    model = tiny_model(str(tmp_path / "model"))
    runs = {}
    for chosen in ("bf16", "fp32"):
        # The launcher's entry point in this process (its log is Python's logging).
        runs[chosen] = run_launcher_in_process([
            "run_classifier_mgpu.py", "--task_name=sentiment", f"--data_dir={SAMPLE_SENTIMENT}",
            f"--vocab_file={model.vocab_file}", f"--bert_config_file={model.config_file}",
            "--max_seq_length=16", "--train_batch_size=4", "--n_gpus=1", "--do_train",
            "--num_train_epochs=0.1", f"--precision={chosen}",
            f"--output_dir={tmp_path / chosen}"]).check()
    assert expected in runs["bf16"].stderr
    assert "precision bf16" not in runs["fp32"].stderr


def test_the_launchers_logged_onednn_state_is_read_back():
    log = ("device plan: 1 tower on 1 device, variables and optimizer on /cpu:0\n"
           "  /cpu:0 (cpu): tower_0\n"
           "  CPU kernels: oneDNN on (TF_ENABLE_ONEDNN_OPTS=1, bert_ad's default on x86)\n")
    assert measuring.logged_onednn_state(log) == ("on (TF_ENABLE_ONEDNN_OPTS=1, bert_ad's "
                                              "default on x86)")
    assert measuring.logged_onednn_state("no plan here") == "not logged"
