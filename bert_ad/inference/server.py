"""`bert-ad serve`'s HTTP server: TensorFlow Serving's REST API with text in, on aiohttp.

  POST /v1/models/NAME[/versions/V]:predict   {"instances": [...]} -> {"predictions": [...]}
  GET  /v1/models/NAME[/versions/V]           TensorFlow Serving's model status
  GET  /v1/models/NAME[/versions/V]/metadata  task, labels, max_seq_length, precision, ...
  POST /v1/embeddings                         OpenAI's embeddings (openai_embeddings.py)
  GET  /healthz                               alive: 200 while the process runs
  GET  /readyz                                ready: 200 once warmed, 503 while draining
  GET  /metrics                               Prometheus' text format (server_metrics.py)

aiohttp (its server and, in benchmarks/serve_load.py, its client) was chosen
over Starlette on uvicorn by a measurement (docs/serving.md). A request's
body is read within bounds (request_body.py: size, time, JSON safe to use),
its instances checked (a 4xx with {"error": "..."} naming the problem),
tokenised on a small thread pool, scored by the model's batcher together
with other requests' rows (batching.py: fair between requests, bounded by
rows and tokens) and answered from the pool again (ServedModel.answer) before
--request_timeout_s (else 504, its rows dropped); the loop never waits on a
model. With --poll_s a model base path's new versions are loaded beside the
served one and switched to, the old one unloaded once its requests are
answered (version_watcher.py); each answer names the version that made it.
Every request has an id (X-Request-Id, taken from the client when it sends a
usable one) in its answer's headers and its log line: every refusal is one
line, every answer too with --access_log. With --api_key_file every
path but the probes and /metrics needs `Authorization: Bearer KEY`
(api_keys.py).

SIGTERM and SIGINT (and SIGHUP without --api_key_file; with one, SIGHUP
re-reads the keys) stop it gracefully: the requests whose body was read are
answered, new ones get 503, and the process exits 0 once none is left or
--drain_timeout_s has passed, whatever clients do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import inspect
import json
import logging
import re
import signal
import socket
import ssl
import time
import uuid
from typing import Dict, List, Optional

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from bert_ad.inference import layout
from bert_ad.inference.api_keys import ApiKeys
from bert_ad.inference.batching import TooManyRows
from bert_ad.inference.listening import is_loopback
from bert_ad.inference.model_versions import ModelVersions
from bert_ad.inference.version_watcher import VersionWatcher
from bert_ad.inference import openai_embeddings
from bert_ad.inference.predictions import BadInstance, FeaturePredictions
from bert_ad.inference.request_body import ClientGone, RequestError, read_json
from bert_ad.inference.served_models import ServedModel, Usage
from bert_ad.inference.server_metrics import Metrics
from bert_ad.signals import NAMES as SIGNAL_NAMES

log = logging.getLogger("bert_ad")

MODEL_NAME = r"{name:[^/:]+}"
VERSION = r"{version:[0-9]+}"
TOP_LEVEL_FIELDS = ("instances", "signature_name")
# Paths open without an API key: a load balancer's probes and Prometheus' scrape.
OPEN_PATHS = ("/healthz", "/readyz", "/metrics")
# A client's own X-Request-Id is kept when it is this plain (no log injection).
CLIENT_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
# After the drain, how long aiohttp lets handlers still running finish their
# answer before it cancels them (the drain has already waited for the rest).
HANDLER_GRACE_S = 1.0


@dataclasses.dataclass(frozen=True)
class ServerSettings:
    """bert-ad serve's flags that shape the server (bert_ad/cli/serve.py has
    their meaning, docs/serving.md the reasons for the defaults)."""
    host: str = "127.0.0.1"
    port: int = 8501
    max_batch_size: int = 32
    batch_timeout_ms: float = 5.0
    max_request_bytes: int = 1 << 20
    max_instances: int = 256
    tokenizer_threads: int = 2
    max_batch_tokens: int = 8192
    max_request_rows: int = 512
    body_timeout_s: float = 30.0
    request_timeout_s: float = 30.0
    drain_timeout_s: float = 25.0
    access_log: bool = False
    poll_s: float = 1.0


def _json_response(value, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(value, ensure_ascii=False), status=status,
                        content_type="application/json")


def _type_name(value) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false",
            type(None): "null"}.get(type(value), "a number")


def _request_id(given: Optional[str]) -> str:
    return given if given and CLIENT_REQUEST_ID.match(given) else uuid.uuid4().hex[:16]


def _runner(app: web.Application, grace_s: float) -> tuple:
    """(AppRunner, the site's keyword arguments) with aiohttp's shutdown timeout
    set where this aiohttp takes it: the runner (3.9+) or the site (3.8)."""
    if "shutdown_timeout" in inspect.signature(web.AppRunner.__init__).parameters or \
            "shutdown_timeout" in inspect.signature(web.BaseRunner.__init__).parameters:
        return web.AppRunner(app, access_log=None, shutdown_timeout=grace_s), {}
    return web.AppRunner(app, access_log=None), {"shutdown_timeout": grace_s}


class Server:
    """The models behind one HTTP server (see the module docstring)."""

    def __init__(self, models: Dict[str, ModelVersions], settings: ServerSettings,
                 api_keys: Optional[ApiKeys] = None):
        self.models = models
        self.settings = settings
        self.api_keys = api_keys
        self.metrics = Metrics(models)
        self.ready = False
        self.draining = False
        self.in_flight = 0
        self.answered = 0
        self._idle: Optional[asyncio.Event] = None
        self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None
        self.versions = VersionWatcher(models, settings.poll_s, self._start_batching)
        for versions in models.values():
            self._start_batching(versions.current.model)

    def _start_batching(self, model: ServedModel) -> None:
        s = self.settings
        model.start_batching(s.max_batch_size, s.batch_timeout_ms,
                             self.metrics.on_batch(model.name), s.max_batch_tokens,
                             s.max_request_rows)

    # --- the application ------------------------------------------------------------------

    def application(self) -> web.Application:
        app = web.Application(middlewares=[self._each_request],
                              client_max_size=self.settings.max_request_bytes)
        for prefix in (f"/v1/models/{MODEL_NAME}", f"/v1/models/{MODEL_NAME}/versions/{VERSION}"):
            app.router.add_post(prefix + ":predict", self.predict)
            app.router.add_get(prefix, self.status)
            app.router.add_get(prefix + "/metadata", self.model_metadata)
        app.router.add_post("/v1/embeddings", self.embeddings)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        app.router.add_get("/metrics", self.prometheus)
        return app

    @web.middleware
    async def _each_request(self, request: web.Request, handler):
        """Every request: its id, the key check, every refusal as {"error": "..."}
        with its status, counted in /metrics and said in one log line."""
        started = time.perf_counter()
        request_id = _request_id(request.headers.get("X-Request-Id"))
        model = request.match_info.get("name", "")
        model = model if model in self.models else ""
        reason = message = ""
        try:
            self._check_key(request)
            response = await handler(request)
        except RequestError as e:
            response = _json_response({"error": str(e)}, e.status)
            reason, message = e.reason, str(e)
        except ClientGone as e:  # nobody to answer: counted and said, not a defect
            response = web.Response(status=499, reason="Client Closed Request")
            reason, message = "client_gone", f"the client closed the connection mid-body ({e})"
        except web.HTTPException as e:  # no such path (404), wrong method (405)
            message = {404: f"no such path {request.path!r}; predict with POST "
                            "/v1/models/NAME:predict",
                       405: f"{request.method} is not allowed on {request.path!r}"}.get(
                e.status, e.reason)
            response = _json_response({"error": message}, e.status)
            reason = {404: "not_found", 405: "method"}.get(e.status, "http")
        except asyncio.CancelledError:  # the drain gave up on it (3.7: an Exception)
            raise
        except Exception as e:  # a defect: said with its traceback, and the server goes on
            log.exception("serve: %s %s %s failed", request_id, request.method, request.path)
            response = _json_response({"error": f"internal error: {type(e).__name__}: {e}"},
                                      500)
            reason, message = "internal", f"{type(e).__name__}: {e}"
        model = request.get("model_name", model)   # /v1/embeddings names it in the body
        response.headers["X-Request-Id"] = request_id
        if response.status == 401:
            response.headers["WWW-Authenticate"] = "Bearer"
        self.metrics.answered(model, response.status, reason)
        if message or self.settings.access_log:
            usage = request.get("usage") or Usage()
            line = (f"serve: {request_id} {request.method} {request.path} {response.status} "
                    f"rows={usage.rows} tokens={usage.tokens} "
                    f"ms={1000 * (time.perf_counter() - started):.1f}")
            if "version" in request:
                line += f" version={request['version']}"
            if message:
                line += f" error: {message}"
            log.info("%s", line)
        return response

    def _check_key(self, request: web.Request) -> None:
        if self.api_keys is None or request.path in OPEN_PATHS:
            return
        authorization = request.headers.get("Authorization")
        if not self.api_keys.allows(authorization):
            raise RequestError(401, 'this server needs an API key: send "Authorization: '
                                    'Bearer KEY" with a key of its --api_key_file'
                               if not authorization else
                               "the Authorization header does not carry one of this "
                               'server\'s API keys (it must be "Bearer KEY")', "auth")

    def _too_large(self, size: Optional[int] = None) -> str:
        return (f"the request body{f' of {size} bytes' if size else ''} is over "
                f"--max_request_bytes={self.settings.max_request_bytes}; send fewer or "
                "shorter instances a request")


    def _versions(self, name: str) -> ModelVersions:
        versions = self.models.get(name)
        if versions is None:
            raise RequestError(404, f"no model named {name!r} here; this server serves "
                                    f"{', '.join(sorted(self.models))}", "not_found")
        return versions

    def _model(self, request: web.Request, hold: bool = False) -> ServedModel:
        """The model version a request names (the newest when it names none);
        `hold`: held until _release (it is not unloaded while it answers)."""
        name = request.match_info["name"]
        versions = self._versions(name)
        version = request.match_info.get("version")
        try:
            return (versions.acquire if hold else versions.model)(
                None if version is None else int(version))
        except LookupError:
            raise RequestError(404, f"model {name!r} has no version {version} loaded; it "
                                    f"serves version {versions.current.number}",
                               "not_found") from None

    # --- predict ------------------------------------------------------------------------

    async def predict(self, request: web.Request) -> web.Response:
        self._model(request)   # 404 before the body is read
        self._refuse_if_draining()
        body = await read_json(request, self.settings.max_request_bytes,
                               self.settings.body_timeout_s, self._too_large)
        # A body completed after the stop signal was not received before it.
        self._refuse_if_draining()
        # The version is taken once the body is read: one switched to meanwhile answers.
        model = self._model(request, hold=True)
        try:
            answers = await self._predict(request, model, self._instances(body))
        finally:
            self.versions.release(model)
        # Which version answered, in the body (beside TF Serving's "predictions") and
        # in a header: while versions switch a client can tell.
        response = _json_response({"predictions": answers,
                                   "model_version": str(model.version)})
        response.headers["X-Model-Version"] = str(model.version)
        return response

    async def _predict(self, request: web.Request, model: ServedModel,
                       instances: list) -> list:
        """The answers to a request's instances (counted in flight meanwhile)."""
        started = time.perf_counter()
        self._enter()
        try:
            parsed = []
            for index, instance in enumerate(instances):
                try:
                    parsed.append(model.predictions.parse(instance))
                except BadInstance as e:
                    raise RequestError(400, f"instances[{index}] {e}", "bad_instance") from None
            request["usage"], request["version"] = Usage(), model.version
            answers = await self._answers(model, parsed, request["usage"])
            self.metrics.instances.labels(model.name).inc(len(instances))
            self.metrics.latency.labels(model.name).observe(time.perf_counter() - started)
            return answers
        finally:
            self._leave()

    async def embeddings(self, request: web.Request) -> web.Response:
        """OpenAI's POST /v1/embeddings for a features export (openai_embeddings.py)."""
        self._refuse_if_draining()
        body = await read_json(request, self.settings.max_request_bytes,
                               self.settings.body_timeout_s, self._too_large)
        self._refuse_if_draining()
        asked = openai_embeddings.parse_request(body, self.settings.max_instances)
        versions = self._versions(asked.model)
        request["model_name"] = asked.model
        model = versions.acquire()
        try:
            if not isinstance(model.predictions, FeaturePredictions):
                raise RequestError(400, f"model {asked.model!r} is not an embedding model (it "
                                        f"is a {model.metadata.task} export); /v1/embeddings "
                                        "serves exports of bert-ad features", "bad_request")
            answers = await self._predict(request, model, asked.texts)
        finally:
            self.versions.release(model)
        vectors = [answer["embedding"] for answer in answers]
        openai_embeddings.check_dimensions(body, len(vectors[0]))
        response = _json_response(openai_embeddings.response(asked, vectors,
                                                              request["usage"].tokens))
        response.headers["X-Model-Version"] = str(model.version)
        return response

    async def _answers(self, model: ServedModel, parsed: list, usage: Usage) -> list:
        """The answers, within --request_timeout_s of the body being read (504
        otherwise: the request leaves the queue, its rows are never scored)."""
        timeout = self.settings.request_timeout_s
        try:
            return await asyncio.wait_for(asyncio.wrap_future(
                model.answer(parsed, self._pool, usage)), timeout)
        except asyncio.TimeoutError:
            raise RequestError(504, f"no answer within --request_timeout_s={timeout:g} "
                                    "seconds (the server is busy, or the request large); "
                                    "its rows were dropped: retry, or send fewer texts a "
                                    "request", "deadline") from None
        except TooManyRows as e:
            raise RequestError(413, f"the request makes {e.rows} rows to score (texts and "
                                    f"windows of up to {model.metadata.max_seq_length} "
                                    f"tokens), over --max_request_rows={e.limit}; send fewer "
                                    "or shorter texts a request", "too_large") from None

    def _refuse_if_draining(self) -> None:
        if self.draining:
            raise RequestError(503, "the server is stopping; send the request to another "
                                    "replica or again once it is back", "draining")

    def _enter(self) -> None:
        self.in_flight += 1
        self.metrics.in_flight.inc()
        self._idle.clear()

    def _leave(self) -> None:
        self.in_flight -= 1
        self.answered += 1
        self.metrics.in_flight.dec()
        if not self.in_flight:
            self._idle.set()

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
        """TF Serving's model status: every version known (the served one, one
        loading, one draining, those unloaded or failed: END), newest first."""
        name, version = request.match_info["name"], request.match_info.get("version")
        listed = self._versions(name).status()
        if version is not None:
            listed = [entry for entry in listed if entry["version"] == str(int(version))]
            if not listed:
                raise RequestError(404, f"model {name!r} has no version {version}",
                                   "not_found")
        if self.draining:
            for entry in listed:
                entry["state"] = "UNLOADING" if entry["state"] == "AVAILABLE" else entry["state"]
        return _json_response({"model_version_status": listed})

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
        """Alive: 200 as long as the process answers, draining included (a
        liveness probe that failed while draining would get it killed)."""
        return _json_response({"status": "draining" if self.draining else "ok",
                               "models": sorted(self.models)})

    async def readyz(self, request: web.Request) -> web.Response:
        """Ready for traffic: models loaded and warmed, not draining."""
        if not self.ready:
            return _json_response({"status": "draining" if self.draining else "starting"},
                                  503)
        return _json_response({"status": "ready", "models": sorted(self.models)})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    # --- running and stopping ------------------------------------------------------------

    async def run(self, listening: socket.socket,
                  ssl_context: Optional[ssl.SSLContext] = None) -> int:
        """Serve on `listening` (bound) until a stop signal; answer what is in
        flight within --drain_timeout_s."""
        loop = asyncio.get_running_loop()
        self._idle = asyncio.Event()
        self._idle.set()
        stop = asyncio.Event()
        received: List[int] = []

        def on_signal(signum: int) -> None:
            if signum == signal.SIGHUP and self.api_keys is not None:
                self.api_keys.reload("SIGHUP")
                return
            received.append(signum)
            stop.set()

        stop_signals = [s for s in SIGNAL_NAMES if signal.getsignal(s) is not signal.SIG_IGN]
        for signum in stop_signals:
            loop.add_signal_handler(signum, on_signal, signum)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            self.settings.tokenizer_threads, thread_name_prefix="bert_ad-tokenize")
        watcher = self.versions.start()
        runner, site_options = _runner(self.application(), HANDLER_GRACE_S)
        await runner.setup()
        try:
            await web.SockSite(runner, listening, ssl_context=ssl_context,
                               **site_options).start()
            self.ready = True   # load_model warmed every model before this
            host, port = listening.getsockname()[:2]
            log.info("serve: listening on %s://%s:%d  (%s)", "https" if ssl_context else "http",
                     host, port, ", ".join(f"POST /v1/models/{name}:predict"
                                           for name in sorted(self.models)))
            await stop.wait()
            self.ready, self.draining = False, True
            if watcher is not None:
                watcher.cancel()
            drain = self.settings.drain_timeout_s
            log.info("serve: stopping on %s: %d request(s) in flight will be answered "
                     "(within --drain_timeout_s=%g), new ones get 503",
                     SIGNAL_NAMES[received[0]], self.in_flight, drain)
            try:
                await asyncio.wait_for(self._idle.wait(), drain)
            except asyncio.TimeoutError:
                log.warning("serve: --drain_timeout_s=%g passed with %d request(s) "
                            "unanswered; closing their connections", drain, self.in_flight)
        finally:
            # Connections still sending a body (not in flight) are closed here.
            await runner.cleanup()
            for signum in stop_signals:
                loop.remove_signal_handler(signum)
            self.versions.close()   # every version loaded, or being loaded
            self._pool.shutdown(wait=True)
        log.info("serve: stopped after answering %d predict request(s)", self.answered)
        return 0


def serve(models: Dict[str, ModelVersions], settings: ServerSettings,
          listening: socket.socket, api_keys: Optional[ApiKeys] = None,
          ssl_context: Optional[ssl.SSLContext] = None) -> int:
    """Run the server until a stop signal; 0 once every received request is
    answered (or the drain's bound passed)."""
    if api_keys is None and not is_loopback(listening):
        log.warning("serve: listening on %s without --api_key_file: anyone who can reach "
                    "this address can use the models; give --api_key_file=FILE (one key a "
                    "line)", listening.getsockname()[0])
    return asyncio.run(Server(models, settings, api_keys).run(listening, ssl_context))
