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
from typing import Dict

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
      graph_def: a frozen GraphDef (constants, no variables).
      inputs, outputs: {signature name: graph tensor name ("input_ids:0")}.
    Returns:
      The onnx.ModelProto (opset OPSET): the text inputs' dimensions named
      INPUT_DIMENSIONS, every other input's and output's first one `batch`.
    """
    tf2onnx = require_converter()
    renames = {tensor: name for name, tensor in list(inputs.items()) + list(outputs.items())}
    model, _ = tf2onnx.convert.from_graph_def(
        graph_def, input_names=list(inputs.values()), output_names=list(outputs.values()),
        opset=OPSET, tensors_to_rename=renames)
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


def versions() -> Dict[str, str]:
    """The converter's and ONNX's versions, for export.json."""
    import onnx
    tf2onnx = require_converter()
    return {"tf2onnx": tf2onnx.__version__, "onnx": onnx.__version__, "opset": str(OPSET)}
