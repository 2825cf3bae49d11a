"""BertModel against independent references, and unit tests on tiny configs.

The real MiniLM (converted to a Google checkpoint by the `minilm_google_ckpt`
fixture) must give, for real English and Chinese sentences padded into one
batch, the same sequence and pooled outputs as (a) a plain numpy forward pass
written here from the Hugging Face weights, in both lanes, and (b) Hugging
Face `transformers` on PyTorch, in the TF2 lane.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from bert_ad.tools import weight_names
from bert_ad.model import modeling
from bert_ad.resources import safetensors
from bert_ad.compat import tf
from bert_ad.errors import UserError
from bert_ad.model.modeling import BertConfig, BertModel
from bert_ad.data.tokenization import FullTokenizer
from numpy_reference import numpy_bert

TOLERANCE = 1e-4

SENTENCES = [
    "The movie was surprisingly good, and the acting felt honest.",
    "I would not recommend this restaurant to anyone.",
    "Hello world!",
    # MiniLM's uncased vocab holds only 244 CJK characters; these use them.
    "中国人民大学和北京大学。",
    "我的中国心，天下大事。",
    "BERT reads the whole sentence at once; it does not go left to right.",
]
PAIRS = [
    ("Is the battery life long?", "Yes, it lasts about two days."),
    ("北京的春天？", "山水花木，美不美？"),
]


# --- references --------------------------------------------------------------

def encode_batch(vocab_file: str) -> tuple:
    """Token ids, mask and segment ids of SENTENCES and PAIRS, padded with 0."""
    tokenizer = FullTokenizer(vocab_file, do_lower_case=True)

    def ids(text):
        return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))

    cls, sep, unk = tokenizer.convert_tokens_to_ids(["[CLS]", "[SEP]", "[UNK]"])
    rows = [([cls] + ids(s) + [sep], []) for s in SENTENCES]
    rows += [([cls] + ids(a) + [sep], ids(b) + [sep]) for a, b in PAIRS]
    length = max(len(a) + len(b) for a, b in rows)
    input_ids = np.zeros([len(rows), length], np.int32)
    input_mask = np.zeros_like(input_ids)
    token_type_ids = np.zeros_like(input_ids)
    for i, (a, b) in enumerate(rows):
        input_ids[i, :len(a) + len(b)] = a + b
        input_mask[i, :len(a) + len(b)] = 1
        token_type_ids[i, len(a):len(a) + len(b)] = 1
    assert (input_ids == unk).sum() < 0.05 * input_mask.sum()  # real words, not [UNK]s
    return input_ids, input_mask, token_type_ids


def run_bert_ad(config: BertConfig, checkpoint: str, batches: list) -> list:
    """Our graph, restored from `checkpoint`, on each (ids, mask, segment ids) batch.

    Returns [(sequence output, pooled output)] per batch.
    """
    with tf.Graph().as_default():
        ids = tf.placeholder(tf.int32, [None, None])
        mask = tf.placeholder(tf.int32, [None, None])
        types = tf.placeholder(tf.int32, [None, None])
        model = BertModel(config, is_training=False, input_ids=ids, input_mask=mask,
                          token_type_ids=types)
        saver = tf.train.Saver()
        with tf.Session() as session:
            saver.restore(session, checkpoint)
            return [session.run([model.get_sequence_output(), model.get_pooled_output()],
                                {ids: b[0], mask: b[1], types: b[2]})
                    for b in batches]


def assert_close_on_real_tokens(ours, reference, input_mask, what):
    real = input_mask.astype(bool)
    worst = np.abs(ours[0][real] - reference[0][real]).max()
    assert worst <= TOLERANCE, f"{what}: sequence output off by {worst}"
    worst = np.abs(ours[1] - reference[1]).max()
    assert worst <= TOLERANCE, f"{what}: pooled output off by {worst}"


# --- the real MiniLM ---------------------------------------------------------

@pytest.fixture(scope="module")
def minilm_outputs(minilm_google_ckpt):
    """(config, batch, our outputs, our outputs for row 2 alone, unpadded)."""
    config = BertConfig.from_json_file(os.path.join(minilm_google_ckpt, "bert_config.json"))
    # Three columns past the longest row: whole columns of padding.
    batch = encode_batch(os.path.join(minilm_google_ckpt, "vocab.txt"))
    batch = tuple(np.pad(a, [(0, 0), (0, 3)], mode="constant") for a in batch)
    length = int(batch[1][2].sum())
    alone = tuple(a[2:3, :length] for a in batch)
    ours, ours_alone = run_bert_ad(
        config, os.path.join(minilm_google_ckpt, "bert_model.ckpt"), [batch, alone])
    return config, batch, ours, ours_alone


@pytest.mark.real_model
def test_minilm_matches_numpy_reference(minilm_dir, minilm_outputs):
    config, batch, ours, ours_alone = minilm_outputs
    input_mask = batch[1]
    assert len(set(input_mask.sum(1))) > 4  # really different lengths
    assert ours[0].shape == (len(input_mask), input_mask.shape[1], 384)
    assert ours[1].shape == (len(input_mask), 384)
    weights = safetensors.load(os.path.join(minilm_dir, "model.safetensors"))
    reference = numpy_bert(weights, config.num_hidden_layers, config.num_attention_heads,
                           *batch)
    assert_close_on_real_tokens(ours, reference, input_mask, "numpy")
    # A row's outputs do not depend on the padding around it.
    length = ours_alone[0].shape[1]
    assert np.abs(ours_alone[0][0] - ours[0][2, :length]).max() <= TOLERANCE
    assert np.abs(ours_alone[1][0] - ours[1][2]).max() <= TOLERANCE


@pytest.mark.real_model
def test_minilm_matches_transformers(minilm_dir, minilm_outputs):
    os.environ["HF_HUB_OFFLINE"] = "1"
    torch = pytest.importorskip("torch", reason="PyTorch is only in the TF2 lane")
    transformers = pytest.importorskip(
        "transformers", reason="Hugging Face transformers is only in the TF2 lane")
    _, batch, ours, _ = minilm_outputs
    model = transformers.BertModel.from_pretrained(minilm_dir, local_files_only=True)
    model.eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor(batch[0], dtype=torch.long),
                    attention_mask=torch.tensor(batch[1], dtype=torch.long),
                    token_type_ids=torch.tensor(batch[2], dtype=torch.long))
    reference = (out.last_hidden_state.numpy(), out.pooler_output.numpy())
    assert_close_on_real_tokens(ours, reference, batch[1], "transformers")


# --- tiny configs ------------------------------------------------------------

TINY = {"vocab_size": 20, "hidden_size": 8, "num_hidden_layers": 2,
        "num_attention_heads": 2, "intermediate_size": 12,
        "max_position_embeddings": 16, "type_vocab_size": 2}

GOOGLE_TINY_NAMES = [
    "bert/embeddings/word_embeddings",
    "bert/embeddings/token_type_embeddings",
    "bert/embeddings/position_embeddings",
    "bert/embeddings/LayerNorm/beta",
    "bert/embeddings/LayerNorm/gamma",
] + [
    f"bert/encoder/layer_{n}/{suffix}" for n in range(2) for suffix in (
        "attention/self/query/kernel", "attention/self/query/bias",
        "attention/self/key/kernel", "attention/self/key/bias",
        "attention/self/value/kernel", "attention/self/value/bias",
        "attention/output/dense/kernel", "attention/output/dense/bias",
        "attention/output/LayerNorm/beta", "attention/output/LayerNorm/gamma",
        "intermediate/dense/kernel", "intermediate/dense/bias",
        "output/dense/kernel", "output/dense/bias",
        "output/LayerNorm/beta", "output/LayerNorm/gamma")
] + ["bert/pooler/dense/kernel", "bert/pooler/dense/bias"]


def _tiny_inputs():
    ids = np.array([[1, 5, 7, 9, 2, 0], [1, 3, 2, 4, 6, 2]], np.int32)
    mask = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32)
    types = np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]], np.int32)
    return ids, mask, types


def test_config_keeps_unknown_keys(tmp_path):
    values = dict(TINY, hidden_act="gelu", directionality="bidi", pooler_fc_size=768,
                  pooler_num_attention_heads=12, pooler_type="first_token_transform")
    path = tmp_path / "bert_config.json"
    path.write_text(json.dumps(values))
    config = BertConfig.from_json_file(str(path))
    assert config.hidden_size == 8 and config.hidden_dropout_prob == 0.1
    assert config.extra == {"directionality": "bidi", "pooler_fc_size": 768,
                            "pooler_num_attention_heads": 12,
                            "pooler_type": "first_token_transform"}
    written = json.loads(config.to_json_string())
    for key, value in values.items():
        assert written[key] == value, key
    again = BertConfig.from_dict(written)
    assert again.to_dict() == config.to_dict()


def test_config_missing_fields_name_file_and_fields(tmp_path):
    path = tmp_path / "partial.json"
    path.write_text(json.dumps({"vocab_size": 10, "num_hidden_layers": 2}))
    with pytest.raises(UserError) as error:
        BertConfig.from_json_file(str(path))
    message = str(error.value)
    assert str(path) in message
    assert "hidden_size, num_attention_heads, intermediate_size" in message


def test_config_bad_json_names_the_line(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('{\n  "vocab_size": 10,\n  "hidden_size": ,\n  "x": 1\n}\n')
    with pytest.raises(UserError, match=r"broken\.json' is not valid JSON \(line 3\)"):
        BertConfig.from_json_file(str(path))


def test_tiny_model_has_googles_variable_names():
    with tf.Graph().as_default():
        BertModel(BertConfig.from_dict(dict(TINY)), False,
                  tf.placeholder(tf.int32, [2, 6]))
        variables = tf.global_variables()
        names = [v.op.name for v in variables]
    assert sorted(names) == sorted(GOOGLE_TINY_NAMES)
    assert len(names) == len(GOOGLE_TINY_NAMES) == 2 * 16 + 5 + 2
    assert all(v.dtype.base_dtype == tf.float32 for v in variables)


def test_towers_under_auto_reuse_share_one_set_of_variables():
    ids, mask, types = _tiny_inputs()
    config = BertConfig.from_dict(dict(TINY))
    with tf.Graph().as_default():
        outputs = []
        for tower in range(2):
            with tf.device("/cpu:0"), tf.name_scope(f"tower_{tower}"), \
                    tf.variable_scope(tf.get_variable_scope(), reuse=tf.AUTO_REUSE):
                model = BertModel(config, False, tf.constant(ids), tf.constant(mask),
                                  tf.constant(types))
                outputs.append(model.get_pooled_output())
        assert sorted(v.op.name for v in tf.global_variables()) == sorted(GOOGLE_TINY_NAMES)
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            first, second = session.run(outputs)
    np.testing.assert_array_equal(first, second)


def _run_twice(is_training: bool):
    ids, mask, types = _tiny_inputs()
    config = BertConfig.from_dict(dict(TINY, hidden_dropout_prob=0.3,
                                       attention_probs_dropout_prob=0.3))
    with tf.Graph().as_default():
        tf.set_random_seed(1)
        model = BertModel(config, is_training, tf.constant(ids), tf.constant(mask),
                          tf.constant(types))
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            return [session.run(model.get_sequence_output()) for _ in range(2)]


def test_dropout_only_when_training():
    first, second = _run_twice(is_training=False)
    np.testing.assert_array_equal(first, second)
    first, second = _run_twice(is_training=True)
    assert np.abs(first - second).max() > 1e-3


def _dropped(x, rate: float):
    """dropout(x, rate) run once, and the graph's op types."""
    with tf.Graph().as_default() as graph:
        tf.set_random_seed(3)
        out = modeling.dropout(tf.constant(x), rate)
        with tf.Session() as session:
            return session.run(out), {op.type for op in graph.get_operations()}


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_dropout_keeps_each_entry_with_its_probability_and_an_exact_expectation(rate):
    dropped = round(rate * 2 ** 16)
    keep_probability = 1.0 - dropped / 2 ** 16       # 16 random bits an entry
    out, ops = _dropped(np.ones([400, 384], np.float32), rate)
    assert "Bitcast" in ops            # two entries from one random int32
    kept = out != 0
    # every kept entry scaled by exactly 1 / keep probability: E[out] = x
    np.testing.assert_allclose(out[kept], 1.0 / keep_probability, rtol=1e-6)
    n = out.size
    sigma = math.sqrt(n * keep_probability * (1 - keep_probability))
    assert abs(kept.sum() - n * keep_probability) < 5 * sigma
    # no pattern across the pair of entries one int32 draws
    pairs = kept.reshape(-1, 2)
    both = np.mean(pairs[:, 0] & pairs[:, 1])
    assert abs(both - keep_probability ** 2) < 5 * math.sqrt(
        keep_probability ** 2 * (1 - keep_probability ** 2) / len(pairs))


