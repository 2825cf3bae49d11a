"""Several workers for real: TensorFlow servers on loopback ports, CPU towers.

* The collective layer (bert_ad/parallel/collective.py) between three workers in one
  subprocess: packed gradient means (dense, sparse, None), float16 exchange,
  the chief's broadcast, checksums and all-gather, against numpy.
* run_classifier_mgpu.py as users run it: 2 workers x 1 tower (started with
  scripts/launch_local_workers.sh) end with the same weights and optimizer
  state as 1 worker x 2 towers and as 1 worker x 1 tower with the double
  batch (dropout off, relative difference <= 5e-5 after 5 Adam steps, see
  STEPS_TOLERANCE); run_pretraining_mgpu.py
  likewise with 2 workers and 2 towers, accumulating 2 micro-batches.
* A killed worker makes the other stop with a one-line error within its
  timeout; relaunching both resumes from the chief's newest checkpoint, and
  only the chief wrote to its output dir.
* Bad cluster input (malformed TF_CONFIG, task index out of range, a port in
  use, a worker that never comes up, workers with different flags) is one
  `error:` line, exit 2.

Every subprocess is killed in teardown; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

import numpy as np
import pytest

from bert_ad.compat import IS_TF1, tf
from helpers import (
    REPO, SAMPLE_SENTIMENT as SAMPLE, TIMEOUT, Processes, assert_one_error_line, flag_args,
    head_graph, launcher_env, logged_run, read_text, run_launcher_in_process,
    sample_sentiment_texts, save_initial_checkpoint, tiny_model, wait)

TESTS = os.path.join(REPO, "tests")
CLASSIFIER = os.path.join(REPO, "run_classifier_mgpu.py")
PRETRAINING = os.path.join(REPO, "run_pretraining_mgpu.py")
LAUNCHER = os.path.join(REPO, "scripts", "launch_local_workers.sh")
BATCH = 4              # per tower
STEPS = 5              # 40 training rows, global batch 8, 1 epoch
STEP_TIMEOUT = 10      # --collective_timeout_s in the fault test
START_TIMEOUT = 90     # --cluster_start_timeout_s (first steps included) on a busy box


# ---------------------------------------------------------------------------
# Loopback clusters.


def free_ports(n: int) -> list:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(ports: list, index: int) -> str:
    return json.dumps({"cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
                       "task": {"type": "worker", "index": index}})


# ---------------------------------------------------------------------------
# The collective layer, three workers in one process.


def threaded_workers(workers: int, out_path: str,
                     worker: Callable[[int, str, str, object], dict]) -> None:
    """Run in a subprocess: `workers` TensorFlow servers on loopback ports and a
    thread per worker calling worker(index, its CPU device, its session
    target, its session config) -> {name: array}; saves every worker's arrays
    to `out_path` as "index/name". Exits naming the workers that failed."""
    import threading

    from bert_ad.compat import collectives

    hosts = [f"127.0.0.1:{p}" for p in free_ports(workers)]
    configs, servers = [], []
    for i in range(workers):
        config = tf.ConfigProto()
        collectives.configure_collectives(config, "/job:worker/replica:0/task:0",
                                     f"/job:worker/task:{i}", "ring")
        configs.append(config)
        servers.append(collectives.start_server(hosts, i, config))
    results, errors = [None] * workers, []

    def run(i):
        try:
            results[i] = worker(i, f"/job:worker/replica:0/task:{i}/device:CPU:0",
                                servers[i].target, configs[i])
        except Exception as e:  # reported by the main thread
            errors.append(f"worker {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if errors or any(r is None for r in results):
        raise SystemExit("; ".join(errors) or "a worker did not finish")
    np.savez(out_path, **{f"{i}/{k}": v for i, r in enumerate(results) for k, v in r.items()})


def run_check(tmp_path, check: str) -> dict:
    """This file's function `check`(out_path) run in a fresh Python (servers
    cannot be stopped, so they live and die with it); the arrays it saved."""
    out = str(tmp_path / "results.npz")
    code = f"from test_multiworker import {check}; {check}({out!r})"
    tests_first = os.pathsep.join((TESTS, launcher_env()["PYTHONPATH"]))
    with Processes() as processes:
        process = processes.start([sys.executable, "-c", code], str(tmp_path / "log"),
                                  PYTHONPATH=tests_first)
        assert wait(process) == 0, read_text(process.log_path)
    return dict(np.load(out, allow_pickle=True))


def collective_check(out_path: str) -> None:
    """Run in a subprocess: 3 workers exchange; save what each got."""
    from bert_ad.parallel.collective import CollectiveKeys, Collectives, variables_checksum

    workers = 3

    def worker(i, device, target, config):
        with tf.Graph().as_default():
            collectives = Collectives(workers, device, "CPU", CollectiveKeys())
            inputs = collective_inputs(i)
            with tf.device(device):
                grads = [tf.constant(inputs["dense"]), None,
                         tf.IndexedSlices(tf.constant(inputs["slice_values"]),
                                          tf.constant(inputs["slice_indices"]),
                                          tf.constant([6, 2])),
                         tf.constant(inputs["vector"])]
                weights = tf.get_variable("weights", initializer=inputs["weights"])
                step = tf.get_variable("step", initializer=np.int64(10 + i))
            # 40-byte packs: the three gradients travel in three packs.
            mean = collectives.mean_gradients(grads, pack_bytes=40)
            half = (collectives.mean_gradients(grads, pack_bytes=1 << 20, fp16=True)
                    if not IS_TF1 else [])
            broadcast = collectives.broadcast_variables([weights, step], i == 0,
                                                        pack_bytes=40)
            with tf.control_dependencies([broadcast]):
                checksum = variables_checksum([weights, step])
            checksums = collectives.all_gather(checksum)
            gathered = collectives.all_gather(tf.constant([i + 0.5], tf.float64))
            fetch = {"dense": mean[0], "slices": mean[2], "vector": mean[3],
                     "checksums": checksums, "gathered": gathered}
            if half:
                fetch.update(half_dense=half[0], half_slices=half[2])
            assert mean[1] is None
            shapes = [g.shape.as_list() for g in (mean[0], mean[2], mean[3])]
            with tf.Session(target, config=config) as session:
                session.run(tf.global_variables_initializer())
                values = session.run(fetch)
                values["weights"], values["step"] = session.run([weights, step])
        values["shapes"] = np.array(shapes, dtype=object)
        return values

    threaded_workers(workers, out_path, worker)


def collective_inputs(worker: int) -> dict:
    rng = np.random.RandomState(worker)
    return {"dense": rng.randn(3, 2).astype(np.float32),
            "slice_values": rng.randn(3, 2).astype(np.float32),
            "slice_indices": np.array([worker, 4, 4], np.int32),
            "vector": rng.randn(7).astype(np.float32),
            "weights": rng.randn(4, 3).astype(np.float32)}


def test_collectives_between_three_workers(tmp_path):
    got = run_check(tmp_path, "collective_check")
    inputs = [collective_inputs(w) for w in range(3)]
    dense = np.mean([x["dense"] for x in inputs], axis=0)
    slices = np.zeros((6, 2), np.float32)
    for x in inputs:
        np.add.at(slices, x["slice_indices"], x["slice_values"])
    slices /= 3
    vector = np.mean([x["vector"] for x in inputs], axis=0)
    for w in range(3):
        np.testing.assert_allclose(got[f"{w}/dense"], dense, rtol=1e-6)
        np.testing.assert_allclose(got[f"{w}/slices"], slices, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got[f"{w}/vector"], vector, rtol=1e-6)
        assert got[f"{w}/shapes"].tolist() == [[3, 2], [6, 2], [7]]
        if not IS_TF1:
            np.testing.assert_allclose(got[f"{w}/half_dense"], dense, rtol=2e-3, atol=2e-3)
            np.testing.assert_allclose(got[f"{w}/half_slices"], slices, rtol=2e-3,
                                       atol=2e-3)
        # The chief's variables everywhere, checked by every worker's checksum.
        np.testing.assert_array_equal(got[f"{w}/weights"], inputs[0]["weights"])
        assert got[f"{w}/step"] == 10
        np.testing.assert_array_equal(got[f"{w}/checksums"],
                                      np.tile(got["0/checksums"][:3], 3))
        np.testing.assert_array_equal(got[f"{w}/gathered"], [0.5, 1.5, 2.5])
    # Not vacuous: the workers started from different values.
    assert not np.allclose(inputs[1]["weights"], inputs[0]["weights"])


def nan_on_one_worker_check(out_path: str) -> None:
    """Run in a subprocess: 2 workers train one step; worker 1's loss is NaN.

    The NaN sits in a term without gradient (as an overflowed loss value can),
    so every gradient stays finite: only a decision from cluster-wide values
    makes both workers skip the update alike (their weights stay equal); with
    finite losses both then apply the next one.
    """
    from bert_ad.parallel.collective import CollectiveKeys, Collectives
    from bert_ad.parallel.towers import plan_devices
    from bert_ad.parallel.train_graph import TrainSettings, build_train_graph

    workers = 2

    def worker(i, device, target, config):
        with tf.Graph().as_default():
            plan = plan_devices(1, cuda_visible_devices="")
            plan.tower_devices = [device]
            plan.variable_device = device
            collectives = Collectives(workers, device, "CPU", CollectiveKeys())

            def tower_loss(features, tower):
                w = tf.get_variable("w", [3], initializer=tf.constant_initializer(0.5))
                return (tf.reduce_mean(tf.square(w * features["x"] - 1.0))
                        + tf.stop_gradient(tf.reduce_sum(features["noise"])))

            graph = build_train_graph(
                plan, {"x": (tf.float32, [None]), "noise": (tf.float32, [None])},
                tower_loss,
                TrainSettings(learning_rate=0.1, num_train_steps=10, num_workers=2),
                cross_worker_reduce=lambda g: collectives.mean_gradients(g, 1 << 20))
            w = [v for v in tf.global_variables() if v.name.startswith("w")][0]
            inputs = graph.placeholders[0]
            x = np.array([1.0, 2.0, 3.0], np.float32)
            noise = np.array([np.nan if i == 1 else 0.0], np.float32)
            fetch = {"applied": graph.train_step, "all_finite": graph.all_finite}
            with tf.Session(target, config=config) as session:
                session.run(tf.global_variables_initializer())
                skipped = session.run(fetch, {inputs["x"]: x, inputs["noise"]: noise})
                w_after_skip = session.run(w)
                applied = session.run(fetch, {inputs["x"]: x,
                                              inputs["noise"]: np.zeros(1, np.float32)})
                w_after_apply = session.run(w)
            return {"skip_applied": skipped["applied"],
                    "skip_finite": skipped["all_finite"],
                    "w_after_skip": w_after_skip,
                    "apply_applied": applied["applied"],
                    "w_after_apply": w_after_apply}

    threaded_workers(workers, out_path, worker)


def test_a_nan_loss_on_one_worker_makes_every_worker_skip_alike(tmp_path):
    got = run_check(tmp_path, "nan_on_one_worker_check")
    for w in range(2):
        # Worker 0's own loss was finite, yet it skips with worker 1.
        assert not got[f"{w}/skip_applied"] and not got[f"{w}/skip_finite"]
        np.testing.assert_array_equal(got[f"{w}/w_after_skip"], [0.5, 0.5, 0.5])
        assert got[f"{w}/apply_applied"]
        np.testing.assert_array_equal(got[f"{w}/w_after_apply"], got["0/w_after_apply"])
    assert not np.allclose(got["0/w_after_apply"], 0.5)  # the second step did apply


# ---------------------------------------------------------------------------
# The classifier CLI on a tiny model.


class Setup:
    """Paths and flags of the tiny model and data."""


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Setup:
    """Tiny BERT without dropout, a vocab of the sample's words, a shared start."""
    from bert_ad.model.heads import FEATURE_SPEC, classifier

    s = Setup()
    s.root = str(tmp_path_factory.mktemp("multiworker"))
    # One encoder layer: what crosses the cluster is every variable's gradient, whatever
    # the depth, and each worker builds its graph in about half the time of two.
    model = tiny_model(s.root, sample_sentiment_texts(("train", "dev")),
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                       initializer_range=0.2, num_hidden_layers=1)
    s.vocab_file, s.config_file = model.vocab_file, model.config_file
    s.data_dir = os.path.join(s.root, "data")
    os.makedirs(s.data_dir)
    for split in ("train", "dev"):
        shutil.copy(os.path.join(SAMPLE, f"{split}.tsv"), s.data_dir)
    # Every run starts from these weights (a 1- and a 2-tower graph would
    # draw different initial values from the same seed).
    s.init_checkpoint = save_initial_checkpoint(
        os.path.join(s.root, "init", "model.ckpt"), model.bert_config(),
        lambda config: head_graph(config, FEATURE_SPEC, True, lambda bert, f: classifier(
            bert, f, 2, is_training=True)),
        seed=7)
    s.flags = {
        "task_name": "sentiment", "data_dir": s.data_dir, "vocab_file": s.vocab_file,
        "bert_config_file": s.config_file, "init_checkpoint": s.init_checkpoint,
        "max_seq_length": 64, "train_batch_size": BATCH, "num_train_epochs": 1,
        "learning_rate": 1e-3, "log_every_n_steps": 1, "do_train": True,
        "cluster_start_timeout_s": START_TIMEOUT,
        # One global batch split three ways (workers, towers, one big batch):
        # compared at one learning rate, whatever the default scaling does.
        "lr_scaling": "none",
    }
    return s


