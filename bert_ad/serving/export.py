"""--do_export: a task's inference graph and weights, written for serving.

Any task with a text encoder exports the same way (bert_ad/tasks/base.py):

  build_serving_graph   a fresh graph: a placeholder per `task.serving_inputs`
                        (int32 [batch, seq], both dimensions dynamic), the
                        task's `serving_outputs` on BertModel with dropout off,
                        each output as a float32/int32 tensor named after it
  load_weights          the checkpoint's values into its variables (cast to
                        float16 for an fp16 export)
  export_model          -> a SavedModel (tf.compat.v1.saved_model.Builder, the
                        `serving_default` signature), a frozen graph (one
                        .pb, variables folded into constants, pruned to the
                        outputs) or that frozen graph as ONNX (onnx_export.py;
                        int8: quantization.py), plus the shared assets and
                        metadata (bert_ad/inference/layout.py), written into a
                        hidden folder and renamed into place whole

fp16: the encoder's weights (every float32 variable under `bert/`) are
float16 variables and the encoder computes in float16, as `--precision=fp16`
training does (layer norm and softmax statistics stay float32); the task's
head keeps its float32 weights and outputs are float32. The inputs stay int32.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import tempfile
from typing import Dict, Optional, Sequence

import numpy as np

from bert_ad.compat import TF_VERSION, tf

from bert_ad.compat.graphs import make_saved_model_portable, portable_graph_def
from bert_ad.errors import fail
from bert_ad.files import cannot_write, file_in_the_way
from bert_ad.folders import staging_directory
from bert_ad.parallel.checkpoint_files import checkpoint_step
from bert_ad.parallel.checkpoints import require_variables, variable_name
from bert_ad.inference import layout
from bert_ad.serving import onnx_export, quantization
# What --do_export asks for; in layout.py, which imports no TensorFlow (the flags read it).
from bert_ad.inference.layout import ExportSettings  # noqa: F401
from bert_ad.tasks.base import SplitData, Task, TextEncoder
from bert_ad.tasks.model_description import describe_model

log = logging.getLogger("bert_ad")

ENCODER_SCOPE = "bert/"


@dataclasses.dataclass
class ServingGraph:
    """The inference graph of a task: placeholders in, named outputs out."""
    graph: "tf.Graph"
    inputs: Dict[str, "tf.Tensor"]    # {name: int32 placeholder [batch, seq]}
    outputs: Dict[str, "tf.Tensor"]   # {name: tensor named `name`, batch first}
    variables: list


def export_dir_for(settings: ExportSettings, output_dir: str, checkpoint: str) -> str:
    """--export_dir, or OUTPUT_DIR/export/<global step of `checkpoint`>."""
    if settings.export_dir:
        return settings.export_dir
    return os.path.join(output_dir, "export", str(checkpoint_step(checkpoint)))


def refuse_existing(export_dir: str) -> None:
    """UserError if `export_dir` exists: an export is never written over."""
    if os.path.lexists(export_dir):
        fail(f"--export_dir={export_dir} already exists; an export is never written "
             "over: remove it or give another --export_dir")
    blocker = file_in_the_way(export_dir)
    if blocker:
        fail(f"--export_dir={export_dir} lies under {blocker}, which is a file, not a "
             "folder: give an --export_dir whose parents are folders")


def check_exportable(task: Task) -> None:
    if not isinstance(task.encoder, TextEncoder):  # pretraining's reads token ids
        fail(f"the {task.name} task cannot be exported: it has no text encoder "
             "(--do_export is for fine-tuned tasks)")


# --- the graph -----------------------------------------------------------------------

def _half_encoder_weights(getter, name, *args, **kwargs):
    """Variable getter: the encoder's float32 variables become float16 ones."""
    if name.startswith(ENCODER_SCOPE) and kwargs.get("dtype") in (tf.float32, None):
        kwargs["dtype"] = tf.float16
    return getter(name, *args, **kwargs)


