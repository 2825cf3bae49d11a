"""Streaming batch scoring: `bert-ad predict` on many short lines, rows/sec and peak RSS.

    python -m benchmarks.bench_predict_stream --lines 1000000 --tf_lines 100000
    python -m benchmarks.bench_predict_stream --lines 20000 --chunk_size 256 --onnx_only
    python -m benchmarks.bench_predict_stream --lines 20000 --chunk_size 256 --trace_rss

One fresh process per configuration (benchmarks/measuring.py run_measured:
wall time, user + system CPU seconds, peak RSS from wait4), on the same
short lines (movie-review sentences cut to their first 8 words, repeated):

  predict onnx int8   bert-ad predict --model_dir=OUT (its ONNX int8 export),
                      --lines and --lines / 10 (peak RSS for 10x the lines
                      should be within 10% of 1x: memory is flat)
  predict checkpoint  bert-ad predict --model_dir=OUT without an export: its
                      checkpoint on 1 tower, TensorFlow (--tf_lines)
  --do_predict        bert-ad classifier --do_predict --predict_file on the same
                      rows (--tf_lines): the driver reads the whole file first

The model: MiniLM-L6 (scripts/fetch_minilm.sh) fine-tuned --steps steps on
the movie reviews (bert-ad data prepare movie_reviews), max_seq_length 64,
exported as ONNX int8; made once in --work_dir. Lines/sec counts the whole
process (start-up, model load, reading, writing), as a user sees it; "after
load" is bert-ad predict's own figure from its model loaded to its last line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

from benchmarks import measuring

WORDS_A_LINE = 8


def run(command, log_path: str) -> dict:
    """A command's wall seconds, CPU seconds and peak RSS (it must succeed)."""
    started = time.time()
    with open(log_path, "w") as log:
        measured = measuring.run_measured(command, stdout=log, stderr=subprocess.STDOUT,
                                          env=dict(os.environ, **measuring.checkout_env()))
    wall = time.time() - started
    if measured.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed: "
                 f"{measuring.last_error_line(open(log_path).read())} ({log_path})")
    return {"wall": wall, "cpu": measured.cpu_seconds, "rss": measured.peak_rss_mb,
            "log": open(log_path).read()}


def bert_ad(*args: str) -> list:
    return [sys.executable, "-m", "bert_ad"] + list(args)


def make_model(args, work: str) -> str:
    """A fine-tuned MiniLM folder with an ONNX int8 export (made once)."""
    folder = os.path.join(work, "model")
    if os.path.isdir(os.path.join(folder, "export")):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    run(bert_ad("classifier", "--task_name=sentiment", f"--data_dir={args.data_dir}",
                f"--vocab_file={args.model_dir}/vocab.txt",
                f"--bert_config_file={args.model_dir}/bert_config.json",
                f"--init_checkpoint={args.model_dir}/bert_model.ckpt", "--max_seq_length=64",
                "--train_batch_size=16", f"--max_train_examples={16 * args.steps}",
                "--num_train_epochs=1", "--do_train", "--do_export", "--export_format=onnx",
                "--export_precision=int8", f"--output_dir={folder}"),
        os.path.join(work, "train.log"))
    return folder


def write_lines(args, work: str, count: int) -> str:
    """`count` short lines (and the same rows as label<TAB>text for --do_predict)."""
    from bert_ad.data import processors
    task = processors.get_task("sentiment")
    texts = [" ".join(e.text_a.split()[:WORDS_A_LINE]) for split in ("train", "dev", "test")
             for e in processors.read_examples(task, args.data_dir, split)]
    path = os.path.join(work, f"lines_{count}.txt")
    with open(path, "w", encoding="utf-8") as f, \
            open(path + ".tsv", "w", encoding="utf-8") as tsv:
        for i in range(count):
            f.write(texts[i % len(texts)] + "\n")
            tsv.write("0\t" + texts[i % len(texts)] + "\n")
    return path


def trace_rss(export_dir: str, path: str, chunk_size: int, every: int = 2560) -> int:
    """bert-ad predict's loop in this process on `path`, its resident memory printed
    every `every` lines (is it flat once warm?)."""
    import io
    from bert_ad.inference.exported_model import ExportedModel
    from bert_ad.inference.prediction_input import InputSettings, read_instances
    from bert_ad.inference.predictions import ServeOptions, predictions_for
    from bert_ad.inference.streamed_predictions import StreamSettings, predict_stream
    exported = ExportedModel.open(export_dir)
    predictions = predictions_for(exported, ServeOptions())
    scorer = exported.open_scorer()
    scored = [0]

    def score(batch: dict) -> dict:
        before = scored[0]
        scored[0] += len(batch["input_ids"])
        if scored[0] // every > before // every:
            print(f"{scored[0]:>9,} lines scored: RSS {measuring.current_rss_mb():.1f} MB, "
                  f"peak {measuring.peak_rss_mb():.1f} MB", flush=True)
        return scorer.run([batch])[0]

    class Discard(io.TextIOBase):
        def write(self, text: str) -> int:
            return len(text)

    with open(path, "rb") as lines:
        items = read_instances(lines, path, InputSettings(), predictions.text_fields)
        predict_stream(items, predictions, score, Discard(), "jsonl",
                       StreamSettings(64, chunk_size, progress_every_s=1e9))
    print(f"done: RSS {measuring.current_rss_mb():.1f} MB, peak {measuring.peak_rss_mb():.1f} MB")
    return 0


