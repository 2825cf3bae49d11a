"""`bert-ad serve`'s HTTP server: TensorFlow Serving's REST API with text in, on aiohttp.

  POST /v1/models/NAME[/versions/V]:predict   {"instances": [...]} -> {"predictions": [...]}
  GET  /v1/models/NAME[/versions/V]           TensorFlow Serving's model status
  GET  /v1/models/NAME[/versions/V]/metadata  task, labels, max_seq_length, precision, ...
  GET  /healthz                               200 while serving, 503 while stopping
  GET  /metrics                               Prometheus' text format (prometheus_client)

aiohttp (its server and, in benchmarks/serve_load.py, its client) was chosen
over Starlette on uvicorn by a measurement (docs/serving.md). A request is
read on the event loop (size, JSON, every instance checked: a 4xx with
{"error": "..."} naming the problem), tokenised on a small thread pool,
scored by the model's batcher together with other requests' rows
(bert_ad/inference/batching.py) and answered from the pool again
(ServedModel.answer); the loop never waits on TensorFlow.

SIGTERM, SIGINT and SIGHUP stop it gracefully: requests already received are
answered, new ones get 503, and the process exits 0 once none is left.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import json
import logging
import signal
import socket
import time
from typing import Dict, List, Optional

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, \
    Histogram, generate_latest

from bert_ad.errors import fail
from bert_ad.inference import layout
from bert_ad.inference.predictions import BadInstance
from bert_ad.inference.served_models import ServedModel
from bert_ad.signals import NAMES as SIGNAL_NAMES

log = logging.getLogger("bert_ad")

MODEL_NAME = r"{name:[^/:]+}"
VERSION = r"{version:[0-9]+}"
# Rows a batch holds, and seconds a request takes, as Prometheus buckets.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0)
TOP_LEVEL_FIELDS = ("instances", "signature_name")


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """bert-ad serve's flags that shape the server (bert_ad/cli/serve.py)."""
    host: str = "127.0.0.1"
    port: int = 8501
    max_batch_size: int = 32
    batch_timeout_ms: float = 5.0
    max_request_bytes: int = 1 << 20
    max_instances: int = 256
    tokenizer_threads: int = 2


class RequestError(Exception):
    """A request the server refuses: its HTTP status and the one-line reason."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class Metrics:
    """The /metrics figures, in a registry of this server's own."""

    def __init__(self, models: Dict[str, ServedModel]):
        self.registry = CollectorRegistry()
        r = dict(registry=self.registry)
        self.requests = Counter("bert_ad_serve_requests", "HTTP requests answered, by model "
                                "and status code", ["model", "code"], **r)
        self.errors = Counter("bert_ad_serve_request_errors", "requests answered with a 4xx "
                              "or 5xx status, by model and code", ["model", "code"], **r)
        self.instances = Counter("bert_ad_serve_instances", "instances predicted", ["model"],
                                 **r)
        self.latency = Histogram("bert_ad_serve_request_seconds", "time from a predict "
                                 "request's arrival to its answer", ["model"],
                                 buckets=LATENCY_BUCKETS, **r)
        self.batch_rows = Histogram("bert_ad_serve_batch_rows", "feature rows scored in one "
                                    "batch", ["model"], buckets=BATCH_BUCKETS, **r)
        self.batch_seconds = Histogram("bert_ad_serve_batch_seconds", "time to pad and score "
                                       "one batch", ["model"], buckets=LATENCY_BUCKETS, **r)
        self.queued = Gauge("bert_ad_serve_queued_rows", "feature rows waiting to be scored",
                            ["model"], **r)
        self.in_flight = Gauge("bert_ad_serve_in_flight_requests", "predict requests being "
                               "answered", **r)
        for name, model in models.items():
            self.queued.labels(name).set_function(
                lambda m=model: m.batcher.queued_rows if m.batcher else 0)

    def on_batch(self, model: str):
        def record(rows: int, seconds: float) -> None:
            self.batch_rows.labels(model).observe(rows)
            self.batch_seconds.labels(model).observe(seconds)
        return record

    def answered(self, model: str, status: int) -> None:
        self.requests.labels(model, str(status)).inc()
        if status >= 400:
            self.errors.labels(model, str(status)).inc()


def _json_response(value, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(value, ensure_ascii=False), status=status,
                        content_type="application/json")


