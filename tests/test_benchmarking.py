"""The benchmarks' and studies' pure parts: the FLOP formula (benchmarks/flops.py),
tables and the worker protocol (measuring.py), every module running from the checkout.

No timing is asserted anywhere: the figures themselves are recorded in
docs/benchmarks.md, not tested.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import os
import sys

import numpy as np
import pytest

from benchmarks import measuring
from benchmarks import flops
from bert_ad import driver
from bert_ad.data.batching import TokenizedExamples, make_batch
from bert_ad.compat import tf
from bert_ad.model.modeling import BertConfig
from helpers import (SAMPLE_SENTIMENT, run_command, run_many, run_module,
                     save_initial_checkpoint, tiny_model)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_config(**overrides) -> BertConfig:
    values = dict(vocab_size=50, hidden_size=4, num_hidden_layers=1,
                  num_attention_heads=2, intermediate_size=8,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                  max_position_embeddings=16)
    values.update(overrides)
    return BertConfig(**values)


def test_flops_match_a_hand_count():
    # H=4, I=8, one layer, 2 labels, one sequence of 3 tokens, forward:
    #   projections Q,K,V,O: 4 matmuls [3,4]x[4,4] = 4 * 2*3*4*4 = 384
    #   FFN: [3,4]x[4,8] and [3,8]x[8,4]          = 2 * 2*3*4*8 = 384
    #   attention: QK^T and PV over 2 heads of 2:  2 * 2 * (2*3*3*2) = 144
    #   pooler [1,4]x[4,4] = 32; classifier [1,4]x[4,2] = 16
    config = tiny_config()
    assert flops.encoder_matmul_params(config) == 4 * 16 + 2 * 32
    assert flops.forward_flops(config, [3], 2) == 384 + 384 + 144 + 32 + 16
    assert flops.training_flops(config, [3], 2) == 3 * 960
    # Two sequences: token terms add, the attention term is per sequence (n^2).
    assert flops.forward_flops(config, [3, 5], 2) == (
        2 * 128 * 8 + 4 * 4 * (9 + 25) + 2 * 48)


def test_flops_scale_with_layers_and_ignore_padding_they_are_not_given():
    two_layers = tiny_config(num_hidden_layers=2)
    one_layer = tiny_config()
    head = 2 * (2 * 4 * 4 + 2 * 4 * 2)
    assert flops.forward_flops(two_layers, [3, 5], 2) - head == 2 * (
        flops.forward_flops(one_layer, [3, 5], 2) - head)
    assert flops.training_flops(one_layer, [], 2) == 0


def _build_classifier(config: BertConfig, batch: int, seq: int, num_labels: int,
                      train: bool):
    from bert_ad.model.heads import classifier
    from bert_ad.tasks.base import Encoder
    features = {
        "input_ids": tf.placeholder(tf.int32, [batch, seq]),
        "input_mask": tf.placeholder(tf.int32, [batch, seq]),
        "segment_ids": tf.placeholder(tf.int32, [batch, seq]),
        "label_ids": tf.placeholder(tf.int32, [batch]),
        "example_weights": tf.placeholder(tf.float32, [batch]),
    }
    # The formula counts the padded batch's work: the graph that keeps the padding
    # (with it removed, the dense layers' row count is dynamic and smaller).
    bert = Encoder(config, remove_padding=False).model(features, train)
    out = classifier(bert, features, num_labels, train)
    if train:
        tf.gradients(out.loss, tf.trainable_variables())


@pytest.mark.parametrize("train", [False, True])
def test_formula_equals_the_matmuls_of_the_real_graph(train):
    config = tiny_config(hidden_size=8, num_hidden_layers=2, intermediate_size=12)
    with tf.Graph().as_default() as graph:
        _build_classifier(config, batch=3, seq=5, num_labels=3, train=train)
        counted = flops.graph_matmul_flops(graph)
    formula = (flops.training_flops if train else flops.forward_flops)(
        config, [5, 5, 5], 3)
    assert counted == formula


def test_graph_count_refuses_dynamic_shapes():
    with tf.Graph().as_default() as graph:
        x = tf.placeholder(tf.float32, [None, 4])
        tf.matmul(x, tf.ones([4, 2]))
        with pytest.raises(ValueError, match="dynamic shape"):
            flops.graph_matmul_flops(graph)


def test_markdown_table_pads_and_aligns():
    table = measuring.markdown_table(["name", "rate"], [["ours", "12.5"], ["hf", 3]])
    assert table.splitlines() == [
        "| name | rate |",
        "|:-----|-----:|",
        "| ours | 12.5 |",
        "| hf   |    3 |",
    ]
    left = measuring.markdown_table(["a", "b"], [["x", "yy"]], align="ll")
    assert left.splitlines()[1:] == ["|:--|:---|", "| x | yy |"]
    with pytest.raises(ValueError, match="3 cells, expected 2"):
        measuring.markdown_table(["a", "b"], [[1, 2, 3]])


def test_fmt_and_median():
    assert measuring.fmt(12345.678) == "12,345.7"
    assert measuring.fmt(0.5, 2) == "0.50"
    assert measuring.fmt(float("nan")) == "-"
    assert measuring.median([3.0, None, 1.0, 2.0]) == 2.0
    assert math.isnan(measuring.median([]))


def test_run_worker_returns_the_emitted_result_and_reports_failures(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(
        "import sys\n"
        "from benchmarks import measuring as b\n"
        "print('noise before')\n"
        "b.emit_result({'rate': 1.5, 'name': sys.argv[1]})\n"
        "print('noise after')\n")
    # This checkout (its bert_ad and measuring.py) on the worker's path, without asking.
    assert measuring.run_worker([sys.executable, str(script), "x"]) == {
        "rate": 1.5, "name": "x"}
    failing = tmp_path / "failing.py"
    failing.write_text("print('about to fail')\nraise SystemExit(3)\n")
    with pytest.raises(RuntimeError, match="exited 3 without a result") as error:
        measuring.run_worker([sys.executable, str(failing)])
    assert "about to fail" in str(error.value)


def test_run_launcher_starts_fresh_and_launch_logged_touches_nothing_but_its_log(tmp_path):
    # A stand-in launcher: writes eval_results.txt and a checkpoint into argv[1], or fails.
    script = tmp_path / "launcher.py"
    script.write_text(
        "import os, sys\n"
        "out = sys.argv[1]\n"
        "os.makedirs(out, exist_ok=True)\n"
        "print('training')\n"
        "if sys.argv[2] == 'fail':\n"
        "    sys.exit('error: --flag=x: give y')\n"
        "open(os.path.join(out, 'eval_results.txt'), 'w').write('eval_f1 = 91.5\\n')\n"
        "open(os.path.join(out, 'model.ckpt-3.index'), 'w').write('x')\n")
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    (output_dir / "earlier.txt").write_text("an earlier attempt")
    run = measuring.run_launcher([sys.executable, str(script), str(output_dir), "ok"],
                                 str(output_dir), log_name="log.txt")
    assert run.ok and run.evaluated == {"eval_f1": "91.5"} and run.peak_rss_mb > 0
    assert sorted(os.listdir(output_dir)) == ["eval_results.txt", "log.txt"]
    assert (output_dir / "log.txt").read_text() == "training\n"

    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "model.ckpt-9.index").write_text("the user's")
    failed = measuring.launch_logged([sys.executable, str(script), str(kept), "fail"],
                                     str(tmp_path / "logs" / "failed.log"))
    assert not failed.ok and failed.error == "error: --flag=x: give y"
    assert sorted(os.listdir(kept)) == ["model.ckpt-9.index"]
    assert (tmp_path / "logs" / "failed.log").read_text().startswith("training\n")
    # Without a log: stdout dropped, the error from stderr.
    unlogged = measuring.run_launcher([sys.executable, str(script), str(kept), "fail"],
                                      str(tmp_path / "unlogged"))
    assert not unlogged.ok and unlogged.error == "error: --flag=x: give y"


def test_matmul_measurements_return_wall_and_cpu_rates():
    for rates in (flops.measure_numpy_matmul(n=32, repeats=2),
                  flops.measure_tf_matmul(16, 8, 4, repeats=2)):
        assert set(rates) == {"flops_per_sec", "flops_per_cpu_sec"}
        assert all(0 < v < float("inf") for v in rates.values())


def test_machine_description_names_cores_and_cpu():
    info = measuring.machine_description()
    assert info["nproc"] == os.cpu_count()
    assert info["cpu_model"]
    assert info["tensorflow"] != "not installed"


def _load_script(name: str):
    """benchmarks/NAME.py, imported as `python -m benchmarks.NAME` runs it."""
    return importlib.import_module("benchmarks." + name)


def test_a_worker_command_names_its_module_worker_and_flags():
    assert measuring.worker_command("benchmarks.x", "ours", seq=64, hf_dir=None,
                                    profile=True, predict=False, model_dir="") == [
        sys.executable, "-m", "benchmarks.x", "--worker", "ours", "--seq", "64",
        "--profile", "--model_dir", ""]


def test_paired_ratio_is_the_median_of_round_by_round_ratios():
    a = [{"rate": 3.0}, {"rate": 2.0}, {"rate": 6.0}]
    b = [{"rate": 1.0}, {"rate": 2.0}, {"rate": 2.0}]
    assert measuring.paired_ratio(a, b, "rate") == "3.00 (1.00-3.00)"
    assert measuring.paired_ratio(a[:1], b[:1], "rate") == "3.00"
    assert measuring.paired_ratio(a, [{}], "rate") == "-"


def test_bench_train_counts_real_tokens_of_real_rows_only():
    bench_train = _load_script("bench_train")
    examples = TokenizedExamples(
        {"input_ids": [np.arange(1, n + 1) for n in (3, 9, 5)],
         "segment_ids": [np.zeros(n, np.int32) for n in (3, 9, 5)]},
        np.array([0, 1, 0]))
    # Tower 0: rows 0 and 1 (dynamic: padded to 16); tower 1: row 2 and a filler row.
    micro_batch = [make_batch(examples, [0, 1], "dynamic"),
                   make_batch(examples, [2], 64, batch_size=2)]
    assert bench_train.batch_lengths(micro_batch) == [([3, 9], 16), ([5], 64)]


def _counting_build_training(monkeypatch) -> list:
    """Every call of bert_ad.driver.build_training the benchmarks make, recorded."""
    from benchmarks import training
    calls = []

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return driver.build_training(*args, **kwargs)
    monkeypatch.setattr(training, "build_training", counted)
    return calls


def test_bench_train_times_the_training_the_driver_builds(tmp_path, monkeypatch):
    bench_train = _load_script("bench_train")
    model = tiny_model(str(tmp_path / "model"))
    save_initial_checkpoint(str(tmp_path / "model" / "bert_model.ckpt"), model.bert_config())
    calls = _counting_build_training(monkeypatch)
    args = argparse.Namespace(model_dir=str(tmp_path / "model"), data_dir=SAMPLE_SENTIMENT,
                              seq=32, padding="dynamic", towers=2, batch=3, steps=2,
                              warmup=1, variant="unfused_adamw", no_peak=True)
    result = bench_train.worker_ours(args)
    # Through the driver's one hook, with the variant's setting no flag has.
    assert calls == [{"fused_optimizer": False}]
    assert (result["steps"], result["towers"], len(result["step_sec"])) == (2, 2, 2)
    assert result["examples_per_sec"] > 0 and math.isfinite(result["final_loss"])
    # The timed steps' rows are the sample's sentences, padded to a multiple of 8 at most.
    assert 0 < result["real_tokens"] <= result["padded_tokens"]
    assert all(n % 8 == 0 and n <= 32 for n in result["padded_lengths"])


def test_bench_memory_times_the_training_the_driver_builds_on_full_windows(
        tmp_path, monkeypatch):
    bench_memory = _load_script("bench_memory")
    model = tiny_model(str(tmp_path / "model"))
    calls = _counting_build_training(monkeypatch)
    with open(model.vocab_file, encoding="utf-8") as f:
        words = [line.strip() for line in f if line.strip().isalpha()]
    # Running text of the tiny vocab's words, cut into full windows of 16 pieces.
    monkeypatch.setattr(bench_memory, "texts_of", lambda name: [" ".join(words * 20)])
    # The matmul ceiling measured on small products (2048^3 takes seconds).
    monkeypatch.setattr(flops, "measure_tf_matmul",
                        functools.partial(flops.measure_tf_matmul, 64, 64, 64, repeats=1))
    monkeypatch.setattr(flops, "measure_numpy_matmul",
                        functools.partial(flops.measure_numpy_matmul, 64, repeats=1))
    args = argparse.Namespace(model="minilm", model_dir=str(tmp_path / "model"), seq=16,
                              batch=2, steps=2, warmup=1, profile=True,
                              precision="fp32")
    result = bench_memory.worker_ours(args, recompute=True)
    assert calls == [{"fused_optimizer": True}]
    assert (result["impl"], result["seq"], result["steps"]) == ("ours_recompute", 16, 2)
    assert result["examples_per_sec"] > 0 and math.isfinite(result["final_loss"])
    assert 0 < result["start_rss_mb"] <= result["peak_rss_mb"]
    assert sum(result["profile"]["by_category"].values()) > 0
    assert 0 < result["useful_flops_per_sec"] and 0 < result["matmul_flops_per_sec"]


def test_bench_train_plan_has_every_comparison_the_tables_need():
    bench_train = _load_script("bench_train")

    class Args:
        quick, skip_hf, seqs = False, False, "64,128"
    plan = bench_train.suite_plan(Args)
    assert len(plan) == len(set(plan))
    for seq in (64, 128):
        for padding in bench_train.PADDINGS:
            assert ("ours", seq, padding, 1, 16) in plan
            assert ("hf", seq, padding, 1, 16) in plan
            assert ("ours", seq, padding, 2, 16) in plan
    for padding in bench_train.PADDINGS:  # the multi-tower overhead pairs
        assert ("ours", 64, padding, 1, 32) in plan
    Args.quick, Args.skip_hf = True, True
    assert {run[0] for run in bench_train.suite_plan(Args)} == {"ours"}


# Every module with a command line (the others take positional arguments: below).
BENCHMARKS = ("benchmarks.bench_train", "benchmarks.bench_predict", "benchmarks.bench_export",
              "benchmarks.bench_memory", "benchmarks.bench_features",
              "benchmarks.exchange_bytes", "benchmarks.model_sizes",
              "benchmarks.cpu_apply_time", "benchmarks.gpu_scaling_model",
              "studies.accuracy_study", "studies.long_text_study", "studies.squad_run",
              "studies.precision_study", "studies.features_study", "studies.ner_pieces",
              "benchmarks.bench_onnx", "studies.int8_study", "studies.distill_study",
              "benchmarks.distill_speed", "studies.int8_tasks_study")


def test_every_benchmark_and_study_runs_as_a_module_of_the_checkout(tmp_path):
    # From another folder with this checkout on PYTHONPATH, as scripts/*.sh run them.
    runs = run_many({name: [name, "--help"] for name in BENCHMARKS},
                    run=lambda argv: run_module(argv[0], argv[1:], cwd=str(tmp_path)))
    for run in runs.values():
        assert run.returncode == 0 and run.stdout.startswith("usage:"), run.describe()
    report = run_module("studies.domain_pretrain_report", cwd=str(tmp_path))
    assert report.returncode == 1, report.describe()
    assert report.stderr.strip() == (
        "python -m studies.domain_pretrain_report OUTPUT_ROOT REVIEWS_DIR")
    # Their workers start as `python -m WORKER_MODULE`: the module itself.
    for name in ("benchmarks.bench_train", "benchmarks.bench_predict",
                 "benchmarks.bench_export", "benchmarks.bench_memory",
                 "benchmarks.bench_features", "benchmarks.bench_onnx", "studies.precision_study",
                 "studies.squad_run"):
        assert importlib.import_module(name).WORKER_MODULE == name


def test_the_studies_and_benchmarks_share_one_helper_module_outside_the_package():
    # Not shipped: bert_ad imports none of them, and the helpers are one module.
    assert not os.path.exists(os.path.join(REPO, "bert_ad", "tools", "benchmarking.py"))
    assert os.path.dirname(measuring.__file__) == os.path.join(REPO, "benchmarks")
    for folder in ("benchmarks", "studies"):
        for name in os.listdir(os.path.join(REPO, folder)):
            if not name.endswith(".py") or name == "measuring.py":
                continue
            with open(os.path.join(REPO, folder, name), encoding="utf-8") as f:
                source = f.read()
            for copy in ('"-m", WORKER_MODULE', "def peak_rss_mb(", "def run_measured(",
                         "def print_machine(", "def hf_dir_for(", "def load_runs(",
                         "def append_run(", "def cpu_line(", "getrusage("):
                assert copy not in source, f"{folder}/{name}: {copy} (use measuring.py's)"


WORKER = ("import json, os, sys, time; started = time.time(); time.sleep(1.0); "
          "print('BENCH_RESULT ' + json.dumps({'cores': sorted(os.sched_getaffinity(0)), "
          "'started': started, 'ended': time.time(), 'name': sys.argv[1]}))")


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two CPU cores")
def test_side_by_side_workers_run_at_once_each_on_its_core():
    first, second = sorted(os.sched_getaffinity(0))[:2]
    a, b = measuring.run_workers_side_by_side(
        [[sys.executable, "-c", WORKER, "a"], [sys.executable, "-c", WORKER, "b"]],
        [second, first])
    assert (a["name"], a["cores"]) == ("a", [second])
    assert (b["name"], b["cores"]) == ("b", [first])
    assert max(a["started"], b["started"]) < min(a["ended"], b["ended"])   # overlapping
    failed, ok = measuring.run_workers_side_by_side(
        [[sys.executable, "-c", "print('no result'); raise SystemExit(3)"],
         [sys.executable, "-c", WORKER, "c"]], [first, second])
    assert "exited 3 without a result" in failed["error"] and "no result" in failed["error"]
    assert ok["name"] == "c"
    with pytest.raises(ValueError, match="2 commands for 1 cores"):
        measuring.run_workers_side_by_side([["true"], ["true"]], [first])


def test_bench_memory_refuses_option_mixes_it_cannot_run():
    for argv, expected in (
            (["--predict", "--impls", "ours,hf_checkpointing"],
             "--predict: hf_checkpointing only train; use --impls ours,hf"),
            (["--predict", "--profile"],
             "--predict times scoring; --profile and --windows_run time training"),
            (["--paired", "--impls", "ours,hf,ours_recompute"],
             "--paired runs two --impls (e.g. ours,hf) at one --precisions")):
        run = run_module("benchmarks.bench_memory", argv)
        assert run.returncode == 2, run.describe()
        assert run.stderr.strip().splitlines()[-1].endswith(expected), run.describe()


def test_bench_train_reads_the_bucket_window_without_importing_tensorflow():
    from bert_ad.data.batching import BUCKET_WINDOW_BATCHES
    assert _load_script("bench_train").bucket_window_batches() == BUCKET_WINDOW_BATCHES
    # The PyTorch worker reads it: batching must not pull TensorFlow in.
    code = ("import sys; import bert_ad.data.batching; "
            "print('tensorflow' in sys.modules)")
    out = run_command([sys.executable, "-c", code]).check()
    assert out.stdout.strip() == "False"


def test_squad_run_hf_adam_follows_our_learning_rate_schedule_step_for_step():
    # hf-adam claims the same update as ours*-adam: its LambdaLR factor times the
    # peak must be the rate run_squad_mgpu.py's graph uses at every step.
    from studies.squad_run import google_schedule
    from bert_ad.parallel.learning_rate import learning_rate_schedule
    base, total, warmup = 5e-5, 368, 36
    factor = google_schedule(total, warmup)
    steps = list(range(0, total + 3))
    with tf.Graph().as_default():
        step = tf.placeholder(tf.int64, [])
        lr = learning_rate_schedule(step, base, total, warmup)
        with tf.Session() as sess:
            ours = [sess.run(lr, {step: s}) for s in steps]
    np.testing.assert_allclose([base * factor(s) for s in steps], ours, rtol=1e-5, atol=1e-12)
    assert factor(0) == 0.0 and factor(warmup) == pytest.approx(1 - warmup / total)


def test_hf_adamw_puts_the_head_at_its_multiplied_rate_under_the_schedule():
    torch = pytest.importorskip("torch", reason="PyTorch is only in the TF2 lane")
    model = torch.nn.ModuleDict({"bert": torch.nn.ModuleDict({
        "dense": torch.nn.Linear(4, 4), "LayerNorm": torch.nn.LayerNorm(4)}),
        "qa_outputs": torch.nn.Linear(4, 2)})
    optimizer = measuring.hf_adamw(model, 1e-3, 0.01, head_prefix="qa_outputs.",
                                   head_multiplier=30.0)
    # The schedule scales each group from its own rate (run_squad_mgpu.py's graph
    # multiplies the head's update by the same factor at every step).
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 0.5)
    named = dict(model.named_parameters())
    rate = {name: (group["lr"], group["weight_decay"]) for group in optimizer.param_groups
            for name, p in named.items() if any(p is q for q in group["params"])}
    assert sorted(rate) == sorted(named)
    assert rate == {"bert.dense.weight": (5e-4, 0.01), "bert.dense.bias": (5e-4, 0.0),
                    "bert.LayerNorm.weight": (5e-4, 0.0), "bert.LayerNorm.bias": (5e-4, 0.0),
                    "qa_outputs.weight": (pytest.approx(0.015), 0.01),
                    "qa_outputs.bias": (pytest.approx(0.015), 0.0)}
    assert scheduler.get_last_lr()[0] == 5e-4
    plain = measuring.hf_adamw(model, 1e-3, 0.0)
    assert {g["lr"] for g in plain.param_groups} == {1e-3}


def test_squad_run_pads_hugging_face_batches_with_the_padding_piece():
    # Padding with id 0 put <s> ([CLS] of the Chinese default's piece list) on every
    # padding position of the reference's batches (issue 43).
    from studies.squad_run import padded_ids
    from bert_ad.data.batching import TokenizedExamples
    examples = TokenizedExamples({"input_ids": [np.array([0, 7, 2]), np.array([0, 8, 9, 5, 2])],
                                  "segment_ids": [np.array([0, 0, 1]), np.array([0, 0, 1, 1, 1])]})
    batch = padded_ids(examples, np.array([0, 1]), pad_id=1)
    np.testing.assert_array_equal(batch["input_ids"], [[0, 7, 2, 1, 1], [0, 8, 9, 5, 2]])
    np.testing.assert_array_equal(batch["token_type_ids"], [[0, 0, 1, 0, 0], [0, 0, 1, 1, 1]])
    np.testing.assert_array_equal(batch["attention_mask"], [[1, 1, 1, 0, 0], [1] * 5])


def test_squad_run_few_unanswerable_split_keeps_every_answer_and_a_tenth_without():
    from studies.squad_run import few_unanswerable, few_unanswerable_figures
    # 18 with an answer, 30 without: 18 / 0.9 = 20 questions, 2 without (the 1st
    # and the 16th unanswerable, evenly spaced), in file order.
    golds = {f"q{i:02d}": (["甲"] if i % 8 < 3 else []) for i in range(48)}
    ids = few_unanswerable(golds)
    unanswerable = [q for q in golds if not golds[q]]
    assert ids == [q for q in golds if golds[q] or q in (unanswerable[0], unanswerable[15])]
    # Everything answered right but the two unanswerable ones (answered "乙"; their
    # null odds 1, the answerable ones' -1): F1 18/20 at 0, 20/20 at threshold -1.
    spans = {q: "甲" if golds[q] else "乙" for q in golds}
    odds = {q: -1.0 if golds[q] else 1.0 for q in golds}
    figures = few_unanswerable_figures(golds, spans, odds, spans)
    assert figures["eval_few_unanswerable_f1"] == pytest.approx(90.0)
    assert (figures["eval_few_unanswerable_best_f1"],
            figures["eval_few_unanswerable_best_f1_thresh"]) == pytest.approx((100.0, -1.0))
    assert figures["eval_few_unanswerable_no_answer_questions"] == 2


def test_squad_run_dev_questions_follow_the_training_ones_in_file_order(tmp_path):
    from studies.squad_run import subset
    squad = {"version": "v2.0", "data": [
        {"title": f"t{a}", "paragraphs": [
            {"context": "甲乙", "qas": [{"id": f"a{a}p{p}q{q}", "question": "?", "answers": [],
                                        "is_impossible": True} for q in range(2)]}
            for p in range(2)]} for a in range(2)]}
    source = tmp_path / "train.json"
    source.write_text(json.dumps(squad), encoding="utf-8")

    def ids(path):
        with open(path, encoding="utf-8") as f:
            return [q["id"] for a in json.load(f)["data"] for p in a["paragraphs"]
                    for q in p["qas"]]
    assert ids(subset(str(source), 3, str(tmp_path / "train3.json"))) == [
        "a0p0q0", "a0p0q1", "a0p1q0"]
    assert ids(subset(str(source), 3, str(tmp_path / "dev.json"), skip=3)) == [
        "a0p1q1", "a1p0q0", "a1p0q1"]


def test_squad_run_test_figures_answer_at_zero_at_the_run_threshold_and_at_the_best():
    from studies.squad_run import answers_at, test_figures
    golds = {"a": ["甲"], "b": [], "c": ["乙丙"]}
    spans = {"a": "甲", "b": "丁", "c": "乙丙"}
    odds = {"a": -1.0, "b": 2.0, "c": 0.5}
    # At 0, c's null odds (0.5) exceed it: "" for a gold answer, F1 2/3; answered at
    # threshold 1 (the run's), every question is right.
    assert answers_at(0.0, odds, spans) == {"a": "甲", "b": "", "c": ""}
    figures = test_figures(golds, answers_at(1.0, odds, spans), odds, spans)
    assert figures["test_f1_at_0"] == pytest.approx(200 / 3)
    assert figures["test_has_answer_f1_at_0"] == pytest.approx(50.0)
    assert (figures["test_f1"], figures["test_has_answer_f1"]) == pytest.approx((100.0, 100.0))
    assert figures["test_best_f1"] == pytest.approx(100.0)
    assert 0.5 <= figures["test_best_f1_thresh"] < 2.0


def test_squad_run_calibration_says_where_the_null_odds_lie():
    from studies.squad_run import calibration_figures
    golds = {"a": ["甲"], "b": ["乙"], "c": ["丙"], "d": [], "e": []}
    odds = {"a": 1.5, "b": -0.5, "c": 0.5, "d": 3.0, "e": 2.0}
    assert calibration_figures(golds, odds) == pytest.approx({
        "test_answerable_null_odds_median": 0.5, "test_unanswerable_null_odds_median": 2.5,
        "test_answerable_over_0": 2 / 3})


def test_squad_run_nodev_runs_train_alike_but_choose_the_threshold_on_the_training_questions():
    from studies.squad_run import ours_command
    s = {"vocab_file": "v.tsv", "do_lower_case": True, "model_dir": "m", "train_file": "t.json",
         "test_file": "test.json", "dev_file": "dev.json", "batch": 32, "learning_rate": 5e-5,
         "epochs": 2.0, "max_seq_length": 128, "doc_stride": 64, "max_query_length": 16,
         "seed": 2, "head_learning_rate_multiplier": 100.0}
    with_dev = ours_command(s, "ours2-adam", "out")
    without = ours_command(s, "ours2-adam-nodev", "out")
    assert "--dev_file=dev.json" in with_dev and "--do_eval" in with_dev
    # No dev file and no --do_eval (with --do_eval the predict file would be the dev file).
    assert without == [c for c in with_dev if c not in ("--dev_file=dev.json", "--do_eval")]
    assert {"--n_gpus=2", "--train_batch_size=16", "--optimizer=adam"} <= set(without)
    one = ours_command(s, "ours1-adam-nodev", "out")
    assert {"--n_gpus=1", "--train_batch_size=32", "--optimizer=adam"} <= set(one)
    assert "--optimizer=adamw" in ours_command(s, "ours1", "out")


def test_squad_run_grid_puts_each_run_and_seed_beside_the_others():
    from studies.squad_run import grid_report
    settings = {"dev_file": "d", "head_learning_rate_multiplier": 100.0}

    def record(run, size, seed, at_0, default, best):
        return {"status": "ok", "run": run, "settings": dict(settings, train_questions=size,
                                                              seed=seed),
                "eval": {"test_f1_at_0": at_0, "test_f1": default, "test_best_f1": best}}
    records = [record("ours1-adam-nodev", 2000, 2, 80.0, 89.5, 90.0),
               record("ours2-adam", 2000, 2, 89.0, 89.75, 90.0),
               record("ours2-adam", 1000, 3, 72.0, 72.25, 72.5),
               dict(record("ours2-adam", 1000, 3, 0.0, 0.0, 0.0), status="failed"),
               dict(record("ours2-adam", 1000, 2, 1.0, 1.0, 1.0),
                    settings=dict(settings, head_learning_rate_multiplier=30.0,
                                  train_questions=1000, seed=2))]
    lines = grid_report(records, 100.0).splitlines()
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert cells[0] == ["training questions", "ours2-adam seed 2", "ours2-adam seed 3",
                        "ours1-adam-nodev seed 2", "ours1-adam-nodev seed 3"]
    assert cells[2] == ["1,000", "not run", "0.50 / 0.25 (72.5)", "not run", "not run"]
    assert cells[3] == ["2,000", "1.00 / 0.25 (90.0)", "not run", "10.00 / 0.50 (90.0)",
                        "not run"]


def test_the_op_profile_sums_op_types_by_kind_with_their_shares():
    from benchmarks import onnx_op_profile
    results = {"int8": {"ms_a_call": 10.5, "op_ms": {
        "MatMulIntegerToFloat": 5.0, "QAttention": 3.0, "BiasGelu": 1.0, "Reshape": 1.0}},
        "fp32": {"ms_a_call": 20.0, "op_ms": {"MatMul": 15.0, "Softmax": 5.0}}}
    assert onnx_op_profile.kinds_table("32x24", results) == [
        ["32x24", "int8 matmul", "8.00 (80%)", "-"],
        ["32x24", "float matmul", "-", "15.00 (75%)"],
        ["32x24", "activation (GELU)", "1.00 (10%)", "-"],
        ["32x24", "softmax", "-", "5.00 (25%)"],
        ["32x24", "the rest (add, mul, reshape, transpose, ...)", "1.00 (10%)", "-"],
        ["32x24", "**a call (model_run, median)**", "**10.50**", "**20.00**"]]


def test_the_op_profile_reads_onnx_runtimes_own_profile_of_the_counted_calls(tmp_path):
    pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    from benchmarks import onnx_op_profile
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["rows", 8])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["rows", 8])
    out = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["rows", 3])
    weight = numpy_helper.from_array(np.ones((8, 3), np.float32), "weight")
    graph = helper.make_graph([
        helper.make_node("Mul", ["input_ids", "attention_mask"], ["kept"]),
        helper.make_node("Cast", ["kept"], ["as_float"], to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["as_float", "weight"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["scores"])], "tiny", [ids, mask], [out],
        [weight])
    path = str(tmp_path / "tiny.onnx")
    with open(path, "wb") as f:
        f.write(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
                .SerializeToString())
    found = onnx_op_profile.profile(path, np.arange(16).reshape(2, 8), threads=1, warmup=2,
                                    calls=1)
    assert set(found["op_ms"]) == {"Mul", "Cast", "MatMul", "Softmax"}
    # The counted call's nodes only (not the warm-up's), inside its own time.
    assert 0 < sum(found["op_ms"].values()) <= found["ms_a_call"]
