"""int8 against fp32 on the accuracy study's quick run, and which parts to quantize.

    python -m studies.int8_study                     # seeds 1,2,3
    python -m studies.int8_study --report_only

Per seed: the accuracy study's quick run (MiniLM-L6, the first 800
movie-review training sentences, 1 tower x 16, AdamW 5e-5, 2 epochs,
max_seq_length 64: studies/accuracy_study.py) trained by
run_classifier_mgpu.py, exported as ONNX fp32 (`--do_export
--export_format=onnx`), then quantized here in several ways with the
function --export_precision=int8 runs (bert_ad/serving/quantization.py):

  int8                          the encoder's matrices, one scale per output
                                column (what --export_precision=int8 does)
  int8 per-tensor               the encoder's matrices, one scale per matrix
  int8 per-tensor + embeddings  that, and the embedding tables' lookups
  int8 per-tensor + head        that, and the pooler's and the classifier's matrices

Each model scores the whole dev and test sets (400 sentences each) in ONNX
Runtime (bert_ad/inference/onnx_scorer.py, the task's own batches); accuracy
from the task's metrics (dev) and from its predictions against test.tsv's
labels; the TensorFlow checkpoint's own dev and test accuracy beside them.
Records go to docs/int8_runs.jsonl (one JSON object a model and seed).
No TensorFlow in this process: training and export are launcher processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from benchmarks import measuring
from benchmarks.measuring import CLASSIFIER, REPO, append_run, checkout_env, load_runs
from studies import accuracy_study as study

DEFAULT_RUNS = os.path.join(REPO, "docs", "int8_runs.jsonl")
DATASET = "movie_reviews"
# name: quantization.quantize's options
VARIANTS = {
    "int8": {"per_channel": True},
    "int8 per-tensor": {"per_channel": False},
    "int8 per-tensor + embeddings": {"per_channel": False, "embeddings": True},
    "int8 per-tensor + head": {"per_channel": False, "head": True},
}


def train_and_export(seed: int, args) -> tuple:
    """(the quick run's record, its fp32 ONNX export folder), made once."""
    spec = study.make_spec(DATASET, 1, 1, "adamw", "none", seed,
                           study.QUICK_MAX_TRAIN_EXAMPLES)
    output_dir = os.path.join(args.output_root, spec.name)
    record_path = os.path.join(output_dir, "record.json")
    export_dir = os.path.join(output_dir, "export_onnx")
    if not os.path.exists(record_path):
        record = study.run_one(spec, sys.executable, args.model_dir, args.data_dir,
                               args.output_root, keep_checkpoints=True)
        if record["status"] != "ok":
            raise RuntimeError(f"the quick run failed: {record.get('error')}")
        with open(record_path, "w") as f:
            json.dump(record, f)
    with open(record_path) as f:
        record = json.load(f)
    if not os.path.exists(export_dir):
        subprocess.run([sys.executable, CLASSIFIER, "--task_name=sentiment",
                        f"--output_dir={output_dir}", f"--vocab_file={args.model_dir}/vocab.txt",
                        f"--bert_config_file={args.model_dir}/bert_config.json",
                        f"--max_seq_length={study.MAX_SEQ_LENGTH}", "--do_export",
                        "--export_format=onnx", f"--export_dir={export_dir}"], check=True,
                       env=dict(os.environ, **checkout_env()))
    return record, export_dir


def accuracy_of(task, data, outputs) -> float:
    import numpy as np
    predicted = np.argmax(task.row_outputs(data, outputs)["predictions"], axis=-1)
    return float(np.mean(predicted == task.truth(data)))


def measure(seed: int, args) -> list:
    """One record per model (fp32 ONNX and each int8 variant) of this seed."""
    from bert_ad.data.processors import get_task
    from bert_ad.inference import layout, onnx_scorer
    from bert_ad.serving import quantization
    from bert_ad.tasks.classification import ClassificationTask

    trained, export_dir = train_and_export(seed, args)
    metadata = layout.read_metadata(export_dir)
    task = ClassificationTask(onnx_scorer.export_encoder(export_dir, metadata),
                              get_task("sentiment"), args.data_dir).with_labels(
                                  metadata.labels)
    splits = {"dev": task.read("dev"), "test": task.read("predict")}
    config = task.encoder.config
    fp32 = os.path.join(export_dir, layout.ONNX_FILE)
    models = {"fp32": (fp32, {})}
    for name, options in VARIANTS.items():
        path = os.path.join(args.output_root, f"seed{seed}_{name.replace(' ', '_')}.onnx")
        done = quantization.quantize(fp32, path, config.num_attention_heads,
                                     config.hidden_size, **options)
        models[name] = (path, done)
    records = []
    for name, (path, done) in models.items():
        record = {"seed": seed, "model": name, "megabytes": os.path.getsize(path) / 1e6,
                  "options": done, "tf_dev_accuracy": trained["dev_accuracy"],
                  "tf_test_accuracy": trained["test_accuracy"], "cpu": measuring.cpu_line()}
        for split, data in splits.items():
            started = time.perf_counter()
            outputs = onnx_scorer.score(task, data, 32, export_dir, metadata, path)
            record[f"{split}_seconds"] = time.perf_counter() - started
            record[f"{split}_accuracy"] = accuracy_of(task, data, outputs)
        records.append(record)
        print(f"seed {seed} {name}: dev {record['dev_accuracy']:.4f} test "
              f"{record['test_accuracy']:.4f} ({record['megabytes']:.1f} MB)", flush=True)
    return records


def report(records: list) -> str:
    by_model = {}
    for r in records:
        by_model.setdefault(r["model"], []).append(r)
    fp32 = {r["seed"]: r for r in by_model.get("fp32", [])}
    rows = []
    for name, runs in by_model.items():
        seeds = sorted(r["seed"] for r in runs)
        dev = [r["dev_accuracy"] for r in runs]
        test = [r["test_accuracy"] for r in runs]
        change = [r[f"{s}_accuracy"] - fp32[r["seed"]][f"{s}_accuracy"] for r in runs
                  for s in ("dev", "test") if r["seed"] in fp32]
        rows.append([name, ",".join(map(str, seeds)),
                     f"{100 * sum(dev) / len(dev):.2f}", f"{100 * sum(test) / len(test):.2f}",
                     " ".join(f"{100 * r['test_accuracy']:.2f}" for r in runs),
                     f"{100 * min(change):+.2f} to {100 * max(change):+.2f}" if change else "",
                     f"{sum(r['megabytes'] for r in runs) / len(runs):.1f}"])
    tf_dev = [r["tf_dev_accuracy"] for r in by_model.get("fp32", [])]
    tf_test = [r["tf_test_accuracy"] for r in by_model.get("fp32", [])]
    if tf_dev:
        rows.insert(0, ["TensorFlow checkpoint", "", f"{100 * sum(tf_dev) / len(tf_dev):.2f}",
                        f"{100 * sum(tf_test) / len(tf_test):.2f}",
                        " ".join(f"{100 * t:.2f}" for t in tf_test), "", ""])
    return "\n".join([records[0]["cpu"] if records else "", "", measuring.markdown_table(
        ["model", "seeds", "dev acc %", "test acc %", "test acc % per seed",
         "change vs ONNX fp32, dev and test (points)", "model MB"], rows,
        align="llrrlrr")])


def main(argv=None) -> int:
    parser = measuring.parser_for(__doc__)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--runs", default=DEFAULT_RUNS)
    parser.add_argument("--report_only", action="store_true")
    parser.add_argument("--cache", default=os.environ.get("BERT_AD_CACHE") or
                        os.path.expanduser("~/.cache/bert_ad"))
    args = parser.parse_args(argv)
    args.model, args.datasets = "minilm", [DATASET]
    args.model_dir = os.path.join(args.cache, study.MODELS["minilm"].cache_name)
    args.data_root = os.path.join(args.cache, "data")
    args.data_dir = os.path.join(args.data_root, DATASET)
    args.output_root = os.path.join(args.cache, "int8_study")
    if not args.report_only:
        study.prepare_inputs(args)
        done = {r["seed"] for r in load_runs(args.runs)}
        for seed in (int(s) for s in args.seeds.split(",")):
            if seed not in done:
                for record in measure(seed, args):
                    append_run(args.runs, record)
    print(report(load_runs(args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
