"""The fine-tuned folder is the model (issue 51; issue 55's resume identity).

One tiny classifier is trained in this process with --max_seq_length=64
--pooling=mean; every later command is given that folder and data flags
only, as a user would: predict, export, a contradicting flag, --label_names,
a hand-edited record, a resume by another task or another model size, a
folder from before the record, continued training from it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from helpers import (REPO, SAMPLE_SENTIMENT, assert_one_error_line, flag_args,
                     run_launcher_in_process, tiny_model, tree_digest, write_config)

from bert_ad.bert_config import BertConfig
from bert_ad.files import file_digest
from bert_ad.model_folder import SETTINGS_FILE, read_model_settings


def bert_ad(command: str, flags: dict):
    return run_launcher_in_process(["bert-ad", command] + flag_args(flags))


class Setup:
    """The tiny model's files, the data flags and the trained folder."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    s = Setup()
    s.root = str(tmp_path_factory.mktemp("model_folder"))
    s.model = tiny_model(os.path.join(s.root, "model"))
    s.data = {"task_name": "sentiment", "data_dir": SAMPLE_SENTIMENT, "n_gpus": 1,
              "predict_batch_size": 8, "eval_batch_size": 8}
    s.trained = os.path.join(s.root, "trained")
    flags = dict(s.data, output_dir=s.trained, vocab_file=s.model.vocab_file,
                 bert_config_file=s.model.config_file, max_seq_length=64, pooling="mean",
                 do_train=True, do_predict=True, do_eval=True, train_batch_size=8,
                 num_train_epochs=1, learning_rate=1e-3, save_checkpoints_steps=100)
    bert_ad("classifier", flags).check()
    return s


def copy_folder(s: Setup, name: str) -> str:
    target = os.path.join(s.root, name)
    shutil.copytree(s.trained, target)
    return target


