"""The encoder's self-attention as ONNX Runtime's fused Attention kernel, for int8.

ONNX Runtime's transformer optimizer (model type `bert_tf`) fuses our graph's layer
norms and GELUs, not its attention: tf2onnx writes Google's `attention_layer` on
[batch * seq, hidden] matrices, the query scaled before its transpose, a pattern
neither that optimizer's attention fusion nor the one ONNX Runtime runs at load
recognises. Each layer then runs 3 matmuls for Q, K and V, 4 transposes, 4 reshapes,
the scaled scores, the mask's add, softmax and the context matmul as separate kernels.

Here, before int8's calibration (bert_ad/serving/quantization.py), each layer's
self-attention becomes one com.microsoft `Attention` node: Q, K and V packed into one
[hidden, 3 * hidden] matrix (one matmul instead of three; quantized as `QAttention`),
the mask read as the model's 0/1 input_mask (the kernel adds the same -10000 to
masked scores that the graph's mask bias adds). Measured on the distilled MiniLM
student (docs/serving.md "Fused attention"): 1.03-1.14x a call. The residual add and
layer norm as one SkipLayerNormalization was measured too and left out: 0.94x.

Matching is structural, on the nodes the export writes: a layer whose nodes differ
(another head, a changed modeling.py) is left as it is, and the caller keeps the fused
model only when it answers as the unfused one.
"""

from __future__ import annotations

from typing import Dict, List, Optional

import numpy as np

from bert_ad.serving.integer_matmuls import names_read, value_readers

MS_DOMAIN = "com.microsoft"


class _Graph:
    """Producers, consumers and constants of an ONNX graph, for matching."""

    def __init__(self, graph):
        self.graph = graph
        self.producer = {out: node for node in graph.node for out in node.output}
        # (None among a value's readers: a graph output or a loop body's read)
        self.readers = value_readers(graph)
        self.initializers = {tensor.name: tensor for tensor in graph.initializer}
        self.inputs = {value.name: value for value in graph.input}

    def constant(self, name: str) -> Optional[np.ndarray]:
        from onnx import numpy_helper
        if name in self.initializers:
            return numpy_helper.to_array(self.initializers[name])
        node = self.producer.get(name)
        if node is not None and node.op_type == "Constant":
            for attribute in node.attribute:
                if attribute.name == "value":
                    return numpy_helper.to_array(attribute.t)
        return None

    def made_by(self, name: str, op_type: str):
        node = self.producer.get(name)
        return node if node is not None and node.op_type == op_type else None

    def only_reader(self, name: str):
        """The one node that reads `name`; None if anything else reads it (another
        node, a graph output, a loop's body)."""
        readers = self.readers.get(name, [])
        return readers[0] if len(readers) == 1 else None


def _perm(node) -> List[int]:
    for attribute in node.attribute:
        if attribute.name == "perm":
            return list(attribute.ints)
    return []


def _projection(g: _Graph, name: str, nodes: list):
    """(input, weight [in, out], bias [out]) of `name` = MatMul(input, W) + b."""
    add = g.made_by(name, "Add")
    if add is None or g.only_reader(name) is None:
        return None
    for matmul_side, bias_side in ((0, 1), (1, 0)):
        matmul = g.made_by(add.input[matmul_side], "MatMul")
        bias = g.constant(add.input[bias_side])
        if matmul is None or bias is None or g.only_reader(matmul.output[0]) is not add:
            continue
        weight = g.constant(matmul.input[1])
        if weight is None or weight.ndim != 2 or bias.shape != (weight.shape[1],):
            return None
        nodes += [matmul, add]
        return matmul.input[0], weight, bias
    return None


