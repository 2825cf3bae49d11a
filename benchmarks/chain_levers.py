"""The levers behind bench_chain's table, each measured (python -m benchmarks.bench_chain --levers).

Every measurement is a fresh worker process pinned to one core (the same rows
and exports as bench_chain's --setup made):

* tokenizers: per-row time of ours tokenizing the whole text then cutting at
  126 pieces a character at a time (as before this change), ours cutting first
  (tokenization's tokenize_head), that with basic_tokenization's ASCII path
  (what --do_predict runs now), and Hugging Face's Rust
  BertTokenizerFast (a batch of 32 with truncation, and one text a call); the
  number of rows whose ids differ from Hugging Face's (piece parity).
* session options and recipe: the scorer alone (ONNX Runtime session.run on
  batches already made, grouped by length and padded per batch as
  --do_predict does, 32 rows) for our int8 teacher at graph optimization
  level ALL (ours) and BASIC, and at 2 threads; the teacher quantized by the
  earlier dynamic recipe (teacher_128_dynamic, kept by hand); optimum's int8 model
  on the same token ids and batches (the quantization recipe alone, nothing
  else different); our int8 student.
* sorting: optimum int8 (Hugging Face fp32 without --optimum_python) on the
  short rows sorted by length before batching, beside the same in input order
  (side by side).
"""

from __future__ import annotations

import os
import sys
import time

from benchmarks import measuring as bench
from benchmarks.chain_layout import (NO_TF, SEQ, WORKER_MODULE, command, export_dir, paths,
                                     rows_of)

LEVER_BATCH = 32
TOKENIZER_ROWS = {"short": 2000, "long": 1500}
SCORER_ROWS = {"short": 2000, "long": 320}


def general_path_tokenizer(vocab: str, lower: bool):
    """Our WordPiece tokenizer with the basic steps a character at a time for every
    text (as before the ASCII path in bert_ad/data/basic_tokenization.py)."""
    from bert_ad.data import basic_tokenization as basic
    from bert_ad.data.tokenization import FullTokenizer

    class General(FullTokenizer):
        def basic_tokenize(self, text):
            text = basic._space_out_chinese_chars(basic._clean_text(basic.to_text(text)))
            words = []
            for word in text.split():
                if self.do_lower_case:
                    word = basic.strip_accents(word.lower())
                words.extend(basic._split_on_punctuation(word))
            return [w for w in words if w]
    return General(vocab, lower)


def worker_tokenizers(args) -> dict:
    """Per-row microseconds of each tokenizer on args.rows's texts; parity with HF."""
    from transformers import BertTokenizerFast

    from bert_ad.data.tokenization import make_tokenizer
    from bert_ad.data.truncation import truncate_tokens
    _, rows, _ = rows_of(args)
    texts = [text for _, text in rows[:TOKENIZER_ROWS[args.rows]]]
    p = paths(args.work_dir)
    ours = make_tokenizer(os.path.join(p["hf"], "vocab.txt"), True)
    hf = BertTokenizerFast(os.path.join(p["hf"], "vocab.txt"), do_lower_case=True)
    room = SEQ - 2

    def timed(function):
        started = time.perf_counter()
        out = function()
        return out, (time.perf_counter() - started) / len(texts) * 1e6

    general = general_path_tokenizer(os.path.join(p["hf"], "vocab.txt"), True)
    whole, whole_us = timed(lambda: [truncate_tokens(general.tokenize(t), room) for t in texts])
    _, general_head_us = timed(lambda: [general.tokenize_head(t, room) for t in texts])
    head, head_us = timed(lambda: [ours.tokenize_head(t, room) for t in texts])
    batched, batch_us = timed(lambda: [
        ids for start in range(0, len(texts), LEVER_BATCH) for ids in hf(
            texts[start:start + LEVER_BATCH], truncation=True, max_length=SEQ)["input_ids"]])
    _, single_us = timed(lambda: [hf(t, truncation=True, max_length=SEQ)["input_ids"]
                                  for t in texts])
    ours_ids = [ours.convert_tokens_to_ids(["[CLS]"] + pieces + ["[SEP]"]) for pieces in head]
    return {"rows": len(texts), "kind": args.rows,
            "pieces_mean": sum(len(ours.tokenize(t)) for t in texts[:200]) / min(200, len(texts)),
            "ours_whole_us": whole_us, "ours_general_head_us": general_head_us,
            "ours_head_us": head_us, "ascii": sum(t.isascii() for t in texts),
            "hf_batch_us": batch_us,
            "hf_single_us": single_us,
            "head_equals_whole": sum(a == b for a, b in zip(head, whole)),
            "ids_equal_hf": sum(a == b for a, b in zip(ours_ids, batched))}


