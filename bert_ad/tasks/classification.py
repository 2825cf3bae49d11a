"""run_classifier_mgpu.py: fine-tune, predict and evaluate a BERT classifier on N towers.

The flags of Google's run_classifier.py plus --n_gpus and the multi-tower
ones. Order as in the predecessor: train -> predict -> eval. Outputs in
--output_dir: model.ckpt-N, labels.txt, predict.txt (one predicted label
index per input row, in input order), test_results.tsv (class
probabilities per row), eval_results.txt (`key = value`).

With a cluster (docs/multi_worker.md) every worker trains on its share of
each global batch; the chief (worker 0) alone reads --init_checkpoint and
writes labels.txt, checkpoints, predictions and eval results.
"""

from __future__ import annotations

import logging
import os

import numpy as np
from absl import flags

from bert_ad.data import processors
from bert_ad.data.batching import (BUCKET_WINDOW_BATCHES, make_batch, prefetch,
                                    split_for_towers, training_batches, training_stream)
from bert_ad.parallel.checkpoints import latest_checkpoint, resolve_checkpoint
from bert_ad.model.heads import FEATURE_SPEC, classifier
from bert_ad.cli.flags import (build_training_graph, check_training_flags,
                                define_training_flags, is_chief, loop_settings,
                                make_session_config, num_workers, run_entry_point,
                                train_settings, worker_index, write_train_results)
from bert_ad.compat import tf
from bert_ad.errors import fail
from bert_ad.data.features import FeatureSettings, cache_key, cached_features, convert_examples
from bert_ad.parallel.scoring import run_inference
from bert_ad.metrics.classification import classification_metrics
from bert_ad.model.modeling import BertConfig
from bert_ad.parallel.optimization import scale_learning_rate
from bert_ad.files import write_key_values, write_lines
from bert_ad.model.precision import compute_dtype
from bert_ad.data.tokenization import TRUNCATION_STRATEGIES, check_max_seq_length, make_tokenizer
from bert_ad.parallel.loop import train

log = logging.getLogger("bert_ad")
FLAGS = flags.FLAGS


def define_flags() -> None:
    # Google's run_classifier.py flags (the training ones are shared).
    flags.DEFINE_string("data_dir", None, "Folder of the task's train/dev/test files.")
    flags.DEFINE_string("task_name", None, "Task: " + ", ".join(sorted(processors.TASKS)))
    define_model_flags()
    flags.DEFINE_enum("truncation", "head", list(TRUNCATION_STRATEGIES),
                      "Which tokens survive when a text is too long.")
    flags.DEFINE_float("truncation_head_fraction", 0.25,
                       "head+tail: share of the budget kept from the start.")
    for key in ("train_file", "dev_file", "test_file", "delimiter", "labels"):
        flags.DEFINE_string(key, None, f"Override the task's {key}.")
    for key in ("label_column", "text_a_column", "text_b_column"):
        flags.DEFINE_integer(key, None, f"Override the task's {key} (0-based).")
    flags.DEFINE_bool("has_header", None, "Override: the files start with a header line.")


def define_model_flags() -> None:
    """The flags of a pair classifier on N towers, whatever its data
    (run_classifier_mgpu.py and rewrite_finetune.py)."""
    flags.DEFINE_string("vocab_file", None, "WordPiece vocab.txt of the model.")
    flags.DEFINE_bool("do_lower_case", True, "Lower-case (uncased models).")
    flags.DEFINE_integer("max_seq_length", 128, "Longest sequence after WordPiece.")
    flags.DEFINE_bool("do_predict", False, "Score --predict_file (default: the test file).")
    flags.DEFINE_integer("predict_batch_size", 8, "Predict batch size per tower.")
    flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training file.")
    flags.DEFINE_float("warmup_proportion", 0.1, "Share of steps with linear warmup.")
    define_training_flags()
    # Data.
    flags.DEFINE_string("predict_file", None, "File to score with --do_predict.")
    flags.DEFINE_integer("max_train_examples", None, "Use only the first N training rows.")
    flags.DEFINE_integer("max_eval_examples", None, "Use only the first N dev rows.")
    flags.DEFINE_enum("padding", "dynamic", ["dynamic", "max_length"],
                      "Pad each batch to its longest row (dynamic) or to max_seq_length.")
    flags.DEFINE_bool("bucket_by_length", False,
                      "Train on batches of similar lengths (less padding); eval and "
                      "predict always group by length and restore the input order.")
    flags.DEFINE_string("spm_model_file", None, "SentencePiece model instead of --vocab_file.")
    flags.DEFINE_string("cache_dir", None, "Feature cache (default: output_dir/cache).")


