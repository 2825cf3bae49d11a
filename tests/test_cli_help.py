"""--help of every launcher: usage, description and our flags on stdout, exit 0."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers import REPO, launcher_env, run_many
LAUNCHERS = {
    "run_classifier_mgpu.py": ["--n_gpus", "--train_batch_size", "--lr_scaling",
                               "--do_predict", "--bucket_by_length",
                               "--sparse_embedding_updates"],
    "run_pretraining_mgpu.py": ["--n_gpus", "--input_file", "--num_train_steps"],
    "run_ner_mgpu.py": ["--n_gpus", "--use_crf", "--doc_stride", "--tag_scheme",
                        "--label_column", "--head_learning_rate_multiplier"],
    "rewrite_finetune.py": ["--n_gpus", "--do_train"],
    "create_pretraining_data.py": ["--input_file", "--vocab_file", "--mode"],
    "extract_features.py": ["--n_gpus", "--layers", "--batch_size", "--pooling",
                            "--max_seq_length"],
}


@pytest.fixture(scope="module")
def helps():
    return run_many({name: [name, "--help"] for name in LAUNCHERS})


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_help_lists_the_flags(helps, name):
    run = helps[name]
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert lines[0].startswith(f"usage: {name} ")
    for flag in LAUNCHERS[name]:
        matching = [line for line in lines if line.startswith(f"  {flag}: ")]
        assert len(matching) == 1, (flag, run.stdout[-3000:])
        assert "(default: " in matching[0]
    # Only our flags: none of absl's or TensorFlow's own.
    assert not [line for line in lines if line.startswith("  --logtostderr")]
    assert "Traceback" not in run.stderr


def test_help_into_a_closed_pipe_is_quiet():
    """`--help | head`: the reader is gone before we write; no traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        run = subprocess.run([sys.executable, "create_pretraining_data.py", "--help"],
                             cwd=REPO, env=launcher_env(), stdout=write_end, stderr=subprocess.PIPE,
                             text=True, timeout=300)
    finally:
        os.close(write_end)
    assert run.returncode == 0, run.stderr
    assert run.stderr == ""