def _independence_p_value(a: np.ndarray, b: np.ndarray) -> float:
    """Pearson's chi-square test (1 degree of freedom) of two boolean samples'
    independence, from their 2 x 2 table: the probability of a table at least
    this far from independence if they were independent."""
    table = np.array([[np.sum(a & b), np.sum(a & ~b)], [np.sum(~a & b), np.sum(~a & ~b)]],
                     np.float64)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    return math.erfc(math.sqrt(chi2 / 2.0))


def test_neighbouring_dropout_masks_are_independent():
    """Issue 43 asked whether two entries drawn from one random int32 are independent:
    masks of the attention probabilities' shape ([batch, heads, seq, seq]) tested
    pair by pair (the two halves of one int32), across pairs (the next int32's
    first half), across rows, across two dropout calls of one graph (two layers)
    and across two runs of one call (two training steps), each with a 2 x 2
    chi-square test."""
    shape = [8, 12, 64, 64]
    with tf.Graph().as_default() as graph:
        tf.set_random_seed(3)
        ones = tf.ones(shape)
        first_layer, second_layer = modeling.dropout(ones, 0.1), modeling.dropout(ones, 0.1)
        with tf.Session() as session:
            step_1 = session.run([first_layer, second_layer])
            step_2 = session.run(first_layer)
    assert "Bitcast" in {op.type for op in graph.get_operations()}
    kept = (step_1[0] != 0).reshape(-1)
    halves = kept.reshape(-1, 2)
    rows = kept.reshape(-1, 64)
    for name, a, b in (("one int32's halves", halves[:, 0], halves[:, 1]),
                       ("neighbouring int32s", halves[:-1, 1], halves[1:, 0]),
                       ("neighbouring rows", rows[:-1].reshape(-1), rows[1:].reshape(-1)),
                       ("two layers", kept, (step_1[1] != 0).reshape(-1)),
                       ("two steps", kept, (step_2 != 0).reshape(-1))):
        # 393,216 entries: a dependence of 0.01 in P(both kept) would give p < 1e-30.
        assert _independence_p_value(a, b) > 1e-6, name
    # The test tells dependent masks apart: a mask against itself.
    assert _independence_p_value(kept, kept) < 1e-30