def _heads(g: _Graph, name: str, perm: List[int], nodes: list) -> Optional[str]:
    """The 2-D tensor reshaped to [batch, seq, heads, size] and transposed by
    `perm` into `name`; the nodes on the way are added to `nodes`."""
    transpose = g.made_by(name, "Transpose")
    if transpose is None or _perm(transpose) != perm:
        return None
    reshape = g.made_by(transpose.input[0], "Reshape")
    if reshape is None or g.only_reader(reshape.output[0]) is not transpose:
        return None
    nodes += [transpose, reshape]
    return reshape.input[0]


def _match_attention(g: _Graph, softmax, head_size: int):
    """The attention subgraph around `softmax`, or None.

    Returns (input, [q, k, v] projections, mask bias tensor, context output, nodes)."""
    nodes = [softmax]
    add = g.made_by(softmax.input[0], "Add")
    if add is None or g.only_reader(add.output[0]) is not softmax:
        return None
    scores, mask_bias = None, None
    for scores_side in (0, 1):
        candidate = g.made_by(add.input[scores_side], "MatMul")
        if candidate is not None:
            scores, mask_bias = candidate, add.input[1 - scores_side]
            break
    if scores is None or g.only_reader(scores.output[0]) is not add:
        return None
    nodes += [add, scores]
    # The query: scaled by 1/sqrt(head size) before its transpose (Google's order).
    query_t = g.made_by(scores.input[0], "Transpose")
    if query_t is None or _perm(query_t) != [0, 2, 1, 3]:
        return None
    scaled = g.made_by(query_t.input[0], "Mul")
    if scaled is None or g.only_reader(scaled.output[0]) is not query_t:
        return None
    scale = [g.constant(name) for name in scaled.input]
    if scale[1] is not None and scale[1].size == 1:
        query_4d, factor = scaled.input[0], float(scale[1].reshape(()))
    elif scale[0] is not None and scale[0].size == 1:
        query_4d, factor = scaled.input[1], float(scale[0].reshape(()))
    else:
        return None
    if not np.isclose(factor, 1.0 / np.sqrt(head_size), rtol=1e-5):
        return None
    query_reshape = g.made_by(query_4d, "Reshape")
    if query_reshape is None or g.only_reader(query_4d) is not scaled:
        return None
    nodes += [query_t, scaled, query_reshape]
    key = _heads(g, scores.input[1], [0, 2, 3, 1], nodes)
    # The context: probabilities times V, back to [batch * seq, hidden].
    context = g.only_reader(softmax.output[0])
    if key is None or context is None or context.op_type != "MatMul" or \
            context.input[0] != softmax.output[0]:
        return None
    value = _heads(g, context.input[1], [0, 2, 1, 3], nodes)
    back = g.only_reader(context.output[0])
    if value is None or back is None or back.op_type != "Transpose" or \
            _perm(back) != [0, 2, 1, 3]:
        return None
    flat = g.only_reader(back.output[0])
    if flat is None or flat.op_type != "Reshape":
        return None
    nodes += [context, back, flat]
    projections = [_projection(g, name, nodes) for name in (query_reshape.input[0], key, value)]
    if None in projections or len({p[0] for p in projections}) != 1:
        return None
    return projections[0][0], projections, mask_bias, flat.output[0], nodes


def _mask_input(g: _Graph, mask_bias: str) -> Optional[str]:
    """The one graph input the attention's mask bias is computed from."""
    found, seen, todo = set(), set(), [mask_bias]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in g.inputs:
            found.add(name)
        node = g.producer.get(name)
        if node is not None:
            todo.extend(node.input)
    return found.pop() if len(found) == 1 else None


