"""A predict request's body: read within bounds, decoded to JSON that is safe to use.

Whatever a client sends, the result is the JSON value or one `RequestError`
(a 4xx naming what is wrong), never an exception from deeper down:

* size: over `limit` bytes is 413 (the declared Content-Length before a byte
  is read; a chunked body as it grows, aiohttp's client_max_size);
* time: a body not complete within `timeout` seconds is 408 (a client that
  sends 7 of 100 declared bytes and goes silent would otherwise hold its
  handler, and a drain waiting for it, forever);
* a client that closes its connection mid-body is `ClientGone` (the server
  counts it as 499, nginx's "client closed request", and logs one line);
* bytes that are not UTF-8, text that is not JSON, numbers JSON allows but
  nothing here can use (NaN, Infinity, 1e999, integers past 64 bits: Python
  reads a million-digit integer in quadratic time), nesting deeper than any
  request needs (200,000 `[` made Python's reader raise RecursionError), and
  strings holding a lone UTF-16 surrogate (`"\\ud800"` is valid JSON, but no
  tokenizer or JSON writer can encode it) are each 400.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from typing import List, Tuple

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

# The deepest a request body may nest: {"instances": [{"tokens": ["w"]}]} is 3
# containers deep; no request of any task needs more than 4.
MAX_DEPTH = 32
# Integers beyond 64 bits are no count, index or id a request carries.
MAX_INT = 2 ** 63
LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class RequestError(Exception):
    """A request the server refuses: its HTTP status, the one-line reason and a
    short name of its class for /metrics (bad_body, too_large, auth, ...)."""

    def __init__(self, status: int, message: str, reason: str = "bad_request"):
        super().__init__(message)
        self.status = status
        self.reason = reason


class ClientGone(Exception):
    """The client closed its connection before its body was complete."""


class _BadNumber(ValueError):
    pass


async def read_json(request: web.Request, limit: int, timeout: float,
                    too_large_message) -> object:
    """The request body's JSON value (see the module docstring); `too_large_message`
    (size or None) -> the 413's text."""
    if request.content_length is not None and request.content_length > limit:
        raise RequestError(413, too_large_message(request.content_length), "too_large")
    try:
        body = await asyncio.wait_for(request.read(), timeout)
    except asyncio.TimeoutError:
        raise RequestError(408, f"the request body was not received within --body_timeout_s="
                                f"{timeout:g} seconds; send it at once, or raise the limit",
                           "body_timeout") from None
    except web.HTTPRequestEntityTooLarge:
        raise RequestError(413, too_large_message(None), "too_large") from None
    except (ConnectionError, HttpProcessingError) as e:
        # Reset mid-body, or closed before Content-Length's bytes came.
        raise ClientGone(str(e) or type(e).__name__) from None
    return decode_json(body)


def decode_json(body: bytes) -> object:
    """`body` as a checked JSON value, or RequestError(400)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise RequestError(400, f"the request body is not UTF-8 text (byte {e.start + 1})",
                           "bad_body") from None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int,
                           parse_float=_finite_float)
    except _BadNumber as e:
        raise RequestError(400, f"the request body holds {e}", "bad_body") from None
    except RecursionError:
        raise RequestError(400, f"the request body nests deeper than {MAX_DEPTH} levels",
                           "bad_body") from None
    except ValueError as e:
        raise RequestError(400, f"the request body is not JSON: {e}", "bad_body") from None
    _check_depth_and_strings(value)
    return value


def _no_constant(name: str):
    raise _BadNumber(f"{name}, which is not a number a request can use")


def _bounded_int(digits: str) -> int:
    # The length first: int() of a million digits takes quadratic time.
    if len(digits.lstrip("-")) > 19 or abs(int(digits)) >= MAX_INT:
        raise _BadNumber(f"the integer {digits[:24]}{'...' if len(digits) > 24 else ''}, "
                         "out of range (at most 64 bits)")
    return int(digits)


def _finite_float(digits: str) -> float:
    value = float(digits)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {digits[:24]}, out of range for a float")
    return value


def _check_depth_and_strings(value: object) -> None:
    """RequestError(400) for nesting past MAX_DEPTH or a string (or key) with a
    lone surrogate, naming where; a loop, not recursion, so any depth is safe."""
    stack: List[Tuple[object, str, int]] = [(value, "", 1)]
    while stack:
        item, where, depth = stack.pop()
        if isinstance(item, str):
            _check_string(item, where)
            continue
        if not isinstance(item, (dict, list)):
            continue
        if depth > MAX_DEPTH:
            raise RequestError(400, f"the request body nests deeper than {MAX_DEPTH} levels",
                               "bad_body")
        if isinstance(item, dict):
            for key, child in item.items():
                _check_string(key, f"{where} key" if where else "a key")
                stack.append((child, f"{where}[{key!r}]" if where else key, depth + 1))
        else:
            stack.extend((child, f"{where}[{index}]", depth + 1)
                         for index, child in enumerate(item))


def _check_string(text: str, where: str) -> None:
    found = LONE_SURROGATE.search(text)
    if found:
        raise RequestError(400, f"{where or 'the body'} has a lone surrogate "
                                f"(\\u{ord(found.group()):04x}) at character {found.start()}: "
                                "not text; send UTF-8 (a character outside the BMP as a "
                                "surrogate pair, or as itself)", "bad_body")