def test_dropout_of_an_odd_count_draws_a_float_an_entry():
    out, ops = _dropped(np.ones([999, 3], np.float32), 0.1)
    assert "Bitcast" not in ops
    kept = out != 0
    np.testing.assert_allclose(out[kept], 1.0 / 0.9, rtol=1e-6)
    assert abs(kept.mean() - 0.9) < 5 * math.sqrt(0.9 * 0.1 / out.size)


def test_gelu_is_the_exact_erf_form():
    x = np.linspace(-6.0, 6.0, 241).astype(np.float32)
    with tf.Graph().as_default(), tf.Session() as session:
        exact, approximate = session.run([modeling.gelu(tf.constant(x)),
                                          modeling.gelu_tanh(tf.constant(x))])
    want = np.array([v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
                     for v in x.astype(np.float64)])
    assert np.abs(exact - want).max() < 2e-6
    # The tanh approximation is measurably different: this test tells them apart.
    assert np.abs(approximate - want).max() > 1e-4


def test_tiny_model_matches_numpy_reference():
    """Random weights, padding and two segments; no downloaded asset needed."""
    ids, mask, types = _tiny_inputs()
    config = BertConfig.from_dict(dict(TINY))
    with tf.Graph().as_default():
        model = BertModel(config, False, tf.constant(ids), tf.constant(mask),
                          tf.constant(types))
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            ours = session.run([model.get_sequence_output(), model.get_pooled_output()])
            values = session.run({v.op.name: v for v in tf.global_variables()})
    weights = {weight_names.google_to_hf_name(n): (v.T if weight_names.is_kernel(n) else v)
               for n, v in values.items()}
    reference = numpy_bert(weights, 2, 2, ids, mask, types)
    assert_close_on_real_tokens(ours, reference, mask, "numpy, tiny")


