"""run_pretraining_mgpu.py: masked-LM (+ next-sentence) pretraining on N towers.

The flags of Google's run_pretraining.py plus --n_gpus and the shared training
flags. From scratch, or continued from a released checkpoint: what that
checkpoint lacks (the MLM/NSP heads, optimizer slots) starts fresh and is
listed in the log. Eval runs on held-out files (--eval_input_file) and writes
masked_lm_accuracy, masked_lm_loss, next_sentence_accuracy and
next_sentence_loss to eval_results.txt.
"""

from __future__ import annotations

import glob
import logging
import os
from typing import Iterator, Sequence

import numpy as np
from absl import flags

from bert_ad.data.batching import padded_length, prefetch
from bert_ad.parallel.checkpoints import checkpoint_step, latest_checkpoint, resolve_checkpoint
from bert_ad.cli.flags import (build_training_graph, check_training_flags,
                                define_training_flags, is_chief, loop_settings,
                                make_session_config, num_workers, run_entry_point,
                                train_settings, worker_index, write_train_results)
from bert_ad.compat import tf
from bert_ad.errors import fail
from bert_ad.parallel.scoring import Scorer
from bert_ad.model.modeling import (ACTIVATIONS, BertConfig, BertModel, create_initializer,
                              dense, layer_norm)
from bert_ad.files import write_key_values
from bert_ad.pretraining.records import FEATURE_NAMES, FLOAT_FEATURES
from bert_ad.model.precision import compute_dtype
from bert_ad.parallel.loop import train

log = logging.getLogger("bert_ad")
FLAGS = flags.FLAGS

# Per-tower inputs. Sequences are trimmed to the batch's longest real row.
FEATURE_SPEC = {
    "input_ids": (tf.int32, [None, None]),
    "input_mask": (tf.int32, [None, None]),
    "segment_ids": (tf.int32, [None, None]),
    "masked_lm_positions": (tf.int32, [None, None]),
    "masked_lm_ids": (tf.int32, [None, None]),
    "masked_lm_weights": (tf.float32, [None, None]),
    "next_sentence_labels": (tf.int32, [None]),
    "example_weights": (tf.float32, [None]),
}
# --- the model: BERT + Google's MLM and NSP heads --------------------------------

def gather_positions(sequence, positions):
    """[B, S, H] and [B, P] positions -> [B*P, H]."""
    batch = tf.shape(sequence)[0]
    seq_length = tf.shape(sequence)[1]
    width = sequence.shape[-1]
    offsets = tf.reshape(tf.range(batch) * seq_length, [-1, 1])
    flat_positions = tf.reshape(positions + offsets, [-1])
    return tf.gather(tf.reshape(sequence, [-1, width]), flat_positions)


def masked_lm_head(config: BertConfig, sequence_output, embedding_table, positions):
    """Log-probabilities [B*P, vocab] at the masked positions (`cls/predictions`)."""
    with tf.variable_scope("cls/predictions"):
        hidden = gather_positions(sequence_output, positions)
        with tf.variable_scope("transform"):
            hidden = dense(hidden, config.hidden_size, "dense", config.initializer_range,
                           ACTIVATIONS[config.hidden_act])
            hidden = layer_norm(hidden, config.layer_norm_eps)
        # The output embedding is tied to the input one, as in Google's BERT.
        output_bias = tf.get_variable("output_bias", [config.vocab_size], tf.float32,
                                      tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(hidden, embedding_table, transpose_b=True),
                                output_bias)
        return tf.nn.log_softmax(logits, axis=-1)


def next_sentence_head(config: BertConfig, pooled_output):
    """Log-probabilities [B, 2] of "B follows A" (0) vs "random" (1) (`cls/seq_relationship`)."""
    with tf.variable_scope("cls/seq_relationship"):
        weights = tf.get_variable("output_weights", [2, config.hidden_size], tf.float32,
                                  create_initializer(config.initializer_range))
        bias = tf.get_variable("output_bias", [2], tf.float32, tf.zeros_initializer())
        logits = tf.nn.bias_add(tf.matmul(pooled_output, weights, transpose_b=True), bias)
        return tf.nn.log_softmax(logits, axis=-1)


