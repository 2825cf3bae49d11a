"""Score rows with exports the way a server would: TensorFlow alone, no bert_ad.

    python tests/export_reader.py REQUEST.json RESULT.json

REQUEST: {"rows": [{input name: [ids of one row]}], "exports": {key: folder},
          "limits": {key: read only the first N rows} (optional)}.
Each row is fed on its own (a batch of one, no padding), so neither bert_ad's
batching nor its padding is involved. A SavedModel is read with TF 2.x's
`tf.saved_model.load` (eager, its `serving_default` function) on TF 2.x and
with `tf.compat.v1.saved_model.loader` on TF 1.15; a frozen graph with
`import_graph_def` and the tensor names of frozen_graph.json beside it.
RESULT: {key: {output name: [value of each row]}, "tensorflow": version}.

Runs on Python 3.7 (TF 1.15) and 3.11 (TF 2.x); used by tests/test_export.py.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

TF2 = tf.__version__.startswith("2.")
v1 = tf.compat.v1


def score_saved_model_eager(path, rows):
    serve = tf.saved_model.load(path).signatures["serving_default"]
    results = []
    for row in rows:
        outputs = serve(**{k: tf.constant([v], tf.int32) for k, v in row.items()})
        results.append({k: v.numpy()[0] for k, v in outputs.items()})
    return results


def score_in_session(graph, session, inputs, outputs, rows):
    fetch = {k: graph.get_tensor_by_name(v) for k, v in outputs.items()}
    results = []
    for row in rows:
        feed = {graph.get_tensor_by_name(inputs[k]): np.array([v], np.int32)
                for k, v in row.items()}
        results.append({k: v[0] for k, v in session.run(fetch, feed).items()})
    return results


def score_saved_model_v1(path, rows):
    graph = v1.Graph()
    with graph.as_default(), v1.Session(graph=graph) as session:
        meta_graph = v1.saved_model.loader.load(session, ["serve"], path)
        signature = meta_graph.signature_def["serving_default"]
        return score_in_session(graph, session,
                                {k: v.name for k, v in signature.inputs.items()},
                                {k: v.name for k, v in signature.outputs.items()}, rows)


def score_frozen_graph(path, rows):
    with open(os.path.join(path, "frozen_graph.json")) as f:
        names = json.load(f)
    graph_def = v1.GraphDef()
    with open(os.path.join(path, "frozen_graph.pb"), "rb") as f:
        graph_def.ParseFromString(f.read())
    graph = v1.Graph()
    with graph.as_default():
        v1.import_graph_def(graph_def, name="")
    with v1.Session(graph=graph) as session:
        return score_in_session(graph, session,
                                {k: v["tensor"] for k, v in names["inputs"].items()},
                                {k: v["tensor"] for k, v in names["outputs"].items()}, rows)


def main():
    with open(sys.argv[1]) as f:
        request = json.load(f)
    result = {"tensorflow": tf.__version__}
    for key, path in request["exports"].items():
        if os.path.exists(os.path.join(path, "saved_model.pb")):
            score = score_saved_model_eager if TF2 else score_saved_model_v1
        else:
            score = score_frozen_graph
        limit = request.get("limits", {}).get(key)
        rows = score(path, request["rows"][:limit])
        result[key] = {name: [np.asarray(row[name]).tolist() for row in rows]
                       for name in rows[0]}
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
