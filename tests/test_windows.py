"""Long documents as windows (--long_text=windows).

Where windows start; the pooling in graph ops (and run on the host, as
scoring runs it) against a loop written here; a 3,000-token document scored
from every one of its windows (counted in the batches fed, and its last words
move its score);
scoring on 2 towers, with a document's windows on both, equal to 1 tower and
to the pooling inside one graph (dropout off, 1e-5); one predict.txt line per
input row from the launcher, training on documents' windows in one step; an
export of a windows model scores like its checkpoint, pools a request's
documents in its signature, and refuses a run that cuts windows otherwise.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest

from bert_ad import driver
from bert_ad.cli import classifier as classifier_cli
from bert_ad.compat import tf
from bert_ad.data.batching import make_batch
from bert_ad.errors import UserError
from bert_ad.data import processors
from bert_ad.data.features import WindowSettings, encode_windows, window_starts
from bert_ad.data.tokenization import make_tokenizer
from bert_ad.model.heads import classifier
from bert_ad.model.modeling import BertConfig
from bert_ad.answers.windows import pool_scored_windows
from bert_ad.model.windows import pool_windows
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import feature_placeholders
from bert_ad.tasks.base import TextEncoder
from bert_ad.tasks.classification import ClassificationTask

from helpers import (REPO, flag_args, run_launcher_in_process, run_main,
                     sample_sentiment_texts, tiny_model)

LAUNCHER = os.path.join(REPO, "run_classifier_mgpu.py")
MAX_SEQ = 32                       # windows of 30 pieces
STRIDE = 15


# ---------------------------------------------------------------------------
# Where windows start.


def test_window_starts_cover_the_text_with_overlap():
    starts = window_starts(3000, 126, 63)
    assert len(starts) == 1 + math.ceil((3000 - 126) / 63) == 47
    assert starts[0] == 0 and starts[-1] == 3000 - 126
    assert all(0 < b - a <= 63 for a, b in zip(starts, starts[1:]))
    covered = np.zeros(3000, bool)
    for start in starts:
        covered[start:start + 126] = True
    assert covered.all()
    assert window_starts(100, 126, 63) == [0]
    # --max_windows keeps that many, evenly spread, first and last included.
    kept = window_starts(3000, 126, 63, max_windows=4)
    assert kept == [starts[0], starts[15], starts[31], starts[46]]
    assert window_starts(3000, 126, 63, max_windows=1) == [0]


# ---------------------------------------------------------------------------
# Pooling: graph ops (in a graph, and as scoring runs them on the host) against a
# plain loop.


def loop_pooling(logits, scores, documents, count, pooling):
    out = []
    for d in range(count):
        rows = [i for i in range(len(documents)) if documents[i] == d]
        x = np.array([logits[i] for i in rows], np.float64)
        if pooling == "max":
            out.append(x.max(axis=0))
        elif pooling == "mean":
            out.append(x.mean(axis=0))
        else:
            w = np.exp([scores[i] for i in rows])
            out.append((w[:, None] * x).sum(axis=0) / w.sum())
    return np.array(out)


@pytest.mark.parametrize("pooling", ["mean", "max", "attention"])
def test_pooling_in_the_graph_and_on_the_host_agree_with_a_loop(pooling):
    rng = np.random.RandomState(1)
    documents = np.array([2, 0, 0, 1, 2, 2, 0, 3])
    logits = rng.normal(0, 3, (8, 3)).astype(np.float32)
    scores = rng.normal(0, 3, 8).astype(np.float32)
    expected = loop_pooling(logits, scores, documents, 4, pooling)
    np.testing.assert_allclose(pool_scored_windows(logits, scores, documents, 4, pooling),
                               expected, rtol=1e-6)
    with tf.Graph().as_default(), tf.Session() as session:
        pooled = session.run(pool_windows(tf.constant(logits), tf.constant(scores),
                                          tf.constant(documents, tf.int32), 4, pooling))
    np.testing.assert_allclose(pooled, expected, rtol=1e-5)


# ---------------------------------------------------------------------------
# The task on a tiny model.


CONFIG_CHANGES = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      initializer_range=0.5, max_position_embeddings=MAX_SEQ)


def long_text(words: int, seed: int) -> str:
    """`words` words of the sample sentences, in a seeded order: `words` pieces
    (whole words of the tiny vocab, no punctuation)."""
    pool = [w for w in " ".join(sample_sentiment_texts()).split() if w.isalnum()]
    rng = np.random.RandomState(seed)
    return " ".join(pool[i] for i in rng.randint(0, len(pool), words))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("windows")
    model = tiny_model(str(root / "model"), **CONFIG_CHANGES)
    data = root / "data"
    data.mkdir()
    # Row 0: 3,000 pieces; then shorter rows.
    rows = [("1", long_text(3000, 0)), ("0", long_text(70, 1)), ("1", long_text(20, 2)),
            ("0", long_text(140, 3)), ("1", long_text(45, 4))]
    for split in ("train", "dev", "test"):
        (data / f"{split}.tsv").write_text("".join(f"{label}\t{text}\n" for label, text in rows),
                                           encoding="utf-8")
    return {"root": root, "model": model, "data": str(data), "rows": rows}


def make_task(setup, pooling="mean", windows=True, cache="cache", max_windows=0):
    model = setup["model"]
    encoder = TextEncoder(BertConfig.from_json_file(model.config_file),
                          make_tokenizer(model.vocab_file, True, ""), model.vocab_file, True,
                          MAX_SEQ, cache_dir=str(setup["root"] / cache), compute_dtype=tf.float32)
    task = ClassificationTask(
        encoder, processors.get_task("sentiment"), setup["data"],
        windows=WindowSettings(STRIDE, max_windows) if windows else None,
        window_pooling=pooling)
    task.labels = ["0", "1"]
    return task


def initial_checkpoint(task, path: str) -> str:
    """The task's freshly initialised model (the attention weights included)."""
    with tf.Graph().as_default():
        tf.set_random_seed(5)
        task.build_model(feature_placeholders(task.feature_spec, 0), is_training=False)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            tf.train.Saver().save(session, path)
    return path