def pretraining_tower(config: BertConfig, features: dict, is_training: bool,
                      use_nsp: bool, compute_dtype=tf.float32) -> dict:
    """Losses and per-position outputs of one tower.

    Returns {loss, masked_lm_loss [B, P], masked_lm_predictions [B, P],
    masked_lm_weights [B, P], next_sentence_loss [B], next_sentence_predictions [B]}.
    """
    model = BertModel(config, is_training, features["input_ids"],
                      features["input_mask"], features["segment_ids"],
                      compute_dtype=compute_dtype)
    positions = features["masked_lm_positions"]
    # The heads and losses run in float32 whatever the encoder's precision.
    log_probs = masked_lm_head(config, tf.cast(model.get_sequence_output(), tf.float32),
                               model.get_embedding_table(), positions)
    shape = tf.shape(positions)
    label_ids = tf.reshape(features["masked_lm_ids"], [-1])
    mlm_loss = -tf.reduce_sum(log_probs * tf.one_hot(label_ids, config.vocab_size), axis=-1)
    weights = tf.reshape(features["masked_lm_weights"], [-1])
    # Weighted mean over the real predictions (Google's formula).
    loss = tf.reduce_sum(weights * mlm_loss) / (tf.reduce_sum(weights) + 1e-5)
    outputs = {
        "masked_lm_loss": tf.reshape(mlm_loss, shape),
        "masked_lm_predictions": tf.reshape(tf.argmax(log_probs, -1, output_type=tf.int32),
                                            shape),
        "masked_lm_weights": features["masked_lm_weights"],
    }
    if use_nsp:
        nsp_log_probs = next_sentence_head(config,
                                           tf.cast(model.get_pooled_output(), tf.float32))
        labels = features["next_sentence_labels"]
        nsp_loss = -tf.reduce_sum(nsp_log_probs * tf.one_hot(labels, 2), axis=-1)
        example_weights = features["example_weights"]
        loss += tf.reduce_sum(nsp_loss * example_weights) / tf.maximum(
            tf.reduce_sum(example_weights), 1.0)
        outputs["next_sentence_loss"] = nsp_loss
        outputs["next_sentence_predictions"] = tf.argmax(nsp_log_probs, -1,
                                                         output_type=tf.int32)
    outputs["loss"] = loss
    return outputs


# --- input: TFRecord shards, streamed -----------------------------------------------

def expand_input_files(spec: str, flag: str) -> list:
    """Files from a glob, a comma list (of globs) or a directory of shards."""
    files = []
    for part in (p.strip() for p in (spec or "").split(",")):
        if not part:
            continue
        if os.path.isdir(part):
            files.extend(sorted(os.path.join(part, f) for f in os.listdir(part)
                                if not f.startswith(".")))
            continue
        matched = sorted(glob.glob(part))
        if not matched:
            fail(f"{flag}: no file matches {part!r}")
        files.extend(matched)
    if not files:
        fail(f"{flag} is required (a glob, comma list or directory of TFRecord shards)")
    return files


def parse_record(record: bytes, max_seq_length: int | None = None) -> dict:
    """One tf.train.Example of create_pretraining_data.py as numpy arrays."""
    feature = tf.train.Example.FromString(record).features.feature
    parsed = {}
    for name in FEATURE_NAMES:
        if name not in feature:
            fail(f"pretraining record lacks the feature {name!r}: is this a file written "
                 "by create_pretraining_data.py?")
        values = feature[name]
        if name in FLOAT_FEATURES:
            parsed[name] = np.array(values.float_list.value, np.float32)
        else:
            parsed[name] = np.array(values.int64_list.value, np.int32)
    parsed["next_sentence_labels"] = parsed["next_sentence_labels"][0]
    if max_seq_length is not None and len(parsed["input_ids"]) != max_seq_length:
        fail(f"pretraining records have sequences of {len(parsed['input_ids'])} tokens "
             f"but --max_seq_length={max_seq_length}; use the value the data was made with")
    return parsed


