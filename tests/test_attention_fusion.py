"""bert_ad/serving/attention_fusion.py: Google's self-attention as tf2onnx writes it
(on [batch * seq, hidden] matrices, the query scaled before its transpose, an additive
mask bias) becomes ONNX Runtime's Attention kernel, which answers as the graph did and
as numpy does."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from bert_ad.serving.attention_fusion import fuse_attention  # noqa: E402

BATCH, SEQ, HEADS, SIZE = 3, 5, 2, 4
HIDDEN = HEADS * SIZE
EPSILON = 1e-12


def weights(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    w = {name: rng.normal(scale=0.5, size=(HIDDEN, HIDDEN)).astype(np.float32)
         for name in ("q", "k", "v", "o")}
    w.update({name + "_b": rng.normal(scale=0.1, size=HIDDEN).astype(np.float32)
              for name in ("q", "k", "v", "o")})
    w["gamma"] = rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32)
    w["beta"] = rng.normal(scale=0.1, size=HIDDEN).astype(np.float32)
    return w


def google_attention_graph(w: dict, scale: float = 1 / np.sqrt(SIZE),
                           context_reader: bool = False):
    """One layer's attention, output dense, residual add and layer norm, in the
    nodes tf2onnx writes for bert_ad/model/modeling.py."""
    c = [numpy_helper.from_array(value, name) for name, value in w.items()]
    c += [numpy_helper.from_array(np.array([BATCH, SEQ, HEADS, SIZE], np.int64), "heads4"),
          numpy_helper.from_array(np.array([-1, HIDDEN], np.int64), "flat2"),
          numpy_helper.from_array(np.array(scale, np.float32), "scale"),
          numpy_helper.from_array(np.array(1.0, np.float32), "one"),
          numpy_helper.from_array(np.array(-10000.0, np.float32), "minus"),
          numpy_helper.from_array(np.array([1, 2], np.int64), "axes12")]
    n = [
        # the mask bias: (1 - mask) * -10000, [batch, 1, 1, seq]
        helper.make_node("Cast", ["input_mask"], ["mask_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_f", "axes12"], ["mask_4d"]),
        helper.make_node("Sub", ["one", "mask_4d"], ["inverse"]),
        helper.make_node("Mul", ["inverse", "minus"], ["mask_bias"])]
    for name in ("q", "k", "v"):
        n += [helper.make_node("MatMul", ["x", name], [name + "_mm"], name=f"layer/{name}/MatMul"),
              helper.make_node("Add", [name + "_mm", name + "_b"], [name + "_2d"]),
              helper.make_node("Reshape", [name + "_2d", "heads4"], [name + "_4d"])]
    n += [
        helper.make_node("Mul", ["q_4d", "scale"], ["q_scaled"]),
        helper.make_node("Transpose", ["q_scaled"], ["q_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k_4d"], ["k_t"], perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q_t", "k_t"], ["scores"], name="layer/self/MatMul"),
        helper.make_node("Add", ["scores", "mask_bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["probs"], name="layer/self/Softmax"),
        helper.make_node("Transpose", ["v_4d"], ["v_t"], perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["probs", "v_t"], ["context_4d"]),
        helper.make_node("Transpose", ["context_4d"], ["context_t"], perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context_t", "flat2"], ["context"]),
        helper.make_node("MatMul", ["context", "o"], ["o_mm"]),
        helper.make_node("Add", ["o_mm", "o_b"], ["dense"]),
        helper.make_node("Add", ["dense", "x"], ["residual"]),
        helper.make_node("LayerNormalization", ["residual", "gamma", "beta"], ["out"],
                         axis=-1, epsilon=EPSILON, name="layer/LayerNorm")]
    outputs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [None, HIDDEN])]
    if context_reader:   # another node reads a value inside the attention
        n.append(helper.make_node("Identity", ["probs"], ["probs_out"]))
        outputs.append(helper.make_tensor_value_info("probs_out", TensorProto.FLOAT, None))
    graph = helper.make_graph(
        n, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, HIDDEN]),
                 helper.make_tensor_value_info("input_mask", TensorProto.INT32, [None, None])],
        outputs, c)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def numpy_layer(w: dict, x: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Multi-head attention, dense, residual and layer norm (Google's BERT layer's
    first half), in float64."""
    x = x.astype(np.float64)

    def heads(name):
        return (x @ w[name] + w[name + "_b"]).reshape(BATCH, SEQ, HEADS, SIZE).transpose(0, 2, 1, 3)
    scores = heads("q") @ heads("k").transpose(0, 1, 3, 2) / np.sqrt(SIZE)
    scores = scores + (1.0 - mask[:, None, None, :]) * -10000.0
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = (probs @ heads("v")).transpose(0, 2, 1, 3).reshape(-1, HIDDEN)
    residual = context @ w["o"] + w["o_b"] + x
    mean = residual.mean(-1, keepdims=True)
    variance = residual.var(-1, keepdims=True)
    return (residual - mean) / np.sqrt(variance + EPSILON) * w["gamma"] + w["beta"]