def _type_name(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


class Server:
    """The models behind one HTTP server (see the module docstring)."""

    def __init__(self, models: Dict[str, ServedModel], settings: ServerSettings):
        self.models = models
        self.settings = settings
        self.metrics = Metrics(models)
        self.draining = False
        self.in_flight = 0
        self.answered = 0
        self._idle: Optional[asyncio.Event] = None
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        for name, model in models.items():
            model.start_batching(settings.max_batch_size, settings.batch_timeout_ms,
                                 self.metrics.on_batch(name))

    # --- the application ------------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._errors_as_json],
                              client_max_size=self.settings.max_request_bytes)
        for prefix in (f"/v1/models/{MODEL_NAME}", f"/v1/models/{MODEL_NAME}/versions/{VERSION}"):
            app.router.add_post(prefix + ":predict", self.predict)
            app.router.add_get(prefix, self.status)
            app.router.add_get(prefix + "/metadata", self.model_metadata)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/metrics", self.prometheus)
        return app

    @web.middleware
    async def _errors_as_json(self, request: web.Request, handler):
        """Every refusal as {"error": "..."} with its status; counted in /metrics."""
        model = request.match_info.get("name", "")
        model = model if model in self.models else ""
        try:
            response = await handler(request)
        except RequestError as e:
            response = _json_response({"error": str(e)}, e.status)
        except web.HTTPRequestEntityTooLarge:
            response = _json_response({"error": self._too_large()}, 413)
        except web.HTTPException as e:  # no such path (404), wrong method (405)
            message = {404: f"no such path {request.path!r}; predict with POST "
                            "/v1/models/NAME:predict",
                       405: f"{request.method} is not allowed on {request.path!r}"}.get(
                e.status, e.reason)
            response = _json_response({"error": message}, e.status)
        except Exception as e:  # a defect: said, and the server goes on
            log.exception("serve: %s %s failed", request.method, request.path)
            response = _json_response({"error": f"internal error: {type(e).__name__}: {e}"},
                                      500)
        self.metrics.answered(model, response.status)
        return response

    def _too_large(self, size: Optional[int] = None) -> str:
        return (f"the request body{f' of {size} bytes' if size else ''} is over "
                f"--max_request_bytes={self.settings.max_request_bytes}; send fewer or "
                "shorter instances a request")

    def _model(self, request: web.Request) -> ServedModel:
        name = request.match_info["name"]
        model = self.models.get(name)
        if model is None:
            raise RequestError(404, f"no model named {name!r} here; this server serves "
                                    f"{', '.join(sorted(self.models))}")
        version = request.match_info.get("version")
        if version is not None and int(version) != model.version:
            raise RequestError(404, f"model {name!r} has no version {version} here; it "
                                    f"serves version {model.version}")
        return model

    # --- predict ------------------------------------------------------------------------

    async def predict(self, request: web.Request) -> web.Response:
        started = time.perf_counter()
        model = self._model(request)
        if self.draining:
            raise RequestError(503, "the server is stopping; send the request to another "
                                    "replica or again once it is back")
        self.in_flight += 1
        self.metrics.in_flight.inc()
        self._idle.clear()
        try:
            instances = self._instances(await self._body(request))
            parsed = []
            for index, instance in enumerate(instances):
                try:
                    parsed.append(model.predictions.parse(instance))
                except BadInstance as e:
                    raise RequestError(400, f"instances[{index}] {e}") from None
            answers = await asyncio.wrap_future(model.answer(parsed, self._pool))
            self.metrics.instances.labels(model.name).inc(len(instances))
            self.metrics.latency.labels(model.name).observe(time.perf_counter() - started)
            return _json_response({"predictions": answers})
        finally:
            self.in_flight -= 1
            self.answered += 1
            self.metrics.in_flight.dec()
            if not self.in_flight:
                self._idle.set()

    async def _body(self, request: web.Request):
        """The request's JSON (413 over --max_request_bytes, 400 if not JSON)."""
        limit = self.settings.max_request_bytes
        if request.content_length is not None and request.content_length > limit:
            raise RequestError(413, self._too_large(request.content_length))
        body = await request.read()
        try:
            return json.loads(body.decode("utf-8"))
        except UnicodeDecodeError as e:
            raise RequestError(400, f"the request body is not UTF-8 text (byte {e.start + 1})"
                               ) from None
        except ValueError as e:
            raise RequestError(400, f"the request body is not JSON: {e}") from None

    def _instances(self, body) -> List[object]:
        """The checked `instances` of a request body."""
        if not isinstance(body, dict):
            raise RequestError(400, 'the request body must be a JSON object {"instances": '
                                    f'[...]}}, not {_type_name(body)}')
        if "instances" not in body:
            hint = (' (the columnar "inputs" form takes token ids; send text as '
                    '"instances")' if "inputs" in body else "")
            raise RequestError(400, f'the request has no "instances": send {{"instances": '
                                    f'[...]}}{hint}')
        unknown = [key for key in body if key not in TOP_LEVEL_FIELDS]
        if unknown:
            raise RequestError(400, f"the request has an unknown field {unknown[0]!r}; the "
                                    f"fields are {', '.join(TOP_LEVEL_FIELDS)}")
        signature = body.get("signature_name", layout.SIGNATURE_KEY)
        if signature != layout.SIGNATURE_KEY:
            raise RequestError(400, f"signature_name {signature!r}: the only signature is "
                                    f"{layout.SIGNATURE_KEY!r}")
        instances = body["instances"]
        if not isinstance(instances, list):
            raise RequestError(400, f'"instances" must be a list, not {_type_name(instances)}')
        if not instances:
            raise RequestError(400, '"instances" is empty: send at least one')
        if len(instances) > self.settings.max_instances:
            raise RequestError(413, f"{len(instances)} instances are over --max_instances="
                                    f"{self.settings.max_instances} a request; split it")
        return instances

    # --- status, metadata, health, metrics ---------------------------------------------

    async def status(self, request: web.Request) -> web.Response:
        model = self._model(request)
        state = "UNLOADING" if self.draining else "AVAILABLE"
        return _json_response({"model_version_status": [
            {"version": str(model.version), "state": state,
             "status": {"error_code": "OK", "error_message": ""}}]})

    async def model_metadata(self, request: web.Request) -> web.Response:
        model = self._model(request)
        m = model.metadata
        return _json_response({
            "model_spec": {"name": model.name, "signature_name": layout.SIGNATURE_KEY,
                           "version": str(model.version)},
            "metadata": {"task": m.task, "labels": m.labels,
                         "max_seq_length": m.max_seq_length, "precision": m.precision,
                         "format": m.format, "version": model.version,
                         "global_step": m.global_step, "do_lower_case": m.do_lower_case,
                         "tokenizer": m.tokenizer, "tensorflow_version": m.tensorflow_version,
                         "settings": m.settings,
                         "instances": model.predictions.instance_format,
                         "predictions": model.predictions.describe(),
                         "max_batch_size": self.settings.max_batch_size,
                         "batch_timeout_ms": self.settings.batch_timeout_ms}})

    async def healthz(self, request: web.Request) -> web.Response:
        if self.draining:
            return _json_response({"status": "stopping"}, 503)
        return _json_response({"status": "ok", "models": sorted(self.models)})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- running and stopping ------------------------------------------------------------

    async def run(self, listening: socket.socket) -> int:
        """Serve on `listening` (bound) until a stop signal; answer what is in flight."""
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        stop = asyncio.Event()
        received: List[int] = []

        def on_signal(signum: int) -> None:
            received.append(signum)
            stop.set()

        stop_signals = [s for s in SIGNAL_NAMES if signal.getsignal(s) is not signal.SIG_IGN]
        for signum in stop_signals:
            loop.add_signal_handler(signum, on_signal, signum)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.settings.tokenizer_threads, thread_name_prefix="bert_ad-tokenize")
        runner = web.AppRunner(self.application(), access_log=None)
        await runner.setup()
        try:
            await web.SockSite(runner, listening).start()
            host, port = listening.getsockname()[:2]
            log.info("serve: listening on http://%s:%d  (%s)", host, port, ", ".join(
                f"POST /v1/models/{name}:predict" for name in sorted(self.models)))
            await stop.wait()
            self.draining = True
            log.info("serve: stopping on %s: %d request(s) in flight will be answered, new "
                     "ones get 503", SIGNAL_NAMES[received[0]], self.in_flight)
            await self._idle.wait()
        finally:
            await runner.cleanup()
            for signum in stop_signals:
                loop.remove_signal_handler(signum)
            for model in self.models.values():
                model.close()
            self._pool.shutdown(wait=True)
        log.info("serve: stopped after answering %d predict request(s)", self.answered)
        return 0


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: a free one), or one `error:` line."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        listening = socket.socket(family, kind, proto)
    except OSError as e:
        fail(f"--host={host}: cannot listen there ({e.strerror or e}); give an address of "
             "this machine, e.g. 127.0.0.1 or 0.0.0.0")
    try:
        listening.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listening.bind(address)
    except OSError as e:
        listening.close()
        fail(f"--host={host} --port={port}: cannot listen there ({e.strerror or e}); "
             "choose another --port (0: any free one)")
    listening.setblocking(False)
    return listening


def serve(models: Dict[str, ServedModel], settings: ServerSettings,
          listening: socket.socket) -> int:
    """Run the server until a stop signal; 0 once every received request is answered."""
    return asyncio.run(Server(models, settings).run(listening))