def _records(files: Sequence[str]) -> Iterator[bytes]:
    for path in files:
        yield from tf.io.tf_record_iterator(path)


def training_records(files: Sequence[str], seed: int, start_example: int,
                     shuffle_buffer: int = 1000) -> Iterator[bytes]:
    """Endless records: each epoch shuffles the file order and, through a seeded
    buffer, the records. Record k of the stream depends only on (files, seed, k),
    so `start_example` resumes exactly (skipped records are read, not parsed)."""
    epoch = 0
    produced = 0
    while True:
        rng = np.random.RandomState((seed * 1000003 + epoch) % (2 ** 32))
        order = [files[i] for i in rng.permutation(len(files))]
        buffer = []
        empty = True
        for record in _records(order):
            empty = False
            buffer.append(record)
            if len(buffer) >= shuffle_buffer:
                record = buffer.pop(rng.randint(len(buffer)))
                if produced >= start_example:
                    yield record
                produced += 1
        if empty:
            fail(f"the pretraining input {', '.join(files)} holds no records")
        while buffer:
            record = buffer.pop(rng.randint(len(buffer)))
            if produced >= start_example:
                yield record
            produced += 1
        epoch += 1


def stack_batch(examples: list, rows: int) -> dict:
    """Stack parsed examples into [rows, ...] arrays, trimmed to the longest real row.

    Missing rows (the end of an eval set) are zeros with example_weights 0.
    """
    seq = padded_length(max(int(e["input_mask"].sum()) for e in examples), "dynamic")
    seq = min(seq, len(examples[0]["input_ids"]))
    batch = {}
    for name in FEATURE_NAMES:
        first = examples[0][name]
        shape = (rows,) + np.shape(first)
        if name in ("input_ids", "input_mask", "segment_ids"):
            shape = (rows, seq)
        array = np.zeros(shape, np.asarray(first).dtype)
        for i, example in enumerate(examples):
            value = example[name]
            array[i] = value[:seq] if name in ("input_ids", "input_mask", "segment_ids") \
                else value
        batch[name] = array
    weights = np.zeros(rows, np.float32)
    weights[:len(examples)] = 1.0
    batch["example_weights"] = weights
    return batch


# --- the job ---------------------------------------------------------------------------

def define_flags() -> None:
    flags.DEFINE_string("input_file", None, "Training shards: glob, comma list or directory.")
    flags.DEFINE_string("eval_input_file", None,
                        "HELD-OUT shards for --do_eval (never the training files).")
    flags.DEFINE_integer("max_seq_length", 128, "Sequence length the data was made with.")
    flags.DEFINE_integer("max_predictions_per_seq", 20, "As given to create_pretraining_data.")
    flags.DEFINE_integer("num_train_steps", 100000, "Applied steps.")
    flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup steps.")
    flags.DEFINE_integer("max_eval_steps", 100, "Eval batches (global) at most.")
    flags.DEFINE_enum("nsp", "auto", ["auto", "true", "false"],
                      "Next-sentence head: auto = on unless the data is MLM-only.")
    define_training_flags(default_learning_rate=1e-4)


def inspect_records(files: Sequence[str], vocab_size: int, flag: str,
                    sample: int = 1000) -> bool:
    """Check the first records against the model; return whether they carry NSP.

    MLM-only data (create_pretraining_data --mode=mlm) has no segment B and no
    label 1. A token id beyond vocab_size means the shards were made with
    another vocab, which would otherwise fail deep inside TensorFlow.
    """
    has_nsp = False
    for i, record in enumerate(_records(files)):
        if i >= sample:
            break
        example = parse_record(record, FLAGS.max_seq_length)
        largest = int(max(example["input_ids"].max(), example["masked_lm_ids"].max()))
        if largest >= vocab_size:
            fail(f"{flag} holds token id {largest} but --bert_config_file has "
                 f"vocab_size={vocab_size}: the shards were made with another vocab")
        if example["next_sentence_labels"] == 1 or example["segment_ids"].any():
            has_nsp = True
    return has_nsp


