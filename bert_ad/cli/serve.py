"""bert-ad serve: fine-tuned models behind an HTTP API, raw text in (docs/serving.md).

    bert-ad serve --model_dir=OUT/export [--port=8501]
    bert-ad serve --model_dir=sentiment=A/export,ner=B/export/1200

TensorFlow Serving's REST API with text in each instance:

    curl -d '{"instances": ["a gorgeous, witty film."]}' \\
      http://127.0.0.1:8501/v1/models/sentiment:predict
    {"predictions": [{"label": "1", "probabilities": {"0": 0.06, "1": 0.94}}]}

--model_dir is an export (written by --do_export) or a model base path such
as OUTPUT_DIR/export, whose newest numbered version is served (a newer one
is loaded and switched to within --poll_s of being published); several
models as NAME=DIR,NAME=DIR (a single one is named --model_name, else after
its folder). Classifier (single-label, multi-label, regression, long-text
windows), token classification, squad and features exports are served, as
SavedModels, frozen graphs or ONNX. Requests are scored in batches of up to
--max_batch_size rows and --max_batch_tokens tokens, one row of each waiting
request in turn; a row waits at most --batch_timeout_ms for the rows of
requests being tokenised, and a lone request not at all. Every wait is
bounded (--body_timeout_s, --request_timeout_s, --drain_timeout_s);
--api_key_file asks for a key, --tls_cert/--tls_key serve HTTPS.
SIGTERM or Ctrl-C answer what was received, then exit 0.

Needs the `serve` extra: pip install "bert_ad[serve]" (aiohttp, prometheus_client).
"""

from __future__ import annotations

import functools
import logging
from typing import Sequence

from absl import flags

from bert_ad.cli import answer_flags
from bert_ad.cli.registry import register_tool
from bert_ad.cli.runner import configure_logging, parse_flags, tool_cli
from bert_ad.errors import fail

log = logging.getLogger("bert_ad")

USAGE = "--model_dir=DIR|NAME=DIR,NAME=DIR [--host=127.0.0.1] [--port=8501] ..."
EXTRA = 'pip install "bert_ad[serve]"'


def define_flags(fv: flags.FlagValues) -> None:
    d = dict(flag_values=fv)
    flags.DEFINE_string("model_dir", None,
                        "An export folder, or a model base path (OUTPUT_DIR/export: its "
                        "newest version), or several as NAME=DIR,NAME=DIR.", **d)
    flags.DEFINE_string("model_name", None,
                        "The name in /v1/models/NAME of a single --model_dir (default: its "
                        "folder's name, passing over a version number and `export`).", **d)
    flags.DEFINE_string("host", "127.0.0.1",
                        "Address to listen on (0.0.0.0: every interface).", **d)
    flags.DEFINE_integer("port", 8501, "Port to listen on (0: any free one, logged).", **d)
    flags.DEFINE_integer("max_batch_size", 32, "Most rows (texts, windows) scored at once.",
                         **d)
    flags.DEFINE_float("batch_timeout_ms", 5.0,
                       "How long a waiting row waits for the rows of requests being "
                       "tokenised while the model is idle (a lone request never waits; 0: "
                       "score what is queued at once).", **d)
    flags.DEFINE_integer("max_request_bytes", 1 << 20,
                         "Larger request bodies are refused (413).", **d)
    flags.DEFINE_integer("max_instances", 256,
                         "More instances in one request are refused (413).", **d)
    flags.DEFINE_integer("tokenizer_threads", 2,
                         "Threads that tokenise requests and make answers (the model "
                         "scores on its own thread).", **d)
    flags.DEFINE_integer("max_batch_tokens", 8192,
                         "Most tokens in one batch, padding included (a batch of long rows "
                         "holds fewer than --max_batch_size; one row always fits).", **d)
    flags.DEFINE_integer("max_request_rows", 512,
                         "More rows (texts and windows of a long text) in one request are "
                         "refused (413).", **d)
    flags.DEFINE_float("body_timeout_s", 30.0,
                       "A request body not received whole within this many seconds is "
                       "refused (408).", **d)
    flags.DEFINE_float("request_timeout_s", 30.0,
                       "A request not answered this many seconds after its body was read "
                       "gets 504 and its rows leave the queue.", **d)
    flags.DEFINE_float("drain_timeout_s", 25.0,
                       "On SIGTERM, how long the requests already received may take to be "
                       "answered before the server exits anyway.", **d)
    flags.DEFINE_string("api_key_file", None,
                        "A file of API keys, one a line: every request but /healthz, "
                        "/readyz and /metrics must send `Authorization: Bearer KEY` (401 "
                        "otherwise); re-read on SIGHUP and when it changes.", **d)
    flags.DEFINE_string("tls_cert", None, "HTTPS: the certificate (PEM, chain after it); "
                        "with --tls_key.", **d)
    flags.DEFINE_string("tls_key", None, "HTTPS: the certificate's private key (PEM).", **d)
    flags.DEFINE_float("poll_s", 1.0,
                       "Seconds between looks for a new version in a model base path "
                       "(OUTPUT_DIR/export): a newer one is loaded, warmed and switched to, "
                       "the old one unloaded once drained (0: never).", **d)
    flags.DEFINE_bool("access_log", False,
                      "Log one line per request (id, status, rows, tokens, ms, version); "
                      "refusals are logged either way.", **d)
    answer_flags.define_flags(fv)