class ModelJob:
    """The validated model, tokenizer and output settings of one run.

    Subclasses add their data: `features(split, examples, data_file)` and
    `labels`; `do_train`, `score` and `evaluate` below work with any of them.
    """

    def __init__(self):
        if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict):
            fail("nothing to do: set at least one of --do_train, --do_eval, --do_predict")
        self.check_data_flags()
        self.plan = check_training_flags("predict_batch_size")
        self.read_task()
        self.config = BertConfig.from_json_file(FLAGS.bert_config_file)
        check_max_seq_length(FLAGS.max_seq_length, self.config.max_position_embeddings)
        self.tokenizer = make_tokenizer(FLAGS.vocab_file or "", FLAGS.do_lower_case,
                                        FLAGS.spm_model_file or "")
        # A vocab of another model maps tokens to the wrong rows silently, so
        # any difference is refused (released models have exactly vocab_size).
        if self.tokenizer.vocab_size != self.config.vocab_size:
            vocab_flag = "--spm_model_file" if FLAGS.spm_model_file else "--vocab_file"
            fail(f"{vocab_flag} has {self.tokenizer.vocab_size} tokens but "
                 f"--bert_config_file says vocab_size={self.config.vocab_size}; "
                 "use the vocab the model was trained with")
        # Only the chief reads it; other workers receive its weights.
        self.init_checkpoint = (resolve_checkpoint(FLAGS.init_checkpoint)
                                if FLAGS.init_checkpoint and is_chief() else "")
        self.output_dir = FLAGS.output_dir
        self.cache_dir = FLAGS.cache_dir or os.path.join(self.output_dir, "cache")
        self.padding = ("dynamic" if FLAGS.padding == "dynamic"
                        else FLAGS.max_seq_length)
        self.session_config = make_session_config(self.plan)
        self.labels = None

    def check_data_flags(self) -> None:
        """Refuse missing data flags before anything else is checked."""

    def read_task(self) -> None:
        """Resolve the data settings (after the training flags are checked)."""

    def features(self, split: str, examples, data_file: str):
        raise NotImplementedError

    def tower_classifier(self, is_training: bool):
        dtype = compute_dtype(FLAGS.precision)
        return lambda features, i: classifier(self.config, features, len(self.labels),
                                              is_training, dtype)


class Job(ModelJob):
    """run_classifier_mgpu.py's run: a task of bert_ad.data.processors."""

    def check_data_flags(self) -> None:
        if not FLAGS.task_name:
            fail("--task_name is required")

    def read_task(self) -> None:
        overrides = {key: getattr(FLAGS, key) for key in processors.OVERRIDE_KEYS
                     if getattr(FLAGS, key) is not None}
        self.task = processors.get_task(FLAGS.task_name, overrides)

    def features(self, split: str, examples, data_file: str):
        settings = FeatureSettings(FLAGS.max_seq_length, FLAGS.truncation,
                                   FLAGS.truncation_head_fraction, self.labels)
        key = cache_key(data_file, FLAGS.vocab_file or FLAGS.spm_model_file or "",
                        FLAGS.do_lower_case, settings,
                        repr(self.task) + f"|{split}|{len(examples)}")
        return cached_features(self.cache_dir, split, key,
                               lambda: convert_examples(examples, self.tokenizer, settings))


def read_split(job: Job, split: str, path: str | None = None, limit: int | None = None):
    examples = processors.read_examples(job.task, FLAGS.data_dir or "", split, path)
    if limit is not None:
        examples = examples[:limit]
    return examples


def resolve_labels(job: Job, train_examples) -> list:
    """The training data's (or the task's) labels, else output_dir's labels.txt."""
    labels_file = os.path.join(job.output_dir, "labels.txt")
    if train_examples is not None:
        return processors.label_list(job.task, train_examples)
    if job.task.labels is not None:
        return list(job.task.labels)
    return processors.load_label_list(labels_file)