def shared_checkpoint(setup, pooling: str) -> str:
    """initial_checkpoint of make_task(setup, pooling), made once for the module (the
    same seed gives the same weights: the tests that start from it share it)."""
    path = setup["root"] / f"init_{pooling}" / "model.ckpt"
    if not (setup["root"] / f"init_{pooling}").exists():
        initial_checkpoint(make_task(setup, pooling), str(path))
    return str(path)


def expected_windows(words: int) -> int:
    return 1 if words <= MAX_SEQ - 2 else 1 + math.ceil((words - (MAX_SEQ - 2)) / STRIDE)


def test_a_3000_token_document_is_scored_from_all_its_windows(setup, tmp_path):
    task = make_task(setup)
    data = task.read("dev")
    batches = task.batches(data)
    fed = {}
    for _, tower_batches in batches.scoring(8, 2):
        for batch in tower_batches:
            real = batch["example_weights"] > 0
            for document in batch["document_index"][real]:
                fed[int(document)] = fed.get(int(document), 0) + 1
    pieces = [len(task.encoder.tokenizer.tokenize(text)) for _, text in setup["rows"]]
    assert pieces[0] == 3000
    assert fed == {i: expected_windows(n) for i, n in enumerate(pieces)}
    assert fed[0] == 1 + math.ceil((3000 - 30) / 15) == 199

    # Its last words change its score with windows, not when truncated to the head.
    checkpoint = shared_checkpoint(setup, "mean")
    placement = driver.Placement(plan_devices(1, cuda_visible_devices=""))
    settings = driver.RunSettings(output_dir=str(tmp_path / "out"), init_checkpoint=checkpoint,
                                  predict_batch_size=16)
    edited = [(label, text) for label, text in setup["rows"]]
    edited[0] = ("1", setup["rows"][0][1].rsplit(" ", 20)[0] + " " + long_text(20, 9))
    edited_file = tmp_path / "edited.tsv"
    edited_file.write_text("".join(f"{label}\t{text}\n" for label, text in edited),
                           encoding="utf-8")
    twin = driver.SplitData("dev", processors.read_examples(
        task.spec, "", "dev", str(edited_file)), str(edited_file))
    for windowed, moves in ((True, True), (False, False)):
        kind = make_task(setup, windows=windowed, cache=f"cache_{windowed}")
        before = driver.score(kind, data, 16, settings, placement)
        after = driver.score(kind, twin, 16, settings, placement)
        first = [kind.row_outputs(d, o)["predictions"][0] for d, o in
                 ((data, before), (twin, after))]
        difference = np.max(np.abs(first[0] - first[1]))
        # Two of 199 windows changed: a small move of the mean, but a move.
        assert difference > 1e-6 if moves else difference < 1e-9, (windowed, first)


