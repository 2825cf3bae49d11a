"""--export_format=onnx: a task's serving graph as an ONNX model, by tf2onnx.

The graph converted is the frozen graph --export_format=frozen_graph writes
(bert_ad/serving/export.py: the task's `serving_outputs`, weights folded into
constants, pruned to the outputs), so both formats answer the same
signature: the same input and output names, dtypes and meaning. tf2onnx
(onnx/tensorflow-onnx, the converter the ONNX project keeps for TensorFlow)
converts it at opset 17; both input dimensions stay dynamic (named `batch`
and `sequence`), any batch and any length up to the export's max_seq_length.

The encoder is built without --remove_padding for this format: gathering the
real tokens is a data-dependent NonZero/ScatterND pair that hides the
encoder's layer norms and activations from ONNX Runtime's fusions, and
length-sorted scoring batches hold little padding anyway. Layer norm and
GELU are written as Google's modeling.py writes them, the forms ONNX
Runtime's BERT fusions recognise (bert_ad/serving/quantization.py).
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict

import numpy as np

from bert_ad.compat import tf
from bert_ad.inference.layout import require_export_modules

OPSET = 17
# The names of an ONNX export's dynamic input dimensions, and the inputs that have both.
INPUT_DIMENSIONS = ("batch", "sequence")
TEXT_INPUTS = ("input_ids", "input_mask", "segment_ids")


def require_converter(flag: str = "--export_format=onnx"):
    """tf2onnx (and onnx, onnxruntime), or a UserError naming the extra to install
    (the flags' check, layout.require_export_modules, said so already)."""
    require_export_modules("onnx", "int8" if "int8" in flag else "fp32")
    import tf2onnx
    return tf2onnx


@contextlib.contextmanager
def loops_tf2onnx_converts():
    """Graphs built in this block write their while loops (the CRF's Viterbi
    scans) as TensorFlow 1.x control flow (Enter/Exit/Merge and TensorArrayV3),
    whose patterns tf2onnx rewrites into ONNX Loops; TF 2.x's functional While
    over TensorLists comes out with untyped loop values ONNX Runtime refuses."""
    enabled = tf.control_flow_v2_enabled()
    tf.disable_control_flow_v2()
    try:
        yield
    finally:
        if enabled:
            tf.enable_control_flow_v2()


def convert(graph_def, inputs: Dict[str, str], outputs: Dict[str, str]):
    """The frozen graph as an ONNX ModelProto whose inputs and outputs are named
    as the signature's.

    Args:
      graph_def: a frozen GraphDef (constants, no variables); its weights are
        taken out of it (see weights_as_inputs).
      inputs, outputs: {signature name: graph tensor name ("input_ids:0")}.
    Returns:
      The onnx.ModelProto (opset OPSET): the text inputs' dimensions named
      INPUT_DIMENSIONS, every other input's and output's first one `batch`.
    """
    from onnx import numpy_helper
    tf2onnx = require_converter()
    weights = weights_as_inputs(graph_def)
    renames = {tensor: name for name, tensor in list(inputs.items()) + list(outputs.items())}
    model = _from_graph_def(
        tf2onnx, graph_def, input_names=list(inputs.values()) + list(weights),
        output_names=list(outputs.values()), opset=OPSET, tensors_to_rename=renames)
    for value in list(model.graph.input):
        if value.name in weights:  # back as the constants they were
            model.graph.input.remove(value)
            model.graph.initializer.append(
                numpy_helper.from_array(weights.pop(value.name), value.name))
    assert not weights, f"tf2onnx dropped the weights {sorted(weights)[:3]}"
    # Names say which dynamic sizes are equal (ONNX Runtime plans buffers by them):
    # the pieces' inputs share [batch, sequence]; every input and output its batch;
    # other sizes (NER's words) keep the converter's own name each.
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        names = INPUT_DIMENSIONS if value.name in TEXT_INPUTS else INPUT_DIMENSIONS[:1]
        for dimension, name in zip(dims, names):
            if not dimension.HasField("dim_value"):
                dimension.dim_param = name
    return model


def _from_graph_def(tf2onnx, graph_def, **arguments):
    """tf2onnx's from_graph_def without the copy of the whole graph it takes before
    each of its optimisers (to put the graph back if that optimiser fails): about 60%
    of its optimising time, and the same model when none fails. If one does, the
    conversion runs again tf2onnx's careful way, which skips that optimiser."""
    from tf2onnx import constants
    # tf2onnx 1.17 reads this variable as "copy nothing" whenever it is set, whatever
    # its value (convert._convert_common): set for the quick way, unset for the careful.
    switch = constants.ENV_TF2ONNX_CATCH_ERRORS
    try:
        with _environment(switch, "FALSE"):
            model, _ = tf2onnx.convert.from_graph_def(graph_def, **arguments)
    except Exception:  # an optimiser failed, part way through its changes
        with _environment(switch, None):
            model, _ = tf2onnx.convert.from_graph_def(graph_def, **arguments)
    return model


@contextlib.contextmanager
def _environment(name: str, value):
    """os.environ[name] = value (None: unset) for a block, then as it was."""
    saved = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


# Constants of at least this many elements are weights: matrices, embedding tables
# and the wider biases (layer norms and the narrow biases stay constants).
WEIGHT_ELEMENTS = 1024


def weights_as_inputs(graph_def) -> Dict[str, "np.ndarray"]:
    """Turn `graph_def`'s large float constants (the weights) into placeholders, in
    place; {their tensor name ("...:0"): value}.

    tf2onnx copies its whole graph, constants included, before each of its
    optimisers (to restore it if one fails), and the copies wait for Python's
    cycle collector: converting MiniLM's 90 MB of weights peaked at 4.6 GB.
    Fed as inputs, the weights stay out of its graph (1.0 GB), and convert()
    puts them back as initializers, which is what constants become in ONNX.
    """
    weights = {}
    for node in graph_def.node:
        tensor = node.attr["value"].tensor if node.op == "Const" else None
        if tensor is None or tensor.dtype != tf.float32.as_datatype_enum or \
                np.prod([d.size for d in tensor.tensor_shape.dim]) < WEIGHT_ELEMENTS:
            continue
        weights[node.name + ":0"] = tf.make_ndarray(tensor)
        node.op = "Placeholder"
        node.attr["shape"].shape.CopyFrom(tensor.tensor_shape)
        del node.attr["value"]
    return weights


def versions() -> Dict[str, str]:
    """The converter's and ONNX's versions, for export.json."""
    import onnx
    tf2onnx = require_converter()
    return {"tf2onnx": tf2onnx.__version__, "onnx": onnx.__version__, "opset": str(OPSET)}