def batches_of(args, tokenizer, rows: int) -> list:
    """--do_predict's batches of the first `rows` texts: grouped by length, padded."""
    import numpy as np

    from bert_ad.data.batching import make_batch
    from bert_ad.data.features import FeatureSettings, encode_example
    from bert_ad.data.processors import InputExample
    from bert_ad.data.batching import TokenizedExamples
    _, data, _ = rows_of(args)
    settings = FeatureSettings(SEQ, "head", 0.25, ["0", "1"])
    encoded = [encode_example(InputExample("", text), tokenizer, settings)
               for _, text in data[:rows]]
    examples = TokenizedExamples({"input_ids": [np.array(i, np.int32) for i, _ in encoded],
                                  "segment_ids": [np.array(s, np.int32) for _, s in encoded]})
    order = np.argsort([len(i) for i, _ in encoded], kind="stable")
    return [make_batch(examples, order[s:s + LEVER_BATCH], "dynamic")
            for s in range(0, len(order), LEVER_BATCH)]


def worker_scorer(args) -> dict:
    """Rows/sec of session.run alone on --do_predict's batches, one configuration."""
    import numpy as np
    import onnxruntime as ort

    from bert_ad.data.tokenization import make_tokenizer
    p = paths(args.work_dir)
    tokenizer = make_tokenizer(os.path.join(p["hf"], "vocab.txt"), True)
    batches = batches_of(args, tokenizer, SCORER_ROWS[args.rows])
    variant = args.variant
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2 if variant == "ours_teacher_2threads" else 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = {
        "ours_teacher_basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    }.get(variant, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    if variant == "optimum":
        path = os.path.join(p["optimum_int8"], "model_quantized.onnx")
    elif variant == "ours_teacher_dynamic":  # the earlier recipe, kept beside the export
        path = os.path.join(args.work_dir, "teacher_128_dynamic", "onnx_int8", "model.onnx")
    else:
        folder = p["student" if variant == "ours_student" else "teacher"]
        path = os.path.join(export_dir(folder), "model.onnx")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    names = {i.name: i.type for i in session.get_inputs()}

    def feed(batch):
        if variant == "optimum":
            return {"input_ids": batch["input_ids"].astype(np.int64),
                    "attention_mask": batch["input_mask"].astype(np.int64),
                    **({"token_type_ids": batch["segment_ids"].astype(np.int64)}
                       if "token_type_ids" in names else {})}
        return {name: batch[name].astype(np.int64 if "int64" in kind else np.int32)
                for name, kind in names.items()}

    feeds = [feed(b) for b in batches]
    session.run(None, feeds[0])
    started = time.perf_counter()
    for one in feeds:
        session.run(None, one)
    seconds = time.perf_counter() - started
    rows = sum(len(f["input_ids"]) for f in feeds)
    return {"variant": variant, "kind": args.rows, "rows": rows, "rows_per_sec": rows / seconds,
            "threads": options.intra_op_num_threads, "model": os.path.basename(path),
            "loadavg": bench.loadavg()}


# Run two at a time, in this order: (ours_teacher, optimum), ...
# ours_teacher_dynamic: WORK_DIR/teacher_128_dynamic/onnx_int8, the teacher exported
# by the quantizer main had before static quantization (dynamic activation ranges).
SCORER_VARIANTS = ("ours_teacher", "optimum", "ours_teacher_dynamic", "ours_teacher_basic",
                   "ours_teacher_2threads", "ours_student")


def main(args) -> int:
    env = bench.checkout_env(**NO_TF)
    out = {"machine": bench.machine_description(), "command": " ".join(sys.argv)}
    print(bench.cpu_line() + "\n")
    parts = args.lever_parts.split(",")
    variants = tuple(args.scorer_variants.split(",")) if args.scorer_variants \
        else SCORER_VARIANTS
    # Tokenizers.
    rows = []
    for kind in ("short", "long") if "tokenizers" in parts else ():
        result = bench.run_workers_side_by_side([bench.worker_command(
            WORKER_MODULE, "tokenizers", work_dir=args.work_dir, rows=kind)], [0], env=env)[0]
        out.setdefault("tokenizers", []).append(result)
        if "error" in result:
            print(result["error"], file=sys.stderr)
            continue
        rows.append([kind, result["rows"], bench.fmt(result["pieces_mean"], 0),
                     bench.fmt(result["ours_whole_us"], 0),
                     bench.fmt(result["ours_general_head_us"], 0),
                     bench.fmt(result["ours_head_us"], 0),
                     bench.fmt(result["hf_batch_us"], 0), bench.fmt(result["hf_single_us"], 0),
                     f"{result['head_equals_whole']} / {result['rows']}",
                     f"{result['ids_equal_hf']} / {result['rows']}"])
    print("**Tokenizers, microseconds a row (1 core)**\n")
    print(bench.markdown_table(
        ["rows", "texts", "pieces a text (whole)", "ours before: whole, then cut",
         "ours: cut first", "ours now: cut first + ASCII path", "HF fast, batch of 32",
         "HF fast, one a call",
         "cut first = whole then cut", "ids = HF's"], rows) + "\n")
    # Scorer alone: session options, recipe; two at a time side by side, cores swapped.
    rows = []
    for kind in ("long", "short") if "scorer" in parts else ():
        results = {}
        for index in range(args.repeats):
            for first, second in zip(variants[0::2], variants[1::2]):
                cores = (0, 1) if index % 2 == 0 else (1, 0)
                if "2threads" in first + second:
                    cores = None
                commands = [bench.worker_command(WORKER_MODULE, "scorer", work_dir=args.work_dir,
                                                 rows=kind, variant=v) for v in (first, second)]
                if cores is None:  # 2 threads: each alone on the whole machine
                    pair = [bench.run_worker(c, env=env) for c in commands]
                else:
                    pair = bench.run_workers_side_by_side(commands, cores, env=env)
                for variant, result in zip((first, second), pair):
                    out.setdefault("scorer", []).append(result)
                    if "error" not in result:
                        results.setdefault(variant, []).append(result["rows_per_sec"])
        base = bench.median(results.get("ours_teacher", []))
        for variant in variants:
            got = results.get(variant, [])
            rows.append([kind, variant, len(got), bench.fmt(bench.median(got), 1),
                         bench.fmt(bench.median(got) / base, 2)])
    print("**The scorer alone (session.run on --do_predict's batches of 32), rows/sec**\n")
    print(bench.markdown_table(["rows", "model / options", "runs", "rows/sec",
                                "/ ours_teacher (ALL, 1 thread)"], rows) + "\n")
    # Sorting, on the reference systems.
    rows = []
    # The short rows only (every long row fills its 128-token window, so sorting
    # changes nothing there), on optimum (HF's 10,000 rows take minutes a run).
    for kind in ("short",) if "sorting" in parts else ():
        for system in ("optimum",) if args.optimum_python else ("hf",):
            plain = command(system, args, kind, os.path.join(args.work_dir, "rounds"))
            pair = bench.run_workers_side_by_side([plain, plain + ["--sorted"]], (0, 1), env=env)
            out.setdefault("sorting", []).append(pair)
            if any("error" in r for r in pair):
                print(pair, file=sys.stderr)
                continue
            rows.append([kind, system, bench.fmt(pair[0]["steady_rows_per_sec"], 1),
                         bench.fmt(pair[1]["steady_rows_per_sec"], 1),
                         bench.fmt(pair[1]["steady_rows_per_sec"]
                                   / pair[0]["steady_rows_per_sec"], 2)])
    print("**Rows sorted by length before batching (steady rows/sec, side by side)**\n")
    print(bench.markdown_table(["rows", "system", "input order", "sorted", "sorted / input"],
                               rows))
    if args.json:
        bench.write_json(args.json, out)
    return 0
