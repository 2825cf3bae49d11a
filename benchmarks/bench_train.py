"""Training throughput of run_classifier_mgpu.py vs Hugging Face transformers (PyTorch CPU).

    python -m benchmarks.bench_train --json train.json --profile_after
                                     # the full suite (docs/benchmarks.md)
    python -m benchmarks.bench_train --quick
                                     # a few minutes: seq 64, 1 round, fewer runs
    python -m benchmarks.bench_train --seqs 64 --repeats 5
                                     # the suite for some sequence lengths only
    python -m benchmarks.bench_train --tables_from train.json
                                     # print the tables of an earlier run again
    python -m benchmarks.bench_train --profile --seq 64 --padding dynamic
                                     # where the time of one step goes
    python -m benchmarks.bench_train --experiments --seq 64 --padding bucketed
                                     # the library vs the suggested speed-ups
    python -m benchmarks.bench_train --towers_scaling 1,4 --seq 128 --batch 32
                                     # towers scaling (scripts/gpu_smoke.sh)

The suite fine-tunes the real MiniLM-L6 (Google checkpoint from
scripts/fetch_minilm.sh) on the real movie-review sentences
(bert-ad data prepare movie_reviews) and prints markdown tables:

  1. ours: examples/sec at max_seq_length 64 and 128, batch 16 per tower,
     1 and 2 towers, padding to max_length, dynamic (the default) and
     dynamic + --bucket_by_length; a row from the real CLI's own log;
  2. the same job in Hugging Face transformers on PyTorch CPU
     (BertForSequenceClassification, torch.optim.AdamW, clip 1.0, its own
     tokenizer, padding="max_length" vs its DataCollatorWithPadding), and the
     ratios ours / theirs, paired round by round;
  3. useful-token FLOP/s of our step (see benchmarks/flops.py for the
     formula) as a fraction of this machine's matmul FLOP/s, measured by the
     same worker process before and after its training;
  4. multi-tower overhead: 2 towers x 16 vs 1 tower x 32 on the same cores.

Every measurement is a fresh worker process (this script with --worker),
ours and theirs alternating, repeated --repeats times (the order reversed
every other round); tables give medians. Ours is timed inside
`bert_ad.parallel.loop.train_loop`, the loop run_classifier_mgpu.py runs, on the
graph and batch source `bert_ad.driver.build_training` makes for the classifier
(the one hook driver.train builds them with: benchmarks/training.py hands it the
sentiment task, the flags' defaults and the towers; warm start from the
checkpoint): the batch source records a timestamp each time the loop asks for
a batch, so the window covers --steps whole steps after
--warmup steps and excludes start-up, warm start and the checkpoint.
Besides the wall clock, each worker reports examples per CPU-second of its
own process, which a machine shared with other jobs disturbs far less.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from benchmarks import measuring
from benchmarks import flops
from benchmarks.measuring import CLASSIFIER, loadavg

# Each measurement is `python -m WORKER_MODULE --worker ...` (measuring.worker_command).
WORKER_MODULE = "benchmarks.bench_train"
WORKERS = ("ours", "hf", "cli", "profile")

SEED = 12345
LEARNING_RATE = 5e-5
WEIGHT_DECAY = 0.01
CLIP_NORM = 1.0
# max_length: --padding=max_length; dynamic: --padding=dynamic (the default);
# bucketed: --padding=dynamic --bucket_by_length.
PADDINGS = ("max_length", "dynamic", "bucketed")
# library: bert_ad as run_classifier_mgpu.py runs it (fused AdamW, padding removed
# from the position-wise layers); unfused_adamw: the element-wise AdamW ops instead
# of ResourceApplyAdam; padded_layers: --noremove_padding; old_graph: both (the
# graph before issue #17); sparse_embedding: --sparse_embedding_updates; xla:
# session-level XLA (which keeps the padding).
VARIANTS = ("library", "unfused_adamw", "padded_layers", "old_graph", "sparse_embedding",
            "xla")
# --compare: (label, worker, variant, environment), side by side in one run.
# oneDNN's ISA cap emulates an AVX2-only CPU on a larger one (a no-op on an
# AVX2 CPU); TF_ENABLE_ONEDNN_OPTS=0 is TensorFlow's own kernels (Eigen).
COMPARISONS = (
    ("ours, default (oneDNN on, fused AdamW, padding removed)", "ours", "library", {}),
    ("ours, oneDNN off", "ours", "library", {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    ("ours, oneDNN on, ISA capped at AVX2", "ours", "library",
     {"TF_ENABLE_ONEDNN_OPTS": "1", "ONEDNN_MAX_CPU_ISA": "AVX2"}),
    ("ours, unfused AdamW", "ours", "unfused_adamw", {}),
    ("ours, padding kept in the dense layers (--noremove_padding)", "ours",
     "padded_layers", {}),
    ("ours, oneDNN off + unfused AdamW + padding kept (the old default)", "ours",
     "old_graph", {"TF_ENABLE_ONEDNN_OPTS": "0"}),
    ("ours, --sparse_embedding_updates", "ours", "sparse_embedding", {}),
    ("ours, run_classifier_mgpu.py (its log)", "cli", "library", {}),
    ("HF transformers, PyTorch CPU", "hf", "library", {}),
)


# ----------------------------------------------------------------------------
# Data shared by both workers: the same rows in the same order.
# ----------------------------------------------------------------------------

def read_train_examples(data_dir: str):
    """(examples, label list) of the sentiment task's train.tsv."""
    from bert_ad.data import processors
    task = processors.get_task("sentiment")
    examples = processors.read_examples(task, data_dir, "train")
    return examples, processors.label_list(task, examples)


