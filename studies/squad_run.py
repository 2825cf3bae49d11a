"""People's Daily MRC (SQuAD v2.0) with the Chinese model: ours on 1 and 2 towers vs Hugging Face.

    python -m studies.squad_run                       # the runs of docs/squad.md
    python -m studies.squad_run --quick               # minutes: fewer questions
    python -m studies.squad_run --report_only         # the tables from the records
    python -m studies.squad_run --sizes=1000,2000,5000 --seeds=2,3 --dev_questions=1000 \
        --epochs=2 --test_questions=3000 --runs=ours2-adam,ours1-adam,hf-adam-head
                                                      # issue 56: the default over sizes
    python -m studies.squad_run --model_dir=DIR --data_dir=DIR --runs=ours1,hf

Data: `bert-ad data prepare peoples_daily_mrc` (built into --data_dir when
missing); the first --train_questions questions of train.json and the first
--test_questions of test.json (the whole test split by default). Model: the
project's Chinese model (scripts/fetch_chinese_model.sh, built when missing)
or any Google-layout folder (--model_dir: bert_model.ckpt, bert_config.json,
vocab.txt or pieces.tsv).

Runs, each in a fresh process, one JSON record each in --records
(docs/squad_runs.jsonl; a run already recorded is skipped):

  ours1, ours2  run_squad_mgpu.py --version_2_with_negative on 1 tower x B and
                2 towers x B/2 (the same global batch B, the same steps), train
                -> predict -> eval on the test questions; examples/sec from its
                train_results.txt (windows per second of the training loop); the
                span head at --head_learning_rate_multiplier (run_squad_mgpu.py's
                default, 30x, unless given; records before issue 43 carry no such
                setting: their head trained at 1x)
  ours2-adam-nodev, ours1-adam-nodev
                the same training without --dev_file and --do_eval, as a user
                without a dev file runs it: the null threshold is chosen on the
                training questions (issue 56); its figures from the test file's
                predictions.json / null_odds.json, not eval_results.txt
  hf            transformers' BertForQuestionAnswering on PyTorch CPU, the
                encoder converted from the same checkpoint (bert_ad.convert
                google2hf; its fresh qa_outputs head drawn by PyTorch), trained
                on the same windows (bert_ad's features: the same tokenizer,
                doc_stride, targets) with the same hyper-parameters (AdamW, weight
                decay 0.01 but biases and LayerNorm, clip 1.0, linear warmup 10%
                and decay, batch B padded to its longest window with the vocab's
                padding piece, one seeded shuffle per epoch); its logits go
                through our answer search and metric, so only the model and its
                training differ
  hf-adam       the same with exactly the update of ours*-adam: torch's AdamW with
                weight decay 0 (= bias-corrected Adam, eps 1e-6) and Google's
                learning-rate schedule (warmup to the peak, then
                peak * (1 - step / steps), as run_squad_mgpu.py), where `hf` uses
                transformers' (decay from the peak at the end of warmup: about
                1/0.9 of Google's rate after warmup)
  hf-adam-head  hf-adam with its span head (qa_outputs) at ours' head rate
                (--head_learning_rate_multiplier): issue 43's cause, tried on the
                reference

The report: EM/F1 (CMRC2018's definitions, overall / with an answer / without)
at the default null threshold (0) and at the best one, and training
examples/sec of each, with ours / HF; and the F1 at 0 and at the best threshold
on a split with few unanswerable questions (`few_unanswerable`: every test
question with an answer, and unanswerable ones, evenly spaced, for 10%).

The Hugging Face model is padded with the vocab's padding piece (<pad>, id 1,
in the Chinese default's piece list) and told that id (pad_token_id, whose
embedding row it never updates). Records before issue 43 padded with id 0,
which in that piece list is <s> = [CLS] (docs/squad.md, "Why Hugging Face
answered more").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from benchmarks import measuring
from benchmarks.measuring import REPO, append_run, load_runs, run_launcher

LAUNCHER = os.path.join(REPO, "run_squad_mgpu.py")
WORKER_MODULE = "studies.squad_run"
RECORDS = os.path.join(REPO, "docs", "squad_runs.jsonl")
CACHE = os.environ.get("BERT_AD_CACHE") or os.path.expanduser("~/.cache/bert_ad")
# On request (--runs=...): ours1-adam / ours2-adam (bias-corrected Adam, the task's
# default) and hf-adam (Hugging Face with exactly that update and Google's schedule).
RUNS = ("ours1", "ours2", "hf")
HF_RUNS = ("hf", "hf-adam", "hf-adam-head")
WEIGHT_DECAY, CLIP_NORM, WARMUP = 0.01, 1.0, 0.1
FEW_UNANSWERABLE_SHARE = 0.1
NO_DEV = "-nodev"  # ours*-nodev: no dev file; the threshold chosen on the training questions


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", default="", help="Google-layout model (default: the "
                   "Chinese model of scripts/fetch_chinese_model.sh, built if missing)")
    p.add_argument("--data_dir", default=os.path.join(CACHE, "peoples_daily_mrc"))
    p.add_argument("--work_dir", default=os.path.join(CACHE, "squad_run"))
    p.add_argument("--records", default=RECORDS)
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--train_questions", type=int, default=20000)
    p.add_argument("--test_questions", type=int, default=0, help="0: all of test.json")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch", type=int, default=32, help="global batch (windows)")
    p.add_argument("--learning_rate", type=float, default=5e-5)
    p.add_argument("--max_seq_length", type=int, default=128)
    p.add_argument("--doc_stride", type=int, default=64)
    p.add_argument("--max_query_length", type=int, default=16)
    p.add_argument("--seed", type=int, default=12345)
    p.add_argument("--head_learning_rate_multiplier", type=float, default=None,
                   help="ours' span head rate (default: run_squad_mgpu.py's, 30x since "
                        "issue 43), and hf-adam-head's; hf and hf-adam train their head at "
                        "the encoder's rate")
    p.add_argument("--dev_questions", type=int, default=0,
                   help="a dev file of the questions of train.json after the training ones: "
                        "ours answer the test file at the threshold chosen on it (the "
                        "default of run_squad_mgpu.py with --dev_file), hf-* the same way")
    p.add_argument("--sizes", default="", help="comma-separated --train_questions values: "
                   "the runs for each size and each of --seeds (work folders q<size>_s<seed>)")
    p.add_argument("--seeds", default="", help="with --sizes (default: --seed)")
    p.add_argument("--quick", action="store_true",
                   help="2,000 training and 800 test questions")
    p.add_argument("--report_only", action="store_true")
    p.add_argument("--worker", choices=HF_RUNS, help=argparse.SUPPRESS)
    p.add_argument("--settings", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.train_questions, args.test_questions = 2000, 800
    return args


def ensure_model(args) -> str:
    if args.model_dir:
        return args.model_dir
    out = subprocess.run(["bash", os.path.join(REPO, "scripts", "fetch_chinese_model.sh")],
                         stdout=subprocess.PIPE, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def ensure_data(args) -> str:
    if not os.path.exists(os.path.join(args.data_dir, "test.json")):
        subprocess.run([sys.executable, "-m", "bert_ad", "data", "prepare",
                        "peoples_daily_mrc", f"--output_dir={args.data_dir}"], check=True)
    return args.data_dir


def subset(path: str, count: int, out_path: str, skip: int = 0) -> str:
    """The first `count` questions of a SQuAD file (all for 0) after its first `skip`,
    as out_path."""
    with open(path, encoding="utf-8") as f:
        squad = json.load(f)
    if count:
        left, articles = count, []
        for article in squad["data"]:
            paragraphs = []
            for paragraph in article["paragraphs"]:
                skipped = min(skip, len(paragraph["qas"]))
                skip -= skipped
                qas = paragraph["qas"][skipped:skipped + left]
                left -= len(qas)
                if qas:
                    paragraphs.append(dict(paragraph, qas=qas))
            if paragraphs:
                articles.append(dict(article, paragraphs=paragraphs))
            if left <= 0:
                break
        squad = dict(squad, data=articles)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(squad, f, ensure_ascii=False)
    return out_path


def vocab_of(model_dir: str) -> tuple:
    """(vocab file, do_lower_case): pieces.tsv is cased (multilingual-e5)."""
    pieces = os.path.join(model_dir, "pieces.tsv")
    if os.path.exists(pieces):
        return pieces, False
    return os.path.join(model_dir, "vocab.txt"), True


def settings_of(args, model_dir: str, train: str, test: str, dev: str = "") -> dict:
    vocab, lower = vocab_of(model_dir)
    from bert_ad.cli.squad import FLAG_DEFAULTS  # (neither imports TensorFlow)
    from bert_ad.data.tokenization import make_tokenizer
    head = args.head_learning_rate_multiplier
    if head is None:
        head = dict(FLAG_DEFAULTS)["head_learning_rate_multiplier"]
    # Records before issue 43 carry no head_learning_rate_multiplier: ours' head at 1x.
    return {"hf_pad_id": make_tokenizer(vocab, lower).pad_id,
            "head_learning_rate_multiplier": head,
            "model_dir": model_dir, "vocab_file": vocab, "do_lower_case": lower,
            "train_file": train, "test_file": test, "epochs": args.epochs,
            "batch": args.batch, "learning_rate": args.learning_rate,
            "max_seq_length": args.max_seq_length, "doc_stride": args.doc_stride,
            "max_query_length": args.max_query_length, "seed": args.seed,
            "train_questions": args.train_questions, "test_questions": args.test_questions,
            # (only when asked: records before issue 56 keep matching their settings)
            **({"dev_file": dev, "dev_questions": args.dev_questions} if dev else {})}


# --- ours -------------------------------------------------------------------------------

def ours_command(s: dict, run: str, output_dir: str) -> list:
    """run_squad_mgpu.py's command for `run`: ours1 / ours2 (Google's AdamW, as users run
    it) or ours1-adam / ours2-adam (bias-corrected Adam, --optimizer=adam, the update rule
    torch's AdamW takes); with `-nodev` (ours2-adam-nodev) the same training as a user
    without a dev file runs it: no --dev_file, no --do_eval, so the null threshold is
    chosen on the training questions (issue 56)."""
    name, no_dev = (run[:-len(NO_DEV)], True) if run.endswith(NO_DEV) else (run, False)
    towers, _, optimizer = name[len("ours"):].partition("-")
    towers, optimizer = int(towers), optimizer or "adamw"
    command = [sys.executable, LAUNCHER, f"--vocab_file={s['vocab_file']}",
               f"--do_lower_case={s['do_lower_case']}",
               f"--bert_config_file={os.path.join(s['model_dir'], 'bert_config.json')}",
               f"--init_checkpoint={os.path.join(s['model_dir'], 'bert_model.ckpt')}",
               f"--train_file={s['train_file']}", f"--predict_file={s['test_file']}",
               "--do_train", "--do_predict", *([] if no_dev else ["--do_eval"]),
               "--version_2_with_negative",
               f"--n_gpus={towers}", f"--train_batch_size={s['batch'] // towers}",
               f"--predict_batch_size={64 // towers}", f"--learning_rate={s['learning_rate']}",
               f"--num_train_epochs={s['epochs']}", f"--max_seq_length={s['max_seq_length']}",
               f"--doc_stride={s['doc_stride']}", f"--max_query_length={s['max_query_length']}",
               f"--seed={s['seed']}", f"--output_dir={output_dir}",
               "--save_checkpoints_steps=100000", f"--optimizer={optimizer}",
               f"--head_learning_rate_multiplier={s['head_learning_rate_multiplier']}"]
    if s.get("dev_file") and not no_dev:  # no threshold flag: chosen on the dev file
        command.append(f"--dev_file={s['dev_file']}")
    return command


def run_ours(s: dict, run: str, work_dir: str) -> dict:
    """One run of ours (ours_command) and its figures on the test questions."""
    output_dir = os.path.join(work_dir, run)
    command = ours_command(s, run, output_dir)
    run = run_launcher(command, output_dir, log_name="log.txt")
    if not run.ok:
        return {"status": "failed", "error": run.error, "command": command}
    figures = {k: float(v) for k, v in run.evaluated.items() if _is_number(v)}
    figures.update(outputs_figures(output_dir, s["test_file"]))
    with open(os.path.join(output_dir, "log.txt"), encoding="utf-8") as f:
        onednn = measuring.logged_onednn_state(f.read())
    return {"status": "ok", "command": command, "eval": figures,
            "examples_per_sec": float(run.trained["train_examples_per_sec"]),
            "wall_seconds": run.wall_seconds, "peak_rss_mb": run.peak_rss_mb,
            "onednn": onednn}


def few_unanswerable(golds: dict, share: float = FEW_UNANSWERABLE_SHARE) -> list:
    """The ids of a split with few unanswerable questions: every question with an
    answer, and unanswerable ones evenly spaced through the file for `share` of it."""
    answerable = [q for q, answers in golds.items() if answers]
    unanswerable = [q for q, answers in golds.items() if not answers]
    wanted = min(len(unanswerable), round(share / (1 - share) * len(answerable)))
    step = len(unanswerable) / wanted if wanted else 0
    kept = {unanswerable[int(i * step)] for i in range(wanted)}
    return [q for q in golds if golds[q] or q in kept]


def few_unanswerable_figures(golds: dict, predictions: dict, null_odds: dict,
                             best_spans: dict) -> dict:
    """F1 at the run's threshold and at the best one on `few_unanswerable`'s split."""
    from bert_ad.metrics.squad import score_answers
    ids = few_unanswerable(golds)
    figures = score_answers({q: golds[q] for q in ids}, predictions, "cmrc2018",
                            {q: null_odds[q] for q in ids}, best_spans)
    return {"eval_few_unanswerable_f1": figures["f1"],
            "eval_few_unanswerable_best_f1": figures["best_f1"],
            "eval_few_unanswerable_best_f1_thresh": figures["best_f1_thresh"],
            "eval_few_unanswerable_questions": len(ids),
            "eval_few_unanswerable_no_answer_questions": figures.get("no_answer_questions", 0)}


def answers_at(threshold: float, null_odds: dict, best_spans: dict) -> dict:
    """Each question's answer at a null threshold: "" where its null odds exceed it
    (Google's rule), else its best span."""
    return {q: "" if odds > threshold or not best_spans.get(q) else best_spans[q]
            for q, odds in null_odds.items()}


def test_figures(golds: dict, predictions: dict, null_odds: dict, best_spans: dict) -> dict:
    """The test file's F1 (overall, with an answer) as answered by the run (`predictions`:
    at its threshold), at Google's 0, and at the test file's best threshold."""
    from bert_ad.metrics.squad import score_answers
    as_run = score_answers(golds, predictions, "cmrc2018", null_odds, best_spans)
    at_zero = score_answers(golds, answers_at(0.0, null_odds, best_spans), "cmrc2018")
    return {"test_f1": as_run["f1"], "test_has_answer_f1": as_run["has_answer_f1"],
            "test_f1_at_0": at_zero["f1"], "test_has_answer_f1_at_0": at_zero["has_answer_f1"],
            "test_best_f1": as_run["best_f1"], "test_best_f1_thresh": as_run["best_f1_thresh"]}


def calibration_figures(golds: dict, null_odds: dict) -> dict:
    """Where the null odds lie: their median for questions with an answer and without,
    and the share of questions with an answer whose odds exceed Google's 0 (answered ""
    at 0)."""
    answerable = [null_odds[q] for q in golds if golds[q]]
    unanswerable = [null_odds[q] for q in golds if not golds[q]]
    return {"test_answerable_null_odds_median": statistics.median(answerable),
            "test_unanswerable_null_odds_median": statistics.median(unanswerable),
            "test_answerable_over_0": sum(o > 0 for o in answerable) / len(answerable)}


def outputs_figures(output_dir: str, test_file: str) -> dict:
    """few_unanswerable_figures and test_figures of a run_squad_mgpu.py run's
    predictions.json, null_odds.json and nbest_predictions.json (its best span: the
    first non-empty), and the threshold it answered with (answer_settings.json, when it
    chose one on a dev file)."""
    def load(name):
        with open(os.path.join(output_dir, name), encoding="utf-8") as f:
            return json.load(f)
    with open(test_file, encoding="utf-8") as f:
        squad = json.load(f)
    golds = {q["id"]: [a["text"] for a in q["answers"]] for a in squad["data"]
             for p in a["paragraphs"] for q in p["qas"]}
    best_spans = {q: next((e["text"] for e in entries if e["text"]), "")
                  for q, entries in load("nbest_predictions.json").items()}
    predictions, null_odds = load("predictions.json"), load("null_odds.json")
    figures = few_unanswerable_figures(golds, predictions, null_odds, best_spans)
    figures.update(test_figures(golds, predictions, null_odds, best_spans))
    figures.update(calibration_figures(golds, null_odds))
    if os.path.exists(os.path.join(output_dir, "answer_settings.json")):
        figures["test_thresh"] = float(
            load("answer_settings.json")["answer_settings"]["null_score_diff_threshold"])
    return figures


def padded_ids(examples, indices, pad_id: int) -> dict:
    """input_ids, token_type_ids, attention_mask [rows, longest] int64 of `indices`,
    padded with `pad_id` (the vocab's padding piece, as Hugging Face pads)."""
    import numpy as np
    length = int(max(examples.lengths[indices]))
    ids = np.full((len(indices), length), pad_id, np.int64)
    segments, mask = np.zeros_like(ids), np.zeros_like(ids)
    for row, i in enumerate(indices):
        n = examples.lengths[i]
        ids[row, :n] = examples.columns["input_ids"][i]
        segments[row, :n] = examples.columns["segment_ids"][i]
        mask[row, :n] = 1
    return {"input_ids": ids, "token_type_ids": segments, "attention_mask": mask}


def _is_number(text: str) -> bool:
    try:
        float(text)
        return True
    except ValueError:
        return False


# --- Hugging Face (worker) --------------------------------------------------------------

def google_schedule(steps: int, warmup: int):
    """Google BERT's learning-rate factor at each step (bert_ad/parallel/learning_rate.py):
    step / warmup during warmup, then 1 - step / steps (not renormalised to 1 after
    warmup, as transformers' linear schedule is)."""
    def factor(step: int) -> float:
        if step < warmup:
            return step / warmup
        return 1.0 - min(step, steps) / steps
    return factor


def worker_hf(s: dict, run: str, work_dir: str) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as bench_train: a busy machine
    import numpy as np
    import torch
    import transformers
    from transformers import BertForQuestionAnswering, get_linear_schedule_with_warmup

    from bert_ad.data.squad_features import SquadWindowSettings, convert_questions
    from bert_ad.data.squad_json import read_squad_file
    from bert_ad.data.tokenization import make_tokenizer
    from bert_ad.metrics.squad import find_best_thresh, score_answers
    from bert_ad.answers.squad import AnswerSettings, answers_from_logits
    transformers.logging.set_verbosity_error()
    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(s["seed"])

    hf_dir = os.path.join(work_dir, "hf_model")
    if not os.path.exists(os.path.join(hf_dir, "model.safetensors")):
        subprocess.run([sys.executable, "-m", "bert_ad.convert", "google2hf", "--checkpoint",
                        os.path.join(s["model_dir"], "bert_model.ckpt"), "--output_dir",
                        hf_dir], check=True)
    tokenizer = make_tokenizer(s["vocab_file"], s["do_lower_case"])
    windows = SquadWindowSettings(s["max_seq_length"], s["doc_stride"], s["max_query_length"])
    train = read_squad_file(s["train_file"], True, require_answers=True)
    test = read_squad_file(s["test_file"], True, require_answers=True)
    features = convert_questions(train.questions, train.contexts, tokenizer, windows, True)
    examples = features.examples
    # Padding positions hold the vocab's padding piece, whose embedding row Hugging
    # Face keeps frozen (padding_idx = pad_token_id), whatever the converted config says.
    pad_id = s["hf_pad_id"]
    model = BertForQuestionAnswering.from_pretrained(hf_dir, pad_token_id=pad_id)
    assert model.bert.embeddings.word_embeddings.padding_idx == pad_id
    same_update_as_ours_adam = run != "hf"  # our `adam` decays no weight
    head_multiplier = s["head_learning_rate_multiplier"] if run == "hf-adam-head" else 1.0
    optimizer = measuring.hf_adamw(model, s["learning_rate"],
                                   0.0 if same_update_as_ours_adam else WEIGHT_DECAY,
                                   head_prefix="qa_outputs.", head_multiplier=head_multiplier)
    steps = int(np.ceil(len(examples) * s["epochs"] / s["batch"]))
    if same_update_as_ours_adam:
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, google_schedule(steps, int(steps * WARMUP)))
    else:
        scheduler = get_linear_schedule_with_warmup(optimizer, int(steps * WARMUP), steps)
    rng = np.random.RandomState(s["seed"])
    order = np.concatenate([rng.permutation(len(examples))
                            for _ in range(int(np.ceil(s["epochs"])) + 1)])

    def batch_of(ex, indices):
        return {k: torch.from_numpy(v) for k, v in padded_ids(ex, indices, pad_id).items()}

    model.train()
    started = time.perf_counter()
    for step in range(steps):
        indices = order[step * s["batch"]:(step + 1) * s["batch"]]
        batch = batch_of(examples, indices)
        batch["start_positions"] = torch.from_numpy(
            examples.row_values["start_positions"][indices].astype(np.int64))
        batch["end_positions"] = torch.from_numpy(
            examples.row_values["end_positions"][indices].astype(np.int64))
        loss = model(**batch).loss
        measuring.hf_apply_update(model, optimizer, loss, CLIP_NORM, scheduler)
    seconds = time.perf_counter() - started
    if "tensorflow" in sys.modules:  # its thread pools would have shared the cores
        raise RuntimeError("TensorFlow was imported into the PyTorch worker")
    model.eval()

    def answers_of(squad):  # our answer search on the model's logits, at threshold 0
        scored = convert_questions(squad.questions, squad.contexts, tokenizer, windows, False)
        starts, ends = [], []
        ex = scored.examples
        with torch.inference_mode():
            for first in range(0, len(ex), 64):
                indices = np.arange(first, min(first + 64, len(ex)))
                out = model(**batch_of(ex, indices))
                starts.extend(out.start_logits.numpy())
                ends.extend(out.end_logits.numpy())
        answers = answers_from_logits(squad.questions, squad.contexts, scored, starts, ends,
                                      AnswerSettings(version_2_with_negative=True))
        golds = {q.id: [a.text for a in q.answers] for q in squad.questions}
        return golds, answers

    golds, answers = answers_of(test)
    figures = score_answers(golds, answers.predictions, "cmrc2018", answers.null_odds,
                            answers.best_spans)
    figures = {"eval_" + k: v for k, v in figures.items()}
    figures.update(few_unanswerable_figures(golds, answers.predictions, answers.null_odds,
                                            answers.best_spans))
    predictions = answers.predictions
    if s.get("dev_file"):  # as ours: the test file answered at the dev file's best threshold
        dev_golds, dev = answers_of(read_squad_file(s["dev_file"], True, require_answers=True))
        # (find_best_thresh on F1: what score_answers reports as best_f1_thresh)
        figures["test_thresh"] = find_best_thresh(dev_golds, dev.best_spans, dev.null_odds,
                                                  "cmrc2018", 1)[1]
        predictions = answers_at(figures["test_thresh"], answers.null_odds, answers.best_spans)
    figures.update(test_figures(golds, predictions, answers.null_odds, answers.best_spans))
    figures.update(calibration_figures(golds, answers.null_odds))
    return {"status": "ok", "eval": figures,
            "examples_per_sec": steps * s["batch"] / seconds, "train_seconds": seconds,
            "final_loss": float(loss), "torch": torch.__version__,
            "transformers": transformers.__version__,
            "peak_rss_mb": measuring.peak_rss_mb()}


def run_hf(s: dict, run: str, work_dir: str) -> dict:
    command = measuring.worker_command(WORKER_MODULE, run, work_dir=work_dir,
                                       settings=json.dumps(s))
    try:
        return measuring.run_worker(command)
    except RuntimeError as e:
        return {"status": "failed", "error": str(e)[-2000:]}


# --- the report ---------------------------------------------------------------------------

def report(records) -> str:
    """The table of the runs with the newest record's settings."""
    rows, rates = [], {}
    settings = records[-1]["settings"] if records else None
    for r in (r for r in records if r["settings"] == settings):
        if r.get("status") != "ok":
            rows.append([r["run"], "failed: " + r.get("error", "")[-80:]] + [""] * 7)
            continue
        e = r["eval"]
        rates[r["run"]] = r["examples_per_sec"]
        rss = r.get("peak_rss_mb")
        rows.append([r["run"], measuring.fmt(e.get("eval_exact_match"), 2),  # -nodev: none
                     measuring.fmt(e.get("eval_f1"), 2),
                     measuring.fmt(e.get("eval_has_answer_f1"), 2),
                     measuring.fmt(e.get("eval_no_answer_f1"), 2),
                     measuring.fmt(e.get("eval_best_f1"), 2),
                     measuring.fmt(e.get("eval_best_f1_thresh",
                                     e.get("eval_best_f1_threshold")), 2),
                     measuring.fmt(e.get("eval_few_unanswerable_f1"), 2),
                     measuring.fmt(e.get("eval_few_unanswerable_best_f1"), 2),
                     measuring.fmt(r["examples_per_sec"], 1),
                     f"{rss:.0f}" if rss else "", r.get("onednn", "-")])
    table = measuring.markdown_table(["run", "EM", "F1", "F1 with answer", "F1 without",
                                  "best F1", "best threshold", "few-unanswerable F1",
                                  "its best F1", "train windows/sec", "peak RSS MB",
                                  "oneDNN"], rows)
    for hf in (r for r in HF_RUNS if r in rates):
        for run in sorted(r for r in rates if r.startswith("ours")):
            table += f"\n{run} / {hf} training speed: {rates[run] / rates[hf]:.2f}x"
    return table


def sized_records(records) -> list:
    """Issue 56's records: the study over training-set sizes (those with a dev file)."""
    return [r for r in records if r.get("status") == "ok" and r["settings"].get("dev_file")
            and "test_f1_at_0" in r["eval"]]


def sizes_report(records) -> str:
    """Issue 56's table: per training-set size, seed, run and span head rate, the test
    file's F1 at Google's 0, at the default (the threshold chosen on the dev file; on the
    training questions in -nodev runs) and at the test file's best threshold."""
    rows = []
    for r in sorted(sized_records(records), key=lambda r: (r["settings"]["train_questions"],
                                            r["settings"]["seed"], r["run"],
                                            r["settings"]["head_learning_rate_multiplier"])):
        e, s = r["eval"], r["settings"]
        rows.append([f"{s['train_questions']:,}", s["seed"], r["run"],
                     f"{s['head_learning_rate_multiplier']:g}x",
                     measuring.fmt(e["test_f1_at_0"], 2),
                     measuring.fmt(e["test_has_answer_f1_at_0"], 2),
                     measuring.fmt(e["test_f1"], 2), measuring.fmt(e["test_thresh"], 2),
                     measuring.fmt(e["test_best_f1"], 2),
                     measuring.fmt(e["test_best_f1_thresh"], 2),
                     measuring.fmt(e["test_best_f1"] - e["test_f1_at_0"], 2),
                     measuring.fmt(e["test_best_f1"] - e["test_f1"], 2),
                     f"{100 * e['test_answerable_over_0']:.0f}%"
                     if "test_answerable_over_0" in e else "",
                     measuring.fmt(e.get("test_answerable_null_odds_median"), 2),
                     measuring.fmt(e.get("test_unanswerable_null_odds_median"), 2)])
    return measuring.markdown_table(
        ["training questions", "seed", "run", "span head", "F1 at 0", "F1 with answer at 0",
         "F1 at the default (chosen threshold)", "chosen threshold", "best F1", "best threshold",
         "best - at 0", "best - default", "answerable answered \"\" at 0",
         "null odds, answerable (median)", "null odds, unanswerable (median)"], rows,
        "rrlrrrrrrrrrrrr")


def grid_report(records, head: float) -> str:
    """Issue 56's grid at one span head rate: per size (rows) and run x seed (columns),
    "best - at 0 / best - the default (best F1)" on the test questions; "not run" where
    no record is."""
    studied = [r for r in sized_records(records)
               if r["settings"]["head_learning_rate_multiplier"] == head]
    order = ("ours2-adam", "ours2-adam" + NO_DEV, "ours1-adam", "ours1-adam" + NO_DEV,
             "hf-adam-head")
    runs = sorted({r["run"] for r in studied},
                  key=lambda run: (order.index(run) if run in order else len(order), run))
    seeds = sorted({r["settings"]["seed"] for r in studied})
    cells = {(r["settings"]["train_questions"], r["run"], r["settings"]["seed"]): r["eval"]
             for r in studied}  # the newest record of each wins
    rows = []
    for size in sorted({r["settings"]["train_questions"] for r in studied}):
        row = [f"{size:,}"]
        for run in runs:
            for seed in seeds:
                e = cells.get((size, run, seed))
                row.append("not run" if e is None else
                           f"{e['test_best_f1'] - e['test_f1_at_0']:.2f} / "
                           f"{e['test_best_f1'] - e['test_f1']:.2f} ({e['test_best_f1']:.1f})")
        rows.append(row)
    return measuring.markdown_table(
        ["training questions"] + [f"{run} seed {seed}" for run in runs for seed in seeds],
        rows, "r" + "l" * (len(runs) * len(seeds)))


def run_all(args, records: list, model_dir: str, data_dir: str) -> None:
    """The runs of --runs on --train_questions / --seed in --work_dir (recorded ones skipped)."""
    os.makedirs(args.work_dir, exist_ok=True)
    train = subset(os.path.join(data_dir, "train.json"), args.train_questions,
                   os.path.join(args.work_dir, "train.json"))
    test = subset(os.path.join(data_dir, "test.json"), args.test_questions,
                  os.path.join(args.work_dir, "test.json"))
    dev = subset(os.path.join(data_dir, "train.json"), args.dev_questions,
                 os.path.join(args.work_dir, "dev.json"),
                 skip=args.train_questions) if args.dev_questions else ""
    s = settings_of(args, model_dir, train, test, dev)
    for run in args.runs.split(","):
        if any(r["run"] == run and r["settings"] == s and r.get("status") == "ok"
               for r in records):
            print(f"{run}: recorded, skipped")
            continue
        print(f"{run}: running ({args.train_questions} questions, seed {args.seed})", flush=True)
        result = run_hf(s, run, args.work_dir) if run in HF_RUNS else run_ours(
            s, run, args.work_dir)
        record = dict(result, run=run, settings=s, machine=measuring.machine_description())
        append_run(args.records, record)
        records.append(record)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        measuring.emit_result(worker_hf(json.loads(args.settings), args.worker, args.work_dir))
        return 0
    records = load_runs(args.records)
    if not args.report_only:
        model_dir, data_dir = ensure_model(args), ensure_data(args)
        if args.sizes:
            base = args.work_dir
            for size in (int(v) for v in args.sizes.split(",")):
                for seed in (int(v) for v in (args.seeds or str(args.seed)).split(",")):
                    run_all(argparse.Namespace(**dict(
                        vars(args), train_questions=size, seed=seed,
                        work_dir=os.path.join(base, f"q{size}_s{seed}"))),
                        records, model_dir, data_dir)
        else:
            run_all(args, records, model_dir, data_dir)
    print(measuring.cpu_line())
    if records:
        s = records[-1]["settings"]
        print(f"{s['train_questions']} training questions, {s['test_questions'] or 'all'} test "
              f"questions, {s['epochs']} epoch(s), batch {s['batch']}, max_seq_length "
              f"{s['max_seq_length']}, model {s['model_dir']}")
    print(report(records))
    if sized_records(records):
        print()
        print(sizes_report(records))
        for head in sorted({r["settings"]["head_learning_rate_multiplier"]
                            for r in sized_records(records)}):
            print(f"\nthe span head at {head:g}x: best - at 0 / best - the default (best F1)")
            print(grid_report(records, head))
    return 0


if __name__ == "__main__":
    sys.exit(main())
