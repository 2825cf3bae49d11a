"""The cluster's description and the pieces around it, without starting a cluster.

TF_CONFIG and --worker_hosts/--task_index parsing with its one-line errors,
device plans moved onto a worker's task, gradient packing, the watchdog that
ends a stuck worker, the port checks, and the runtime's refusals (NCCL
without GPUs, float16 where the lane cannot exchange it). Multi-process runs
are in test_multiworker.py.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from bert_ad.distributed import cluster, cluster_config
from bert_ad.parallel.collective import CollectiveKeys, pack_plan, signature_numbers
from bert_ad.compat import IS_TF1, session_config
from bert_ad.errors import UserError
from bert_ad.parallel.towers import plan_devices

HOSTS = ["10.0.0.1:2222", "10.0.0.2:2222", "10.0.0.3:2223"]


def tf_config(hosts=HOSTS, index=1, kind="worker") -> str:
    return json.dumps({"cluster": {"worker": hosts}, "task": {"type": kind, "index": index}})


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        fn(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- TF_CONFIG ------------------------------------------------------------------------

def test_tf_config_gives_hosts_and_task():
    spec = cluster_config.parse_tf_config(tf_config())
    assert spec.hosts == HOSTS
    assert spec.task_index == 1 and spec.num_workers == 3
    assert not spec.is_chief and spec.address == "10.0.0.2:2222"
    assert spec.device("CPU", 0) == "/job:worker/replica:0/task:1/device:CPU:0"
    assert cluster_config.parse_tf_config(tf_config(index=0)).is_chief


@pytest.mark.parametrize("value", [None, "", "   "])
def test_unset_tf_config_is_no_cluster(value):
    assert cluster_config.parse_tf_config(value) is None


@pytest.mark.parametrize("text, expected", [
    ('{"cluster": ', "TF_CONFIG is not valid JSON"),
    ("[1, 2]", "TF_CONFIG must be a JSON object"),
    ('{"task": {"type": "worker", "index": 0}}', 'no "cluster" object'),
    (json.dumps({"cluster": {"worker": HOSTS, "ps": ["h:1"]},
                 "task": {"type": "worker", "index": 0}}), "'ps'"),
    (json.dumps({"cluster": {"chief": ["h:1"]}, "task": {"type": "chief", "index": 0}}),
     "'chief'"),
    (json.dumps({"cluster": {"worker": []}, "task": {"type": "worker", "index": 0}}),
     "non-empty list"),
    (json.dumps({"cluster": {"worker": HOSTS}}), 'no "task" object'),
    (tf_config(kind="evaluator"), "task.type is 'evaluator'"),
    (json.dumps({"cluster": {"worker": HOSTS}, "task": {"type": "worker"}}),
     'no "index"'),
    (tf_config(index=3), "TF_CONFIG task.index=3 is out of range: the cluster lists 3 "
                         "worker(s), so it must be 0..2"),
    (tf_config(index=-1), "task.index=-1 is out of range"),
    (tf_config(index="1"), "task.index='1' is not an integer"),
    (tf_config(index=True), "is not an integer"),
    (tf_config(hosts=["10.0.0.1:2222", "10.0.0.2"]),
     "TF_CONFIG cluster.worker[1]: '10.0.0.2' is not host:port"),
    (tf_config(hosts=["10.0.0.1:2222", "10.0.0.2:70000"]), "port 70000"),
    (tf_config(hosts=["10.0.0.1:2222", 5]), "cluster.worker[1]: 5 is not a worker address"),
    (tf_config(hosts=["10.0.0.1:2222", "10.0.0.1:2222"]),
     "worker 1 and worker 0 both use 10.0.0.1:2222"),
])
def test_bad_tf_config_is_one_clear_line(text, expected):
    assert expected in error_of(cluster_config.parse_tf_config, text)


def test_ipv6_addresses_are_accepted():
    spec = cluster_config.parse_tf_config(tf_config(hosts=["[::1]:2222", "[::1]:2223"], index=0))
    assert spec.hosts == ["[::1]:2222", "[::1]:2223"]
    assert cluster_config.parse_address("[::1]:2223", "x") == ("::1", 2223)


# --- flags ------------------------------------------------------------------------------

def test_worker_flags():
    spec = cluster_config.parse_worker_flags("a:1, b:2", 1)
    assert spec.hosts == ["a:1", "b:2"] and spec.task_index == 1
    assert spec.source == "--worker_hosts"
    assert cluster_config.parse_worker_flags(None, None) is None


@pytest.mark.parametrize("hosts, index, expected", [
    (None, 1, "--task_index=1 needs --worker_hosts"),
    ("a:1,b:2", None, "--worker_hosts needs --task_index"),
    ("a:1,b:2", 2, "--task_index=2 is out of range: the cluster lists 2 worker(s), so it "
                   "must be 0..1"),
    ("a:1,,b:2", 0, "--worker_hosts[1]"),
    ("a:1,b", 0, "--worker_hosts[1]: 'b' is not host:port"),
])
def test_bad_worker_flags(hosts, index, expected):
    assert expected in error_of(cluster_config.parse_worker_flags, hosts, index)


def test_flags_and_tf_config_must_agree():
    env = {"TF_CONFIG": tf_config(hosts=["a:1", "b:2"], index=1)}
    assert cluster_config.resolve_cluster("a:1,b:2", 1, env) == cluster_config.parse_worker_flags(
        "a:1,b:2", 1)
    message = error_of(cluster_config.resolve_cluster, "a:1,b:2", 0, env)
    assert "disagree" in message and "set only one of them" in message
    assert cluster_config.resolve_cluster(None, None, env).task_index == 1
    assert cluster_config.resolve_cluster(None, None, {}) is None


def test_a_cluster_of_one_worker_is_a_single_machine_run():
    assert cluster_config.resolve_cluster("localhost:2222", 0, {}) is None


# --- devices and packing ----------------------------------------------------------------

def test_worker_plan_moves_towers_and_variables_onto_the_task():
    spec = cluster_config.parse_worker_flags("a:1,b:2", 1)
    cpu = cluster_config.worker_plan(plan_devices(2, cuda_visible_devices=""), spec)
    assert cpu.tower_devices == ["/job:worker/replica:0/task:1/device:CPU:0",
                                 "/job:worker/replica:0/task:1/device:CPU:1"]
    assert cpu.variable_device == "/job:worker/replica:0/task:1/device:CPU:0"
    assert cpu.num_cpu_devices == 2
    gpu = cluster_config.worker_plan(plan_devices(3, cuda_visible_devices="4,5"), spec)
    assert gpu.tower_devices == ["/job:worker/replica:0/task:1/device:GPU:0",
                                 "/job:worker/replica:0/task:1/device:GPU:1",
                                 "/job:worker/replica:0/task:1/device:GPU:0"]
    assert gpu.physical_names == ["card 4", "card 5", "card 4"]
    assert gpu.variable_device == "/job:worker/replica:0/task:1/device:CPU:0"


@pytest.mark.parametrize("sizes, limit, groups", [
    ([4, 4, 9, 1], 8, [[0, 1], [2], [3]]),
    ([1, 2, 3, 4], 100, [[0, 1, 2, 3]]),
    ([10, 10, 10], 10, [[0], [1], [2]]),
    ([3, 3, 3, 3, 3], 7, [[0, 1], [2, 3], [4]]),
    ([], 8, []),
])
def test_pack_plan_keeps_order_and_limit(sizes, limit, groups):
    assert pack_plan(sizes, limit) == groups


def test_collective_keys_are_fixed_per_graph_order():
    a, b = CollectiveKeys(), CollectiveKeys()
    assert [a.next_instance_key() for _ in range(3)] == [b.next_instance_key()
                                                         for _ in range(3)]
    assert a.group_key("CPU") != a.group_key("GPU")


def test_signature_numbers_are_exact_in_float64():
    numbers = signature_numbers(["model a", "model b", "model a"])
    assert numbers[0] == numbers[2] != numbers[1]
    assert all(0 <= n < 2 ** 52 and float(n) == n for n in numbers)


# --- the watchdog ------------------------------------------------------------------------

def test_watchdog_ends_an_overrunning_call_with_one_error_line(capsys):
    exited = []
    done = threading.Event()

    def fake_exit(code):
        exited.append(code)
        done.set()

    watchdog = cluster.Watchdog(exit_fn=fake_exit)
    with watchdog.guard(0.2, lambda: "worker 1 of 2: step 3 did not complete\nin time"):
        assert done.wait(5.0)
    assert exited == [2]
    assert capsys.readouterr().err == "error: worker 1 of 2: step 3 did not complete in time\n"


def test_watchdog_stays_quiet_when_calls_finish_in_time(capsys):
    exited = []
    watchdog = cluster.Watchdog(exit_fn=exited.append)
    for _ in range(3):
        with watchdog.guard(0.3, lambda: "too slow"):
            time.sleep(0.01)
    time.sleep(0.5)
    assert exited == []
    assert capsys.readouterr().err == ""


# --- ports -----------------------------------------------------------------------------

def test_port_checks():
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        assert not cluster.port_is_free(port)
        assert cluster.answers(f"127.0.0.1:{port}")
    finally:
        listener.close()
    assert cluster.port_is_free(port)
    assert not cluster.answers(f"127.0.0.1:{port}", 0.5)


def test_a_port_in_use_is_refused_before_tensorflow_tries(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        spec = cluster_config.parse_worker_flags(f"127.0.0.1:{port},127.0.0.1:1", 0)
        runtime = cluster.ClusterRuntime(spec, session_config(1), uses_gpu=False)
        message = error_of(runtime.start)
    finally:
        listener.close()
    assert message.startswith(f"worker 0 (--worker_hosts): port {port} of 127.0.0.1:{port} "
                              "is already in use on this machine")


# --- the runtime's settings ----------------------------------------------------------------

def _runtime(**kwargs):
    spec = cluster_config.parse_worker_flags("127.0.0.1:1,127.0.0.1:2", 1)
    return cluster.ClusterRuntime(spec, session_config(2), **kwargs)


def test_runtime_defaults_follow_the_device_type():
    cpu = _runtime(uses_gpu=False)
    assert cpu.implementation == "ring" and cpu.device_type == "CPU"
    assert _runtime(uses_gpu=True).implementation == "nccl"
    assert _runtime(uses_gpu=True, implementation="ring").device_type == "CPU"
    config = cpu.session_config
    assert config.experimental.collective_group_leader == "/job:worker/replica:0/task:0"
    assert list(config.device_filters) == ["/job:worker/task:1"]
    assert config.device_count["CPU"] == 2


@pytest.mark.parametrize("kwargs, expected", [
    (dict(uses_gpu=False, implementation="nccl"), "--collective_implementation=nccl needs "
                                                  "GPU towers"),
    (dict(uses_gpu=False, implementation="mpi"), "--collective_implementation=mpi"),
    (dict(uses_gpu=False, step_timeout_s=0), "--collective_timeout_s=0 must be positive"),
    (dict(uses_gpu=False, start_timeout_s=-1), "--cluster_start_timeout_s=-1"),
    (dict(uses_gpu=False, pack_mb=0), "--collective_pack_mb=0"),
])
def test_runtime_refuses_bad_settings(kwargs, expected):
    assert expected in error_of(_runtime, **kwargs)


def test_fp16_exchange_where_the_lane_supports_it():
    if IS_TF1:
        message = error_of(_runtime, uses_gpu=False, fp16=True)
        assert "--collective_fp16 is not available here: TensorFlow 1.15's CPU ring" in message
    else:
        assert _runtime(uses_gpu=False, fp16=True).fp16


# --- the exchange in the training graph -------------------------------------------------

def _ops_behind(*targets) -> set:
    """Every op a run of `targets` executes (data and control inputs, transitively)."""
    seen, stack = set(), [t.op if hasattr(t, "op") else t for t in targets]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return seen


@pytest.mark.parametrize("pack_mb, packs", [(32.0, 1), (0.004, None)])
def test_the_exchange_runs_once_per_applied_step_in_few_packs(pack_mb, packs):
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.tasks.base import Encoder
    from bert_ad.compat import tf
    from bert_ad.model.modeling import BertConfig
    from bert_ad.parallel.train_graph import TrainSettings, build_train_graph

    config = BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32)
    runtime = _runtime(uses_gpu=False, pack_mb=pack_mb)
    with tf.Graph().as_default():
        plan = runtime.plan(plan_devices(2, cuda_visible_devices=""))
        graph = build_train_graph(
            plan, FEATURE_SPEC,
            lambda f, i: classifier(Encoder(config).model(f, True), f, 2, True).loss,
            TrainSettings(gradient_accumulation_steps=3),
            cross_worker_reduce=runtime.gradient_reducer())
        reduces = [op for op in tf.get_default_graph().get_operations()
                   if op.type == "CollectiveReduce"]
        micro = _ops_behind(graph.micro_step)
        step = _ops_behind(graph.train_step)
    assert not any(op.type == "CollectiveReduce" for op in micro)
    assert set(reduces) <= step
    if packs is None:  # ~4 KiB packs: several, each a run of whole gradients
        sizes = [4 * v.shape.num_elements() for v in graph.variables]
        packs = len(pack_plan(sizes, runtime.pack_bytes))
        assert 1 < packs < len(graph.variables)
    assert len(reduces) == packs
    for op in reduces:
        assert op.device == "/job:worker/replica:0/task:1/device:CPU:0"
        assert op.get_attr("group_size") == 2
    # One after the other: every pack but the first waits for the one before.
    ordered = sorted(reduces, key=lambda op: op.get_attr("instance_key"))
    keys = [op.get_attr("instance_key") for op in ordered]
    assert keys == list(range(keys[0], keys[0] + len(reduces)))
    for before, after in zip(ordered, ordered[1:]):
        assert before in _ops_behind(after)