def bucket_window_batches() -> int:
    """The trainer's length-bucketing window (bert_ad.data.batching imports no TensorFlow,
    so the PyTorch worker can read it)."""
    from bert_ad.data.batching import BUCKET_WINDOW_BATCHES
    return BUCKET_WINDOW_BATCHES


def step_indices(lengths, batch: int, steps: int, bucketed: bool) -> list:
    """The example indices of each of `steps` one-tower steps of batch `batch`,
    in the order the driver's training batches take them."""
    import numpy as np
    from bert_ad.data.batching import training_stream
    stream = training_stream(len(lengths), batch, SEED, 0, np.asarray(lengths),
                             bucket_window_batches() if bucketed else 0)
    return [next(stream) for _ in range(steps)]


# ----------------------------------------------------------------------------
# Worker: ours (bert_ad.driver.build_training, run by parallel.loop.train_loop)
# ----------------------------------------------------------------------------

def build_ours(args, steps: int, variant: str = "library"):
    """The training run_classifier_mgpu.py builds for these settings (flags at their
    defaults; `variant`: see VARIANTS): (Training, Placement, BertConfig, labels)."""
    from benchmarks import training
    encoder = training.encoder(
        args.model_dir, args.seq, args.seq if args.padding == "max_length" else "dynamic",
        bucket_by_length=args.padding == "bucketed",
        remove_padding=variant not in ("padded_layers", "old_graph", "xla"))
    task, data = training.sentiment_task(encoder, args.data_dir)
    built, placement = training.training(
        task, data, args.towers, args.batch, steps, use_xla=variant == "xla", seed=SEED,
        fused_optimizer=variant not in ("unfused_adamw", "old_graph"),
        sparse_embedding_updates=variant == "sparse_embedding")
    return built, placement, encoder.config, task.labels


def batch_lengths(micro_batch: list) -> list:
    """[(real lengths of the tower's rows, padded length)] of one micro-batch."""
    out = []
    for batch in micro_batch:
        real = batch["example_weights"] > 0
        out.append(([int(n) for n in batch["input_mask"][real].sum(axis=1)],
                    int(batch["input_mask"].shape[1])))
    return out


def measure_peaks(peaks: dict, args, config, config_proto) -> None:
    """Update `peaks` with the best matmul rates measured now (wall and CPU)."""
    for name, rates in (
            ("tf_matmul_flops", flops.measure_tf_matmul(session_config=config_proto)),
            ("numpy_matmul_flops", flops.measure_numpy_matmul()),
            ("tf_model_matmul_flops", flops.measure_tf_matmul(
                args.batch * args.seq, config.hidden_size, config.intermediate_size,
                session_config=config_proto))):
        for suffix, key in (("", "flops_per_sec"), ("_per_cpu_sec", "flops_per_cpu_sec")):
            peaks[name + suffix] = max(peaks.get(name + suffix, 0.0), rates[key])


def worker_ours(args) -> dict:
    from bert_ad.compat import TF_VERSION, tf
    from bert_ad.parallel.loop import LoopSettings, train_loop

    per_tower, towers = args.batch, args.towers
    total_steps = args.warmup + args.steps + 1
    stamps, cpu_stamps, micro_batches = [], [], []
    peaks = {}
    with tempfile.TemporaryDirectory(prefix="bench_train_") as output_dir:
        with tf.Graph().as_default():
            built, placement, config, labels = build_ours(args, total_steps, args.variant)
            config_proto = placement.local_session_config()
            if not args.no_peak:
                measure_peaks(peaks, args, config, config_proto)

            def timed_batches(start_example: int):
                # A timestamp each time the training loop asks for its next step.
                for micro_batch in built.batches(start_example):
                    stamps.append(time.perf_counter())
                    cpu_stamps.append(time.process_time())
                    micro_batches.append(micro_batch)
                    yield micro_batch

            loop = LoopSettings(output_dir, total_steps,
                                save_checkpoints_steps=10 ** 9, keep_checkpoint_max=1,
                                log_every_n_steps=10 ** 9,
                                init_checkpoint=os.path.join(args.model_dir,
                                                             "bert_model.ckpt"),
                                session_config=config_proto)
            result = train_loop(built.graph, timed_batches, loop)
    if result.steps_run != total_steps or len(stamps) < total_steps:
        raise RuntimeError(f"ran {result.steps_run} steps, expected {total_steps}")
    if not args.no_peak:  # again after training: the best of both moments
        measure_peaks(peaks, args, config, config_proto)
    first, last = args.warmup, args.warmup + args.steps
    elapsed = stamps[last] - stamps[first]
    useful = executed = real_tokens = padded_tokens = 0
    padded_lengths = []
    for micro_batch in micro_batches[first:last]:
        for lengths, seq in batch_lengths(micro_batch):
            useful += flops.training_flops(config, lengths, len(labels))
            executed += flops.training_flops(config, [seq] * len(lengths), len(labels))
            real_tokens += sum(lengths)
            padded_tokens += seq * len(lengths)
            padded_lengths.append(seq)
    durations = [b - a for a, b in zip(stamps[first:last], stamps[first + 1:last + 1])]
    out = {"impl": "ours", "tf": TF_VERSION, "seq": args.seq, "padding": args.padding,
           "towers": towers, "batch": per_tower, "steps": args.steps,
           "examples_per_sec": args.steps * per_tower * towers / elapsed,
           "median_step_sec": measuring.median(durations),
           "examples_per_cpu_sec": args.steps * per_tower * towers / (
               cpu_stamps[last] - cpu_stamps[first]),
           "useful_flops_per_sec": useful / elapsed,
           "useful_flops_per_cpu_sec": useful / (cpu_stamps[last] - cpu_stamps[first]),
           "executed_flops_per_sec": executed / elapsed,
           "variant": args.variant, "onednn": measuring.onednn_state(),
           "real_tokens": real_tokens, "padded_tokens": padded_tokens,
           "step_sec": durations, "padded_lengths": padded_lengths,
           "final_loss": result.last_loss, "loadavg": loadavg()}
    out.update(peaks)
    return out


