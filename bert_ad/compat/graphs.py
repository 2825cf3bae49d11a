"""Graphs written for serving (bert_ad/serving/export.py) that load in both lanes."""

from __future__ import annotations

import os

from bert_ad.compat import tf

#
# A graph TF 2.x writes names attributes TF 1.15's op registry does not know
# (MatMul's grad_a/grad_b, VarHandleOp's debug_name), and TF 1.15 refuses a
# whole graph for one unknown attribute. The new ones at their default value
# mean nothing, and debug_name is a label for error messages: without them
# the same graph loads in both lanes.

DEBUG_ONLY_ATTRIBUTES = {"VarHandleOp": ("debug_name",)}


def portable_graph_def(graph_def) -> "tf.GraphDef":
    """`graph_def` without default-valued and debugging-only attributes (a copy).

    Args:
      graph_def: a GraphDef of this process's TensorFlow.
    Returns:
      A GraphDef that computes the same, readable by TF 1.15 and TF 2.x.
    """
    stripped = tf.train.export_meta_graph(graph_def=graph_def, collection_list=[],
                                          strip_default_attrs=True).graph_def
    drop_debug_attributes(stripped)
    return stripped


def drop_debug_attributes(graph_def) -> None:
    """Remove DEBUG_ONLY_ATTRIBUTES from `graph_def`'s nodes, in place."""
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    for node in nodes:
        for name in DEBUG_ONLY_ATTRIBUTES.get(node.op, ()):
            if name in node.attr:
                del node.attr[name]


def make_saved_model_portable(export_dir: str) -> None:
    """Rewrite export_dir/saved_model.pb without debugging-only attributes.

    (tf.saved_model.Builder's strip_default_attrs=True has already removed
    the default-valued ones.)
    """
    from tensorflow.core.protobuf import saved_model_pb2
    path = os.path.join(export_dir, "saved_model.pb")
    saved_model = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        drop_debug_attributes(meta_graph.graph_def)
    with open(path, "wb") as f:
        f.write(saved_model.SerializeToString())
