"""int8 against fp32 on People's Daily NER (CRF and softmax) and MRC, the Chinese tasks
(issues #44 and #53).

    python -m studies.int8_tasks_study ner ner-softmax mrc
    python -m studies.int8_tasks_study --report_only

Each task's fine-tuned model is exported from its output folder as ONNX fp32
and as ONNX int8 (`--do_export --export_format=onnx --export_precision=...`,
the launcher's own export), and all three score the same test split with
`--do_predict`: the checkpoint (TensorFlow), then each export
(`--predict_from_export`, which runs without TensorFlow). The figures come
from the result files against the gold file, the same code for all three:

  ner  the distillation study's NER teacher (studies/distill_study.py ner: the
       Chinese default fine-tuned with run_ner_mgpu.py --use_crf on 4,000
       People's Daily sentences; trained here with its flags when that study has
       not run); entity F1 (bert_ad.metrics.entities) of predict.txt's tags
       against test.txt's, every test sentence.
  ner-softmax  the same with the default tagger (--use_crf=false), trained here.
  windows  a long-document classifier: MiniLM fine-tuned here on the first 600
       whole movie reviews (`bert-ad data prepare movie_reviews_full`) as
       windows of 128 with attention pooling, docs/long_text.md's settings (8
       windows a review, mean pooling, Adam, 3 epochs of 8); accuracy of
       predict.txt on every test review.
  mrc  People's Daily MRC: docs/squad.md's 10,000-question run (the Chinese
       default, run_squad_mgpu.py --version_2_with_negative, 1 tower x 32, 368
       steps, the span head at 30x; --mrc_model), scored on its 4,000 test
       questions; exact match and F1 (CMRC 2018 style, bert_ad.metrics.squad)
       of predictions.json against test.json.

One record per task and model goes to --runs (docs/int8_runs.jsonl, beside
the classifier's), with the int8 export's activation scales ("static" since
issue #53; records without the field were made with dynamic ones); a task
already recorded with the scales the export now makes is skipped.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Dict, List, Optional, Sequence

from benchmarks import measuring
from benchmarks.measuring import REPO, append_run, load_runs
from bert_ad.data.conll import read_conll
from bert_ad.metrics.entities import entity_metrics
from bert_ad.metrics.squad import detect_style, score_answers
from bert_ad.parallel.checkpoint_files import step_checkpoints
from bert_ad.resources.assets import cache_dir
from bert_ad.inference import layout
from studies.study_runner import read_test_predictions
from studies.distill_study import NER_SETTINGS, TEACHER_LEARNING_RATE

NER = os.path.join(REPO, "run_ner_mgpu.py")
CLASSIFIER = os.path.join(REPO, "run_classifier_mgpu.py")
SQUAD = os.path.join(REPO, "run_squad_mgpu.py")
MODELS = ("checkpoint", "onnx fp32", "onnx int8")
# What --export_precision=int8 measures itself on (the dev split's first rows);
# the figures here are the whole test split's.
INT8_DEV_ROWS = 300


def model_flags(model_dir: str) -> List[str]:
    return [f"--vocab_file={model_dir}/pieces.tsv",
            f"--bert_config_file={model_dir}/bert_config.json"]


def ner_setup(args, use_crf: bool) -> dict:
    """A NER model's folder and its flags: the CRF tagger is the distillation
    study's teacher when that study has run; otherwise (and for the softmax
    tagger) trained here with the teacher's flags."""
    tagger = f"--use_crf={'true' if use_crf else 'false'}"
    output_dir = os.path.join(args.distill_dir, "ner-teacher")
    if not use_crf or not step_checkpoints(output_dir):
        output_dir = os.path.join(args.work_dir, "ner-crf" if use_crf else "ner-softmax",
                                  "model")
    flags = model_flags(args.model_dir) + [f"--data_dir={args.ner_dir}",
                                           "--max_seq_length=128", tagger]
    if not step_checkpoints(output_dir):
        settings = [f for f in NER_SETTINGS if not f.startswith("--use_crf")]
        run = launch([sys.executable, NER] + flags + settings + [
            f"--init_checkpoint={args.model_dir}/bert_model.ckpt", "--seed=1",
            f"--max_train_examples={args.ner_sentences}", "--num_train_epochs=1",
            f"--learning_rate={TEACHER_LEARNING_RATE:g}", f"--output_dir={output_dir}"],
            output_dir + ".log")
        if not run.ok:
            sys.exit(f"error: training the NER model failed: {run.error}")
    return {"launcher": NER, "output_dir": output_dir, "gold": os.path.join(
        args.ner_dir, "test.txt"), "flags": flags, "int8_flags": [],
        "predict_flags": ["--predict_file=test.txt", "--predict_batch_size=32"]}