def worker_cli(args) -> dict:
    """The real CLI as a user runs it; examples/sec from its own log lines.

    --max_train_examples and --num_train_epochs=1 give at least warmup +
    steps + 10 steps, a multiple of 10; the trainer logs every 10 steps and
    the first interval (session start, first-shape set-up) is dropped.
    """
    import re
    import subprocess
    interval = 10
    steps = -(-(args.warmup + args.steps) // interval) * interval + interval
    global_batch = args.batch * args.towers
    with tempfile.TemporaryDirectory(prefix="bench_cli_") as output_dir:
        command = [
            sys.executable, CLASSIFIER,
            "--task_name=sentiment", f"--data_dir={args.data_dir}",
            f"--vocab_file={os.path.join(args.model_dir, 'vocab.txt')}",
            f"--bert_config_file={os.path.join(args.model_dir, 'bert_config.json')}",
            f"--init_checkpoint={os.path.join(args.model_dir, 'bert_model.ckpt')}",
            f"--max_seq_length={args.seq}", f"--train_batch_size={args.batch}",
            f"--n_gpus={args.towers}", f"--max_train_examples={steps * global_batch}",
            "--num_train_epochs=1", f"--learning_rate={LEARNING_RATE}",
            f"--log_every_n_steps={interval}", "--save_checkpoints_steps=100000",
            f"--padding={'max_length' if args.padding == 'max_length' else 'dynamic'}",
            "--do_train=true", f"--output_dir={output_dir}"]
        if args.padding == "bucketed":
            command.append("--bucket_by_length=true")
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, env=dict(os.environ, **measuring.checkout_env()))
    rates = [float(m) for m in re.findall(r"([\d.]+) examples/sec", proc.stdout)]
    onednn = measuring.logged_onednn_state(proc.stdout)
    if proc.returncode != 0 or len(rates) < 3:
        raise RuntimeError(f"run_classifier_mgpu.py exited {proc.returncode} with "
                           f"{len(rates)} rate lines:\n{proc.stdout[-2000:]}")
    kept = rates[1:]
    return {"impl": "cli", "seq": args.seq, "padding": args.padding,
            "towers": args.towers, "batch": args.batch, "steps": interval * len(kept),
            "examples_per_sec": measuring.median(kept), "log_rates": rates,
            "onednn": onednn,
            "loadavg": loadavg()}


# ----------------------------------------------------------------------------
# Worker: Hugging Face transformers on PyTorch CPU
# ----------------------------------------------------------------------------

def worker_hf(args) -> dict:
    # Before torch loads OpenMP: on a machine whose cores are busy with other
    # work, libgomp's default spin-waiting makes each of torch's many small
    # parallel regions wait for a descheduled thread (10x slower steps here);
    # PASSIVE is the setting that gives PyTorch its best throughput then.
    if args.omp_wait_policy != "default":
        os.environ["OMP_WAIT_POLICY"] = args.omp_wait_policy
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import numpy as np
    import torch
    import transformers
    from transformers import (AutoTokenizer, BertForSequenceClassification,
                              DataCollatorWithPadding, get_linear_schedule_with_warmup)
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(SEED)

    hf_dir = args.hf_dir or measuring.default_hf_dir()
    examples, labels = read_train_examples(args.data_dir)
    label_ids = np.array([labels.index(e.label) for e in examples], np.int64)
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    # Tokenised once up front (like a datasets.map), padded per batch by the
    # collator, as a transformers training script does.
    encoded = tokenizer([e.text_a for e in examples], truncation=True,
                        max_length=args.seq)
    rows = [{key: encoded[key][i] for key in encoded} for i in range(len(examples))]
    if args.padding != "max_length":
        collator = DataCollatorWithPadding(tokenizer, padding="longest")
    else:
        collator = DataCollatorWithPadding(tokenizer, padding="max_length",
                                           max_length=args.seq)
    model = BertForSequenceClassification.from_pretrained(hf_dir, num_labels=len(labels))
    model.train()
    optimizer = measuring.hf_adamw(model, LEARNING_RATE, WEIGHT_DECAY)
    total_steps = args.warmup + args.steps + 1
    scheduler = get_linear_schedule_with_warmup(optimizer, int(total_steps * 0.1),
                                                total_steps)
    # "bucketed": our length-bucketed order, the counterpart of the Trainer's
    # group_by_length.
    plan = step_indices([len(r["input_ids"]) for r in rows], args.batch, total_steps,
                        args.padding == "bucketed")
    stamps, cpu_stamps, lengths_per_step, padded_per_step = [], [], [], []
    loss = None
    for step in range(total_steps):
        stamps.append(time.perf_counter())
        cpu_stamps.append(time.process_time())
        indices = plan[step]
        batch = collator([rows[i] for i in indices])
        batch["labels"] = torch.from_numpy(label_ids[indices])
        lengths_per_step.append([len(rows[i]["input_ids"]) for i in indices])
        padded_per_step.append(int(batch["input_ids"].shape[1]))
        output = model(**batch)
        measuring.hf_apply_update(model, optimizer, output.loss, CLIP_NORM, scheduler)
        loss = float(output.loss.detach())
    stamps.append(time.perf_counter())
    cpu_stamps.append(time.process_time())
    if "tensorflow" in sys.modules:  # its thread pools would share the cores
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    first, last = args.warmup, args.warmup + args.steps
    elapsed = stamps[last] - stamps[first]
    config = _HFConfigView(model.config)
    useful = sum(flops.training_flops(config, lengths, len(labels))
                 for lengths in lengths_per_step[first:last])
    durations = [b - a for a, b in zip(stamps[first:last], stamps[first + 1:last + 1])]
    return {"impl": "hf", "torch": torch.__version__,
            "transformers": transformers.__version__,
            "attn_implementation": getattr(model.config, "_attn_implementation", "?"),
            "seq": args.seq, "padding": args.padding, "towers": 1, "batch": args.batch,
            "steps": args.steps,
            "examples_per_sec": args.steps * args.batch / elapsed,
            "median_step_sec": measuring.median(durations),
            "examples_per_cpu_sec": args.steps * args.batch / (
                cpu_stamps[last] - cpu_stamps[first]),
            "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
            "useful_flops_per_sec": useful / elapsed,
            "real_tokens": sum(sum(x) for x in lengths_per_step[first:last]),
            "padded_tokens": sum(p * args.batch for p in padded_per_step[first:last]),
            "torch_threads": torch.get_num_threads(), "final_loss": loss,
            "loadavg": loadavg()}