def checkpoint_values(prefix: str) -> dict:
    return {name: tf.train.load_variable(prefix, name)
            for name, _ in tf.train.list_variables(prefix)}


# Five Adam steps of float32 sums taken in different orders (one tower of 2B rows, two of
# B, two workers) leave rounding noise of up to lr x 1e-4 in weights whose gradient
# nearly cancels (Adam divides by its root mean square; TF 1.15 measured 1.6e-5 of the
# largest value on a LayerNorm beta that started at zero). A real defect (a tower's
# gradient lost, an average over the wrong count) moves weights by about lr, relative
# differences above 1e-2: the bound is 3x the noise measured and 200x below a defect.
STEPS_TOLERANCE = 5e-5


def relative_difference(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-6))


def pretraining_flags(root: str) -> dict:
    """A tiny MLM+NSP pretraining job on records written like test_pretraining's,
    from one shared starting point."""
    from test_pretraining import CONFIG, PREDICTIONS, SEQ, write_records

    from bert_ad.model.modeling import BertConfig
    from bert_ad.tasks.pretraining import FEATURE_SPEC, pretraining_tower

    os.makedirs(os.path.join(root, "shards"))
    for shard in range(2):
        write_records(os.path.join(root, "shards", f"shard-{shard}.tfrecord"), 40,
                      seed=shard + 1)
    values = dict(CONFIG, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    config = os.path.join(root, "bert_config.json")
    with open(config, "w") as f:
        json.dump(values, f)
    init_checkpoint = save_initial_checkpoint(
        os.path.join(root, "init", "model.ckpt"), BertConfig.from_dict(values),
        lambda bert_config: head_graph(bert_config, FEATURE_SPEC, True, lambda bert, f:
                                       pretraining_tower(bert, f, True)),
        seed=7)
    return {"bert_config_file": config, "input_file": os.path.join(root, "shards"),
            "init_checkpoint": init_checkpoint,
            "max_seq_length": SEQ, "max_predictions_per_seq": PREDICTIONS,
            "train_batch_size": BATCH, "learning_rate": 1e-3, "num_warmup_steps": 2,
            "num_train_steps": STEPS, "log_every_n_steps": 1, "do_train": True,
            "gradient_accumulation_steps": 2, "cluster_start_timeout_s": START_TIMEOUT}


@pytest.fixture(scope="module")
def equivalence_runs(setup):
    """Side by side: the classifier with 2 workers x 1 tower, 1 worker x 2 towers and
    1 worker x 1 tower x 8; pretraining with 2 workers and with 2 towers."""
    root = os.path.join(setup.root, "equivalence")
    os.makedirs(root)
    runs = {
        "two_workers": (CLASSIFIER, 2, dict(setup.flags, n_gpus=1)),
        "two_towers": (CLASSIFIER, 1, dict(setup.flags, n_gpus=2)),
        "double_batch": (CLASSIFIER, 1, dict(setup.flags, n_gpus=1,
                                             train_batch_size=2 * BATCH)),
    }
    if not IS_TF1:  # the tf1 lane compares the classifier's only (conftest TF1_LANE_TESTS)
        pretraining = pretraining_flags(os.path.join(root, "pretraining_data"))
        runs.update({
            # With accumulation: the exchange happens after the 2nd micro-batch.
            "pretraining_two_workers": (PRETRAINING, 2, dict(pretraining, n_gpus=1)),
            "pretraining_two_towers": (PRETRAINING, 1, dict(pretraining, n_gpus=2)),
        })
    logs = {}
    with Processes() as processes:
        started = {}
        for name, (script, workers, flags) in runs.items():
            flags["output_dir"] = os.path.join(root, name)
            if workers > 1:
                logs[name] = os.path.join(root, f"{name}_logs")
                started[name] = processes.start(
                    ["bash", LAUNCHER, str(workers), script] + flag_args(flags),
                    os.path.join(root, f"{name}.log"), PYTHON=sys.executable,
                    WORKER_LOG_DIR=logs[name])
        # The one-worker references, meanwhile, through the launchers' entry point in
        # this process (no cluster, no TensorFlow import of their own).
        for script, workers, flags in runs.values():
            if workers == 1:
                run_launcher_in_process([script] + flag_args(flags)).check()
        with ThreadPoolExecutor(len(started)) as pool:
            codes = dict(zip(started, pool.map(wait, started.values())))
    for name, process in started.items():
        extra = ""
        for i in range(2):
            path = os.path.join(logs.get(name, "-"), f"worker_{i}.log")
            if os.path.exists(path):
                extra += f"\n--- worker {i}:\n" + read_text(path)
        assert codes[name] == 0, f"{name}:\n{read_text(process.log_path)}{extra}"
    return ({name: flags["output_dir"] for name, (_, _, flags) in runs.items()},
            logs["two_workers"])


def test_two_workers_equal_two_towers_and_the_double_batch(setup, equivalence_runs):
    dirs, _ = equivalence_runs
    final = {name: checkpoint_values(os.path.join(d, f"model.ckpt-{STEPS}"))
             for name, d in dirs.items()}
    reference = final["two_towers"]
    names = sorted(reference)
    assert any(n.endswith("/adam_m") for n in names) and "global_step" in names
    for other in ("two_workers", "double_batch"):
        assert sorted(final[other]) == names, other
        for name in names:
            if "attention/self/key/bias" in name:
                # Its gradient is zero in exact arithmetic (a bias added to every
                # key shifts each query's scores by one constant, which softmax
                # ignores): the value is rounding noise, compared by size.
                assert np.max(np.abs(final[other][name])) < 1e-5, name
                continue
            difference = relative_difference(final[other][name], reference[name])
            assert difference <= STEPS_TOLERANCE, \
                f"{other} vs two_towers: {name} differs by {difference:.2e}"
    assert final["two_workers"]["global_step"] == STEPS
    # The step moved the weights, so the comparison above could fail.
    start = checkpoint_values(setup.init_checkpoint)
    kernel = "bert/encoder/layer_0/output/dense/kernel"
    assert relative_difference(final["two_workers"][kernel], start[kernel]) > 1e-3


def test_pretraining_two_workers_equal_two_towers(equivalence_runs):
    dirs, _ = equivalence_runs
    two_workers, two_towers = (
        checkpoint_values(os.path.join(dirs[name], f"model.ckpt-{STEPS}"))
        for name in ("pretraining_two_workers", "pretraining_two_towers"))
    assert sorted(two_workers) == sorted(two_towers)
    assert any(n.startswith("cls/predictions/") for n in two_towers)
    for name in two_towers:
        if "attention/self/key/bias" in name:  # rounding noise, see above
            continue
        difference = relative_difference(two_workers[name], two_towers[name])
        assert difference <= STEPS_TOLERANCE, f"{name} differs by {difference:.2e}"
    assert two_workers["global_step"] == STEPS
    assert two_workers["examples_seen"] == STEPS * 2 * BATCH * 2


def test_only_the_chief_writes_and_both_log_the_cluster_loss(equivalence_runs):
    dirs, logs = equivalence_runs
    chief, other = (read_text(os.path.join(logs, f"worker_{i}.log")) for i in range(2))
    assert f"saved {dirs['two_workers']}/model.ckpt-{STEPS}" in chief
    assert "saved " not in other
    events = [n for n in os.listdir(dirs["two_workers"]) if n.startswith("events.")]
    assert len(events) == 1
    # Every worker logs the same cluster-mean loss at every step.
    pattern = r"\[worker \d\] step (\d+)/\d+  loss (\S+)"
    assert re.findall(pattern, chief) == re.findall(pattern, other)
    assert len(re.findall(pattern, chief)) == STEPS
    for log in (chief, other):
        assert "2 workers in step after" in log
        assert re.search(r"cluster: 2 workers x 1 tower\(s\) each; worker \d trains on 4 of "
                         r"every 8 examples", log)


# ---------------------------------------------------------------------------
# A worker dies; the other stops; both restart and resume.


def test_a_killed_worker_stops_the_other_and_a_relaunch_resumes(setup):
    root = os.path.join(setup.root, "fault")
    chief_dir, other_dir = os.path.join(root, "chief"), os.path.join(root, "other")
    # 8 epochs of 40 rows, global batch 8: 40 steps, a checkpoint every 5 (the other
    # worker is killed once the first is written, 35 steps before the run could end).
    flags = dict(setup.flags, n_gpus=1, num_train_epochs=8, save_checkpoints_steps=5,
                 log_every_n_steps=5, collective_timeout_s=STEP_TIMEOUT)
    total = 40
    ports = free_ports(2)

    def start(processes, index, tag):
        output_dir = chief_dir if index == 0 else other_dir
        return processes.start([sys.executable, CLASSIFIER] +
                               flag_args(dict(flags, output_dir=output_dir)),
                               os.path.join(root, f"{tag}_worker_{index}.log"),
                               TF_CONFIG=tf_config(ports, index))

    os.makedirs(root)
    with Processes() as processes:
        chief, other = start(processes, 0, "first"), start(processes, 1, "first")
        deadline = time.time() + TIMEOUT
        first = os.path.join(chief_dir, "model.ckpt-5.index")
        while not os.path.exists(first):
            assert chief.poll() is None and other.poll() is None, read_text(chief.log_path)
            assert time.time() < deadline, read_text(chief.log_path)
            time.sleep(0.05)
        other.kill()
        killed_at = time.time()
        wait(chief)
        stopped_after = time.time() - killed_at
    # TF 2.x notices the closed connection at once; TF 1.15 waits for the step
    # deadline, then the watchdog (5 s grace) ends it.
    assert stopped_after < STEP_TIMEOUT + 5 + 10, stopped_after
    message = assert_one_error_line(logged_run(chief), "error: worker 0 of 2: step ",
                                    f"worker 1 (127.0.0.1:{ports[1]}) no longer answers",
                                    "Restart every worker with the same flags")
    stopped_at = int(re.search(r"step (\d+)", message).group(1))
    newest = max(int(m.group(1)) for m in map(re.compile(r"model\.ckpt-(\d+)\.index$").match,
                                              os.listdir(chief_dir)) if m)
    assert 5 <= newest < total and stopped_at > newest
    assert os.listdir(other_dir) == ["cache"]  # the other worker never wrote output

    # Same ports, same flags: both resume from the chief's newest checkpoint.
    with Processes() as processes:
        chief, other = start(processes, 0, "second"), start(processes, 1, "second")
        assert wait(chief) == 0, read_text(chief.log_path)
        assert wait(other) == 0, read_text(other.log_path)
    chief_log, other_log = read_text(chief.log_path), read_text(other.log_path)
    assert re.search(rf"resuming from \S*chief/model\.ckpt-{newest}\n", chief_log), chief_log
    assert "resuming" not in other_log
    done = f"training done: global step {total}, {total * 8} examples seen"
    assert done in chief_log and done in other_log
    logged = [int(s) for s in re.findall(r"\] step (\d+)/", chief_log)]
    assert logged == list(range(newest + 5, total + 1, 5)), chief_log
    assert os.path.exists(os.path.join(chief_dir, f"model.ckpt-{total}.index"))
    assert os.listdir(other_dir) == ["cache"]


# ---------------------------------------------------------------------------
# Evaluation during training: the chief evaluates, every worker stops with it.


def test_early_stopping_on_the_chief_stops_every_worker_at_the_same_step(setup):
    """At learning rate 1e-12 the weights move by about 1e-12 a step, so the dev
    accuracy of the first evaluation is never beaten (a tie is no improvement): with an
    evaluation every step and patience 2 the run ends at step 3 of 5, on both
    workers; relaunched, both train nothing."""
    root = os.path.join(setup.root, "early_stopping")
    chief_dir, other_dir = os.path.join(root, "chief"), os.path.join(root, "other")
    flags = dict(setup.flags, n_gpus=1, learning_rate=1e-12, eval_every_steps=1,
                 early_stopping_patience=2, keep_best_checkpoint=True)
    ports = free_ports(2)
    os.makedirs(root)
    logs = {}
    for attempt in ("first", "again"):
        with Processes() as processes:
            workers = [processes.start(
                [sys.executable, CLASSIFIER] + flag_args(dict(
                    flags, output_dir=chief_dir if index == 0 else other_dir)),
                os.path.join(root, f"{attempt}_worker_{index}.log"),
                TF_CONFIG=tf_config(ports, index)) for index in range(2)]
            for worker in workers:
                assert wait(worker) == 0, read_text(worker.log_path)
        logs[attempt] = [read_text(worker.log_path) for worker in workers]
    chief_log, other_log = logs["first"]
    assert "early stopping at step 3: 2 evaluations without improvement" in chief_log
    for log in (chief_log, other_log):
        assert re.findall(r"\] step (\d+)/5 ", log) == ["1", "2", "3"], log
        assert "training done: global step 3, 24 examples seen (stopped early)" in log
    assert "eval at step" in chief_log and "eval at step" not in other_log
    with open(os.path.join(chief_dir, "best", "best.json"), encoding="utf-8") as f:
        best = json.load(f)
    assert best["best_step"] == 1 and [s for s, _ in best["evaluations"]] == [1, 2, 3]
    assert os.path.exists(os.path.join(chief_dir, "best", "model.ckpt-1.index"))
    assert os.path.exists(os.path.join(chief_dir, "model.ckpt-3.index"))
    assert not os.path.exists(os.path.join(chief_dir, "model.ckpt-4.index"))
    with open(os.path.join(chief_dir, "train_results.txt"), encoding="utf-8") as f:
        assert "early_stopping_step = 3\n" in f.read()
    assert os.listdir(other_dir) == ["cache"]
    # Relaunched: the chief finds the run ended, and the other worker learns it
    # from the start-up vote.
    chief_log, other_log = logs["again"]
    assert "early stopping ended this run at step 3" in chief_log
    for log in (chief_log, other_log):
        assert "training done: global step 3, 24 examples seen (stopped early)" in log
        assert not re.findall(r"\] step (\d+)/5 ", log), log


# ---------------------------------------------------------------------------
# Bad cluster input: one line, exit 2.


def test_bad_cluster_input_is_one_error_line(setup):
    root = os.path.join(setup.root, "bad")
    os.makedirs(root)
    base = dict(setup.flags, n_gpus=1)
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    busy_port = busy.getsockname()[1]
    lonely = free_ports(2)
    mismatch = free_ports(2)
    cases = {
        "malformed": ({"TF_CONFIG": '{"cluster": {"worker": ["127.0.0.1:1"'}, {},
                      ["error: TF_CONFIG is not valid JSON", '{"cluster": {"worker"']),
        "index_out_of_range": ({"TF_CONFIG": tf_config([1, 2], 2)}, {},
                               ["TF_CONFIG task.index=2 is out of range: the cluster lists "
                                "2 worker(s), so it must be 0..1"]),
        "flag_out_of_range": ({}, {"worker_hosts": "127.0.0.1:1,127.0.0.1:2",
                                   "task_index": 5},
                              ["--task_index=5 is out of range"]),
        "port_in_use": ({"TF_CONFIG": tf_config([busy_port, 1], 0)}, {},
                        [f"port {busy_port} of 127.0.0.1:{busy_port} is already in use"]),
        "never_comes_up": ({"TF_CONFIG": tf_config(lonely, 1)},
                           {"cluster_start_timeout_s": 3},
                           [f"error: worker 1: worker 0 (127.0.0.1:{lonely[0]}) did not "
                            "come up within --cluster_start_timeout_s=3"]),
        "other_flags_0": ({"TF_CONFIG": tf_config(mismatch, 0)}, {},
                          ["worker 1 was started with other training flags than the "
                           "chief (worker 0)"]),
        "other_flags_1": ({"TF_CONFIG": tf_config(mismatch, 1)}, {"learning_rate": 2e-3},
                          ["worker 1 was started with other training flags than the "
                           "chief (worker 0)"]),
    }
    if IS_TF1:
        cases["fp16_on_tf1"] = ({"TF_CONFIG": tf_config(free_ports(2), 0)},
                                {"collective_fp16": True},
                                ["--collective_fp16 is not available here: TensorFlow "
                                 "1.15's CPU ring all-reduce has no float16"])
    # Refused from the flags and TF_CONFIG before this worker's server starts: in this
    # process (the launchers' entry point, the same exit code and error line; TF_CONFIG
    # empty is unset, as launcher_env leaves it). A worker of a cluster that starts its
    # server, waits for another or meets one stays a process of its own.
    in_process = {"malformed", "index_out_of_range", "flag_out_of_range", "port_in_use",
                  "fp16_on_tf1"}
    runs = {}
    try:
        with Processes() as processes:
            started = {}
            for name, (env, changes, _) in cases.items():
                if name in in_process:
                    continue
                flags = dict(base, output_dir=os.path.join(root, name), **changes)
                started[name] = processes.start([sys.executable, CLASSIFIER] +
                                                flag_args(flags),
                                                os.path.join(root, f"{name}.log"), **env)
            # The launcher passes a worker's failure on.
            launcher = processes.start(["bash", LAUNCHER, "2", CLASSIFIER, "--do_train",
                                        f"--output_dir={root}/launcher"],
                                       os.path.join(root, "launcher.log"),
                                       PYTHON=sys.executable)
            # Meanwhile, the in-process cases.
            for name, (env, changes, _) in cases.items():
                if name in in_process:
                    flags = dict(base, output_dir=os.path.join(root, name), **changes)
                    runs[name] = run_launcher_in_process([CLASSIFIER] + flag_args(flags),
                                                         **dict({"TF_CONFIG": ""}, **env))
            with ThreadPoolExecutor(len(started) + 1) as pool:
                list(pool.map(wait, list(started.values()) + [launcher]))
    finally:
        busy.close()
    runs.update({name: logged_run(process) for name, process in started.items()})
    for name, (_, _, expected) in cases.items():
        assert_one_error_line(runs[name], *expected)
    log = read_text(launcher.log_path)
    assert launcher.returncode == 2, log
    assert log.count("error: --task_name is required") == 2, log
    for i in range(2):
        assert f"launch_local_workers: worker {i} exited with status 2" in log, log
    # Refused before anything was written.
    for name in ("malformed", "index_out_of_range", "flag_out_of_range", "port_in_use"):
        assert not os.path.exists(os.path.join(root, name))