def fuse_attention(model, num_heads: int, hidden_size: int) -> Dict[str, int]:
    """Rewrites `model` (an onnx ModelProto, in place) with each layer's
    self-attention as one Attention node. Returns {"Attention": count}; {} when
    nothing matched."""
    from onnx import TensorProto, helper, numpy_helper
    graph = model.graph
    g = _Graph(graph)
    head_size = hidden_size // num_heads
    order = {id(node): i for i, node in enumerate(graph.node)}
    matches = []
    for node in list(graph.node):
        if node.op_type == "Softmax":
            match = _match_attention(g, node, head_size)
            if match is not None:
                matches.append(match)
    masks = {_mask_input(g, match[2]) for match in matches}
    if not matches or len(masks) != 1 or None in masks:
        return {}
    removed = set()
    first = []       # new nodes that read graph inputs only: at the start
    placed = {}      # id(an old node) -> new nodes that take its place in the order
    mask = masks.pop()
    mask_type = g.inputs[mask].type.tensor_type.elem_type
    mask_int32 = mask
    if mask_type != TensorProto.INT32:
        mask_int32 = "attention_fusion/mask_int32"
        first.append(helper.make_node("Cast", [mask], [mask_int32], to=TensorProto.INT32,
                                      name="attention_fusion/mask_int32"))
    graph.initializer.extend([
        numpy_helper.from_array(np.array([hidden_size], np.int64), "attention_fusion/hidden"),
        numpy_helper.from_array(np.array([-1, hidden_size], np.int64),
                                "attention_fusion/rows_by_hidden")])
    first += [
        helper.make_node("Shape", [mask], ["attention_fusion/batch_seq"],
                         name="attention_fusion/batch_seq"),
        helper.make_node("Concat", ["attention_fusion/batch_seq", "attention_fusion/hidden"],
                         ["attention_fusion/batch_seq_hidden"], axis=0,
                         name="attention_fusion/batch_seq_hidden")]
    for index, (inputs, projections, _, output, nodes) in enumerate(matches):
        # Named in the layer's scope: int8 quantizes the encoder's nodes by name.
        softmax = nodes[0].name
        scope = (softmax.rsplit("/", 1)[0] if "/" in softmax else
                 f"attention_fusion/{index}") + "/fused_attention"
        weight = np.concatenate([p[1] for p in projections], axis=1).astype(np.float32)
        bias = np.concatenate([p[2] for p in projections]).astype(np.float32)
        graph.initializer.extend([numpy_helper.from_array(weight, scope + "/qkv_kernel"),
                                  numpy_helper.from_array(bias, scope + "/qkv_bias")])
        position = min(nodes, key=lambda n: order[id(n)])
        placed[id(position)] = [
            helper.make_node("Reshape", [inputs, "attention_fusion/batch_seq_hidden"],
                             [scope + "/input_3d"], name=scope + "/input_3d"),
            helper.make_node("Attention", [scope + "/input_3d", scope + "/qkv_kernel",
                                           scope + "/qkv_bias", mask_int32],
                             [scope + "/context_3d"], name=scope, domain=MS_DOMAIN,
                             num_heads=num_heads),
            helper.make_node("Reshape", [scope + "/context_3d",
                                         "attention_fusion/rows_by_hidden"],
                             [output], name=scope + "/context")]
        removed.update(id(n) for n in nodes)
    # Each new node where the first node it replaces was: its inputs are made
    # before that, its readers after (and a loop's body keeps its outer values).
    nodes = list(first)
    for node in graph.node:
        nodes += placed.get(id(node), [])
        if id(node) not in removed:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    if not any(opset.domain == MS_DOMAIN for opset in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    _drop_unread(graph)
    return {"Attention": len(matches)}


def _drop_unread(graph) -> None:
    """Nodes none of whose outputs is read any more (the shape computations of the
    reshapes the fusion removed) and initializers nothing reads (the separate Q, K,
    V matrices, now packed; ONNX Runtime warns of each at load)."""
    outputs = {value.name for value in graph.output}
    while True:
        read = outputs | names_read(graph)
        dead = [node for node in graph.node if not any(out in read for out in node.output)]
        if not dead:
            break
        for node in dead:
            graph.node.remove(node)
    kept = [tensor for tensor in graph.initializer if tensor.name in read]
    del graph.initializer[:]
    graph.initializer.extend(kept)

