"""Reliability, round three (issue 31): no silent wrong result, no lost work.

Each test reproduces one defect of the issue on a tiny model, in this process
(the launchers' define_flags + main, as the command runs them):
  #1 NER --do_export exported nothing; #2 a header row became a class (the
  refusals are in tests/test_bad_inputs.py; here: --skip_header works);
  #4 a NaN dev metric stopped the run and left a bare NaN in best.json;
  #5 an unknown --best_metric was found after training had begun;
  #6 scoring fell back to an older checkpoint without naming it (and to
  --init_checkpoint when every trained one was damaged); #7 an output path
  that is an input of the same run was written over; #10 a damaged best/ was
  a 195-line traceback.
"""

from __future__ import annotations

import json
import logging
import math
import os

import pytest

from bert_ad import driver
from bert_ad.cli import classifier as classifier_cli
from bert_ad.cli import create_pretraining_data as create_cli
from bert_ad.cli import ner as ner_cli
from bert_ad.errors import UserError
from bert_ad.files import read_key_values
from bert_ad.parallel.checkpoint_files import step_checkpoints
from bert_ad.parallel.towers import plan_devices
from bert_ad.inference.layout import read_metadata
from helpers import (SAMPLE_SENTIMENT, run_main, tiny_model,
                     tree_digest)
from test_best_checkpoint import ScriptedTask, make_task, read_state
from test_driver import settings, toy_rows
import test_reliability


# The tiny model and its initial checkpoint, as test_reliability's runs use them.
ws = test_reliability.ws


def classifier_flags(w, output_dir: str, **changes) -> dict:
    values = {"task_name": "sentiment", "data_dir": SAMPLE_SENTIMENT,
              "vocab_file": w.model.vocab_file, "bert_config_file": w.model.config_file,
              "init_checkpoint": w.init, "output_dir": output_dir, "max_seq_length": 32,
              "train_batch_size": 4, "num_train_epochs": 1}
    values.update(changes)
    return values