def windows_setup(args) -> dict:
    """The long-document classifier's folder (trained here once) and its flags."""
    output_dir = os.path.join(args.work_dir, "windows", "model")
    if not os.path.isfile(os.path.join(args.windows_dir, "test.tsv")):
        sys.exit(f"error: {args.windows_dir} has no test.tsv: run `bert-ad data prepare "
                 f"movie_reviews_full --output_dir={args.windows_dir}` first")
    minilm = args.minilm_dir
    flags = ["--task_name=sentiment", f"--data_dir={args.windows_dir}",
             f"--vocab_file={minilm}/vocab.txt", f"--bert_config_file={minilm}/bert_config.json",
             "--max_seq_length=128", "--long_text=windows", "--window_pooling=attention",
             "--window_stride=63", "--max_windows=8", "--pooling=mean"]
    if not step_checkpoints(output_dir):
        run = launch([sys.executable, CLASSIFIER] + flags + [
            f"--init_checkpoint={minilm}/bert_model.ckpt", "--do_train", "--n_gpus=1",
            "--max_train_examples=600", "--train_batch_size=8", "--learning_rate=5e-5",
            "--num_train_epochs=3", "--optimizer=adam", "--seed=1",
            "--save_checkpoints_steps=100000", "--keep_checkpoint_max=1",
            f"--output_dir={output_dir}"], output_dir + ".log")
        if not run.ok:
            sys.exit(f"error: training the windows classifier failed: {run.error}")
    return {"launcher": CLASSIFIER, "output_dir": output_dir, "gold": args.windows_dir,
            "flags": flags, "int8_flags": [], "predict_flags": ["--predict_batch_size=32"]}


def mrc_setup(args) -> dict:
    """The MRC model: --mrc_model (docs/squad.md's 10,000-question run, the span head at
    30x), else fine-tuned here once on --mrc_dir/train.json."""
    output_dir = args.mrc_model or os.path.join(args.work_dir, "mrc")
    flags = model_flags(args.model_dir) + [
        "--version_2_with_negative", "--max_seq_length=128", "--doc_stride=64",
        "--max_query_length=16"]
    predict_flags = [f"--predict_file={args.mrc_dir}/test.json", "--predict_batch_size=64"]
    if not step_checkpoints(output_dir):
        run = launch([sys.executable, SQUAD] + flags + [
            f"--init_checkpoint={args.model_dir}/bert_model.ckpt",
            f"--train_file={args.mrc_dir}/train.json", "--do_train", "--n_gpus=1",
            "--train_batch_size=32", "--learning_rate=5e-5", "--num_train_epochs=1",
            "--seed=12345", "--save_checkpoints_steps=100000", f"--output_dir={output_dir}"],
            output_dir + ".log")
        if not run.ok:
            sys.exit(f"error: training the MRC model failed: {run.error}")
    # An int8 export measures itself on the dev split: here the test file's first rows.
    return {"launcher": SQUAD, "output_dir": output_dir,
            "gold": os.path.join(args.mrc_dir, "test.json"), "flags": flags,
            "int8_flags": [f"--dev_file={args.mrc_dir}/test.json"],
            "predict_flags": predict_flags}


def launch(command: List[str], log_path: str) -> measuring.LauncherRun:
    """A launcher run to its end from this checkout, its output in log_path."""
    return measuring.launch_logged(command, log_path,
                                   env=dict(os.environ, **measuring.checkout_env()))


def export(setup: dict, precision: str, work_dir: str) -> str:
    """The fine-tuned folder's newest checkpoint exported as ONNX (once); int8 measures
    itself on the dev split's first INT8_DEV_ROWS rows."""
    export_dir = os.path.join(work_dir, f"export_{precision}")
    if not os.path.isfile(layout.metadata_path(export_dir)):
        shutil.rmtree(export_dir, ignore_errors=True)
        int8_flags = setup["int8_flags"] + [f"--max_eval_examples={INT8_DEV_ROWS}"]
        run = launch([sys.executable, setup["launcher"]] + setup["flags"] + [
            f"--output_dir={setup['output_dir']}", "--do_export", "--export_format=onnx",
            f"--export_precision={precision}", f"--export_dir={export_dir}"]
            + (int8_flags if precision == "int8" else []),
            os.path.join(work_dir, f"export_{precision}.log"))
        if not run.ok:
            sys.exit(f"error: the {precision} export failed: {run.error}")
    return export_dir