def run(model, x, mask):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "input_mask": mask})


def rows():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(BATCH * SEQ, HIDDEN)).astype(np.float32)
    mask = np.ones((BATCH, SEQ), np.int32)
    mask[1, 3:] = 0   # padded rows: the kernel must mask them as the bias did
    mask[2, 1:] = 0
    return x, mask


def test_the_fused_layer_answers_as_the_graph_and_as_numpy():
    w = weights()
    x, mask = rows()
    unfused = google_attention_graph(w)
    expected = run(unfused, x, mask)[0]
    np.testing.assert_allclose(expected, numpy_layer(w, x, mask), atol=1e-4)

    fused = google_attention_graph(w)
    assert fuse_attention(fused, HEADS, HIDDEN) == {"Attention": 1}
    onnx.checker.check_model(fused)
    kinds = [node.op_type for node in fused.graph.node]
    assert kinds.count("Attention") == 1
    # Everything the attention was made of is gone: no softmax, no transposes, one
    # matmul left (the output dense); the separate Q, K, V matrices too.
    assert "Softmax" not in kinds and "Transpose" not in kinds
    assert kinds.count("MatMul") == 1
    assert not {"q", "k", "v", "q_b", "scale", "heads4"} & {
        t.name for t in fused.graph.initializer}
    read = {name for node in fused.graph.node for name in node.input} | {"out"}
    assert all(set(node.output) & read for node in fused.graph.node)   # nothing left dead
    attention = next(node for node in fused.graph.node if node.op_type == "Attention")
    assert attention.name.startswith("layer/")   # in the layer's scope (int8 picks by name)
    packed = numpy_helper.to_array(next(t for t in fused.graph.initializer
                                        if t.name == attention.input[1]))
    np.testing.assert_array_equal(packed, np.concatenate([w["q"], w["k"], w["v"]], axis=1))
    answer = run(fused, x, mask)[0]
    np.testing.assert_allclose(answer, expected, atol=1e-5)


def test_a_batch_answers_each_row_as_alone():
    """The fused kernel masks padding as the bias did: a row's answer is its own."""
    w = weights(3)
    x, mask = rows()
    fused = google_attention_graph(w)
    fuse_attention(fused, HEADS, HIDDEN)
    together = run(fused, x, mask)[0].reshape(BATCH, SEQ, HIDDEN)
    for row in range(BATCH):
        length = int(mask[row].sum())
        others = x.reshape(BATCH, SEQ, HIDDEN).copy()
        others[:, length:] += 100.0 * (np.arange(BATCH)[:, None, None] + 1)   # other padding
        others[row] = x.reshape(BATCH, SEQ, HIDDEN)[row]
        alone = run(fused, others.reshape(-1, HIDDEN), mask)[0].reshape(BATCH, SEQ, HIDDEN)
        np.testing.assert_allclose(alone[row, :length], together[row, :length], atol=1e-5)


def test_a_pattern_that_differs_is_left_as_it_is():
    w = weights()
    # the scale is not 1/sqrt(head size): the kernel's own scale would be wrong
    other_scale = google_attention_graph(w, scale=0.3)
    before = other_scale.SerializeToString()
    assert fuse_attention(other_scale, HEADS, HIDDEN) == {}
    assert other_scale.SerializeToString() == before
    # another node reads the probabilities: they must stay
    read_inside = google_attention_graph(w, context_reader=True)
    assert fuse_attention(read_inside, HEADS, HIDDEN) == {}
    x, mask = rows()
    np.testing.assert_allclose(run(read_inside, x, mask)[0], numpy_layer(w, x, mask),
                               atol=1e-4)