class _HFConfigView:
    """The fields of a transformers BertConfig that the FLOP formula reads."""

    def __init__(self, config):
        self.hidden_size = config.hidden_size
        self.intermediate_size = config.intermediate_size
        self.num_hidden_layers = config.num_hidden_layers


# ----------------------------------------------------------------------------
# Profile: where one step's time goes
# ----------------------------------------------------------------------------

def _category(name: str) -> str:
    """Which part of the training step a traced op belongs to, by its name."""
    if "clip_by_global_norm" in name:
        return "clip by global norm (incl. embedding-gradient dedup)"
    if "AdamWeightDecay" in name or "/adam_" in name or name.startswith("cond/"):
        return "optimizer apply"
    if name.startswith("average_gradients"):
        return "average gradients over towers"
    if "/gradients/" in name or name.startswith("gradients"):
        if "embeddings" in name:
            return "backward: embeddings"
        return "backward: encoder + head"
    if name.startswith("tower_"):
        if "embeddings" in name:
            return "forward: embeddings"
        return "forward: encoder + head"
    return "other (variable reads, step counter, ...)"


def worker_profile(args) -> dict:
    """Time python-side batch making vs session.run, then trace one step."""
    from bert_ad.compat import tf
    from bert_ad.parallel.checkpoints import WarmStart

    with tf.Graph().as_default():
        built, placement, _, _ = build_ours(args, 1000, args.variant)
        graph = built.graph
        warm = WarmStart(os.path.join(args.model_dir, "bert_model.ckpt"),
                         tf.global_variables())
        fetches = {"loss": graph.loss, "applied": graph.train_step,
                   "global_step": graph.step_after, "learning_rate": graph.learning_rate,
                   "grad_norm": graph.grad_norm}
        init = [tf.global_variables_initializer(), tf.local_variables_initializer()]
        # Without the training loop's prefetch thread, to time the Python side alone.
        stream = built.micro_batches(0)
        with tf.Session(config=placement.local_session_config()) as session:
            session.run(init)
            warm.restore(session)
            batch_time = run_time = 0.0
            for step in range(args.warmup + args.steps):
                start = time.perf_counter()
                feed = {}
                for placeholders, batch in zip(graph.placeholders, next(stream)):
                    for name, placeholder in placeholders.items():
                        feed[placeholder] = batch[name]
                middle = time.perf_counter()
                session.run(fetches, feed)
                end = time.perf_counter()
                if step >= args.warmup:
                    batch_time += middle - start
                    run_time += end - middle
            options = tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE)
            metadata = tf.RunMetadata()
            start = time.perf_counter()
            session.run(fetches, feed, options=options, run_metadata=metadata)
            traced_wall = time.perf_counter() - start
    traced = flops.traced_op_micros(metadata.step_stats, _category)
    return {"impl": "profile", "seq": args.seq, "padding": args.padding,
            "variant": args.variant, "onednn": measuring.onednn_state(),
            "towers": args.towers, "batch": args.batch, "steps": args.steps,
            "python_batch_sec_per_step": batch_time / args.steps,
            "session_run_sec_per_step": run_time / args.steps,
            "traced_step_wall_sec": traced_wall,
            "op_micros_by_category": traced["by_category"],
            "op_micros_by_type": traced["by_type"], "op_micros_by_node": traced["by_node"]}


def print_profile(result: dict) -> None:
    print(f"\n### Profile: seq {result['seq']}, {result['padding']} padding, "
          f"{result['towers']} tower(s) x {result['batch']}, variant {result['variant']}\n")
    print(measuring.cpu_line(result["onednn"]) + "\n")
    batch, run = result["python_batch_sec_per_step"], result["session_run_sec_per_step"]
    print(measuring.markdown_table(
        ["per step (mean of %d)" % result["steps"], "ms", "share"],
        [["python: training_batches + feed dict (prefetched when training)",
          measuring.fmt(batch * 1e3),
          measuring.fmt(100 * batch / (batch + run)) + "%"],
         ["session.run (graph)", measuring.fmt(run * 1e3),
          measuring.fmt(100 * run / (batch + run)) + "%"]]))
    for title, table in (("category", result["op_micros_by_category"]),
                         ("op type (top 15)", result["op_micros_by_type"]),
                         ("op (top 15)", result["op_micros_by_node"])):
        print()
        print(flops.op_time_table(f"traced step: op time by {title}", table))
    print(f"\ntraced step wall time {result['traced_step_wall_sec'] * 1e3:.0f} ms "
          "(tracing itself adds overhead)")