# Max pooling is left out here: its pooling is the loop's in the graph and on the host
# (test_pooling_...), and it takes no path across towers that mean does not (same
# variables, same scoring; and a maximum of per-tower maxima would hide a split that
# a mean of per-tower means shows). Mean and attention (its own weights) stay.
@pytest.mark.parametrize("pooling", ["mean", "attention"])
def test_two_towers_split_a_document_and_pool_it_as_one(setup, tmp_path, pooling):
    task = make_task(setup, pooling)
    checkpoint = shared_checkpoint(setup, pooling)
    data = task.read("dev")
    batches = task.batches(data)
    # Scoring on 2 towers puts windows of one document on both.
    towers_of = {}
    for _, tower_batches in batches.scoring(4, 2):
        for tower, batch in enumerate(tower_batches):
            for document in batch["document_index"][batch["example_weights"] > 0]:
                towers_of.setdefault(int(document), set()).add(tower)
    assert towers_of[0] == {0, 1}

    def predictions(towers):
        placement = driver.Placement(plan_devices(towers, cuda_visible_devices=""))
        settings = driver.RunSettings(output_dir=str(tmp_path / f"out{towers}"),
                                      init_checkpoint=checkpoint)
        outputs = driver.score(task, data, 4, settings, placement)
        return task.row_outputs(data, outputs, with_losses=True)

    two, one = predictions(2), predictions(1)
    np.testing.assert_allclose(two["predictions"], one["predictions"], atol=1e-5)
    np.testing.assert_allclose(two["losses"], one["losses"], atol=1e-5)
    assert np.ptp(one["predictions"][:, 0]) > 1e-3      # the rows score differently

    # The graph's own pooling (every document's windows in one batch, as in
    # training) gives the same documents' probabilities and loss.
    batch = batches.document_batch(np.arange(len(data)))
    with tf.Graph().as_default():
        features = {name: tf.constant(batch[name]) for name in task.feature_spec}
        out = classifier(task.encoder.model(features, False), features, 2, False,
                         objective="softmax", window_pooling=pooling)
        with tf.Session() as session:
            tf.train.Saver().restore(session, checkpoint)
            probabilities, losses = session.run([out.probabilities, out.per_example_loss])
    np.testing.assert_allclose(probabilities, one["predictions"], atol=1e-5)
    np.testing.assert_allclose(losses, one["losses"], atol=1e-5)


def test_training_batches_hold_whole_documents(setup):
    task = make_task(setup, max_windows=6)
    batches = task.batches(task.read("train"))
    assert batches.num_examples == 5
    micro = next(iter(batches.training(2, 2, 1, 0, 3, 0)))
    assert len(micro) == 2
    for batch in micro:
        documents = len(batch["label_ids"])
        assert documents == 2 and batch["example_weights"].tolist() == [1.0, 1.0]
        counts = np.bincount(batch["window_document"], minlength=documents)
        assert np.all(counts >= 1) and len(batch["input_ids"]) == counts.sum()
        assert counts.max() <= 6


def test_the_launcher_trains_on_windows_and_writes_a_line_per_row(setup, tmp_path):
    model = setup["model"]
    predict_file = tmp_path / "predict.tsv"
    lines = [f"{label}\t{text}" for label, text in setup["rows"]]
    predict_file.write_text("\n".join(lines[:2] + [""] + lines[2:]) + "\n", encoding="utf-8")
    output_dir = str(tmp_path / "out")
    # The launcher's entry point in this process (test_classifier_cli.py runs it as a
    # user types it).
    run = run_launcher_in_process([LAUNCHER] + flag_args({
        "task_name": "sentiment", "data_dir": setup["data"], "vocab_file": model.vocab_file,
        "bert_config_file": model.config_file, "output_dir": output_dir,
        "max_seq_length": MAX_SEQ, "n_gpus": 2, "train_batch_size": 1,
        "predict_batch_size": 8, "num_train_epochs": 2, "learning_rate": 1e-3,
        "long_text": "windows", "window_stride": STRIDE, "max_windows": 8,
        "window_pooling": "attention", "do_train": True, "do_predict": True,
        "predict_file": str(predict_file)})).check()
    assert "train: 5 rows as" in run.stderr
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        predicted = f.read().split("\n")[:-1]
    assert len(predicted) == 6 and all(line in ("0", "1") for line in predicted)
    # 5 documents, 2 towers x 1 document a step, 2 epochs: 5 steps.
    with open(os.path.join(output_dir, "train_results.txt"), encoding="utf-8") as f:
        assert "global_step = 5\n" in f.read()
    reader = tf.train.load_checkpoint(os.path.join(output_dir, "model.ckpt-5"))
    assert reader.has_tensor("window_attention/kernel")


# ---------------------------------------------------------------------------
# Text pairs: the first text rides in every window, the second is cut.