def build_serving_graph(task: Task, precision: str = "fp32",
                        remove_padding: bool = True) -> ServingGraph:
    """The task's `serving_outputs` in a fresh graph, dropout off.

    Args:
      task: a task with an encoder (labels resolved).
      precision: "fp32", or "fp16" (float16 encoder weights and compute).
      remove_padding: False builds the encoder on every position whatever
        the task's encoder says (an ONNX export: onnx_export.py).
    Returns:
      A ServingGraph: placeholders named as `task.serving_inputs` (their dtype
      and shape from `task.feature_spec`), outputs named after the task's
      (floating ones cast to float32), the graph's variables.
    """
    check_exportable(task)
    half = precision == "fp16"
    graph = tf.Graph()
    with graph.as_default():
        inputs = {}
        for name in task.serving_inputs:
            dtype, shape = task.feature_spec[name]
            inputs[name] = tf.placeholder(dtype, shape, name=name)
        if half:
            tf.get_variable_scope().set_custom_getter(_half_encoder_weights)
        # Model ops under model/, so the root names stay free for the outputs.
        # The same task computing in the export's dtype (a copy: the
        # caller's task is not touched).
        serving_task = task.with_encoder(
            compute_dtype=tf.float16 if half else tf.float32,
            remove_padding=task.encoder.remove_padding and remove_padding)
        with tf.name_scope("model"):
            served = serving_task.serving_outputs(dict(inputs))
        outputs = {}
        for name in sorted(served):
            tensor = tf.convert_to_tensor(served[name])
            if tensor.dtype.is_floating and tensor.dtype != tf.float32:
                tensor = tf.cast(tensor, tf.float32)
            outputs[name] = tf.identity(tensor, name=name)
            if outputs[name].op.name != name:
                raise ValueError(f"the {task.name} task's output {name!r} clashes with "
                                 "an op of the same name; rename the output")
        return ServingGraph(graph, inputs, outputs, tf.global_variables())


def load_weights(session, checkpoint: str, variables: list) -> None:
    """Set `variables` to `checkpoint`'s values, cast to each variable's dtype.

    UserError (one line) if the checkpoint lacks a variable or has another shape.
    """
    require_variables(checkpoint, variables,
                      advice="export a checkpoint of this task (train first, or "
                             "point --init_checkpoint at a fine-tuned model.ckpt-N)")
    reader = tf.train.NewCheckpointReader(checkpoint)
    feed = {}
    for variable in variables:
        value = reader.get_tensor(variable_name(variable))
        feed[variable.initial_value] = value.astype(variable.dtype.base_dtype.as_numpy_dtype)
    session.run([v.initializer for v in variables], feed)


# --- writing -------------------------------------------------------------------------

def _tensor_info(tensor, onnx: bool = False) -> layout.TensorInfo:
    """An input or output as export.json lists it; in an ONNX model the tensor is
    named as the signature names it (input_ids, not input_ids:0)."""
    shape = [-1 if d is None else int(d) for d in tensor.shape.as_list()]
    name = tensor.op.name if onnx else tensor.name
    return layout.TensorInfo(name, tensor.dtype.base_dtype.name, shape)