def print_profile_comparison(before: dict, after: dict) -> None:
    """Op time of one traced step by category and by op type, before and after."""
    print(f"\n### Profile before / after: seq {after['seq']}, {after['padding']} "
          f"padding, {after['towers']} tower(s) x {after['batch']}\n")
    print(f"before: {before['variant']}, {measuring.cpu_line(before['onednn'])}")
    print(f"after:  {after['variant']}, {measuring.cpu_line(after['onednn'])}")
    for title, key, top in (("category", "op_micros_by_category", None),
                            ("op type", "op_micros_by_type", 20)):
        names = sorted(set(before[key]) | set(after[key]),
                       key=lambda n: -max(before[key].get(n, 0), after[key].get(n, 0)))
        rows = [[n, measuring.fmt(before[key].get(n, 0) / 1e3),
                 measuring.fmt(after[key].get(n, 0) / 1e3),
                 measuring.fmt(after[key].get(n, 0) / before[key][n], 2)
                 if before[key].get(n) else "-"] for n in names[:top]]
        rows.append(["total", measuring.fmt(sum(before[key].values()) / 1e3),
                     measuring.fmt(sum(after[key].values()) / 1e3),
                     measuring.fmt(sum(after[key].values()) / sum(before[key].values()), 2)])
        print()
        print(measuring.markdown_table([f"traced step: op time by {title}", "before ms",
                                        "after ms", "after / before"], rows))
    print(f"\nsession.run per step (untraced mean): before "
          f"{before['session_run_sec_per_step'] * 1e3:.0f} ms, after "
          f"{after['session_run_sec_per_step'] * 1e3:.0f} ms. Op times are summed over "
          "threads (MatMul and _FusedMatMul are Eigen's kernels; _MklMatMul, "
          "_MklFusedMatMul and friends oneDNN's).")