@pytest.mark.parametrize("first_words", [6, 40])
def test_a_pair_keeps_its_first_text_in_every_window(setup, first_words):
    task = make_task(setup)
    tokenizer = task.encoder.tokenizer
    first, second = long_text(first_words, 7), long_text(300, 8)
    example = processors.InputExample(guid="pair", text_a=first, text_b=second, label="1")
    windows = encode_windows(example, tokenizer, task.feature_settings())
    a = tokenizer.tokenize(first)[:(MAX_SEQ - 3) // 2]       # 40 words: cut to 14
    assert len(a) == min(first_words, 14)
    b = tokenizer.tokenize(second)
    head = tokenizer.convert_tokens_to_ids(["[CLS]"] + a + ["[SEP]"])
    sep = tokenizer.convert_tokens_to_ids(["[SEP]"])[0]
    covered, parts = np.zeros(len(b), bool), []
    for ids, segments in windows:
        assert len(ids) <= MAX_SEQ and ids[:len(head)] == head and ids[-1] == sep
        assert segments == [0] * len(head) + [1] * (len(ids) - len(head))
        parts.append(ids[len(head):-1])
    # Each window's second part is a run of b's pieces; together they cover b,
    # in order, each overlapping the one before.
    b_ids = tokenizer.convert_tokens_to_ids(b)
    window = MAX_SEQ - 3 - len(a)
    start = end = 0
    for k, part in enumerate(parts):
        found = [i for i in range(start, len(b_ids) - len(part) + 1)
                 if b_ids[i:i + len(part)] == part]
        assert found and len(part) == window, k
        assert k == 0 or found[0] < end, f"window {k} does not overlap the one before"
        covered[found[0]:found[0] + len(part)] = True
        start, end = found[0] + 1, found[0] + len(part)
    assert covered.all() and end == len(b_ids)
    # The stride is --window_stride's share of a single text's window (15/30).
    stride = round(STRIDE * window / (MAX_SEQ - 2))
    assert len(windows) == 1 + math.ceil((len(b) - window) / stride)


def test_the_launcher_scores_pairs_from_windows(setup, tmp_path):
    model = setup["model"]
    data = tmp_path / "pairs"
    data.mkdir()
    rows = [(label, long_text(5, 20 + i), text) for i, (label, text) in
            enumerate(setup["rows"])]
    for split in ("train", "dev", "test"):
        (data / f"{split}.tsv").write_text(
            "".join(f"{label}\t{title}\t{body}\n" for label, title, body in rows),
            encoding="utf-8")
    output_dir = str(tmp_path / "out")
    assert run_classifier(dict(
        WINDOW_FLAGS, task_name="tsv", text_b_column=2, data_dir=str(data),
        vocab_file=model.vocab_file, bert_config_file=model.config_file,
        output_dir=output_dir, max_seq_length=MAX_SEQ, train_batch_size=2,
        predict_batch_size=8, num_train_epochs=1, learning_rate=1e-3, do_train=True,
        do_eval=True, do_predict=True)) == 0
    with open(os.path.join(output_dir, "predict.txt"), encoding="utf-8") as f:
        assert len(f.read().splitlines()) == len(rows)
    with open(os.path.join(output_dir, "eval_results.txt"), encoding="utf-8") as f:
        assert "eval_examples = 5\n" in f.read()


# ---------------------------------------------------------------------------
# Export of a windows model.

WINDOW_FLAGS = {"long_text": "windows", "window_stride": STRIDE, "max_windows": 8,
                "window_pooling": "attention"}


def run_classifier(flags: dict) -> int:
    """run_classifier_mgpu.py's main in this process (UserError propagates)."""
    return run_main(classifier_cli, flags)


def read_table(path: str) -> np.ndarray:
    with open(path, encoding="utf-8") as f:
        return np.array([[float(x) for x in line.split("\t")] for line in f])


@pytest.fixture(scope="module")
def exported(setup):
    """A windows model trained, predicted and exported (SavedModel) in one run."""
    model = setup["model"]
    output_dir = str(setup["root"] / "exported")
    assert run_classifier(dict(
        WINDOW_FLAGS, task_name="sentiment", data_dir=setup["data"],
        vocab_file=model.vocab_file, bert_config_file=model.config_file,
        output_dir=output_dir, max_seq_length=MAX_SEQ, train_batch_size=2,
        predict_batch_size=8, num_train_epochs=1, learning_rate=1e-3, do_train=True,
        do_predict=True, do_export=True)) == 0
    (step,) = os.listdir(os.path.join(output_dir, "export"))
    return output_dir, os.path.join(output_dir, "export", step)


def test_a_windows_export_scores_like_its_checkpoint(setup, exported, tmp_path):
    trained, export_dir = exported
    output_dir = str(tmp_path / "from_export")
    # Batches of 3 windows: the 8 windows of the long review span three batches
    # and are pooled on the host, as checkpoint scoring does.
    assert run_classifier(dict(WINDOW_FLAGS, task_name="sentiment", data_dir=setup["data"],
                               output_dir=output_dir, do_predict=True, predict_batch_size=3,
                               predict_from_export=export_dir)) == 0
    for name in ("predict.txt", "test_results.tsv"):
        with open(os.path.join(trained, name), encoding="utf-8") as f:
            expected = f.read().splitlines()
        with open(os.path.join(output_dir, name), encoding="utf-8") as f:
            got = f.read().splitlines()
        assert len(got) == len(expected) == len(setup["rows"])
    np.testing.assert_allclose(read_table(os.path.join(output_dir, "test_results.tsv")),
                               read_table(os.path.join(trained, "test_results.tsv")),
                               rtol=0, atol=1e-5)


def test_the_signature_pools_each_documents_windows_of_a_request(setup, exported):
    trained, export_dir = exported
    expected = read_table(os.path.join(trained, "test_results.tsv"))
    task = make_task(setup, pooling="attention", max_windows=8, cache="export_cache")
    windows = task.batches(task.read("predict")).examples
    documents = windows.row_values["document_index"]
    # Documents 3 (140 words: 9 windows, kept 8) and 1 (70 words), renumbered 0 and 1.
    rows = list(np.flatnonzero(documents == 3)) + list(np.flatnonzero(documents == 1))
    batch = make_batch(windows, rows, "dynamic")
    request = np.array([0 if documents[r] == 3 else 1 for r in rows], np.int32)
    assert (request == 0).sum() == 8 and (request == 1).sum() == expected_windows(70)
    with tf.Graph().as_default() as graph, tf.Session(graph=graph) as session:
        meta = tf.saved_model.loader.load(session, ["serve"], export_dir)
        signature = meta.signature_def["serving_default"]
        assert sorted(signature.inputs) == ["document_index", "input_ids", "input_mask",
                                            "segment_ids"]
        feed = {signature.inputs[name].name: batch[name]
                for name in ("input_ids", "input_mask", "segment_ids")}
        feed[signature.inputs["document_index"].name] = request
        names = ["probabilities", "label_ids", "window_logits", "window_scores",
                 "window_documents"]
        got = dict(zip(names, session.run([signature.outputs[n].name for n in names], feed)))
    # Every window carries its document's pooled answer: the checkpoint's row.
    document_rows = np.where(request == 0, 3, 1)
    np.testing.assert_allclose(got["probabilities"], expected[document_rows], rtol=0,
                               atol=1e-5)
    assert got["label_ids"].tolist() == expected[document_rows].argmax(axis=1).tolist()
    assert got["window_documents"].tolist() == request.tolist()
    # And the windows' own outputs pool (in numpy, the loop above) to the same answer.
    pooled = loop_pooling(got["window_logits"], got["window_scores"], request, 2,
                          "attention")
    shifted = np.exp(pooled - pooled.max(axis=1, keepdims=True))
    np.testing.assert_allclose(shifted / shifted.sum(axis=1, keepdims=True),
                               expected[[3, 1]], rtol=0, atol=1e-5)


@pytest.mark.parametrize("changes,message", [
    ({"window_stride": 10}, "was exported with --window_stride=15 but this run has "
                            "--window_stride=10; set --window_stride=15"),
    ({"window_pooling": "mean"}, "was exported with --window_pooling=attention but this run "
                                 "has --window_pooling=mean; set --window_pooling=attention"),
    # (flags left out take the export's own: given otherwise, they are refused)
    ({"long_text": "truncate", "window_stride": None, "max_windows": None,
      "window_pooling": None},
     "was exported with --long_text=windows but this run has --long_text=truncate; set "
     "--long_text=windows"),
])
def test_a_run_that_cuts_windows_otherwise_is_refused(setup, exported, tmp_path, changes,
                                                     message):
    _, export_dir = exported
    output_dir = tmp_path / "refused"
    flags = dict(WINDOW_FLAGS, task_name="sentiment", data_dir=setup["data"],
                 output_dir=str(output_dir), do_predict=True, predict_from_export=export_dir)
    flags.update(changes)
    with pytest.raises(UserError) as caught:
        run_classifier(flags)
    assert str(caught.value) == f"--predict_from_export={export_dir} {message}"
    assert not output_dir.exists() or not os.listdir(output_dir)
