"""The command registry and `bert-ad` (bert_ad/cli/registry.py, bert_ad/cli/entry_points.py).

* Every registration line is found without importing, and says what its
  module registers when imported (name and summary).
* setup.py's console scripts, the root launchers and `bert-ad --help` come
  from it; names are unique; a non-literal registration is refused.
* The toy task of tests/toy_task.py, registered by one line, trains on 2
  towers through `bert-ad toy` with a flag of its own.
"""

from __future__ import annotations

import json
import os

import pytest

from bert_ad.cli import entry_points, registry
from bert_ad.files import read_key_values
from helpers import (REPO, run_file_in_process, run_launcher, run_launcher_in_process,
                     run_module)
from toy_task import CONFIG

TESTS = os.path.dirname(os.path.abspath(__file__))


def test_every_declaration_matches_what_its_module_registers():
    declared = registry.declarations(plugins=False)
    names = [d.name for d in declared]
    for expected in ("classifier", "ner", "pretrain", "rewrite", "create-pretraining-data",
                     "convert", "vocab", "assets", "tokenize", "data"):
        assert expected in names
    for declaration in declared:
        command = registry.command(declaration)
        assert command.name == declaration.name
        assert command.summary == declaration.summary
        kind = registry.TaskCommand if declaration.kind == "task" else registry.ToolCommand
        assert isinstance(command, kind), declaration


def test_console_scripts_and_launchers_come_from_the_registry():
    scripts = registry.console_scripts()
    assert scripts[0] == "bert-ad=bert_ad.cli.entry_points:main"
    assert "bert-ad-classifier=bert_ad.cli.entry_points:classifier" in scripts
    assert ("bert-ad-create-pretraining-data="
            "bert_ad.cli.entry_points:create_pretraining_data") in scripts
    for line in scripts[1:]:
        function = line.split(":")[1]
        assert callable(getattr(entry_points, function)), line
    # Every root launcher in the checkout is declared by a command, and back. The other
    # two: the build script, and what benchmarks/ and studies/ share.
    launchers = {d.launcher for d in registry.declarations(plugins=False) if d.launcher}
    on_disk = {name for name in os.listdir(REPO)
               if name.endswith(".py") and name != "setup.py"}
    assert launchers == on_disk
    missing = "no_such_command"
    with pytest.raises(AttributeError):
        getattr(entry_points, missing)


