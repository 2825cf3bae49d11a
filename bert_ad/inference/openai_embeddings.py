"""POST /v1/embeddings: OpenAI's embeddings request and answer, for a features export.

    {"input": "text" or ["text", ...], "model": NAME, "encoding_format": "float"}
    -> {"object": "list", "model": NAME,
        "data": [{"object": "embedding", "embedding": [...], "index": 0}, ...],
        "usage": {"prompt_tokens": N, "total_tokens": N}}

The shape OpenAI's client libraries (and infinity-emb's, text-embeddings-inference's
users) send by default, so a `bert-ad features` export (`--do_export`: a pooled,
optionally normalised sentence vector) is a drop-in embeddings endpoint. The
vectors are the export's, made by the same code as `bert-ad features`
(FeaturePredictions). `encoding_format: "base64"` sends each vector as its
little-endian float32 bytes in base64, as OpenAI does (a quarter of the JSON
and no float printing). Tokens are counted as the model sees them, [CLS] and
[SEP] included. This module reads and writes the JSON; the server routes and
scores (server.py).
"""

from __future__ import annotations

import base64
import dataclasses
from typing import List, Sequence

import numpy as np

from bert_ad.inference.request_body import RequestError

ENCODINGS = ("float", "base64")
FIELDS = ("input", "model", "encoding_format", "user", "dimensions")


@dataclasses.dataclass(frozen=True)
class EmbeddingsRequest:
    model: str
    texts: List[str]
    encoding_format: str


def _kind(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def parse_request(body, max_inputs: int) -> EmbeddingsRequest:
    """The checked request; RequestError (400, or 413 past --max_instances) naming
    what is wrong."""
    if not isinstance(body, dict):
        raise RequestError(400, 'the request body must be a JSON object {"input": ..., '
                                f'"model": ...}}, not {_kind(body)}')
    unknown = [key for key in body if key not in FIELDS]
    if unknown:
        raise RequestError(400, f"the request has an unknown field {unknown[0]!r}; the "
                                f"fields are {', '.join(FIELDS)}")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise RequestError(400, 'the request needs "model": the name of an embedding model '
                                "this server serves")
    given = body.get("input")
    texts = [given] if isinstance(given, str) else given
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise RequestError(400, '"input" must be a string or a list of strings (token '
                                "arrays are not taken: the server tokenises text itself)")
    if not texts:
        raise RequestError(400, '"input" is empty: send at least one text')
    if len(texts) > max_inputs:
        raise RequestError(413, f"{len(texts)} inputs are over --max_instances={max_inputs} "
                                "a request; split it", "too_large")
    encoding = body.get("encoding_format", "float")
    if encoding not in ENCODINGS:
        raise RequestError(400, f"encoding_format {encoding!r} is not one of "
                                f"{', '.join(ENCODINGS)}")
    if body.get("dimensions") is not None and not isinstance(body["dimensions"], int):
        raise RequestError(400, '"dimensions" must be a whole number')
    return EmbeddingsRequest(model, texts, encoding)


def check_dimensions(body: dict, width: int) -> None:
    """OpenAI's `dimensions` shortens a vector; this model's have one width."""
    asked = body.get("dimensions")
    if asked is not None and asked != width:
        raise RequestError(400, f"dimensions={asked}: this model's embeddings have "
                                f"{width} dimensions and are not shortened")


def encode(vector: Sequence[float], encoding_format: str):
    if encoding_format == "base64":
        return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")
    return vector


def response(request: EmbeddingsRequest, vectors: Sequence[Sequence[float]],
             tokens: int) -> dict:
    """OpenAI's answer: one entry per input, in order."""
    return {"object": "list",
            "data": [{"object": "embedding", "embedding": encode(v, request.encoding_format),
                      "index": i} for i, v in enumerate(vectors)],
            "model": request.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
