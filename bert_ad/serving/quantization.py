"""--export_precision=int8 for ONNX: fuse, calibrate, quantize, and measure what it
cost on dev.

1. Fuse: ONNX Runtime's own BERT optimizer (onnxruntime.transformers.optimizer,
   model type `bert_tf`, Python fusions only) turns each layer norm into one
   LayerNormalization kernel and each GELU with its bias into one BiasGelu,
   as they are written in the graph (bert_ad/model/modeling.py writes both in
   Google's form, which it recognises). It needs no PyTorch. Then each layer's
   self-attention becomes one Attention kernel (bert_ad/serving/attention_fusion.py:
   Q, K and V in one matmul, quantized as QAttention), kept only if the fused
   model answers as the unfused one on a calibration batch.
2. Calibrate: ONNX Runtime's min/max calibrator runs the fused model on the
   calibration rows (the run's dev rows) and records each matmul input's range.
3. Quantize: the encoder's weight matrices as int8 (symmetric, one scale per
   output column), their inputs as uint8 with the calibrated, fixed scales
   (QuantizeLinear -> MatMulIntegerToFloat, which scales the int32 sums back
   to float and adds the bias: ONNX Runtime's integer kernels); the products
   between activations (attention's scores and context) stay float32, as do
   layer norms, softmax and GELU. Fixed scales make a row's outputs its own:
   the same alone, in any batch, with any padding (dynamic quantization,
   before, took each scale from the whole batch).
4. Measure: the dev split scored by the fp32 model and the int8 one, the
   task's dev figures of both (Task.metrics on what the export serves), the
   share of prediction lines that stay the same and the largest output
   change, written to assets.extra/int8_accuracy.json beside the export.

What is quantized, and how, was chosen by measurement (studies/int8_study.py,
docs/serving.md "int8"): the encoder's matrices only, one scale per column.
One scale per matrix lost 1.25-2 points of accuracy on the accuracy study's
quick run where per column kept it within half a point, for 13% of int8's
speed; the word embeddings (a lookup, no arithmetic to speed up) cost
accuracy for file size alone, and the task's head (one small matrix a row)
changed nothing either way: both stay float32. Static scales against dynamic
ones, and the integer form against quantize_static's QDQ: docs/serving.md.
Each step logs its time and the peak RSS so far.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import sys
import time
from typing import Dict, Iterable, List, Optional

import numpy as np

from bert_ad.errors import fail
from bert_ad.inference import layout, onnx_scorer
from bert_ad.inference.exported_model import ExportedModel, score_split
from bert_ad.serving.attention_fusion import fuse_attention
from bert_ad.serving.integer_matmuls import fuse_integer_matmuls

log = logging.getLogger("bert_ad")

ENCODER_PREFIX = "model/bert/encoder/"    # the ONNX node names of the encoder's layers
EMBEDDINGS_PREFIX = "model/bert/embeddings/"


def require_quantizer(flag: str = "--export_precision=int8"):
    """onnxruntime's quantization and transformer optimizer, or a UserError."""
    onnx_scorer.require_onnxruntime(flag)
    try:
        from onnxruntime.quantization import create_calibrator
        from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer  # noqa: F401
        from onnxruntime.transformers import optimizer
    except ImportError as e:
        fail(f"{flag} needs onnxruntime's quantization tools ({e}): "
             f"{onnx_scorer.EXTRA}")
    return optimizer, create_calibrator


@contextlib.contextmanager
def step(name: str):
    """Log `name` and, once done, its time: the export's steps take seconds to
    minutes on a real model, and a silent minute looks like a hang."""
    log.info("export: %s ...", name)
    start = time.monotonic()
    yield
    log.info("export: %s done in %.1f s (peak RSS so far %.2f GB)", name,
             time.monotonic() - start, _peak_rss_bytes() / 1e9)