def run_profile_comparison(args) -> int:
    """--profile_compare: the old default (oneDNN off, unfused AdamW, padding kept in
    the dense layers) vs ours now."""
    before = measuring.run_worker(
        worker_command(args, "profile", args.seq, args.padding, args.towers, args.batch,
                       variant="old_graph"),
        env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    after = measuring.run_worker(
        worker_command(args, "profile", args.seq, args.padding, args.towers, args.batch))
    print_profile_comparison(before, after)
    return 0


# ----------------------------------------------------------------------------
# Driver
# ----------------------------------------------------------------------------

def worker_command(args, impl: str, seq: int, padding: str, towers: int, batch: int,
                   variant: str = "library", no_peak: bool = False) -> list:
    return measuring.worker_command(
        WORKER_MODULE, impl, seq=seq, padding=padding, towers=towers, batch=batch,
        steps=args.steps, warmup=args.warmup, model_dir=args.model_dir,
        data_dir=args.data_dir, hf_dir=args.hf_dir,
        omp_wait_policy=args.omp_wait_policy if impl == "hf" else None,
        variant=variant if variant != "library" else None, no_peak=no_peak)


class Suite:
    """The runs of one suite and their results, keyed by configuration."""

    def __init__(self, args):
        self.args = args
        self.results = {}

    def run(self, impl: str, seq: int, padding: str, towers: int, batch: int) -> None:
        key = (impl, seq, padding, towers, batch)
        command = worker_command(self.args, impl, seq, padding, towers, batch)
        started = time.time()
        try:
            result = measuring.run_worker(command)
        except RuntimeError as e:
            print(f"  FAILED {key}: {e}", file=sys.stderr)
            return
        self.results.setdefault(key, []).append(result)
        if self.args.json:  # after every run: a long suite cut short keeps its data
            write_json(self.args.json, self.results)
        extra = ""
        if "examples_per_cpu_sec" in result:
            extra += f" ({result['examples_per_cpu_sec']:.1f} per CPU-sec)"
        if "tf_matmul_flops" in result:
            extra += (f", useful {result['useful_flops_per_sec'] / 1e9:.1f} GFLOP/s, "
                      f"matmul peak {_peak(result) / 1e9:.1f} GFLOP/s")
        print(f"  {impl:4s} seq {seq:3d} {padding:10s} {towers} x {batch:2d}: "
              f"{result['examples_per_sec']:7.1f} examples/sec{extra} "
              f"({time.time() - started:.0f} s, load {loadavg()})", file=sys.stderr,
              flush=True)

    def median(self, key, field: str = "examples_per_sec") -> float:
        values = [r.get(field) for r in self.results.get(key, [])]
        return measuring.median([v for v in values if v is not None])

    def paired(self, key_a, key_b, field: str = "examples_per_sec") -> str:
        """Median over rounds of a/b, each round's a and b measured back to back,
        with the range: "1.75 (1.51-1.88)"."""
        return measuring.paired_ratio(self.results.get(key_a, []),
                                      self.results.get(key_b, []), field)


def suite_plan(args) -> list:
    """One round of runs (impl, seq, padding, towers, batch), ours and theirs
    interleaved."""
    runs = []
    for seq in ([64] if args.quick else [int(x) for x in args.seqs.split(",")]):
        for padding in PADDINGS:
            runs.append(("ours", seq, padding, 1, 16))
            if seq == 64 and padding != "bucketed" and not args.quick:
                runs.append(("cli", seq, padding, 1, 16))
            if not args.skip_hf:
                runs.append(("hf", seq, padding, 1, 16))
            if not args.quick or padding == "dynamic":
                runs.append(("ours", seq, padding, 2, 16))
            # The overhead pair at 128 only where the shapes are fixed.
            if (seq == 64 and (not args.quick or padding == "dynamic")) or \
                    padding == "max_length":
                runs.append(("ours", seq, padding, 1, 32))
    return runs


def _peak(result: dict) -> float:
    """The best float32 matmul rate the worker measured (the FLOP/s ceiling)."""
    return max(result["tf_matmul_flops"], result["numpy_matmul_flops"],
               result["tf_model_matmul_flops"])


def _peak_cpu(result: dict) -> float:
    """The best matmul FLOPs per CPU-second the worker measured (0: not measured)."""
    return max(result.get(name + "_per_cpu_sec", 0.0) for name in (
        "tf_matmul_flops", "numpy_matmul_flops", "tf_model_matmul_flops"))


def peak_rss(runs: list) -> str:
    """The largest peak RSS (MB) of a configuration's runs ("-": recorded before it was)."""
    peaks = [r["peak_rss_mb"] for r in runs if "peak_rss_mb" in r]
    return measuring.fmt(max(peaks), 0) if peaks else "-"


PADDING_NAMES = {"max_length": "max_length", "dynamic": "dynamic",
                 "bucketed": "dynamic + length buckets"}


def print_tables(suite: Suite, args) -> None:
    seqs = sorted({k[1] for k in suite.results})
    shapes = ((1, 16), (2, 16), (1, 32))
    ours = [r for key, runs in suite.results.items() if key[0] == "ours" for r in runs]
    cpu = measuring.cpu_line(ours[0].get("onednn", "not recorded") if ours else None)
    print("\n### Training examples/sec (median of %d rounds, %d timed steps each)\n"
          % (args.repeats, args.steps))
    print(cpu + "\n")
    rows = []
    for seq in seqs:
        for padding in PADDINGS:
            keys = [("ours", seq, padding, t, b) for t, b in shapes]
            keys[1:1] = [("cli", seq, padding, 1, 16), ("hf", seq, padding, 1, 16)]
            for key in keys:
                if key not in suite.results:
                    continue
                name = {"ours": "bert_ad (train_loop, in process)",
                        "cli": "bert_ad (run_classifier_mgpu.py, its log)",
                        "hf": "HF transformers, PyTorch CPU"}[key[0]]
                rows.append([name, seq, PADDING_NAMES[padding], f"{key[3]} x {key[4]}",
                             measuring.fmt(suite.median(key)),
                             measuring.fmt(suite.median(key, "examples_per_cpu_sec")),
                             measuring.fmt(suite.median(key, "median_step_sec") * 1e3, 0),
                             peak_rss(suite.results[key]), len(suite.results[key])])
    print(measuring.markdown_table(["implementation", "max_seq_length", "padding",
                                    "towers x batch", "examples/sec", "examples/CPU-sec",
                                    "median step ms", "peak RSS MB", "runs"], rows,
                               "llllrrrrr"))
    print("\nexamples/sec: wall clock over the timed steps (the CLI row: the median "
          "of the examples/sec its trainer logs every 10 steps, first interval "
          "dropped). examples/CPU-sec: the same "
          "examples over the CPU time the process used in that window (all threads), "
          "which depends less on how much of the shared cores other jobs took.")

    if not args.skip_hf:
        print("\n### Ours / Hugging Face, 1 tower x 16: median (range) over rounds of "
              "the ratio of the two runs made back to back\n")
        print(cpu + "\n")
        rows = []
        pairs = [("max_length", "max_length", ">= 2.0"), ("dynamic", "dynamic", ">= 1.5"),
                 ("bucketed", "bucketed", ""), ("dynamic", "max_length", ""),
                 ("bucketed", "dynamic", "")]
        for seq in seqs:
            for mine, theirs, target in pairs:
                ours_key, hf_key = ("ours", seq, mine, 1, 16), ("hf", seq, theirs, 1, 16)
                if ours_key not in suite.results or hf_key not in suite.results:
                    continue
                rows.append([seq, f"ours {PADDING_NAMES[mine]} / HF "
                             f"{PADDING_NAMES[theirs]}", suite.paired(ours_key, hf_key),
                             suite.paired(ours_key, hf_key, "examples_per_cpu_sec"),
                             target if seq == 64 else ""])
        print(measuring.markdown_table(["max_seq_length", "comparison", "examples/sec ratio",
                                        "examples/CPU-sec ratio", "target"], rows, "llrrl"))
        print("\nHF bucketed = the same length-bucketed order as ours (the counterpart "
              "of TrainingArguments(group_by_length=True)), padded to the longest row.")

    print("\n### Useful-token FLOP/s vs this machine's matmul FLOP/s\n")
    print(cpu + "\n")
    rows = []
    for seq in seqs:
        for padding in PADDINGS:
            ours_16 = suite.results.get(("ours", seq, padding, 1, 16), [])
            for key in [("ours", seq, padding, t, b) for t, b in shapes] + [
                    ("hf", seq, padding, 1, 16)]:
                results = suite.results.get(key, [])
                if not results:
                    continue
                if key[0] == "ours":
                    peaks = [_peak(r) for r in results]
                elif ours_16:  # HF workers do not measure; use ours' same-config peak
                    peaks = [measuring.median([_peak(r) for r in ours_16])] * len(results)
                else:
                    continue
                useful = [r["useful_flops_per_sec"] / p for r, p in zip(results, peaks)]
                per_cpu = [r["useful_flops_per_cpu_sec"] / _peak_cpu(r) for r in results
                           if "useful_flops_per_cpu_sec" in r and _peak_cpu(r)]
                executed = ([r["executed_flops_per_sec"] / p
                             for r, p in zip(results, peaks)] if key[0] == "ours" else [])
                share = [r["real_tokens"] / r["padded_tokens"] for r in results]
                name = f"{key[3]} x {key[4]}" + ("" if key[0] == "ours" else " HF")
                rows.append([seq, PADDING_NAMES[padding], name,
                             measuring.fmt(suite.median(key, "useful_flops_per_sec") / 1e9),
                             measuring.fmt(measuring.median(peaks) / 1e9),
                             measuring.fmt(100 * measuring.median(useful)) + "%",
                             measuring.fmt(100 * measuring.median(per_cpu)) + "%"
                             if per_cpu else "-",
                             measuring.fmt(100 * measuring.median(executed)) + "%"
                             if executed else "-",
                             measuring.fmt(100 * measuring.median(share)) + "%"])
    print(measuring.markdown_table(
        ["max_seq_length", "padding", "towers x batch", "useful GFLOP/s",
         "matmul peak GFLOP/s", "useful / peak", "same per CPU-sec", "executed / peak",
         "real / padded tokens"], rows, "lllrrrrrr"))
    print("\nuseful: matmul FLOPs of the real (unpadded) tokens; executed: of the padded "
          "batch, what a graph keeping the padding runs (--noremove_padding; by default only "
          "attention runs over the padding: benchmarks/flops.py has the formula). "
          "matmul "
          "peak: the best float32 matmul rate each worker measured just before it "
          "trained (best of 5 runs each of a TensorFlow 2048^3, a numpy 2048^3 and the "
          "model-shaped TensorFlow [batch*seq, hidden] x [hidden, intermediate] "
          "product, before and after training); fractions are per run, then the "
          "median. same per CPU-sec: useful FLOPs per CPU-second of training over "
          "the best matmul FLOPs per CPU-second, the load-robust form. Target: "
          "useful / peak >= 40%.")

    print("\n### Multi-tower overhead: 2 towers x 16 vs 1 tower x 32 (same cores)\n")
    print(cpu + "\n")
    rows = []
    for seq in seqs:
        for padding in PADDINGS:
            two, one = ("ours", seq, padding, 2, 16), ("ours", seq, padding, 1, 32)
            if two in suite.results and one in suite.results:
                rows.append([seq, PADDING_NAMES[padding], measuring.fmt(suite.median(two)),
                             measuring.fmt(suite.median(one)), suite.paired(two, one),
                             suite.paired(two, one, "examples_per_cpu_sec")])
    print(measuring.markdown_table(["max_seq_length", "padding", "2 x 16 examples/sec",
                                    "1 x 32 examples/sec", "paired ratio",
                                    "paired ratio per CPU-sec"], rows, "llrrrr"))
    print("\nTarget: ratio >= 0.95 (overhead within 5%).")


def write_json(path: str, results: dict) -> None:
    """Raw results ({"machine", "results": [{"key", "runs"}]}), atomically."""
    measuring.write_json(path, {
        "machine": measuring.machine_description(),
        "results": [{"key": list(k), "runs": v} for k, v in results.items()]})


def load_json(path: str) -> dict:
    with open(path) as f:
        return {tuple(item["key"]): item["runs"] for item in json.load(f)["results"]}


def run_suite(args) -> int:
    print(measuring.machine_table())
    suite = Suite(args)
    plan = suite_plan(args)
    for round_index in range(args.repeats):
        print(f"round {round_index + 1}/{args.repeats}", file=sys.stderr, flush=True)
        # Alternate the order between rounds so drift in the machine's load
        # does not always favour the same configurations.
        for run in (plan if round_index % 2 == 0 else list(reversed(plan))):
            suite.run(*run)
    print_tables(suite, args)
    if args.profile_after:
        for padding in PADDINGS:
            command = worker_command(args, "profile", 64, padding, 1, 16)
            print_profile(measuring.run_worker(command))
    return 0


def run_compare(args) -> int:
    """--compare: COMPARISONS side by side, --repeats rounds in alternating order;
    ratios to HF and to our default, paired round by round."""
    print(measuring.machine_table())
    chosen = [c for c in COMPARISONS
              if not (c[1] == "hf" and args.skip_hf)
              and not (c[1] == "cli" and args.padding == "bucketed")]
    results = {}
    for round_index in range(args.repeats):
        for label, impl, variant, env in (chosen if round_index % 2 == 0
                                          else chosen[::-1]):
            command = worker_command(args, impl, args.seq, args.padding,
                                     1 if impl == "hf" else args.towers, args.batch,
                                     variant=variant)
            try:
                result = measuring.run_worker(command, env=env)
            except RuntimeError as e:
                print(f"  FAILED {label}: {e}", file=sys.stderr)
                continue
            results.setdefault(label, []).append(result)
            print(f"  {label}: {result['examples_per_sec']:6.1f} examples/sec "
                  f"(oneDNN {result.get('onednn', '-')}, load {result['loadavg']})",
                  file=sys.stderr, flush=True)
    default, hf = chosen[0][0], "HF transformers, PyTorch CPU"
    onednn = results[default][0]["onednn"] if results.get(default) else None
    print(f"\n### Side by side: max_seq_length {args.seq}, {PADDING_NAMES[args.padding]}, "
          f"{args.towers} x {args.batch}, {args.repeats} round(s), {args.steps} timed steps\n")
    print(measuring.cpu_line(onednn) + "\n")
    rows = []
    for label, impl, _, env in chosen:
        runs = results.get(label, [])
        if not runs:
            continue
        per_cpu = [r.get("examples_per_cpu_sec") for r in runs]
        useful = ([r["useful_flops_per_cpu_sec"] / _peak_cpu(r) for r in runs
                   if _peak_cpu(r)] if impl == "ours" else [])
        rows.append([label, " ".join(f"{k}={v}" for k, v in env.items()) or "-",
                     runs[0].get("onednn", "-").split(" ")[0] if impl != "hf" else "-",
                     measuring.fmt(measuring.median([r["examples_per_sec"] for r in runs])),
                     measuring.fmt(measuring.median(per_cpu)) if all(per_cpu) else "-",
                     measuring.paired_ratio(runs, results.get(hf, [])),
                     measuring.paired_ratio(runs, results.get(default, [])),
                     measuring.fmt(100 * measuring.median(useful)) + "%" if useful else "-",
                     peak_rss(runs)])
    print(measuring.markdown_table(
        ["configuration", "environment", "oneDNN", "examples/sec", "examples/CPU-sec",
         "/ HF", "/ our default", "useful FLOP/s / matmul peak (per CPU-sec)",
         "peak RSS MB"], rows, "lllrrrrrr"))
    print("\nRatios: median (range) over rounds of the two runs made back to back. "
          "Target: our default (and run_classifier_mgpu.py) / HF >= 1.5; useful / "
          "peak >= 40%.")
    if args.json:
        measuring.write_json(args.json, {"machine": measuring.machine_description(),
                                         "compare": results})
    return 0


def run_scaling(args) -> int:
    """Examples/sec for each tower count and the scaling efficiency vs 1 tower."""
    print(measuring.machine_table())
    counts = [int(x) for x in args.towers_scaling.split(",")]
    results = {}
    for towers in counts:
        command = worker_command(args, "ours", args.seq, args.padding, towers,
                                 args.batch, no_peak=True)
        results[towers] = measuring.run_worker(command)
    base = results[counts[0]]["examples_per_sec"] / counts[0]
    print(f"\n### Tower scaling: seq {args.seq}, {args.padding} padding, batch "
          f"{args.batch} per tower, {args.steps} timed steps\n")
    print(measuring.markdown_table(
        ["towers", "examples/sec", "per tower", "scaling efficiency"],
        [[t, measuring.fmt(r["examples_per_sec"]), measuring.fmt(r["examples_per_sec"] / t),
          measuring.fmt(100 * r["examples_per_sec"] / (t * base)) + "%"]
         for t, r in results.items()]))
    return 0


def main(argv=None) -> int:
    parser = measuring.parser_for(__doc__)
    measuring.add_minilm_flags(parser)
    measuring.add_round_flags(parser, quick="seq 64 only, 1 round, fewer steps")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per run")
    parser.add_argument("--warmup", type=int, default=None, help="untimed steps first")
    parser.add_argument("--skip_hf", action="store_true", help="no Hugging Face runs")
    parser.add_argument("--seqs", default="64,128",
                        help="max_seq_length values of the suite (not --quick)")
    parser.add_argument("--tables_from", default=None,
                        help="print the tables of an earlier --json file and exit")
    parser.add_argument("--profile_after", action="store_true",
                        help="after the suite, profile seq 64, 1 x 16, every padding")
    parser.add_argument("--profile", action="store_true",
                        help="only profile one configuration (--seq, --padding, ...)")
    parser.add_argument("--towers_scaling", default=None,
                        help="comma-separated tower counts: scaling table only")
    # One configuration (workers, --profile, --towers_scaling).
    measuring.add_worker_flag(parser, WORKERS)
    parser.add_argument("--seq", type=int, default=64, help="max_seq_length")
    parser.add_argument("--padding", choices=list(PADDINGS), default="dynamic",
                        help="bucketed = dynamic + --bucket_by_length")
    parser.add_argument("--towers", type=int, default=1)
    parser.add_argument("--batch", type=int, default=16, help="batch size per tower")
    parser.add_argument("--no_peak", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", choices=list(VARIANTS), default="library",
                        help="with --profile: the variant to profile")
    parser.add_argument("--compare", "--experiments", action="store_true",
                        help="side by side in one run: our default, oneDNN off, oneDNN "
                             "capped at AVX2, unfused AdamW, padding kept, the old "
                             "default, --sparse_embedding_updates, the CLI and HF (one "
                             "--seq/--padding), with ratios")
    parser.add_argument("--profile_compare", action="store_true",
                        help="profile one step of the old default (oneDNN off, unfused "
                             "AdamW, padding kept) and of ours now, side by side")
    parser.add_argument("--omp_wait_policy", choices=["PASSIVE", "ACTIVE", "default"],
                        default="PASSIVE",
                        help="OMP_WAIT_POLICY of the PyTorch runs (see worker_hf)")
    args = parser.parse_args(argv)
    if args.steps is None:
        args.steps = 15 if args.quick else 40
    if args.warmup is None:
        args.warmup = 3 if args.quick else 5
    if args.repeats is None:
        args.repeats = 1 if args.quick else 3

    if args.tables_from:
        suite = Suite(args)
        suite.results = load_json(args.tables_from)
        args.repeats = max(len(v) for v in suite.results.values())
        print_tables(suite, args)
        return 0
    if args.worker:
        # The cli worker's peak RSS is its launcher's (a child it waited for).
        return measuring.serve_worker(args, {"ours": worker_ours, "hf": worker_hf,
                                             "cli": worker_cli, "profile": worker_profile})
    if measuring.missing_inputs(args):
        return 2
    if args.profile:
        command = worker_command(args, "profile", args.seq, args.padding, args.towers,
                                 args.batch)
        print_profile(measuring.run_worker(command))
        return 0
    if args.towers_scaling:
        return run_scaling(args)
    if args.compare:
        return run_compare(args)
    if args.profile_compare:
        return run_profile_comparison(args)
    return run_suite(args)


if __name__ == "__main__":
    sys.exit(main())
