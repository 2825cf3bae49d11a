"""Scoring rows/sec of a distilled student and its teacher, side by side (docs/distillation.md).

    python -m benchmarks.distill_speed --teacher_dir T --student_dir S \\
        --vocab_file M/pieces.tsv --bert_config_file M/bert_config.json --data_dir D

Both are fine-tuned classifier output folders (the student's from
`bert-ad distill`, its own bert_config.json inside; the teacher's config is
--bert_config_file unless its folder has one). Each is scored by a fresh
worker process through what `--do_predict` runs (the task's scoring graph in
bert_ad.parallel.scoring's Scorer, 1 tower, dynamic padding, rows grouped by
length), on the first --rows rows of D/test.tsv: steady state, timed over
one pass after 3 warm-up batches. The two workers run at the same time, one
pinned to each core (measuring.run_workers_side_by_side: a busy machine's
minutes weigh on both alike), and swap cores every round. The table gives
each round's rows/sec, the student/teacher ratio of each round and their
median, and each worker's peak RSS, under the CPU line (model, vector ISA,
oneDNN).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from benchmarks import measuring
from benchmarks.measuring import loadavg

WORKER_MODULE = "benchmarks.distill_speed"
WARMUP_BATCHES = 3


def worker(args) -> dict:
    from bert_ad.compat import session_config
    from bert_ad.data import processors
    from bert_ad.data.tokenization import decide_do_lower_case, make_tokenizer
    from bert_ad.bert_config import BertConfig
    from bert_ad.parallel.checkpoints import latest_checkpoint
    from bert_ad.parallel.scoring import Scorer
    from bert_ad.parallel.towers import plan_devices
    from bert_ad.tasks.base import SplitData, TextEncoder
    from bert_ad.tasks.classification import ClassificationTask
    from bert_ad.compat import tf

    own = os.path.join(args.output_dir, "bert_config.json")
    config = BertConfig.from_json_file(own if os.path.isfile(own) else args.bert_config_file)
    labels = processors.load_label_list(os.path.join(args.output_dir, "labels.txt"))
    lower = decide_do_lower_case(args.vocab_file, "", True, False)
    encoder = TextEncoder(config, make_tokenizer(args.vocab_file, lower), args.vocab_file,
                          lower, args.seq, compute_dtype=tf.float32)
    task = ClassificationTask(encoder, processors.get_task("sentiment"), args.data_dir,
                              pooling=args.pooling).with_labels(labels)
    data = task.read("predict")
    batches = task.batches(SplitData("predict", data.rows[:args.rows], data.source))
    plan = plan_devices(1, cuda_visible_devices="")

    def tower(features, i):
        outputs = dict(task.build_model(features, is_training=False))
        outputs.pop("loss", None)
        return outputs

    if args.export:  # the folder's ONNX export in ONNX Runtime, one thread
        from bert_ad.inference import layout, onnx_scorer
        scorer = onnx_scorer.OnnxScorer(args.export, layout.read_metadata(args.export),
                                         threads=1)
    else:
        scorer = Scorer(plan, task.feature_spec, tower, latest_checkpoint(args.output_dir),
                        session_config(1))
    scored = 0
    with scorer:
        passes = list(batches.scoring(args.batch, 1))
        for _, tower_batches in passes[:WARMUP_BATCHES]:
            scorer.run(tower_batches)
        start, cpu_start = time.perf_counter(), time.process_time()
        for indices, tower_batches in passes:
            scorer.run(tower_batches)
            scored += len(indices[0])
        seconds = time.perf_counter() - start
        cpu_seconds = time.process_time() - cpu_start
    return {"rows": scored, "rows_per_sec": scored / seconds,
            "rows_per_cpu_sec": scored / cpu_seconds, "layers": config.num_hidden_layers,
            "onednn": measuring.onednn_state(), "loadavg": loadavg()}


def command(args, output_dir: str, export: str = "") -> list:
    return measuring.worker_command(
        WORKER_MODULE, "score", output_dir=output_dir, vocab_file=args.vocab_file,
        bert_config_file=args.bert_config_file, data_dir=args.data_dir, rows=args.rows,
        seq=args.seq, batch=args.batch, pooling=args.pooling, export=export or None)


def onnx_int8_export(args, output_dir: str) -> str:
    """The fine-tuned folder's newest checkpoint as an ONNX int8 export (made once, by the
    classifier's own --do_export, in output_dir/onnx_int8)."""
    export_dir = os.path.join(output_dir, "onnx_int8")
    if os.path.isfile(os.path.join(export_dir, "export.json")):
        return export_dir
    own = os.path.join(output_dir, "bert_config.json")
    run = measuring.run_measured([
        sys.executable, measuring.CLASSIFIER, "--task_name=sentiment",
        f"--data_dir={args.data_dir}", f"--vocab_file={args.vocab_file}",
        f"--bert_config_file={own if os.path.isfile(own) else args.bert_config_file}",
        f"--max_seq_length={args.seq}", f"--pooling={args.pooling}",
        f"--output_dir={output_dir}", "--do_export", "--export_format=onnx",
        "--export_precision=int8", f"--export_dir={export_dir}"],
        env=dict(os.environ, **measuring.checkout_env()))
    if run.returncode != 0:
        raise SystemExit(f"error: exporting {output_dir} as ONNX int8 failed")
    return export_dir