def main() -> int:
    if not (FLAGS.do_train or FLAGS.do_eval):
        fail("nothing to do: set --do_train and/or --do_eval")
    plan = check_training_flags("max_predictions_per_seq", "num_train_steps")
    config = BertConfig.from_json_file(FLAGS.bert_config_file)
    if FLAGS.max_seq_length > config.max_position_embeddings:
        fail(f"--max_seq_length={FLAGS.max_seq_length} exceeds the model's "
             f"max_position_embeddings ({config.max_position_embeddings})")
    # Only the chief reads it; other workers receive its weights.
    init_checkpoint = (resolve_checkpoint(FLAGS.init_checkpoint)
                       if FLAGS.init_checkpoint and is_chief() else "")
    # Expanded even for eval alone, to refuse evaluating on training shards.
    train_files = expand_input_files(FLAGS.input_file, "--input_file") \
        if FLAGS.do_train or FLAGS.input_file else []
    eval_files = []
    if FLAGS.do_eval:
        eval_files = expand_input_files(FLAGS.eval_input_file, "--eval_input_file")
        overlap = set(map(os.path.realpath, eval_files)) & set(
            map(os.path.realpath, train_files))
        if overlap:
            fail(f"--eval_input_file shares {sorted(overlap)[0]} with --input_file; "
                 "evaluate on held-out shards")
    has_nsp = False
    for files, flag in ((train_files, "--input_file"), (eval_files, "--eval_input_file")):
        if files:
            has_nsp = inspect_records(files, config.vocab_size, flag) or has_nsp
    use_nsp = FLAGS.nsp == "true" or (FLAGS.nsp == "auto" and has_nsp)
    log.info("%s", plan.describe())
    log.info("objective: masked LM%s", " + next sentence" if use_nsp else " only")
    if FLAGS.do_train:
        do_train(plan, config, train_files, init_checkpoint, use_nsp)
    if FLAGS.do_eval and is_chief():
        do_eval(plan, config, eval_files, init_checkpoint, use_nsp)
    elif FLAGS.do_eval:
        log.info("eval is the chief's (worker 0's) job")
    return 0


def do_train(plan, config: BertConfig, files: list, init_checkpoint: str,
             use_nsp: bool) -> None:
    towers, per_tower = plan.num_towers, FLAGS.train_batch_size
    workers, index = num_workers(), worker_index()
    global_batch = per_tower * towers * FLAGS.gradient_accumulation_steps * workers
    log.info("pretraining on %d shard(s): %d tower(s) x batch %d x %d accumulation = "
             "global batch %d, %d steps", len(files), towers, per_tower,
             FLAGS.gradient_accumulation_steps, global_batch, FLAGS.num_train_steps)
    if workers > 1:
        log.info("cluster: %d workers x %d tower(s) each; worker %d trains on records "
                 "%d..%d of every %d", workers, towers, index, index * per_tower * towers,
                 (index + 1) * per_tower * towers - 1, per_tower * towers * workers)

    def micro_batches(start_example: int):
        # The cluster reads one stream; tower t of worker i takes the records
        # a single machine's tower i * towers + t would (the others are skipped
        # unparsed), so every record is trained on once across the cluster.
        records = training_records(files, FLAGS.seed, start_example)
        while True:
            mine = []
            for tower in range(towers * workers):
                rows = [next(records) for _ in range(per_tower)]
                if tower // towers == index:
                    mine.append(stack_batch([parse_record(r, FLAGS.max_seq_length)
                                             for r in rows], per_tower))
            yield mine

    def batches(start_example: int):
        return prefetch(micro_batches(start_example))

    settings = train_settings(FLAGS.learning_rate, FLAGS.num_train_steps,
                              FLAGS.num_warmup_steps)
    with tf.Graph().as_default():
        graph = build_training_graph(
            plan, FEATURE_SPEC,
            lambda f, i: pretraining_tower(config, f, True, use_nsp,
                                           compute_dtype(FLAGS.precision))["loss"],
            settings)
        result = train(graph, batches, loop_settings(plan, FLAGS.num_train_steps,
                                                     global_batch, init_checkpoint))
    log.info("pretraining done: global step %d, %d examples seen", result.global_step,
             result.examples_seen)
    if is_chief():
        write_train_results(FLAGS.output_dir, result, global_batch, FLAGS.learning_rate)