def check_flags(f: flags.FlagValues) -> None:
    """Every flag checked before a model is read (one line naming the flag)."""
    if not f.model_dir:
        fail("--model_dir is required: an export folder (or OUTPUT_DIR/export), or "
             "NAME=DIR,NAME=DIR")
    if not 0 <= f.port <= 65535:
        fail(f"--port={f.port} must be between 0 and 65535 (0: any free one)")
    for name in ("max_batch_size", "max_request_bytes", "max_instances", "tokenizer_threads",
                 "max_batch_tokens", "max_request_rows"):
        if f[name].value < 1:
            fail(f"--{name}={f[name].value} must be at least 1")
    for name in ("batch_timeout_ms", "poll_s"):
        if f[name].value < 0:
            fail(f"--{name}={f[name].value} must be at least 0")
    for name in ("body_timeout_s", "request_timeout_s", "drain_timeout_s"):
        if not f[name].value > 0:
            fail(f"--{name}={f[name].value} must be more than 0 seconds")
    answer_flags.check_flags(f)


def require_serve_extra() -> None:
    """One line naming the extra when aiohttp or prometheus_client is missing."""
    try:
        import aiohttp  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as e:
        fail(f"bert-ad serve needs {e.name}, which is not installed: {EXTRA}")


def main(argv: Sequence[str]) -> int:
    f = parse_flags(define_flags, argv, USAGE, __doc__)
    check_flags(f)
    require_serve_extra()
    configure_logging()
    # The server, and TensorFlow for a TensorFlow export, are imported once the flags
    # are known good.
    from bert_ad.inference.api_keys import ApiKeys
    from bert_ad.inference.listening import bind, tls_context
    from bert_ad.inference.model_versions import ModelVersions
    from bert_ad.inference.served_models import load_export, load_model, parse_model_dirs, \
        versions_folder
    from bert_ad.inference.server import ServerSettings, serve
    specs = parse_model_dirs(f.model_dir, f.model_name or "")
    api_keys = ApiKeys(f.api_key_file) if f.api_key_file else None
    ssl_context = tls_context(f.tls_cert, f.tls_key)
    listening = bind(f.host, f.port)   # a port in use fails before the models load
    options = answer_flags.options_from_flags(f)
    models = {}
    try:
        for spec in specs:
            models[spec.name] = ModelVersions(
                spec.name, load_model(spec, options), versions_folder(spec.directory),
                functools.partial(load_export, spec.name, options=options))
        settings = ServerSettings(
            host=f.host, port=f.port, max_batch_size=f.max_batch_size,
            batch_timeout_ms=f.batch_timeout_ms, max_request_bytes=f.max_request_bytes,
            max_instances=f.max_instances, tokenizer_threads=f.tokenizer_threads,
            max_batch_tokens=f.max_batch_tokens, max_request_rows=f.max_request_rows,
            body_timeout_s=f.body_timeout_s, request_timeout_s=f.request_timeout_s,
            drain_timeout_s=f.drain_timeout_s, access_log=f.access_log, poll_s=f.poll_s)
        return serve(models, settings, listening, api_keys, ssl_context)
    finally:
        listening.close()


cli = tool_cli(main)


register_tool("serve", "fine-tuned models behind an HTTP API (TensorFlow Serving's REST "
              "shape, text in; dynamic batching)", cli=cli, console_script="bert-ad-serve")