def _write_text(path: str, text: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def _write_saved_model(target: str, serving: ServingGraph, session, assets: list) -> None:
    """A SavedModel in `target` (empty): tag `serve`, signature `serving_default`."""
    signature = tf.saved_model.signature_def_utils.predict_signature_def(
        serving.inputs, serving.outputs)
    with serving.graph.as_default():
        for path in assets:  # copied into assets/ by the builder
            tf.add_to_collection(tf.GraphKeys.ASSET_FILEPATHS,
                                 tf.constant(path, name="asset_" + os.path.basename(path)))
        builder = tf.saved_model.Builder(target)
        # Attributes at their default value are left out (and debugging
        # ones below), so TF 1.15 can read what TF 2.x wrote.
        builder.add_meta_graph_and_variables(
            session, [layout.SERVE_TAG], signature_def_map={layout.SIGNATURE_KEY: signature},
            assets_collection=tf.get_collection(tf.GraphKeys.ASSET_FILEPATHS),
            clear_devices=True, strip_default_attrs=True)
        builder.save()
    make_saved_model_portable(target)


def frozen_graph_def(serving: ServingGraph, session):
    """The serving graph with its variables folded into constants, pruned to the
    outputs, without devices: what frozen_graph.pb holds (and ONNX converts).

    Every input is kept, read or not: the signature names them all (a caller
    feeds them all) and tf2onnx refuses an input the graph lacks; the softmax
    tagger's outputs do not read `word_mask` (argmax over each word's logits),
    and pruning to the outputs alone dropped its placeholder."""
    names = [t.op.name for t in list(serving.outputs.values()) + list(serving.inputs.values())]
    frozen = portable_graph_def(tf.graph_util.convert_variables_to_constants(
        session, serving.graph.as_graph_def(), names))
    for node in frozen.node:
        node.device = ""
    pack_half_constants(frozen)
    return frozen


def _copy_assets(target: str, assets: list) -> None:
    os.makedirs(os.path.join(target, layout.ASSETS_DIR))
    for path in assets:
        shutil.copyfile(path, layout.asset_path(target, os.path.basename(path)))


def _write_frozen_graph(target: str, serving: ServingGraph, session, assets: list) -> None:
    """frozen_graph.pb (constants, pruned to the outputs) and frozen_graph.json."""
    with open(os.path.join(target, layout.FROZEN_GRAPH_FILE), "wb") as f:
        f.write(frozen_graph_def(serving, session).SerializeToString())
    _copy_assets(target, assets)


def _write_onnx(target: str, serving: ServingGraph, session, assets: list) -> None:
    """model.onnx: the frozen graph converted by tf2onnx (fp32)."""
    with quantization.step("convert to ONNX (tf2onnx)"):
        model = onnx_export.convert(frozen_graph_def(serving, session),
                                    {k: v.name for k, v in serving.inputs.items()},
                                    {k: v.name for k, v in serving.outputs.items()})
        with open(os.path.join(target, layout.ONNX_FILE), "wb") as f:
            f.write(model.SerializeToString())
    _copy_assets(target, assets)


def pack_half_constants(graph_def) -> None:
    """Store float16 constants as raw bytes (`tensor_content`), in place.

    TF 1.15 writes them as `half_val`, one varint per value, which makes an
    fp16 frozen graph as large as the fp32 one; both lanes read either form.
    """
    for node in graph_def.node:
        tensor = node.attr["value"].tensor if node.op == "Const" else None
        if tensor is not None and tensor.dtype == tf.float16.as_datatype_enum \
                and len(tensor.half_val) and not tensor.tensor_content:
            values = tf.make_ndarray(tensor).astype(np.float16)
            tensor.ClearField("half_val")
            tensor.tensor_content = values.tobytes()


def _signature_json(metadata: layout.ExportMetadata) -> str:
    values = {"inputs": {k: dataclasses.asdict(v) for k, v in metadata.inputs.items()},
              "outputs": {k: dataclasses.asdict(v) for k, v in metadata.outputs.items()}}
    return json.dumps(values, indent=2, sort_keys=True) + "\n"


def export_model(task: Task, checkpoint: str, settings: ExportSettings,
                 output_dir: str, dev: Optional[SplitData] = None,
                 dev_batch_size: int = 32, label_names: Sequence[str] = ()) -> str:
    """Write `task` with `checkpoint`'s weights as an export for serving.

    Args:
      task: a task with an encoder and resolved labels.
      checkpoint: a checkpoint prefix holding every variable of the task's graph.
      settings: where, which format, which precision.
      output_dir: the run's output_dir (for the default export_dir).
      dev: an int8 ONNX export's rows to measure it on against fp32
        (quantization.accuracy_change), scored dev_batch_size rows a batch.
      label_names: a display name per label (--label_names), kept in export.json.
    Returns:
      The export's folder, complete (it appears only when fully written).
    Raises:
      UserError: the folder exists, the checkpoint is not of this model, the
        ONNX tools are missing, or a write failed (nothing is left behind).
    """
    target = export_dir_for(settings, output_dir, checkpoint)
    refuse_existing(target)
    onnx = settings.format == "onnx"
    if onnx:  # before any work: the tools are there
        onnx_export.require_converter()
        if settings.precision == "int8":
            quantization.require_quantizer()
    with onnx_export.loops_tf2onnx_converts() if onnx else contextlib.nullcontext():
        serving = build_serving_graph(task, "fp16" if settings.precision == "fp16" else "fp32",
                                      remove_padding=not onnx)
    encoder = task.encoder
    metadata = layout.ExportMetadata(
        format=settings.format, precision=settings.precision, **describe_model(task),
        label_names=list(label_names) if label_names else None,
        tensorflow_version=TF_VERSION,
        checkpoint=os.path.abspath(checkpoint), global_step=checkpoint_step(checkpoint),
        inputs={k: _tensor_info(v, onnx) for k, v in serving.inputs.items()},
        outputs={k: _tensor_info(v, onnx) for k, v in serving.outputs.items()},
        onnx=onnx_export.versions() if onnx else {})
    log.info("export: %s %s of %s (%s) -> %s", settings.format, settings.precision,
             checkpoint, ", ".join(f"{k} {v.dtype}{v.shape}"
                                   for k, v in metadata.outputs.items()), target)
    staging = staging_directory(target)
    try:
        with tempfile.TemporaryDirectory() as scratch:
            with tf.Session(graph=serving.graph) as session:
                load_weights(session, checkpoint, serving.variables)
                assets = list(encoder.tokenizer.files())
                if task.labels is not None:
                    labels_file = os.path.join(scratch, layout.LABELS_FILE)
                    _write_text(labels_file, "".join(label + "\n" for label in task.labels))
                    assets.append(labels_file)
                WRITERS[settings.format](staging, serving, session, assets)
            if settings.format == "frozen_graph":
                _write_text(os.path.join(staging, layout.TENSOR_NAMES_FILE),
                            _signature_json(metadata))
            _write_text(layout.bert_config_path(staging), encoder.config.to_json_string())
            _write_text(layout.metadata_path(staging), metadata.to_json())
            if settings.precision == "int8":
                assert dev is not None, "an int8 export is calibrated on rows (dev)"
                _quantize_staged(task, staging, metadata, scratch, dev, dev_batch_size)
        refuse_existing(target)  # another process may have exported meanwhile
        os.rename(staging, target)
    except BaseException as e:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(e, (OSError, tf.errors.OpError)):
            raise cannot_write(target, e) from e
        raise
    log.info("export: wrote %s", target)
    return target


WRITERS = {"saved_model": _write_saved_model, "frozen_graph": _write_frozen_graph,
           "onnx": _write_onnx}


def _quantize_staged(task: Task, staging: str, metadata: layout.ExportMetadata,
                     scratch: str, dev: SplitData, dev_batch_size: int) -> None:
    """The staged fp32 model.onnx made int8 (quantization.py), its activations'
    ranges calibrated on `dev`, export.json saying how, and measured against
    the fp32 model on `dev` (int8_accuracy.json)."""
    model = os.path.join(staging, layout.ONNX_FILE)
    fp32 = os.path.join(scratch, "fp32_" + layout.ONNX_FILE)
    os.rename(model, fp32)
    config = task.encoder.config
    calibration = (batch for _, batches in task.batches(dev).scoring(dev_batch_size, 1)
                   for batch in batches)
    log.info("int8 export: calibrating on %s's %d rows (%s)", dev.split, len(dev), dev.source)
    metadata.onnx["int8"] = quantization.quantize(fp32, model, config.num_attention_heads,
                                                  config.hidden_size, calibration)
    metadata.onnx["int8"]["calibration_split"] = dev.split
    _write_text(layout.metadata_path(staging), metadata.to_json())
    with quantization.step(f"check (int8 against fp32 on {dev.split})"):
        report = quantization.accuracy_change(task, dev, staging, metadata, fp32,
                                              dev_batch_size)
    quantization.write_report(staging, report, task.main_metric)
    log.info("export: the int8 model against fp32 on %s: %s/%s", dev.source,
             layout.EXTRA_DIR, layout.INT8_ACCURACY_FILE)