def read_eval_examples(job: Job) -> list:
    examples = read_split(job, "dev", limit=FLAGS.max_eval_examples)
    unlabelled = [e for e in examples if e.label is None]
    if unlabelled:
        fail(f"{unlabelled[0].source} line {unlabelled[0].line}: the dev file has no "
             "labels; --do_eval needs a labelled file")
    return examples


def worker_training_batches(examples, per_tower: int, towers: int, seed: int,
                            start_example: int, padding, bucket_batches: int,
                            workers: int, index: int):
    """Worker `index`'s micro-batches: one padded batch dict per local tower.

    The cluster's global batch is dealt to `workers * towers` towers exactly
    as one machine with that many towers would deal it (batching's
    training_batches), and this worker keeps its towers' shares: the cluster
    sees every example once per epoch, and 2 workers x 1 tower get the same
    batches as 1 worker x 2 towers.
    """
    stream = training_stream(len(examples), per_tower * towers * workers, seed,
                             start_example, examples.lengths, bucket_batches)
    for indices in stream:
        shares = split_for_towers(indices, towers * workers, examples.lengths)
        yield [make_batch(examples, part, padding)
               for part in shares[index * towers:(index + 1) * towers]]


def do_train(job: ModelJob, examples) -> None:
    features = job.features("train", examples, examples[0].source)
    towers, per_tower = job.plan.num_towers, FLAGS.train_batch_size
    accumulation = FLAGS.gradient_accumulation_steps
    workers = num_workers()
    global_batch = per_tower * towers * accumulation * workers
    num_train_steps = max(1, int(len(examples) / global_batch * FLAGS.num_train_epochs))
    learning_rate = scale_learning_rate(FLAGS.learning_rate, global_batch,
                                        FLAGS.lr_reference_batch or per_tower,
                                        FLAGS.lr_scaling)
    log.info("training: %d examples, %d tower(s) x batch %d x %d accumulation = global "
             "batch %d, %d steps, learning rate %g", len(examples), towers, per_tower,
             accumulation, global_batch, num_train_steps, learning_rate)
    if workers > 1:
        log.info("cluster: %d workers x %d tower(s) each; worker %d trains on %d of every "
                 "%d examples", workers, towers, worker_index(), per_tower * towers,
                 per_tower * towers * workers)
    settings = train_settings(learning_rate, num_train_steps,
                              int(num_train_steps * FLAGS.warmup_proportion))

    def batches(start_example: int):
        bucket = BUCKET_WINDOW_BATCHES if FLAGS.bucket_by_length else 0
        if workers == 1:
            return prefetch(training_batches(features, per_tower, towers, FLAGS.seed,
                                             start_example, job.padding, bucket))
        return prefetch(worker_training_batches(features, per_tower, towers, FLAGS.seed,
                                                start_example, job.padding, bucket,
                                                workers, worker_index()))

    with tf.Graph().as_default():
        graph = build_training_graph(job.plan, FEATURE_SPEC,
                                     lambda f, i: job.tower_classifier(True)(f, i).loss,
                                     settings)
        result = train(graph, batches, loop_settings(job.plan, num_train_steps,
                                                     global_batch, job.init_checkpoint))
    log.info("training done: global step %d, %d examples seen", result.global_step,
             result.examples_seen)
    if is_chief():
        write_train_results(job.output_dir, result, global_batch, learning_rate)


def scoring_checkpoint(job: ModelJob) -> str:
    found = latest_checkpoint(job.output_dir)
    if found:
        return found
    if job.init_checkpoint:
        return job.init_checkpoint
    fail(f"no checkpoint to score with: --output_dir={job.output_dir} has no "
         "model.ckpt-N and --init_checkpoint is not set")