def _peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux reports KiB, macOS bytes)."""
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def quantize(fp32_path: str, int8_path: str, num_heads: int, hidden_size: int,
             calibration: Iterable[Dict[str, np.ndarray]], embeddings: bool = False,
             head: bool = False, per_channel: bool = True) -> Dict[str, object]:
    """Write the fused, statically quantized int8 model of `fp32_path` to `int8_path`.

    Args:
      fp32_path, int8_path: ONNX files (the fp32 export's model, the int8 one);
        the fused fp32 model and the calibration's scratch are left beside fp32_path.
      num_heads, hidden_size: the encoder's (BertConfig), for the fusions.
      calibration: batches of rows ({input name: array}, extra keys ignored)
        the activations' ranges are measured on: the run's dev rows.
      embeddings: quantize the embedding tables' lookups too.
      head: quantize the matrices outside the encoder (pooler, task head) too.
      per_channel: one scale per output column (else one per matrix).
    Returns:
      What was done, for export.json's `onnx`: fusions, quantized node count,
      the calibration rows and the options.
    """
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantizationMode, QuantType
    from onnxruntime.quantization.onnx_quantizer import ONNXQuantizer
    optimizer, create_calibrator = require_quantizer()
    batches = iter(calibration)
    first = next(batches, None)
    calibration = itertools.chain([first] if first is not None else [], batches)
    with step("optimize (fuse attention, layer norms and GELUs, infer types)"):
        source_path, fusions = _fused(optimizer, fp32_path, num_heads, hidden_size)
        # (not where the optimizer's fusions were dropped: a CRF's loops)
        if first is not None and source_path != fp32_path:
            source_path, attention = _with_fused_attention(source_path, num_heads,
                                                           hidden_size, first)
            fusions.update(attention)
    model = onnx.load(source_path)
    initializers = {tensor.name for tensor in model.graph.initializer}
    names = []
    for node in model.graph.node:
        weights = any(name in initializers for name in node.input)
        if node.op_type in ("MatMul", "Attention") and weights and (
                node.name.startswith(ENCODER_PREFIX) or head):
            names.append(node.name)
        elif node.op_type == "Gather" and embeddings and weights \
                and node.name.startswith(EMBEDDINGS_PREFIX):
            names.append(node.name)
    op_types = ["MatMul", "Attention"] + (["Gather"] if embeddings else [])
    feeds = _CalibrationFeeds(calibration, [value.name for value in model.graph.input])
    with step("calibrate (activation ranges on the calibration rows)"):
        # Each activation's range is measured once, here, and fixed in the model:
        # a row's outputs then depend on that row alone (dynamic quantization
        # took each range from the whole batch, padding included, so a row's
        # label could change with its neighbours).
        calibrator = create_calibrator(
            source_path, op_types, augmented_model_path=source_path + ".calibration.onnx",
            calibrate_method=CalibrationMethod.MinMax,
            # Ranges folded in every few batches: memory stays flat.
            extra_options={"max_intermediate_outputs": 8})
        calibrator.collect_data(feeds)
        ranges = calibrator.compute_data()
        del calibrator
    with step("quantize"):
        # Integer ops (QuantizeLinear with the calibrated scale -> MatMulInteger ->
        # scale back to float), as quantize_dynamic writes them but with fixed
        # scales: ONNX Runtime runs int8 kernels. quantize_static's QDQ form ran
        # at fp32's speed (its matmuls fused with their bias into float Gemms).
        quantizer = ONNXQuantizer(
            model, per_channel, False, QuantizationMode.IntegerOps, True, QuantType.QInt8,
            QuantType.QUInt8, ranges, names, [], op_types,
            # Shape inference cannot type the fused kernels' outputs in a CRF's model.
            {"DefaultTensorType": onnx.TensorProto.FLOAT})
        quantizer.quantize_model()
        # Static scales hide the integer matmuls from ONNX Runtime's own fusion
        # (bert_ad/serving/integer_matmuls.py): written fused here.
        fused_matmuls = fuse_integer_matmuls(quantizer.model.model)
        quantizer.model.save_model_to_file(int8_path)
    return {"fusions": fusions, "quantized_nodes": len(names), "weights": "int8",
            "integer_matmuls_to_float": fused_matmuls,
            "activations": "uint8, static (min/max of the calibration rows)",
            "calibration_rows": feeds.rows, "per_channel": per_channel,
            "embeddings_quantized": embeddings, "head_quantized": head}


def _fused(optimizer, fp32_path: str, num_heads: int, hidden_size: int):
    """(the path of the fused fp32 model, {fused kernel: count}); the model as
    exported and no fusions when fusing breaks it."""
    import onnx
    fused = optimizer.optimize_model(fp32_path, model_type="bert_tf", num_heads=num_heads,
                                     hidden_size=hidden_size, opt_level=0)
    fusions = {op: count for op, count in fused.get_fused_operator_statistics().items()
               if count}
    lost = _undefined_inputs(fused.model.graph)
    if lost:
        # The optimizer drops outer nodes whose outputs only a loop's body reads (the
        # CRF's Viterbi loops): then quantize the model as exported, without fusions.
        log.info("int8: the fused model lost what its loops read (%s); quantizing the "
                 "unfused model", ", ".join(sorted(lost)[:3]))
        return fp32_path, {}
    # The optimizer prunes inputs nothing reads (the softmax tagger's word_mask);
    # the export's signature keeps them all.
    kept = {value.name for value in fused.model.graph.input}
    fused.model.graph.input.extend(value for value in onnx.load(
        fp32_path, load_external_data=False).graph.input if value.name not in kept)
    # Saved first: the file gets the opset of the fused kernels' domain (com.microsoft).
    path = os.path.splitext(fp32_path)[0] + "_fused.onnx"
    fused.save_model_to_file(path)
    del fused
    onnx.save(_typed(onnx.load(path)), path)
    return path, fusions


# The fused model is kept only if it answers as the unfused one on a calibration
# batch: the kernels compute the same sums in another order (float32 rounding).
FUSED_ATTENTION_TOLERANCE = 1e-4


def _with_fused_attention(path: str, num_heads: int, hidden_size: int,
                          batch: Dict[str, np.ndarray]):
    """(the path of `path`'s model with each layer's attention fused, {"Attention":
    count}); `path` and {} when nothing matched or the fused model answers otherwise
    on `batch` (bert_ad/serving/attention_fusion.py)."""
    import onnx
    model = onnx.load(path)
    fused = fuse_attention(model, num_heads, hidden_size)
    if not fused:
        log.info("int8: no attention matched the fused kernel's pattern; quantizing "
                 "the layers as they are")
        return path, {}
    fused_path = os.path.splitext(path)[0] + "_attention.onnx"
    onnx.save(_typed(model), fused_path)
    del model
    difference = _largest_difference(path, fused_path, batch)
    if difference is None or difference > FUSED_ATTENTION_TOLERANCE:
        log.info("int8: the fused attention answered otherwise (largest difference %s); "
                 "quantizing the layers as they are", difference)
        return path, {}
    return fused_path, fused


def _largest_difference(path_a: str, path_b: str, batch: Dict[str, np.ndarray]):
    """The largest absolute difference between two models' float outputs on
    `batch` (None if they cannot both run it)."""
    import onnxruntime
    outputs = []
    for path in (path_a, path_b):
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        feed = {value.name: np.asarray(batch[value.name], np.int32)
                for value in session.get_inputs()}
        try:
            outputs.append(dict(zip([o.name for o in session.get_outputs()],
                                    session.run(None, feed))))
        except Exception as e:  # noqa: BLE001 (onnxruntime raises its own classes)
            log.info("int8: %s did not run a calibration batch: %s", os.path.basename(path), e)
            return None
    changes = [_absolute_change(value, outputs[1][name]) for name, value in outputs[0].items()]
    changes = [change["max_abs"] for change in changes if change is not None]
    if not changes:   # (labels alone: the same labels, or not)
        same = all(np.array_equal(v, outputs[1][k]) for k, v in outputs[0].items())
        return 0.0 if same else float("inf")
    return max(changes)


def _typed(model):
    """`model` with every value's type and shape inferred, the fused kernels'
    (com.microsoft) included, which ONNX's own shape inference leaves untyped:
    the quantizer quantizes only an activation whose type it knows."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
    return SymbolicShapeInference.infer_shapes(model, auto_merge=True)


class _CalibrationFeeds:
    """onnxruntime.quantization's CalibrationDataReader (get_next: a feed, then
    None) over batches of rows, keeping the model's inputs; counts the rows."""

    def __init__(self, batches: Iterable[Dict[str, np.ndarray]], inputs: List[str]):
        self.batches = iter(batches)
        self.inputs = inputs
        self.rows = 0

    def get_next(self) -> Optional[Dict[str, np.ndarray]]:
        batch = next(self.batches, None)
        if batch is None:
            return None
        feed = {name: np.asarray(batch[name], np.int32) for name in self.inputs}
        self.rows += len(feed[self.inputs[0]])
        return feed

    def __iter__(self):
        return iter(self.get_next, None)


def _undefined_inputs(graph, outer: frozenset = frozenset()) -> set:
    """Names a node or an output of `graph` (or of a loop's body in it, at any depth)
    reads that neither it nor an enclosing graph defines."""
    defined = set(outer) | {value.name for value in graph.input} | {
        tensor.name for tensor in graph.initializer} | {
        name for node in graph.node for name in node.output}
    read = [name for node in graph.node for name in node.input] + [
        value.name for value in graph.output]
    missing = {name for name in read if name and name not in defined}
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == attribute.GRAPH:
                missing |= _undefined_inputs(attribute.g, frozenset(defined))
    return missing


def accuracy_change(task, data, export_dir: str, metadata: layout.ExportMetadata,
                    fp32_path: str, batch_size: int = 32) -> Dict[str, object]:
    """The int8 export in `export_dir` against its fp32 twin `fp32_path` on `data`.

    Returns:
      {"split", "source", "rows", "fp32": figures, "int8": figures, "change":
      int8 - fp32 per figure, "outputs": per output the largest and mean
      absolute change, "same_prediction_lines": the share of the task's
      first prediction file's lines that are equal}; figures and lines only
      for a task that has them.
    """
    flag = "--export_dir"
    exported = ExportedModel(export_dir, metadata, task.encoder.config, flag)
    fp32 = score_split(exported, task, data, batch_size, model_file=fp32_path)
    int8 = score_split(exported, task, data, batch_size)
    report: Dict[str, object] = {"split": data.split, "source": data.source,
                                 "rows": len(data), "outputs": {}}
    for name in sorted(fp32):
        change = _absolute_change(fp32[name], int8[name])
        if change is not None:
            report["outputs"][name] = change
    figures = [_numbers(_if_the_task_has(task.metrics, data, outputs))
               for outputs in (fp32, int8)]
    if figures[0] is not None:
        report["fp32"], report["int8"] = figures
        report["change"] = {name: figures[1][name] - value
                            for name, value in figures[0].items() if name in figures[1]}
    files = [_if_the_task_has(task.prediction_files, data, outputs) for outputs in (fp32, int8)]
    if files[0] is not None:
        first = sorted(files[0])[0]
        a, b = list(files[0][first]), list(files[1][first])
        report["same_prediction_lines"] = {
            "file": first, "share": sum(x == y for x, y in zip(a, b)) / max(len(a), 1)}
    return report


def _if_the_task_has(method, data, outputs):
    """`method(data, outputs)`, or None for a task without it (Task's default raises
    NotImplementedError: a features task has no metrics nor prediction files)."""
    try:
        return method(data, outputs)
    except NotImplementedError:
        return None


def _numbers(figures: Optional[dict]) -> Optional[Dict[str, float]]:
    if figures is None:
        return None
    return {k: float(v) for k, v in figures.items()
            if isinstance(v, (int, float, np.number)) and not isinstance(v, bool)}


def _absolute_change(a: np.ndarray, b: np.ndarray) -> Optional[Dict[str, float]]:
    """The largest and mean |a - b| of a floating output (None for others); rows
    padded to their batch's length (an object array) are compared row by row."""
    rows_a, rows_b = (list(a), list(b)) if a.dtype == object else ([a], [b])
    if not rows_a or not np.issubdtype(np.asarray(rows_a[0]).dtype, np.floating):
        return None
    differences = np.concatenate([
        np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).ravel()
        for x, y in zip(rows_a, rows_b)])
    return {"max_abs": float(differences.max()), "mean_abs": float(differences.mean())}


def write_report(export_dir: str, report: Dict[str, object], main_metric: str = "") -> str:
    """assets.extra/int8_accuracy.json in `export_dir`; its path. Logs the change of
    `main_metric` (else of every figure) and the prediction lines that stayed."""
    path = os.path.join(export_dir, layout.EXTRA_DIR, layout.INT8_ACCURACY_FILE)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    names = [main_metric] if main_metric in report.get("fp32", {}) else sorted(
        report.get("fp32", {}))
    for name in names:
        log.info("int8 export: %s %s: %.4f with fp32 weights, %.4f with int8 (%+.4f)",
                 report["split"], name, report["fp32"][name], report["int8"][name],
                 report["change"][name])
    if "same_prediction_lines" in report:
        same = report["same_prediction_lines"]
        log.info("int8 export: %.1f%% of %s's lines as with fp32 weights",
                 100 * same["share"], same["file"])
    for name, change in sorted(report["outputs"].items()):
        log.info("int8 export: %s changed by %.2g at most (mean %.2g)", name,
                 change["max_abs"], change["mean_abs"])
    return path
