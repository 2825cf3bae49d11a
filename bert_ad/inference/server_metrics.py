"""bert-ad serve's /metrics: Prometheus figures in a registry of the server's own.

Every request is counted once under its status (`requests_total{model,code}`;
a client that closed its connection mid-body as 499, nginx's "client closed
request"), and every refusal once more under its class
(`refusals_total{model,reason}`: bad_body, too_large, body_timeout,
deadline, auth, not_found, draining, client_gone, internal, ...).
"""

from __future__ import annotations

from typing import Dict

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Rows and tokens a batch holds, and seconds a request takes, as Prometheus buckets.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
TOKEN_BUCKETS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                   10.0, 30.0)


class Metrics:
    """The /metrics figures, in a registry of this server's own."""

    def __init__(self, models: Dict[str, object]):
        self.registry = CollectorRegistry()
        r = dict(registry=self.registry)
        self.requests = Counter("bert_ad_serve_requests", "HTTP requests answered, by model "
                                "and status code (499: the client closed the connection "
                                "before its body was read)", ["model", "code"], **r)
        self.errors = Counter("bert_ad_serve_request_errors", "requests answered with a 4xx "
                              "or 5xx status, by model and code", ["model", "code"], **r)
        self.refusals = Counter("bert_ad_serve_refusals", "requests not answered with "
                                "predictions, by model and class", ["model", "reason"], **r)
        self.instances = Counter("bert_ad_serve_instances", "instances predicted", ["model"],
                                 **r)
        self.latency = Histogram("bert_ad_serve_request_seconds", "time from a predict "
                                 "request's arrival to its answer", ["model"],
                                 buckets=LATENCY_BUCKETS, **r)
        self.batch_rows = Histogram("bert_ad_serve_batch_rows", "feature rows scored in one "
                                    "batch", ["model"], buckets=BATCH_BUCKETS, **r)
        self.batch_tokens = Histogram("bert_ad_serve_batch_tokens", "tokens scored in one "
                                      "batch, padding included", ["model"],
                                      buckets=TOKEN_BUCKETS, **r)
        self.batch_seconds = Histogram("bert_ad_serve_batch_seconds", "time to pad and score "
                                       "one batch", ["model"], buckets=LATENCY_BUCKETS, **r)
        self.queued = Gauge("bert_ad_serve_queued_rows", "feature rows waiting to be scored",
                            ["model"], **r)
        self.in_flight = Gauge("bert_ad_serve_in_flight_requests", "predict requests whose "
                               "body is read and which are not answered yet", **r)
        self.version = Gauge("bert_ad_serve_model_version", "the version that answers "
                             "requests (--poll_s switches to newer ones)", ["model"], **r)
        for name, versions in models.items():   # read through: a new version is counted too
            self.queued.labels(name).set_function(lambda v=versions: _queued_rows(v))
            self.version.labels(name).set_function(lambda v=versions: v.current.number)

    def on_batch(self, model: str):
        def record(rows: int, tokens: int, seconds: float) -> None:
            self.batch_rows.labels(model).observe(rows)
            self.batch_tokens.labels(model).observe(tokens)
            self.batch_seconds.labels(model).observe(seconds)
        return record

    def answered(self, model: str, status: int, reason: str = "") -> None:
        self.requests.labels(model, str(status)).inc()
        if status >= 400:
            self.errors.labels(model, str(status)).inc()
        if reason:
            self.refusals.labels(model, reason).inc()


def _queued_rows(versions) -> int:
    """Rows waiting in every loaded version's queue (an old one drains its own)."""
    return sum(m.batcher.queued_rows for m in versions.loaded_models() if m.batcher)