def _lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def _warnings(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# --- #2: --skip_header ----------------------------------------------------------------

def test_skip_header_skips_the_first_line_of_every_file(ws, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "dev", "test"):
        rows = _lines(os.path.join(SAMPLE_SENTIMENT, f"{split}.tsv"))
        (data / f"{split}.tsv").write_text("\n".join(["label\tsentence"] + rows) + "\n",
                                           encoding="utf-8")
    output_dir = str(tmp_path / "out")
    assert run_main(classifier_cli, classifier_flags(
        ws, output_dir, data_dir=str(data), skip_header=True, do_train=True,
        do_predict=True)) == 0
    assert _lines(os.path.join(output_dir, "labels.txt")) == ["0", "1"]
    rows = _lines(os.path.join(SAMPLE_SENTIMENT, "test.tsv"))
    assert len(_lines(os.path.join(output_dir, "predict.txt"))) == len(rows)


# --- #1: every flag a task lists is honoured: NER's --do_export --------------------------

def test_ner_exports_what_its_help_promises(tmp_path):
    from test_token_classification import GOOD_DEV, GOOD_TRAIN, VOCAB
    data = tmp_path / "data"
    data.mkdir()
    for name, text in (("train.txt", GOOD_TRAIN * 4), ("dev.txt", GOOD_DEV),
                       ("test.txt", GOOD_DEV)):
        (data / name).write_text(text, encoding="utf-8")
    model = tiny_model(str(tmp_path / "model"), texts=[" ".join(VOCAB[5:])])
    output_dir = tmp_path / "out"
    assert run_main(ner_cli, {"data_dir": str(data), "vocab_file": model.vocab_file,
                              "bert_config_file": model.config_file, "max_seq_length": 16,
                              "train_batch_size": 4, "num_train_epochs": 1,
                              "output_dir": str(output_dir), "do_train": True,
                              "do_export": True}) == 0
    (export,) = os.listdir(str(output_dir / "export"))
    metadata = read_metadata(str(output_dir / "export" / export))
    assert metadata.task == "token_classification"
    assert metadata.labels == _lines(str(output_dir / "labels.txt"))


# --- #4: a NaN dev metric ----------------------------------------------------------------

def test_a_nan_dev_metric_is_never_best_nor_counted_by_patience(tmp_path, caplog):
    script = {2: math.nan, 4: math.nan, 6: 0.5, 8: 0.4, 10: math.nan, 12: 0.3}
    task = make_task(script)
    caplog.set_level(logging.INFO, logger="bert_ad")
    output_dir = str(tmp_path / "out")
    placement = driver.Placement(plan_devices(2, cuda_visible_devices=""))
    driver.run(task, settings(output_dir, eval_every_steps=2, keep_best_checkpoint=True,
                              save_checkpoints_steps=2, early_stopping_patience=2,
                              num_train_epochs=2),
               placement, do_train=True, do_eval=False, do_predict=False)
    # NaN at 2 and 4 neither became the best nor counted: 6 is the first best, 8 and 12
    # are the two finite evaluations without improvement that stop the run (10 is NaN).
    assert task.scored_steps == [2, 4, 6, 8, 10, 12]
    with open(os.path.join(output_dir, "best", "best.json"), encoding="utf-8") as f:
        text = f.read()
    state = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in best.json"))
    assert (state["best_step"], state["best_value"]) == (6, 0.5)
    assert state["evaluations"][0] == [2, None]
    assert read_state(output_dir)["evaluations"][4] == [10, None]
    nan_warnings = [w for w in _warnings(caplog) if "eval_score is nan" in w]
    assert nan_warnings == [
        f"warning: eval at step {step}: eval_score is nan: it is never the best and does "
        "not count toward early stopping" for step in (2, 4, 10)]
    trained = read_key_values(os.path.join(output_dir, "train_results.txt"))
    assert int(trained["early_stopping_step"]) == 12


def test_a_nan_figure_in_eval_results_is_said(tmp_path, caplog):
    class Constant(ScriptedTask):
        def metrics(self, data, outputs):
            figures = super().metrics(data, outputs)
            figures["eval_pearson"] = float("nan")
            return figures

    task = Constant({"train": toy_rows(48, seed=1), "dev": toy_rows(13, seed=2)},
                    {2: 0.1, 4: 0.2, 6: 0.3})
    output_dir = str(tmp_path / "out")
    placement = driver.Placement(plan_devices(1, cuda_visible_devices=""))
    caplog.set_level(logging.INFO, logger="bert_ad")
    driver.run(task, settings(output_dir, num_train_epochs=0.5, train_batch_size=4),
               placement, do_train=True, do_eval=True, do_predict=False)
    assert read_key_values(os.path.join(output_dir, "eval_results.txt"))[
        "eval_pearson"] == "nan"
    assert "warning: eval: eval_pearson is not a finite number (undefined on this dev set, " \
           "e.g. constant targets): no figure to trust" in _warnings(caplog)


# --- #5: --best_metric checked with the other inputs ---------------------------------------

def test_an_unknown_best_metric_is_refused_before_anything_is_written(ws, tmp_path):
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    (output_dir / "notes.txt").write_text("mine")
    before = tree_digest(str(output_dir))
    with pytest.raises(UserError, match=r"--best_metric=eval_acc is not among the dev "
                                        r"figures of the classifier task: eval_accuracy, "):
        run_main(classifier_cli, classifier_flags(
            ws, str(output_dir), do_train=True, eval_every_steps=2, best_metric="eval_acc"))
    assert tree_digest(str(output_dir)) == before


def test_every_figure_a_task_gives_is_among_its_metric_names(ws, trained, tmp_path):
    output_dir = str(tmp_path / "out")
    for target in ({}, {"task_name": "tsv", "regression": True}):
        if target:
            run_main(classifier_cli, classifier_flags(ws, output_dir + str(len(target)),
                                                      do_train=True, do_eval=True, **target))
            results = output_dir + str(len(target))
        else:
            # The sentiment classifier's train + eval run: the `trained` fixture.
            results = trained
        figures = read_key_values(os.path.join(results, "eval_results.txt"))
        task = classifier_cli.build(_parsed(classifier_flags(ws, output_dir, **target)),
                                    None)
        task = task.with_labels(None if target else ["0", "1"])
        assert set(figures) - {"global_step"} <= set(task.metric_names()), target


def _parsed(flags: dict):
    from bert_ad.cli.runner import parse_flags
    from helpers import flag_args
    return parse_flags(classifier_cli.define_flags, ["prog"] + flag_args(flags), "", "")


# --- #6 and #10: which checkpoint scores ---------------------------------------------------

def _cut(prefix: str) -> None:
    path = prefix + ".data-00000-of-00001"
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:len(data) // 3])


@pytest.fixture(scope="module")
def trained(ws, tmp_path_factory):
    """A classifier with checkpoints at steps 2, 4, 6, 8 and 10 (and best/), evaluated
    at the end (eval_results.txt): the tests below copy it."""
    output_dir = str(tmp_path_factory.mktemp("trained") / "out")
    assert run_main(classifier_cli, classifier_flags(
        ws, output_dir, do_train=True, do_eval=True, save_checkpoints_steps=2,
        eval_every_steps=4, keep_best_checkpoint=True, num_train_epochs=1)) == 0
    return output_dir


def test_scoring_passes_over_a_damaged_newest_checkpoint_saying_which_it_uses(
        ws, trained, tmp_path, caplog):
    import shutil
    output_dir = str(tmp_path / "copy")
    shutil.copytree(trained, output_dir)
    steps = [int(p.rsplit("-", 1)[1]) for p in step_checkpoints(output_dir)]
    newest, older = step_checkpoints(output_dir)[-1], step_checkpoints(output_dir)[-2]
    _cut(newest)
    caplog.set_level(logging.INFO, logger="bert_ad")
    run_main(classifier_cli, classifier_flags(ws, output_dir, do_eval=True, do_predict=True))
    said = [w for w in _warnings(caplog) if "instead" in w]
    assert len(said) == 1, _warnings(caplog)
    assert said[0].startswith(f"warning: the checkpoint {newest} cannot be read (")
    assert said[0].endswith(f"; using {older} (step {steps[-2]}) instead: the newest that "
                            "can be read")
    assert int(read_key_values(os.path.join(output_dir, "eval_results.txt"))[
        "global_step"]) == steps[-2]
    # Every trained checkpoint damaged: refused; never the initial weights in their place.
    for prefix in step_checkpoints(output_dir):
        _cut(prefix)
    with pytest.raises(UserError, match=r"no older checkpoint in --output_dir=.* can be read "
                                        r"either: nothing trained to score with"):
        run_main(classifier_cli, classifier_flags(ws, output_dir, do_predict=True))


def test_a_damaged_best_checkpoint_is_one_line(ws, trained, tmp_path):
    import shutil
    output_dir = str(tmp_path / "copy")
    shutil.copytree(trained, output_dir)
    (best,) = step_checkpoints(os.path.join(output_dir, "best"))
    _cut(best)
    with pytest.raises(UserError) as raised:
        run_main(classifier_cli, classifier_flags(ws, output_dir, do_predict=True,
                                                  use_best_checkpoint=True))
    message = str(raised.value)
    assert message.startswith(f"--use_best_checkpoint: the checkpoint {best} cannot be read")
    assert message.endswith("or leave --use_best_checkpoint out to use the newest checkpoint")
    assert "\n" not in message


# --- #7: an output that is an input --------------------------------------------------------

def test_an_output_path_that_is_an_input_is_refused(ws, trained, tmp_path):
    import shutil
    output_dir = str(tmp_path / "copy")
    shutil.copytree(trained, output_dir)
    mine = os.path.join(output_dir, "predict.txt")
    shutil.copy(os.path.join(SAMPLE_SENTIMENT, "test.tsv"), mine)
    before = tree_digest(output_dir)
    with pytest.raises(UserError, match=r"predict.txt is --predict_file=.*predict.txt: this run "
                                        r"reads it and would write over it; give another "
                                        r"--output_dir"):
        run_main(classifier_cli, classifier_flags(ws, output_dir, do_predict=True,
                                                  predict_file=mine))
    assert tree_digest(output_dir) == before
    # Its sibling: create_pretraining_data's --overwrite of its own --input_file.
    text = tmp_path / "text.txt"
    text.write_text("a sentence .\nanother one .\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"is --input_file=.*: this run reads it and would write "
                                        r"over it; write the records elsewhere"):
        create_cli.main(_create_flags(ws, text))
    assert text.read_text(encoding="utf-8") == "a sentence .\nanother one .\n"


def _create_flags(ws, text):
    from bert_ad.cli.runner import parse_flags
    return parse_flags(create_cli.define_flags,
                       ["prog", f"--input_file={text}", f"--output_file={text}",
                        f"--vocab_file={ws.model.vocab_file}", "--overwrite"], "", "")


# --- #3: results, caches, best.json and checkpoints reach the disk before they count ---------

def test_every_write_is_fsynced_before_it_is_renamed_into_place(tmp_path, monkeypatch):
    from bert_ad import files, folders
    from bert_ad.data import feature_cache
    from bert_ad.data.batching import TokenizedExamples
    from bert_ad.parallel.loop import make_durable
    import numpy as np
    synced = []
    real_fsync = os.fsync

    def recording_fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    out = tmp_path / "out"
    files.write_results(str(out), {"predict.txt": ["a"], "eval_results.txt": ["b"]})
    # The temporary files (renamed afterwards), then the folder holding the renames.
    assert [os.path.dirname(p) for p in synced[:2]] == [str(out)] * 2
    assert all(os.path.basename(p).startswith((".predict.txt.", ".eval_results.txt."))
               for p in synced[:2])
    assert synced[2:] == [str(out)]
    synced.clear()
    feature_cache.write_features(str(out / "cache" / "train-k.npz"),
                                 TokenizedExamples({"input_ids": [np.ones(3, np.int32)]}))
    assert synced[-1] == str(out / "cache") and len(synced) == 4  # .npz, folder, record, folder
    synced.clear()
    staging = folders.staging_directory(str(out / "best"))
    with open(os.path.join(staging, "best.json"), "w") as f:
        f.write("{}")
    folders.replace_directory(staging, str(out / "best"))
    assert synced == [os.path.join(staging, "best.json"), staging, str(out)]
    synced.clear()
    for name in ("model.ckpt-3.index", "model.ckpt-3.data-00000-of-00001", "checkpoint"):
        (out / name).write_text("x")
    make_durable(str(out / "model.ckpt-3"))
    assert sorted(synced) == sorted([str(out / "model.ckpt-3.index"), str(out / "checkpoint"),
                                     str(out / "model.ckpt-3.data-00000-of-00001"), str(out)])
