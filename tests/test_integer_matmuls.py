"""bert_ad/serving/integer_matmuls.py: a statically quantized matmul written as one
MatMulIntegerToFloat kernel answers as the quantizer's chain of nodes did."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from bert_ad.serving.integer_matmuls import fuse_integer_matmuls  # noqa: E402

ROWS, INNER, COLUMNS = 5, 8, 6


def quantized_matmul(prefix: str, source: str, bias: bool, scales_constant: bool = True):
    """The quantizer's nodes and constants for `source` @ W (+ b): QuantizeLinear
    with a fixed scale -> MatMulInteger -> Cast -> Mul(scale product) [-> Add]."""
    rng = np.random.default_rng(len(prefix))
    weights = rng.integers(-127, 128, size=(INNER, COLUMNS)).astype(np.int8)
    constants = [
        numpy_helper.from_array(np.array(0.05, np.float32), prefix + "a_scale"),
        numpy_helper.from_array(np.array(131, np.uint8), prefix + "a_zero"),
        numpy_helper.from_array(weights, prefix + "w"),
        numpy_helper.from_array(np.zeros(COLUMNS, np.int8), prefix + "w_zero"),
        numpy_helper.from_array(rng.uniform(0.001, 0.01, COLUMNS).astype(np.float32),
                                prefix + "w_scale"),
        ] + ([numpy_helper.from_array(rng.normal(size=COLUMNS).astype(np.float32),
                                    prefix + "b")] if bias else [])
    a_scale = prefix + "a_scale"
    nodes = []
    if not scales_constant:  # the input's scale computed from the input itself
        nodes.append(helper.make_node("ReduceMax", [source], [prefix + "a_max"], keepdims=0))
        nodes.append(helper.make_node("Mul", [prefix + "a_max", prefix + "a_scale"],
                                      [prefix + "a_scale_now"]))
        a_scale = prefix + "a_scale_now"
    nodes += [
        helper.make_node("QuantizeLinear", [source, prefix + "a_scale", prefix + "a_zero"],
                         [prefix + "q"]),
        helper.make_node("MatMulInteger", [prefix + "q", prefix + "w", prefix + "a_zero",
                                           prefix + "w_zero"], [prefix + "int32"]),
        helper.make_node("Cast", [prefix + "int32"], [prefix + "float"], to=TensorProto.FLOAT),
        helper.make_node("Mul", [a_scale, prefix + "w_scale"], [prefix + "scales"]),
        helper.make_node("Mul", [prefix + "float", prefix + "scales"], [prefix + "scaled"])]
    if bias:
        nodes.append(helper.make_node("Add", [prefix + "scaled", prefix + "b"], [prefix + "out"]))
    else:
        nodes.append(helper.make_node("Identity", [prefix + "scaled"], [prefix + "out"]))
    return nodes, constants


def model_of(parts, outputs):
    nodes = [node for part in parts for node in part[0]]
    constants = [tensor for part in parts for tensor in part[1]]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, INNER])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [None, COLUMNS])
         for name in outputs],
        constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(model, x):
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})


def test_a_static_matmul_with_its_bias_becomes_one_kernel_with_the_same_answers():
    x = np.random.default_rng(0).normal(size=(ROWS, INNER)).astype(np.float32)
    model = model_of([quantized_matmul("m1_", "x", bias=True),
                      quantized_matmul("m2_", "x", bias=False)], ["m1_out", "m2_out"])
    before = run(model, x)
    fused = onnx.ModelProto()
    fused.CopyFrom(model)
    assert fuse_integer_matmuls(fused) == 2
    onnx.checker.check_model(fused)
    ops = [node.op_type for node in fused.graph.node]
    assert ops.count("MatMulIntegerToFloat") == 2
    assert not {"MatMulInteger", "Cast", "Mul", "Add"} & set(ops)
    after = run(fused, x)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    # And both are the quantized product: (round(x / s) + z - z) * s * w_scale @ W + b.
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    q = np.clip(np.rint(x / constants["m1_a_scale"]) + 131, 0, 255) - 131
    expected = (q @ constants["m1_w"].astype(np.float64)) * (
        constants["m1_a_scale"] * constants["m1_w_scale"]) + constants["m1_b"]
    np.testing.assert_allclose(after[0], expected, rtol=1e-5, atol=1e-5)


def test_a_chain_something_else_reads_or_with_a_scale_computed_at_run_time_is_left_alone():
    x = np.random.default_rng(1).normal(size=(ROWS, INNER)).astype(np.float32)
    # m1's int32 -> float cast is also a graph output; m2's input scale is computed
    # from the input (ONNX Runtime fuses such chains itself).
    model = model_of([quantized_matmul("m1_", "x", bias=True),
                      quantized_matmul("m2_", "x", bias=True, scales_constant=False)],
                     ["m1_out", "m1_float", "m2_out"])
    before = run(model, x)
    assert fuse_integer_matmuls(model) == 0
    assert [node.op_type for node in model.graph.node].count("MatMulInteger") == 2
    for a, b in zip(before, run(model, x)):
        np.testing.assert_array_equal(a, b)