def lines(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def test_the_folder_holds_the_model_and_its_record(setup):
    folder = setup.trained
    with open(os.path.join(folder, "vocab.txt"), "rb") as copied, \
            open(setup.model.vocab_file, "rb") as source:
        assert copied.read() == source.read()
    written = BertConfig.from_json_file(os.path.join(folder, "bert_config.json"))
    assert written.to_dict() == setup.model.bert_config().to_dict()
    record = read_model_settings(folder)
    assert (record.task, record.labels, record.max_seq_length) == ("classifier", ["0", "1"], 64)
    assert record.settings["pooling"] == "mean"
    assert record.settings["long_text"] == "truncate" and record.do_lower_case is True
    assert (record.tokenizer, record.vocab_file) == ("wordpiece", "vocab.txt")
    assert record.vocab_sha256 == file_digest(setup.model.vocab_file)
    assert record.model_shape["num_hidden_layers"] == 2
    assert record.dev_file.endswith("dev.tsv")
    # Completed at the end: the step trained to (40 rows / 8 = 5) and its figures.
    assert record.global_step == 5
    assert set(record.metrics) >= {"eval_accuracy", "global_step"}


def test_the_record_is_read_without_tensorflow(setup):
    code = ("import sys; from bert_ad.model_folder import read_model_settings; "
            f"print(read_model_settings({setup.trained!r}).max_seq_length); "
            "print('tensorflow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=REPO, check=True).stdout.split()
    assert out == ["64", "False"]


def test_predict_with_only_the_folder_equals_the_training_run(setup):
    folder = copy_folder(setup, "predict_again")
    os.remove(os.path.join(folder, "predict.txt"))
    os.remove(os.path.join(folder, "test_results.tsv"))
    bert_ad("classifier", dict(setup.data, output_dir=folder, do_predict=True)).check()
    for name in ("predict.txt", "test_results.tsv"):
        assert lines(os.path.join(folder, name)) == lines(os.path.join(setup.trained, name))


def test_export_from_the_folder_records_its_settings_and_label_names(setup):
    folder = copy_folder(setup, "export")
    names = os.path.join(setup.root, "names.txt")
    with open(names, "w", encoding="utf-8") as f:
        f.write("negative\npositive\n")
    export_dir = os.path.join(setup.root, "exported")
    bert_ad("classifier", dict(setup.data, output_dir=folder, do_export=True,
                               export_dir=export_dir, label_names=names)).check()
    with open(os.path.join(export_dir, "assets.extra", "export.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["max_seq_length"] == 64 and metadata["settings"]["pooling"] == "mean"
    assert metadata["labels"] == ["0", "1"]
    assert metadata["label_names"] == ["negative", "positive"]
    assert read_model_settings(folder).label_names == ["negative", "positive"]


def test_label_names_must_name_every_label(setup):
    folder = copy_folder(setup, "bad_names")
    names = os.path.join(setup.root, "three_names.txt")
    with open(names, "w", encoding="utf-8") as f:
        f.write("negative\nneutral\npositive\n")
    before = tree_digest(folder)
    run = bert_ad("classifier", dict(setup.data, output_dir=folder, do_predict=True,
                                     label_names=names))
    assert_one_error_line(run, f"--label_names={names} has 3 name(s)", "2 labels")
    assert tree_digest(folder) == before


@pytest.mark.parametrize("flag, given, trained", [("max_seq_length", 128, 64),
                                                  ("pooling", "cls", "mean")])
def test_a_flag_contradicting_the_folder_is_refused_when_scoring(setup, flag, given,
                                                                 trained):
    before = tree_digest(setup.trained)
    run = bert_ad("classifier", dict(setup.data, output_dir=setup.trained, do_predict=True,
                                     **{flag: given}))
    assert_one_error_line(run, f"--{flag}={given} contradicts the model folder",
                          f"trained with --{flag}={trained}")
    assert tree_digest(setup.trained) == before


def test_another_vocabulary_is_refused_when_scoring(setup):
    other = os.path.join(setup.root, "other_vocab.txt")
    with open(setup.model.vocab_file, encoding="utf-8") as f:
        words = f.read().splitlines()
    with open(other, "w", encoding="utf-8") as f:
        f.write("\n".join(words[:5] + words[5:][::-1]) + "\n")
    run = bert_ad("classifier", dict(setup.data, output_dir=setup.trained, do_predict=True,
                                     vocab_file=other))
    assert_one_error_line(run, f"--vocab_file={other} is another vocabulary")


@pytest.mark.parametrize("change, expected", [
    ({"max_seq_length": 1000}, "max_seq_length=1000 must be between 1 and the model's "
                               "max_position_embeddings"),
    ({"max_seq_length": "64"}, 'max_seq_length is "64", not an integer'),
    ({"labels": "0,1"}, "labels is \"0,1\", not a list or null"),
    ({"tokenizer": "bpe"}, "tokenizer is 'bpe'"),
])
def test_a_hand_edited_record_is_one_error_line(setup, change, expected):
    folder = copy_folder(setup, f"edited_{sorted(change)[0]}_{len(os.listdir(setup.root))}")
    path = os.path.join(folder, SETTINGS_FILE)
    with open(path, encoding="utf-8") as f:
        values = json.load(f)
    values.update(change)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(values, f)
    run = bert_ad("classifier", dict(setup.data, output_dir=folder, do_predict=True))
    assert_one_error_line(run, path, expected)


def write_conll(path: str) -> str:
    """A few tagged sentences of words the tiny vocabulary has."""
    sentences = [[("great", "B-X"), ("movie", "O")], [("bad", "O"), ("film", "B-X")]] * 4
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join("".join(f"{w} {t}\n" for w, t in s) for s in sentences))
    return path


def test_another_tasks_checkpoints_are_no_resume_point(setup):
    folder = copy_folder(setup, "other_task")
    data_dir = os.path.join(setup.root, "conll")
    os.makedirs(data_dir)
    write_conll(os.path.join(data_dir, "train.txt"))
    before = tree_digest(folder)
    run = bert_ad("ner", {"data_dir": data_dir, "output_dir": folder, "do_train": True,
                          "n_gpus": 1, "train_batch_size": 4, "num_train_epochs": 1})
    assert_one_error_line(run, f"--output_dir={folder} holds the checkpoints of a "
                          "classifier model of 2 layers x 32, labels 0, 1",
                          "task classifier, not token_classification", "no resume point")
    assert tree_digest(folder) == before


def test_another_model_size_is_no_resume_point(setup):
    folder = copy_folder(setup, "other_size")
    one_layer = write_config(os.path.join(setup.root, "one_layer.json"),
                             setup.model.vocab_size, num_hidden_layers=1)
    run = bert_ad("classifier", dict(setup.data, output_dir=folder, do_train=True,
                                     bert_config_file=one_layer))
    assert_one_error_line(run, f"--bert_config_file={one_layer} is another model than "
                          "the model folder", "num_hidden_layers=1 (the folder's 2)")


def test_a_folder_from_before_the_record_resumes_with_a_warning(setup):
    folder = copy_folder(setup, "before_the_record")
    os.remove(os.path.join(folder, SETTINGS_FILE))
    run = bert_ad("classifier", dict(setup.data, output_dir=folder, do_train=True,
                                     vocab_file=setup.model.vocab_file, pooling="mean",
                                     bert_config_file=setup.model.config_file,
                                     max_seq_length=64, train_batch_size=8,
                                     num_train_epochs=1)).check()
    assert "holds checkpoints but no model_settings.json" in run.stderr
    assert read_model_settings(folder).global_step == 5  # nothing more to train


def test_continued_training_from_the_folder_may_change_the_length(setup):
    output_dir = os.path.join(setup.root, "continued")
    run = bert_ad("classifier", dict(setup.data, output_dir=output_dir, do_train=True,
                                     init_checkpoint=setup.trained, max_seq_length=128,
                                     train_batch_size=8, num_train_epochs=0.4)).check()
    assert "with --max_seq_length=128 (it was trained with 64)" in run.stderr
    record = read_model_settings(output_dir)
    assert record.max_seq_length == 128 and record.settings["pooling"] == "mean"
    assert lines(os.path.join(output_dir, "vocab.txt")) == lines(setup.model.vocab_file)