def eval_batches(files: list, per_tower: int, towers: int, max_steps: int):
    """Global batches of the eval files in order, each row once; last one padded."""
    records = _records(files)
    for _ in range(max_steps):
        # range first: zip must not pull (and drop) a record past the batch.
        examples = [parse_record(r, FLAGS.max_seq_length)
                    for _, r in zip(range(per_tower * towers), records)]
        if not examples:
            return
        yield [stack_batch(examples[t::towers], per_tower) for t in range(towers)
               if examples[t::towers]]


def do_eval(plan, config: BertConfig, files: list, init_checkpoint: str,
            use_nsp: bool) -> dict:
    checkpoint = latest_checkpoint(FLAGS.output_dir) or init_checkpoint
    if not checkpoint:
        fail(f"no checkpoint to evaluate: --output_dir={FLAGS.output_dir} has no "
             "model.ckpt-N and --init_checkpoint is not set")

    def tower(features, i):
        out = pretraining_tower(config, features, False, use_nsp,
                                compute_dtype(FLAGS.precision))
        out.pop("loss")
        out["example_weights"] = features["example_weights"]
        out["next_sentence_labels"] = features["next_sentence_labels"]
        out["masked_lm_ids"] = features["masked_lm_ids"]
        return out

    totals = {"mlm_loss": 0.0, "mlm_correct": 0.0, "mlm_weight": 0.0,
              "nsp_loss": 0.0, "nsp_correct": 0.0, "examples": 0.0}
    log.info("eval: %s on %d held-out shard(s)", checkpoint, len(files))
    # A released checkpoint (--init_checkpoint, nothing trained yet) may lack the
    # MLM/NSP heads: they start fresh, which measures where pretraining starts.
    from_release = checkpoint == init_checkpoint
    with Scorer(plan, FEATURE_SPEC, tower, checkpoint, make_session_config(plan),
                partial=from_release, seed=FLAGS.seed) as scorer:
        for per_tower_batches in eval_batches(files, FLAGS.eval_batch_size, plan.num_towers,
                                              FLAGS.max_eval_steps):
            # A short last batch may leave some towers without rows: give them
            # an all-filler batch so every tower still has an input.
            while len(per_tower_batches) < plan.num_towers:
                filler = {k: np.zeros_like(v) for k, v in per_tower_batches[0].items()}
                per_tower_batches.append(filler)
            for out in scorer.run(per_tower_batches):
                weights = out["masked_lm_weights"]
                totals["mlm_loss"] += float(np.sum(out["masked_lm_loss"] * weights))
                totals["mlm_correct"] += float(np.sum(
                    (out["masked_lm_predictions"] == out["masked_lm_ids"]) * weights))
                totals["mlm_weight"] += float(np.sum(weights))
                real = out["example_weights"]
                totals["examples"] += float(np.sum(real))
                if use_nsp:
                    totals["nsp_loss"] += float(np.sum(out["next_sentence_loss"] * real))
                    totals["nsp_correct"] += float(np.sum(
                        (out["next_sentence_predictions"] == out["next_sentence_labels"])
                        * real))
    if not totals["examples"]:
        fail(f"--eval_input_file {', '.join(files)} holds no records")
    metrics = {
        "masked_lm_accuracy": totals["mlm_correct"] / max(totals["mlm_weight"], 1e-9),
        "masked_lm_loss": totals["mlm_loss"] / max(totals["mlm_weight"], 1e-9),
        "global_step": checkpoint_step(checkpoint),
        "eval_examples": int(totals["examples"]),
    }
    if use_nsp:
        metrics["next_sentence_accuracy"] = totals["nsp_correct"] / totals["examples"]
        metrics["next_sentence_loss"] = totals["nsp_loss"] / totals["examples"]
    write_key_values(os.path.join(FLAGS.output_dir, "eval_results.txt"), metrics)
    log.info("eval: %s", "  ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}"
                                   for k, v in sorted(metrics.items())))
    return metrics


def cli(argv=None) -> None:
    run_entry_point(define_flags, main, argv)