def score(job: ModelJob, split: str, examples, data_file: str, batch_size: int) -> dict:
    checkpoint = scoring_checkpoint(job)
    features = job.features(split, examples, data_file)

    def tower(placeholders, i):
        out = job.tower_classifier(False)(placeholders, i)
        return {"probabilities": out.probabilities, "loss": out.per_example_loss}

    log.info("%s: scoring %d rows with %s on %d tower(s)", split, len(examples),
             checkpoint, job.plan.num_towers)
    results = run_inference(job.plan, FEATURE_SPEC, tower, checkpoint, features,
                            batch_size, job.padding, job.session_config)
    results["labels"] = features.labels
    results["checkpoint"] = checkpoint
    return results


def do_predict(job: Job, examples) -> None:
    data_file = examples[0].source
    results = score(job, "predict", examples, data_file, FLAGS.predict_batch_size)
    probabilities = results["probabilities"]
    predicted = np.argmax(probabilities, axis=-1)
    write_lines(os.path.join(job.output_dir, "predict.txt"),
                (str(int(p)) for p in predicted))
    write_lines(os.path.join(job.output_dir, "test_results.tsv"),
                ("\t".join(f"{p:.6f}" for p in row) for row in probabilities))
    log.info("predict: wrote %d rows to predict.txt and test_results.tsv in %s",
             len(examples), job.output_dir)


def evaluate(job: ModelJob, examples) -> tuple:
    """(metrics, score's results) of the labelled `examples`."""
    results = score(job, "dev", examples, examples[0].source, FLAGS.eval_batch_size)
    predicted = np.argmax(results["probabilities"], axis=-1)
    metrics = classification_metrics(results["labels"], predicted, job.labels)
    metrics["eval_loss"] = float(np.mean(results["loss"]))
    metrics["global_step"] = _checkpoint_step(results["checkpoint"])
    metrics["eval_examples"] = len(examples)
    return metrics, results


def write_eval_results(output_dir: str, metrics: dict) -> None:
    """eval_results.txt: `key = value` lines, sorted by key."""
    write_key_values(os.path.join(output_dir, "eval_results.txt"), metrics)


def do_eval(job: Job, examples) -> dict:
    metrics, _ = evaluate(job, examples)
    write_eval_results(job.output_dir, metrics)
    log.info("eval: accuracy %.4f  macro-F1 %.4f  loss %.4f  (%d rows, step %d)",
             metrics["eval_accuracy"], metrics["eval_macro_f1"], metrics["eval_loss"],
             len(examples), metrics["global_step"])
    return metrics


def _checkpoint_step(prefix: str) -> int:
    from bert_ad.parallel.checkpoints import checkpoint_step
    return checkpoint_step(prefix)


def main(argv=None) -> int:
    job = Job()
    log.info("%s", job.plan.describe())
    if not is_chief():
        return worker_main(job)
    # Read and check every input before anything is written: a bad dev or
    # predict file must fail in seconds, not after training, and leave
    # output_dir as it was.
    train_examples = predict_examples = eval_examples = None
    if FLAGS.do_train:
        train_examples = read_split(job, "train", limit=FLAGS.max_train_examples)
    if FLAGS.do_predict:
        predict_examples = read_split(job, "test", FLAGS.predict_file)
    if FLAGS.do_eval:
        eval_examples = read_eval_examples(job)
    job.labels = resolve_labels(job, train_examples)
    for examples in (train_examples, eval_examples):
        if examples is not None:
            processors.check_labels(examples, job.labels)
    if train_examples is None:
        scoring_checkpoint(job)
    else:
        processors.save_label_list(os.path.join(job.output_dir, "labels.txt"),
                                   job.labels)
        do_train(job, train_examples)
    if predict_examples is not None:
        do_predict(job, predict_examples)
    if eval_examples is not None:
        do_eval(job, eval_examples)
    return 0


def worker_main(job: Job) -> int:
    """A non-chief worker: train its share; the chief writes every output."""
    if FLAGS.do_predict or FLAGS.do_eval:
        log.info("predict and eval are the chief's (worker 0's) job")
    if not FLAGS.do_train:
        return 0
    train_examples = read_split(job, "train", limit=FLAGS.max_train_examples)
    job.labels = resolve_labels(job, train_examples)
    processors.check_labels(train_examples, job.labels)
    do_train(job, train_examples)
    return 0


def cli(argv=None) -> None:
    """Console entry point: parse absl flags (incl. --flagfile), then run."""
    run_entry_point(define_flags, main, argv)
