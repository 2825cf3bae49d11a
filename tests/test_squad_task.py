"""The question-answering task's model: N towers = 1 tower, and the same logits as
Hugging Face's BertForQuestionAnswering.

* One step on 2 towers x B windows equals 1 tower x 2B (dropout off, windows
  of different lengths, so the towers pad differently): loss, gradient norm
  and every weight to a relative 1e-5.
* A forward pass of our head (cls/squad/output_weights [2, hidden],
  output_bias [2]) equals transformers' BertForQuestionAnswering loaded with
  the same weights (the encoder through bert_ad.convert google2hf, qa_outputs
  from the head) to 1e-4, on the real windows of the English sample with the
  real MiniLM, and of the Chinese sample with the real Chinese vocab (a tiny
  random model). TF2 lane only: it needs PyTorch.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from bert_ad.compat import tf
from bert_ad.data.batching import make_batch
from bert_ad.data.squad_features import SquadWindowSettings
from bert_ad.data.tokenization import FullTokenizer
from bert_ad.model.modeling import BertConfig
from bert_ad.model.span_head import SPAN_FEATURE_SPEC, span_logits
from bert_ad.parallel.towers import plan_devices
from bert_ad.parallel.train_graph import TrainSettings, build_train_graph
from bert_ad.tasks.base import TextEncoder
from bert_ad.tasks.squad import SquadFiles, SquadTask
from bert_ad.answers.squad import AnswerSettings
from bert_ad.tools.convert import convert_google_to_hf

from helpers import (REPO, TINY_CONFIG, StepGraphs, assert_head_steps_at_multiplied_rate,
                     assert_same_weights, assert_weights_moved, tiny_model, train_one_step)

SAMPLES = os.path.join(REPO, "data", "sample_squad")
EN, ZH = os.path.join(SAMPLES, "en-v1.1.json"), os.path.join(SAMPLES, "zh-cmrc2018.json")
TOLERANCE = 1e-4


def squad_task(config: BertConfig, vocab_file: str, path: str, max_seq_length: int,
               cache_dir: str, do_lower_case: bool = True) -> SquadTask:
    encoder = TextEncoder(config, FullTokenizer(vocab_file, do_lower_case), vocab_file,
                          do_lower_case, max_seq_length, cache_dir=cache_dir,
                          compute_dtype=tf.float32)
    return SquadTask(encoder, SquadFiles(path, path),
                     SquadWindowSettings(max_seq_length, doc_stride=16, max_query_length=16),
                     AnswerSettings())


def sample_texts(path: str) -> list:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)["data"]
    return [text for article in data for p in article["paragraphs"]
            for text in [p["context"]] + [q["question"] for q in p["qas"]]]


# The span head at its own rate (30x: squad's default was that until issue 56 made it
# 100x; any factor other than 1 shows what these tests check).
SPAN_HEAD_RATE = (("^cls/squad/.*$", 30.0),)


def _build(task, n_towers: int, multipliers: tuple) -> tuple:
    plan = plan_devices(n_towers, cuda_visible_devices="")
    return plan, build_train_graph(
        plan, SPAN_FEATURE_SPEC, lambda f, i: task.build_model(f, True)["loss"],
        TrainSettings(learning_rate=1e-3, num_train_steps=100, seed=1,
                      learning_rate_multipliers=multipliers))


class Tiny:
    """The tiny English model's task, its train windows and its 1-tower training graphs
    by learning-rate multipliers (StepGraphs: each built once for the tests that take
    steps of it; a step starts afresh from its checkpoint, as a new graph would)."""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad_task")
    t = Tiny()
    model = tiny_model(str(root / "model"), sample_texts(EN), max_position_embeddings=64,
                       hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    t.task = squad_task(model.bert_config(), model.vocab_file, EN, max_seq_length=48,
                        cache_dir=str(root / "cache"))
    t.examples = t.task.features(t.task.read("train")).examples
    t.graphs = StepGraphs(lambda multipliers: _build(t.task, 1, multipliers))
    yield t
    t.graphs.close()


def test_the_span_head_learns_at_the_multiplied_rate(tiny, tmp_path):
    """--head_learning_rate_multiplier: cls/squad/ takes factor x the step, the encoder
    the same step as without it."""
    task = tiny.task
    # 30 (SPAN_HEAD_RATE's) rather than any other factor: the graph of the towers test.
    default, task.head_learning_rate_multiplier = task.head_learning_rate_multiplier, 30.0
    try:
        multipliers = task.learning_rate_multipliers()
    finally:
        task.head_learning_rate_multiplier = default
    assert multipliers == {"^cls/squad/.*$": 30.0}
    batch = [[make_batch(tiny.examples, np.arange(8), "dynamic")]]
    # The span bias's gradient is 0 but for rounding (the softmax over positions
    # cancels it): compared with neither.
    assert_head_steps_at_multiplied_rate(tiny.graphs(()), tiny.graphs(tuple(multipliers.items())),
                                         batch, ["cls/squad/output_weights:0"], 30.0,
                                         str(tmp_path / "init.ckpt"),
                                         unchecked=["cls/squad/output_bias:0"])


def test_two_towers_equal_one_tower_with_the_whole_batch(tiny, tmp_path):
    examples = tiny.examples
    # 4 short windows and 4 long ones: the towers pad to different lengths.
    short = np.nonzero(examples.lengths <= 40)[0][:4]
    long = np.nonzero(examples.lengths > 40)[0][:4]
    rows, halves = np.concatenate([short, long]), [short, long]
    assert [make_batch(examples, h, "dynamic")["input_ids"].shape[1] for h in halves] \
        == [40, 48]
    # Some windows point at their answer, some at [CLS].
    assert 0 < np.count_nonzero(examples.row_values["start_positions"][rows]) < len(rows)

    # The span head at its own rate, as squad's default has it. Not squad's Adam: its
    # first step, g / (|g| + eps), turns the towers' rounding in the smallest gradients
    # into steps of any size. The 1-tower graph built once for its three uses (initial
    # weights, the step, the other rows' step).
    one_tower = tiny.graphs(SPAN_HEAD_RATE)
    checkpoint = one_tower.save_initial_weights(str(tmp_path / "init.ckpt"))
    one = one_tower.step(checkpoint, [[make_batch(examples, rows, "dynamic")]])
    two = train_one_step(lambda: _build(tiny.task, 2, SPAN_HEAD_RATE), checkpoint,
                         [[make_batch(examples, h, "dynamic") for h in halves]])
    assert two.global_step == one.global_step == 1
    assert abs(two.loss - one.loss) <= 1e-5 * abs(one.loss)
    assert abs(two.grad_norm - one.grad_norm) <= 1e-5 * one.grad_norm
    assert_weights_moved(checkpoint, one.weights)
    assert_weights_moved(checkpoint, one.weights, "cls/squad/output_weights:0")
    # The span bias adds one constant to every position's logit, which the softmax
    # over positions cancels: its gradient is 0 but for rounding, and Adam's first
    # step (g / (|g| + eps)) turns that rounding into steps of any size. Not compared.
    span_bias = "cls/squad/output_bias:0"
    assert_same_weights({k: v for k, v in two.weights.items() if k != span_bias},
                        {k: v for k, v in one.weights.items() if k != span_bias})
    # At the start every position is about equally likely: the loss is about
    # log(window length), averaged over the windows.
    assert one.loss == pytest.approx(np.mean(np.log(examples.lengths[rows])), rel=0.05)
    other = one_tower.step(checkpoint,
                           [[make_batch(examples, np.append(rows[:-1], rows[-1] + 1),
                                        "dynamic")]])
    with pytest.raises(AssertionError):
        assert_same_weights(other.weights, one.weights)


# ---------------------------------------------------------------------------
# Hugging Face's BertForQuestionAnswering with the same weights.


def our_logits(task: SquadTask, encoder_checkpoint: str, checkpoint: str) -> tuple:
    """(batch of every window, start logits, end logits) of our head, its weights
    (the encoder's from `encoder_checkpoint`, or fresh; the head fresh, seeded)
    saved to `checkpoint`."""
    examples = task.features(task.read("predict")).examples
    batch = make_batch(examples, np.arange(len(examples)), "dynamic")
    with tf.Graph().as_default():
        tf.set_random_seed(3)
        inputs = {name: tf.placeholder(tf.int32, [None, None])
                  for name in ("input_ids", "input_mask", "segment_ids")}
        start, end = span_logits(task.encoder.model(inputs, False), inputs)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            if encoder_checkpoint:
                encoder = [v for v in tf.global_variables() if v.name.startswith("bert/")]
                tf.train.Saver(encoder).restore(session, encoder_checkpoint)
            head = session.run({v.name[:-2]: v for v in tf.global_variables()
                                if v.name.startswith("cls/squad/")})
            tf.train.Saver().save(session, checkpoint, write_meta_graph=False)
            ours = session.run([start, end], {inputs[k]: batch[k] for k in inputs})
    return batch, ours, head


def hf_logits(checkpoint: str, config_file: str, head: dict, batch: dict, hf_dir: str):
    torch = pytest.importorskip("torch", reason="PyTorch is only in the TF2 lane")
    transformers = pytest.importorskip("transformers", reason="transformers: TF2 lane only")
    os.environ["HF_HUB_OFFLINE"] = "1"
    convert_google_to_hf(checkpoint, hf_dir, bert_config_file=config_file)
    model = transformers.BertForQuestionAnswering.from_pretrained(hf_dir,
                                                                  local_files_only=True)
    model.eval()
    with torch.no_grad():
        # qa_outputs is a Linear(hidden, 2): weight [2, hidden], as Google's [2, hidden].
        model.qa_outputs.weight.copy_(torch.from_numpy(head["cls/squad/output_weights"]))
        model.qa_outputs.bias.copy_(torch.from_numpy(head["cls/squad/output_bias"]))
        out = model(input_ids=torch.tensor(batch["input_ids"], dtype=torch.long),
                    attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                    token_type_ids=torch.tensor(batch["segment_ids"], dtype=torch.long))
    return out.start_logits.numpy(), out.end_logits.numpy()


def assert_same_logits(ours, theirs, mask):
    real = mask.astype(bool)
    for a, b, name in zip(ours, theirs, ("start", "end")):
        worst = np.abs(a[real] - b[real]).max()
        assert worst <= TOLERANCE, f"{name} logits off by {worst}"
        assert np.all(a[~real] <= -9000.0)  # padding: out of every softmax


@pytest.mark.real_model
def test_english_logits_equal_transformers_with_minilm(minilm_google_ckpt, tmp_path):
    config_file = os.path.join(minilm_google_ckpt, "bert_config.json")
    task = squad_task(BertConfig.from_json_file(config_file),
                      os.path.join(minilm_google_ckpt, "vocab.txt"), EN, max_seq_length=64,
                      cache_dir=str(tmp_path / "cache"))
    checkpoint = str(tmp_path / "ours" / "model.ckpt")
    batch, ours, head = our_logits(task, os.path.join(minilm_google_ckpt, "bert_model.ckpt"),
                                   checkpoint)
    assert len(set(batch["input_mask"].sum(1))) > 3 and len(batch["input_ids"]) > 14
    theirs = hf_logits(checkpoint, config_file, head, batch, str(tmp_path / "hf"))
    assert_same_logits(ours, theirs, batch["input_mask"])


def test_chinese_logits_equal_transformers(chinese_vocab, tmp_path):
    config_file = str(tmp_path / "bert_config.json")
    with open(TINY_CONFIG) as f:
        config = dict(json.load(f), vocab_size=21128, max_position_embeddings=64)
    with open(config_file, "w") as f:
        json.dump(config, f)
    task = squad_task(BertConfig.from_json_file(config_file), chinese_vocab, ZH,
                      max_seq_length=64, cache_dir=str(tmp_path / "cache"))
    checkpoint = str(tmp_path / "ours" / "model.ckpt")
    batch, ours, head = our_logits(task, "", checkpoint)
    unknown = task.encoder.tokenizer.unk_id
    assert (batch["input_ids"] == unknown).sum() == 0   # real characters, no [UNK]
    theirs = hf_logits(checkpoint, config_file, head, batch, str(tmp_path / "hf"))
    assert_same_logits(ours, theirs, batch["input_mask"])