def main(argv=None) -> int:
    parser = measuring.parser_for(__doc__)
    measuring.add_worker_flag(parser, ["score"])
    parser.add_argument("--teacher_dir")
    parser.add_argument("--student_dir")
    parser.add_argument("--output_dir", help=argparse.SUPPRESS)  # a worker's folder
    parser.add_argument("--vocab_file", required=True)
    parser.add_argument("--bert_config_file", required=True, help="the teacher's config")
    parser.add_argument("--data_dir", required=True, help="holds test.tsv (sentiment)")
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--seq", type=int, default=64, help="max_seq_length")
    parser.add_argument("--batch", type=int, default=32, help="predict batch size")
    parser.add_argument("--pooling", default="cls")
    parser.add_argument("--repeats", type=int, default=2, help="rounds (cores swapped)")
    parser.add_argument("--onnx_int8", action="store_true",
                        help="score each folder's ONNX int8 export (made once) in ONNX Runtime")
    parser.add_argument("--export", default="", help=argparse.SUPPRESS)  # a worker's
    args = parser.parse_args(argv)
    if args.worker:
        return measuring.serve_worker(args, {"score": worker})
    folders = (args.teacher_dir, args.student_dir)
    commands = [command(args, folder, onnx_int8_export(args, folder) if args.onnx_int8 else "")
                for folder in folders]
    rounds = []
    for index in range(args.repeats):
        cores = [0, 1] if index % 2 == 0 else [1, 0]
        teacher, student = measuring.run_workers_side_by_side(commands, cores)
        for result in (teacher, student):
            if "error" in result:
                print(result["error"], file=sys.stderr)
                return 1
        rounds.append((cores, teacher, student))
        print(f"  round {index + 1}: teacher {teacher['rows_per_sec']:.1f}, student "
              f"{student['rows_per_sec']:.1f} rows/sec (load {teacher['loadavg']})",
              file=sys.stderr, flush=True)
    first = rounds[0][1]
    scorer = "ONNX Runtime, int8 exports" if args.onnx_int8 else "TensorFlow checkpoints"
    print(f"### Scoring side by side ({scorer}): {first['rows']} test rows, max_seq_length "
          f"{args.seq}, 1 tower x {args.batch}, dynamic padding, one core each\n")
    print(measuring.cpu_line(first["onednn"]) + "\n")
    table = []
    for cores, teacher, student in rounds:
        table.append([f"teacher on core {cores[0]}, student on core {cores[1]}",
                      f"{teacher['rows_per_sec']:.1f}", f"{student['rows_per_sec']:.1f}",
                      f"{student['rows_per_sec'] / teacher['rows_per_sec']:.2f}x",
                      f"{teacher['peak_rss_mb']:.0f} / {student['peak_rss_mb']:.0f}",
                      teacher["loadavg"]])
    ratios = [s["rows_per_sec"] / t["rows_per_sec"] for _, t, s in rounds]
    print(measuring.markdown_table(
        ["round", f"teacher ({first['layers']} layers) rows/sec",
         f"student ({rounds[0][2]['layers']} layers) rows/sec", "student / teacher",
         "peak RSS MB (teacher / student)", "load average"], table))
    print(f"\nmedian student / teacher: **{statistics.median(ratios):.2f}x**")
    return 0


if __name__ == "__main__":
    sys.exit(main())