def test_the_registry_refuses_duplicates_and_non_literals(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text('register_task("x", "one", define_flags=f, build=b)\n')
    (package / "b.py").write_text('register_tool("y", "two", cli=c, aliases=("x",))\n')
    with pytest.raises(ValueError, match="'x' is registered twice"):
        registry.declarations(str(package), plugins=False)
    (package / "b.py").write_text('NAME = "y"\nregister_tool(NAME, "two", cli=c)\n')
    with pytest.raises(ValueError, match=r"b\.py:2: the name of a registration must be a "
                                         "literal"):
        registry.declarations(str(package), plugins=False)


def test_a_file_is_parsed_again_only_when_it_changes(tmp_path, monkeypatch):
    """Commands run in one process read the registrations once a file: again only
    after an edit (here one of the same size: the time it was written tells)."""
    package = tmp_path / "pkg"
    package.mkdir()
    source = package / "a.py"
    source.write_text('register_task("x", "one", define_flags=f, build=b)\n')
    parsed = []
    parse = registry._parse_declarations
    monkeypatch.setattr(registry, "_parse_declarations",
                        lambda path, module: parsed.append(path) or parse(path, module))
    for _ in range(3):
        assert [d.name for d in registry.declarations(str(package), plugins=False)] == ["x"]
    assert parsed == [str(source)]
    written = os.stat(source).st_mtime_ns
    source.write_text('register_task("z", "one", define_flags=f, build=b)\n')
    os.utime(source, ns=(written + 10**9, written + 10**9))
    assert [d.name for d in registry.declarations(str(package), plugins=False)] == ["z"]
    assert parsed == [str(source)] * 2


def test_bert_ad_help_lists_every_command_and_bad_commands_are_one_line():
    helped = run_module("bert_ad", ["--help"])
    assert helped.returncode == 0, helped.stderr
    lines = helped.stdout.splitlines()
    assert lines[0] == "usage: bert-ad COMMAND [--flag=value ...]"
    for declaration in registry.declarations(plugins=False):
        listed = [line for line in lines if line.startswith(f"  {declaration.name} ")]
        assert len(listed) == 1 and declaration.summary in listed[0], declaration.name
    unknown = run_module("bert_ad", ["classifer"])
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: unknown command 'classifer'; the commands are ")
    assert len(unknown.stderr.splitlines()) == 1
    nothing = run_module("bert_ad", [])
    assert (nothing.returncode, nothing.stderr) == (
        2, "error: name a command: bert-ad COMMAND [flags]; `bert-ad --help` lists them\n")


def test_an_alias_runs_its_command_and_a_tool_takes_absl_flags():
    # Through `bert-ad`'s entry point in this process (`python -m bert_ad` itself runs
    # in a fresh process in the test above; these need no TensorFlow import of their own).
    # Google's task name is an alias of `classifier`: the same flags.
    helped = run_launcher_in_process(["bert-ad", "run_classifier", "--helpfull"])
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: bert-ad classifier ")
    assert "  --task_name: " in helped.stdout
    # A tool's subcommand: absl's `--name value`, and a missing flag is one line.
    missing = run_launcher_in_process(["bert-ad", "convert", "google2hf", "--checkpoint", "x"])
    # (TensorFlow's start-up chatter may come first.)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
    assert [line for line in missing.stderr.splitlines() if line.startswith("error")] == [
        "error: --output_dir is required"]


def _toy_config(tmp_path) -> str:
    path = tmp_path / "toy_config.json"
    path.write_text(json.dumps(CONFIG.to_dict()))
    return str(path)


def test_the_toy_task_runs_through_bert_ad_on_two_towers_with_its_own_flag(tmp_path):
    env = dict(BERT_AD_PLUGINS="toy_task",
               PYTHONPATH=os.pathsep.join([REPO, TESTS]))
    listed = run_module("bert_ad", ["--help"], **env)
    assert "  toy " in listed.stdout and "a regression toy" in listed.stdout
    # Its flags through the same entry point in this process (no TensorFlow import).
    helped = run_launcher_in_process(["bert-ad", "toy", "--helpfull"],
                                     BERT_AD_PLUGINS="toy_task")
    assert helped.returncode == 0, helped.stderr
    assert "  --toy_threshold: Ids above this count toward the target. (default: '17')" \
        in helped.stdout.splitlines()
    output_dir = tmp_path / "out"
    argv = ["toy", "--do_train", "--do_eval", "--n_gpus=2", "--train_batch_size=4",
            "--learning_rate=3e-3", "--seed=3", f"--bert_config_file={_toy_config(tmp_path)}",
            f"--output_dir={output_dir}", "--toy_threshold=20"]
    # Found from BERT_AD_PLUGINS in a fresh process above; trained through the same
    # entry point in this one (no TensorFlow import of its own).
    run = run_launcher_in_process(["bert-ad"] + argv, BERT_AD_PLUGINS="toy_task")
    assert run.returncode == 0, run.stderr[-3000:]
    trained = read_key_values(str(output_dir / "train_results.txt"))
    # 48 rows / (2 towers x 4) x 3 epochs (RunSettings' default) = 18 steps of 8.
    assert (int(trained["global_step"]), int(trained["global_batch"])) == (18, 8)
    evaluated = read_key_values(str(output_dir / "eval_results.txt"))
    assert int(evaluated["global_step"]) == 18 and float(evaluated["eval_mse"]) < 0.2
    assert "on 2 tower(s)" in run.stderr  # scored on both towers
    # Its own flag is checked by its own builder: one line, nothing written.
    bad = run_launcher_in_process(["bert-ad"] + argv[:-1] + [
        "--toy_threshold=40", f"--output_dir={tmp_path / 'bad'}"], BERT_AD_PLUGINS="toy_task")
    assert (bad.returncode, bad.stderr.splitlines()[-1]) == (
        2, "error: --toy_threshold=40 must be between 5 and 29 (the toy's ids)")
    assert not (tmp_path / "bad").exists()


def test_root_launchers_are_the_registered_commands(tmp_path):
    launchers = [d.launcher for d in registry.declarations(plugins=False) if d.launcher]
    # Each launcher file runs as __main__ in this process (no TensorFlow import each);
    # one of them also in a fresh interpreter, as a user types it, and must print the same.
    for launcher in launchers:
        helped = run_file_in_process(launcher, ["--help"])
        assert helped.returncode == 0, helped.stderr
        assert helped.stdout.startswith(f"usage: {launcher} ")
    launched = run_launcher([launchers[0], "--help"])
    assert launched.returncode == 0, launched.stderr
    assert launched.stdout.startswith(f"usage: {launchers[0]} ")
    assert launched.stdout == run_file_in_process(launchers[0], ["--help"]).stdout