def test_mean_pooling_averages_the_real_tokens_and_makes_no_pooler():
    """pooling="mean": the numpy reference's last layer averaged over mask == 1."""
    ids, mask, types = _tiny_inputs()
    config = BertConfig.from_dict(dict(TINY))
    with tf.Graph().as_default():
        model = BertModel(config, False, tf.constant(ids), tf.constant(mask),
                          tf.constant(types), pooling="mean")
        names = sorted(v.op.name for v in tf.global_variables())
        with tf.Session() as session:
            session.run(tf.global_variables_initializer())
            pooled = session.run(model.get_pooled_output())
            values = session.run({v.op.name: v for v in tf.global_variables()})
    assert names == sorted(n for n in GOOGLE_TINY_NAMES if "pooler" not in n)
    weights = {weight_names.google_to_hf_name(n): (v.T if weight_names.is_kernel(n) else v)
               for n, v in values.items()}
    sequence, no_pooler = numpy_bert(weights, 2, 2, ids, mask, types)
    assert no_pooler is None
    # Row 0 has a padded last position, which must not count.
    want = np.stack([sequence[row, mask[row] == 1].mean(axis=0) for row in range(len(ids))])
    np.testing.assert_allclose(pooled, want, atol=TOLERANCE)
    assert np.abs(pooled[0] - sequence[0].mean(axis=0)).max() > 10 * TOLERANCE


def test_unknown_pooling_is_refused():
    with tf.Graph().as_default(), pytest.raises(ValueError, match="pooling must be one of"):
        BertModel(BertConfig.from_dict(dict(TINY)), False, tf.placeholder(tf.int32, [2, 6]),
                  pooling="max")