def predict(setup: dict, model: str, exports: Dict[str, str], output_dir: str):
    """`--do_predict` with the checkpoint (into its own folder) or an export (into
    output_dir): (how the run went, the folder holding its result files)."""
    if model == "checkpoint":
        flags = setup["flags"] + setup["predict_flags"] + [
            f"--output_dir={setup['output_dir']}", "--do_predict"]
        return launch([sys.executable, setup["launcher"]] + flags,
                      output_dir + ".log"), setup["output_dir"]
    shutil.rmtree(output_dir, ignore_errors=True)
    flags = [f for f in setup["flags"] + setup["predict_flags"]
             if not f.startswith(("--vocab_file", "--bert_config"))]
    run = launch([sys.executable, setup["launcher"]] + flags + [
        f"--output_dir={output_dir}", "--do_predict",
        f"--predict_from_export={exports[model.split()[1]]}"], output_dir + ".log")
    return run, output_dir


def ner_figures(setup: dict, result_dir: str) -> dict:
    gold = read_conll(setup["gold"])
    predicted = read_conll(os.path.join(result_dir, "predict.txt"))
    metrics = entity_metrics([s.tags for s in gold.sentences],
                             [s.tags for s in predicted.sentences])
    return {"f1": 100 * metrics["eval_f1"], "precision": 100 * metrics["eval_precision"],
            "recall": 100 * metrics["eval_recall"], "sentences": len(gold.sentences)}


def mrc_figures(setup: dict, result_dir: str) -> dict:
    with open(setup["gold"], encoding="utf-8") as f:
        squad = json.load(f)["data"]
    paragraphs = [p for article in squad for p in article["paragraphs"]]
    golds = {q["id"]: [a["text"] for a in q.get("answers", [])]
             for p in paragraphs for q in p["qas"]}
    with open(os.path.join(result_dir, "predictions.json"), encoding="utf-8") as f:
        predictions = json.load(f)
    scores = score_answers(golds, predictions, detect_style([p["context"] for p in paragraphs]))
    return {"exact_match": scores["exact_match"], "f1": scores["f1"],
            "questions": scores["questions"]}


def windows_figures(setup: dict, result_dir: str) -> dict:
    """Accuracy of predict.txt's label indices; the labels are the model folder's
    (an export's predictions are written where no labels.txt is)."""
    labels, examples, predicted = read_test_predictions(setup["gold"], result_dir,
                                                        labels_dir=setup["output_dir"])
    right = sum(labels[p] == e.label for p, e in zip(predicted, examples))
    return {"accuracy": 100 * right / len(examples), "reviews": len(examples)}


TASKS = ("ner", "ner-softmax", "mrc", "windows")
SETUPS = {"ner": lambda args: ner_setup(args, use_crf=True),
          "ner-softmax": lambda args: ner_setup(args, use_crf=False),
          "mrc": mrc_setup, "windows": windows_setup}
FIGURES = {"ner": ner_figures, "ner-softmax": ner_figures, "mrc": mrc_figures,
           "windows": windows_figures}


def main_figure(record: dict) -> float:
    """A record's figure: F1 (ner, mrc) or accuracy (windows)."""
    return record.get("f1", record.get("accuracy"))


def scales_of(record: dict) -> str:
    """The int8 export's activation scales a record was made with."""
    return record.get("int8_scales", "dynamic")