def main() -> int:
    parser = measuring.parser_for(__doc__)
    measuring.add_minilm_flags(parser)
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--tf_lines", type=int, default=100_000,
                        help="lines for the TensorFlow runs (checkpoint, --do_predict)")
    parser.add_argument("--steps", type=int, default=20, help="fine-tuning steps")
    parser.add_argument("--chunk_size", type=int, default=2048,
                        help="bert-ad predict's --chunk_size (the RSS comparison needs "
                             "--lines / 10 to be several chunks)")
    parser.add_argument("--trace_rss", action="store_true",
                        help="the ONNX loop in this process on --lines lines, its resident "
                             "memory every 2,560 lines")
    parser.add_argument("--onnx_only", action="store_true",
                        help="the two ONNX runs only (the RSS comparison)")
    parser.add_argument("--work_dir", default=os.path.join(measuring.cache_dir(),
                                                           "bench_predict_stream"))
    args = parser.parse_args()
    if measuring.missing_inputs(args):
        return 2
    work = args.work_dir
    os.makedirs(work, exist_ok=True)
    folder = make_model(args, work)
    without_export = os.path.join(work, "model_checkpoint_only")
    if not os.path.isdir(without_export):
        shutil.copytree(folder, without_export,
                        ignore=shutil.ignore_patterns("export", "cache"))
    if args.trace_rss:
        export_dir = os.path.join(folder, "export", os.listdir(os.path.join(folder, "export"))[0])
        return trace_rss(export_dir, write_lines(args, work, args.lines), args.chunk_size)
    rows = []

    def measure(name: str, lines: int, command, log: str) -> dict:
        result = run(command, os.path.join(work, log))
        # bert-ad predict's own rate, from its model loaded to its last answer.
        steady = re.findall(r"([0-9.,]+) lines/sec \(done\)", result["log"])
        rows.append([name, f"{lines:,}", measuring.fmt(lines / result["wall"]),
                     steady[-1] if steady else "-",
                     measuring.fmt(lines / result["cpu"]), measuring.fmt(result["rss"], 0),
                     measuring.fmt(result["wall"], 0), measuring.loadavg()])
        print(rows[-1], flush=True)
        return result

    sizes = [args.lines // 10, args.lines]
    for count in sizes:
        path = write_lines(args, work, count)
        measure("predict, ONNX int8 export", count,
                bert_ad("predict", f"--model_dir={folder}", f"--input_file={path}",
                        f"--output_file={path}.jsonl", "--batch_size=64",
                        f"--chunk_size={args.chunk_size}"), f"onnx_{count}.log")
        os.remove(f"{path}.jsonl")
    if args.onnx_only:
        print(measuring.cpu_line())
        print(table(rows))
        return 0
    path = write_lines(args, work, args.tf_lines)
    checkpoint = measure("predict, checkpoint (TensorFlow, 1 tower)", args.tf_lines,
                         bert_ad("predict", f"--model_dir={without_export}",
                                 f"--input_file={path}", f"--output_file={path}.jsonl",
                                 "--n_gpus=1", "--batch_size=64"), "checkpoint.log")
    # (--do_predict writes predict.txt beside the checkpoint it scores)
    measure("classifier --do_predict (TensorFlow, 1 tower)", args.tf_lines,
            bert_ad("classifier", "--task_name=sentiment", f"--predict_file={path}.tsv",
                    "--do_predict", f"--output_dir={without_export}", "--n_gpus=1",
                    "--predict_batch_size=64"), "do_predict.log")
    print()
    print(measuring.cpu_line(measuring.logged_onednn_state(checkpoint["log"])))
    print(table(rows))
    return 0


def table(rows) -> str:
    return measuring.markdown_table(
        ["run", "lines", "lines/sec", "after load", "lines/CPU-sec", "peak RSS MB", "wall s",
         "load (1 min)"], rows, "lrrrrrrr")


if __name__ == "__main__":
    sys.exit(main())