def run_task(task: str, args) -> List[dict]:
    setup = SETUPS[task](args)
    work_dir = os.path.join(args.work_dir, task)
    exports = {p: export(setup, p, work_dir) for p in ("fp32", "int8")}
    activations = (layout.read_metadata(exports["int8"]).onnx.get("int8") or {}).get(
        "activations", "")
    scales = "static" if "static" in activations else "dynamic"
    figures = FIGURES[task]
    records = []
    for model in MODELS:
        run, result_dir = predict(setup, model, exports, os.path.join(work_dir, model.replace(
            " ", "_")))
        record = {"study": "int8_tasks", "task": task, "model": model, "int8_scales": scales,
                  "wall_seconds": run.wall_seconds, "peak_rss_mb": round(run.peak_rss_mb),
                  "cpu": measuring.cpu_line(), "loadavg": measuring.loadavg()}
        if not run.ok:
            records.append(dict(record, status="failed", error=run.error))
            continue
        record.update(status="ok", **figures(setup, result_dir))
        if model != "checkpoint":
            export_dir = exports[model.split()[1]]
            record["megabytes"] = round(os.path.getsize(
                os.path.join(export_dir, layout.ONNX_FILE)) / 1e6, 1)
            record["int8"] = layout.read_metadata(export_dir).onnx.get("int8")
        records.append(record)
    return records


def report(records: Sequence[dict]) -> str:
    rows = []
    for scales in ("dynamic", "static"):
        for task in TASKS:
            mine = {r["model"]: r for r in records if r.get("study") == "int8_tasks"
                    and r["task"] == task and r.get("status") == "ok"
                    and scales_of(r) == scales}
            base = mine.get("onnx fp32")
            for model in MODELS:
                r = mine.get(model)
                if r is None:
                    continue
                score = main_figure(r)
                change = f"{score - main_figure(base):+.2f}" if base else "-"
                rows.append([task, scales, model, f"{score:.2f}", change,
                             f"{r['exact_match']:.2f}" if "exact_match" in r else
                             f"{r['precision']:.2f}" if "precision" in r else "-",
                             f"{r.get('megabytes', '-')}", f"{r['wall_seconds']:.0f}",
                             r["cpu"].split("(")[0].replace("CPU: ", "").strip()])
    return measuring.markdown_table(
        ["task", "int8 scales", "model", "F1 (accuracy: windows)", "vs ONNX fp32",
         "EM (mrc) / precision (ner)", "model.onnx MB", "predict wall s", "CPU"], rows,
        align="lllrrrrrl")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("tasks", nargs="*", help="of " + ", ".join(TASKS))
    parser.add_argument("--ner_sentences", type=int, default=4000,
                        help="training sentences of a NER model trained here")
    parser.add_argument("--model_dir", default=os.path.join(cache_dir(), "e5_small_zh_en"))
    parser.add_argument("--ner_dir",
                        default=os.path.join(cache_dir(), "data", "peoples_daily_ner"))
    parser.add_argument("--mrc_dir", default=os.path.join(cache_dir(), "squad_run10k_43"),
                        help="train.json and test.json (studies/squad_run.py's, "
                        "--train_questions=10000 --test_questions=4000)")
    parser.add_argument("--mrc_model", default=os.path.join(
        cache_dir(), "squad_run10k_43", "ours1-adam-head30"),
        help="a fine-tuned MRC output folder (docs/squad.md's 10,000-question run); "
        "empty or without a checkpoint: trained here on --mrc_dir")
    parser.add_argument("--windows_dir",
                        default=os.path.join(cache_dir(), "data", "movie_reviews_full"))
    parser.add_argument("--minilm_dir", default=os.path.join(cache_dir(), "minilm_google"),
                        help="MiniLM-L6 as a Google checkpoint (scripts/fetch_minilm.sh)")
    parser.add_argument("--distill_dir", default=os.path.join(cache_dir(), "distill_study"))
    parser.add_argument("--work_dir", default=os.path.join(cache_dir(), "int8_tasks_study"))
    parser.add_argument("--runs", default=os.path.join(REPO, "docs", "int8_runs.jsonl"))
    parser.add_argument("--report_only", action="store_true")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.tasks) - set(TASKS))
    if unknown:
        parser.error(f"unknown tasks {unknown}: choose of {', '.join(TASKS)}")
    # The export now writes static scales (issue #53): what dynamic ones measured
    # stays in the records and the report, and is not taken for this.
    done = {r["task"] for r in load_runs(args.runs) if r.get("study") == "int8_tasks"
            and r.get("status") == "ok" and scales_of(r) == "static"}
    for task in [] if args.report_only else args.tasks:
        if task in done:
            continue
        for record in run_task(task, args):
            append_run(args.runs, record)
    print(measuring.cpu_line())
    print(report(load_runs(args.runs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
