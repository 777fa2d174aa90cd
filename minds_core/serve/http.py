"""The HTTP face of ``minds serve``: the Tinker API routes the SDK calls, over the ``Engine``.

A threaded stdlib server speaking HTTP/1.1 with keep-alive: every connection gets a
thread, so a ``/retrieve_future`` long-poll never holds up other clients. JSON bodies
are parsed with the SDK's own request models; forward/backward and its results travel
as protobuf (``wire``).

Every route the SDK 0.38 ``RestClient`` can call is in ``ROUTES``: it works, or (a feature
with no meaning on one machine) answers a JSON 400 saying what to do instead. Each answer,
error or not, is JSON (or protobuf). The server holds under hostile input (``ServeLimits``):
bodies are capped as they are read (``Content-Length`` or chunked) and as they are decompressed;
a connection is closed when it goes silent, when its request's line and headers have not arrived within
the header timeout (idle kept-alive connections too), or when the request has not arrived whole within the
read timeout (a client dripping it a byte at a time). Connections are bounded in all (within the open-file
limit) and per client address; a full server makes room by closing the connection that has waited longest
for its request, so floods of idle or slow sockets never lock other clients out. Should file descriptors
run out all the same, the accept loop backs off instead of spinning.
"""

from __future__ import annotations

import errno
import hmac
import http.client
import json
import re
import shutil
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pydantic
import tinker
from tinker import types

from minds_core.backends.local.catalog import Catalog
from minds_core.backends.local.refusals import refusal
from minds_core.backends.local.training.checkpoints import CheckpointStore
from minds_core.http.errors import (
    BadRequest,
    HttpError,
    MethodNotAllowed,
    NotAcceptable,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)
from minds_core.http.limits import ServeLimits
from minds_core.inference import routes as inference
from minds_core.inference.errors import ApiError
from minds_core.inference.surface import Surface

from .downloads import DOWNLOADS_PREFIX as DOWNLOADS
from .downloads import Downloads
from .encodings import decode_body
from .engine import Engine
from .listener import connection_room
from .metrics import ServeMetrics
from .served_models import ServedModels
from .wire import (
    PROTO_CONTENT_TYPE,
    decode_forward_backward,
    encode_forward_backward,
    encode_sample,
    parse_forward_backward,
)

__all__ = ["ROUTES", "HttpServer", "TinkerServer"]

Json = dict[str, Any]
#: accept() errors that mean "out of descriptors or memory for now": back off, then try again.
_OUT_OF_RESOURCES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
#: Longest pause between two accept() tries while descriptors are exhausted.
MAX_ACCEPT_BACKOFF_SECONDS = 0.5
#: After refusing a body it did not read, the server reads (and drops) this much of it, so that the
#: client sees the answer instead of a reset connection.
_DRAIN_BYTES = 4 << 20
#: A chunk's size, as HTTP/1.1 writes it: hex digits only (no sign, no "0x", no "_").
_HEX = re.compile(rb"[0-9A-Fa-f]+")


@dataclass
class _Connection:
    """A connection the server holds: where from, and whether (till when) it is waiting for its request."""

    address: str  #: the client's address
    since: float  #: when it began waiting for its current request (time.monotonic)
    deadline: float | None  #: when it is cut off unless its request has arrived; None while its request is answered


class HttpServer(ThreadingHTTPServer):
    """The threaded server under ``minds serve`` and a run's policy endpoint: each connection a thread, each request
    bounded by ``limits``. ``surface`` (when given) answers the inference routes (``minds_core.inference.routes``);
    ``engine`` (``TinkerServer``), the Tinker API's. It serves on ``listener`` (``listener.listen``).

    Connections are held up to ``limits.max_connections`` (fewer where the open-file limit leaves less room:
    ``connection_room``), ``limits.max_connections_per_address`` of them from one address. A full server makes room
    for a new connection by closing the one that has waited longest for its request (silent, or sending it slowly),
    so that idle or slow sockets, however many and however fast they reconnect, never lock other clients out; a
    connection whose request is being answered is never closed for another."""

    daemon_threads = True
    engine: Engine | None = None

    def __init__(self, listener: socket.socket, api_keys: tuple[str, ...], limits: ServeLimits, surface: Surface | None) -> None:
        self.api_keys = api_keys
        self.limits = limits
        self.surface = surface
        self.max_connections = connection_room(limits.max_connections)
        self._header_seconds = min(limits.header_timeout_seconds, limits.read_timeout_seconds)
        self._accept_backoff = 0.0
        self._open: dict[socket.socket, _Connection] = {}
        self._per_address: Counter[str] = Counter()
        self._connections_lock = threading.Lock()
        self._closing = threading.Event()
        traces = Path(self.engine.service.checkpoint_root) / "traces" if self.engine is not None else None
        self.metrics = ServeMetrics([p for _, p, _ in ROUTES] + [r.path for r in inference.ROUTES], self.engine, traces)
        super().__init__(listener.getsockname()[:2], _Handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        self.server_address = listener.getsockname()
        threading.Thread(target=self._cut_overdue, name="minds-serve-deadlines", daemon=True).start()

    def authorized(self, key: str) -> bool:
        """Whether a request sending ``key`` is served: any key without ``api_keys``, else one of them."""
        return not self.api_keys or any(hmac.compare_digest(key.encode(), allowed.encode()) for allowed in self.api_keys)

    def caller(self, key: str) -> str:
        """The client a key stands for (what it created is its own)."""
        return key

    def public(self, detail: str) -> str:
        """An error message as a client may see it."""
        return detail

    # -- what each connection is doing (its handler tells) -----------------------------------
    def await_request(self, connection: socket.socket) -> None:
        """``connection`` waits for a request: its line and headers are due within the header timeout."""
        self._wait(connection, lambda entry, now: now + self._header_seconds, restart=True)

    def await_body(self, connection: socket.socket) -> None:
        """``connection``'s headers arrived: the rest of its request is due within the read timeout of its start."""
        self._wait(connection, lambda entry, now: entry.since + self.limits.read_timeout_seconds, restart=False)

    def answering(self, connection: socket.socket) -> bool:
        """``connection``'s request has arrived and is answered (it is no longer cut off for others); whether it
        already was cut off (its request is then not served: what arrived of it may be cut short)."""
        with self._connections_lock:
            entry = self._open.get(connection)
            if entry is not None:
                entry.deadline = None
        return entry is None

    def _wait(self, connection: socket.socket, due: Callable[[_Connection, float], float], restart: bool) -> None:
        now = time.monotonic()
        with self._connections_lock:
            entry = self._open.get(connection)
            if entry is not None:
                entry.since = now if restart else entry.since
                entry.deadline = due(entry, now)

    # -- holding connections -------------------------------------------------------------
    def _admit(self, connection: socket.socket, address: str) -> bool:
        """Hold ``connection`` if there is room, or room can be made; whether it is held."""
        with self._connections_lock:
            if self._per_address[address] >= self.limits.max_connections_per_address and not self._cut_longest_waiting(address):
                return False
            if len(self._open) >= self.max_connections and not self._cut_longest_waiting(None):
                return False
            self._open[connection] = _Connection(address, time.monotonic(), time.monotonic() + self._header_seconds)
            self._per_address[address] += 1
        return True

    def _cut_longest_waiting(self, address: str | None) -> bool:
        """Cut off the connection (of ``address``, or any) that has waited longest for its request; whether there was
        one. Called with the lock held."""
        waiting = [
            (entry.since, conn)
            for conn, entry in self._open.items()
            if entry.deadline is not None and address in (None, entry.address)
        ]
        if not waiting:
            return False
        self._cut(min(waiting, key=lambda item: item[0])[1])
        return True

    def _cut(self, connection: socket.socket) -> None:
        """Forget ``connection`` and shut its socket: its handler's blocked read returns and it closes. Lock held."""
        self._forget(connection)
        try:
            connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _forget(self, connection: socket.socket) -> None:
        entry = self._open.pop(connection, None)
        if entry is not None:
            self._per_address[entry.address] -= 1
            if not self._per_address[entry.address]:
                del self._per_address[entry.address]

    def _cut_overdue(self) -> None:
        """Cut off the connections whose request is overdue: a client dripping bytes never leaves one silent for long."""
        pause = min(1.0, self._header_seconds / 4)
        while not self._closing.wait(pause):
            now = time.monotonic()
            with self._connections_lock:
                for conn in [conn for conn, entry in self._open.items() if entry.deadline is not None and entry.deadline < now]:
                    self._cut(conn)

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()

    def get_request(self) -> tuple[socket.socket, Any]:
        """accept(); when descriptors run out, wait (longer each time, up to a bound) before the next try."""
        try:
            accepted = super().get_request()
        except OSError as exc:
            if exc.errno in _OUT_OF_RESOURCES:
                self._accept_backoff = min(max(2 * self._accept_backoff, 0.01), MAX_ACCEPT_BACKOFF_SECONDS)
                time.sleep(self._accept_backoff)  # the connection waits in the backlog meanwhile
            raise  # socketserver drops a failed accept and goes back to waiting
        self._accept_backoff = 0.0
        return accepted

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread per connection held (``_admit``); one that finds no room (or no thread to be had) is closed."""
        if not self._admit(request, str(client_address[0])):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except RuntimeError:  # "can't start new thread": memory or a process limit
            self._release(request)
            self.shutdown_request(request)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._release(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that failed outside a request's answer: a client gone (reset, broken pipe, timed out) is
        nothing to report; anything else is one line, not socketserver's traceback on stderr for each (a client
        resetting its connections would flood the log)."""
        error = sys.exc_info()[1]
        if not isinstance(error, OSError):
            print(f"minds serve: a connection from {client_address[0]} failed: {type(error).__name__}: {error}", file=sys.stderr)

    def _release(self, connection: socket.socket) -> None:
        with self._connections_lock:
            self._forget(connection)


class TinkerServer(HttpServer):
    """Serves ``engine`` on ``listener``, the Tinker API and the inference routes over its models; with
    ``api_keys``, each request's key (``X-API-Key``, or ``Authorization: Bearer``) must be one of them."""

    def __init__(self, listener: socket.socket, engine: Engine, api_keys: tuple[str, ...], limits: ServeLimits) -> None:
        self.engine = engine
        self.downloads = Downloads(Catalog(CheckpointStore(Path(engine.service.checkpoint_root))))
        super().__init__(listener, api_keys, limits, Surface(ServedModels(engine), limits))

    def caller(self, key: str) -> str:
        return self.engine.owners.client_of(key)

    def public(self, detail: str) -> str:
        return self.engine.public(detail)


@dataclass
class _Call:
    """What a route gets: the engine, the calling client, the path's parts, the query and the body."""

    engine: Engine
    client: str
    parts: tuple[str, ...]
    url: str
    raw: bytes
    headers: Message
    server: TinkerServer
    #: (model_id, seq_id) of a request in a training run's order, once its body is parsed
    ordered: tuple[str, int] | None = None
    #: the body as JSON once a route has read it (``json()``), for the request's trace to name its session
    parsed: Json | None = None

    def json(self) -> Json:
        if self.parsed is not None:
            return self.parsed
        try:
            body = json.loads(self.raw or b"{}")
        except (ValueError, RecursionError) as exc:
            raise BadRequest(f"The request body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("The request body must be a JSON object")
        self.parsed = body
        return body

    def model(self, cls: type[pydantic.BaseModel]) -> Any:
        try:
            value = cls.model_validate(self.json())
        except pydantic.ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5])
            raise BadRequest(f"Invalid {cls.__name__}: {problems}") from None
        if getattr(value, "model_id", None) is not None and getattr(value, "seq_id", None) is not None:
            self.ordered = (value.model_id, value.seq_id)
        return value

    def page(self) -> tuple[int, int]:
        """``limit`` and ``offset`` of a listing's query string (the SDK's defaults when absent)."""
        query = parse_qs(urlsplit(self.url).query)
        try:
            limit, offset = int(query.get("limit", ["20"])[0]), int(query.get("offset", ["0"])[0])
        except ValueError:
            raise BadRequest("limit and offset must be integers") from None
        if limit < 0 or offset < 0:
            raise BadRequest("limit and offset must be 0 or more")
        return limit, offset


def _forward_backward(call: _Call) -> Any:
    if PROTO_CONTENT_TYPE not in call.headers.get("Content-Type", ""):
        raise BadRequest(f"forward_backward takes a protobuf body (Content-Type: {PROTO_CONTENT_TYPE})")
    message = parse_forward_backward(call.raw)
    call.ordered = (message.model_id, message.seq_id)
    request, forward_only = decode_forward_backward(message, call.engine.limits)
    return call.engine.forward_backward(request, forward_only, call.client)


def _retrieve(call: _Call) -> Any:
    value = call.engine.retrieve(str(call.json().get("request_id", "")), call.client)
    if not isinstance(value, (types.ForwardBackwardOutput, types.SampleResponse)):
        return value
    if PROTO_CONTENT_TYPE not in call.headers.get("Accept", ""):  # the SDK always asks; they have no JSON form here
        raise NotAcceptable(
            f"The result of {call.json().get('request_id')!r} is a {type(value).__name__}, served as protobuf only: "
            f"retrieve it again with Accept: {PROTO_CONTENT_TYPE} (the Tinker SDK sends that)"
        )
    encode = encode_forward_backward if isinstance(value, types.ForwardBackwardOutput) else encode_sample
    return 200, encode(value), PROTO_CONTENT_TYPE


def _external_weights_urls(call: _Call) -> Any:
    """Signed URLs of an external-weights checkpoint's files (the URL, not a key, lets urllib fetch each)."""
    run_id, checkpoint_id = call.parts
    call.engine.weights_info(f"tinker://{run_id}/{checkpoint_id}", call.client)  # 404 unless the caller's
    host = call.headers.get("Host") or "{}:{}".format(*call.server.server_address[:2])
    return call.server.downloads.urls(run_id, checkpoint_id, f"http://{host}")


def _set_ttl(call: _Call) -> Any:
    """``{"ttl_seconds": seconds or null}``: the checkpoint expires that long from now, or never."""
    body = call.json()
    if "ttl_seconds" not in body:
        raise BadRequest('Setting a checkpoint\'s ttl takes {"ttl_seconds": <seconds from now, or null to never expire>}')
    return call.engine.set_checkpoint_ttl(*call.parts, body["ttl_seconds"], call.client)


def _unsupported(why: str) -> Callable[[_Call], Any]:
    def refuse(call: _Call) -> Any:
        raise BadRequest(f"minds serve does not support this: {why}")

    return refuse


def _refused(sdk_call: str) -> Callable[[_Call], Any]:
    """The route of an SDK call with no local meaning: 400 in the words the in-process client fails with."""

    def refuse(call: _Call) -> Any:
        raise BadRequest(refusal(sdk_call))

    return refuse


_RUN = r"/api/v1/training_runs/([^/]+)"
_CHECKPOINT = _RUN + r"/checkpoints/((?:weights|sampler_weights|external_weights)/[^/]+)"
_SESSION = r"/api/v1/sessions/([^/]+)"

#: (method, path pattern, handler): every route the SDK's clients call.
ROUTES: list[tuple[str, str, Callable[[_Call], Any]]] = [
    ("GET", "/api/v1/healthz", lambda c: {"status": "ok"}),
    ("GET", "/metrics", lambda c: c.server.metrics.answer()),
    ("GET", "/api/v1/get_server_capabilities", lambda c: c.engine.capabilities()),
    ("POST", "/api/v1/client/config", lambda c: types.ClientConfigResponse(pjwt_auth_enabled=False, proto_compress_fwdbwd=False)),
    ("POST", "/api/v1/client/dynamic_config", lambda c: types.ClientDynamicConfigResponse()),
    ("POST", "/api/v1/telemetry", lambda c: {"status": "accepted"}),
    ("POST", "/api/v1/auth/token", _unsupported("it authenticates with X-API-Key only (--api-key), not tokens")),
    # sessions
    ("POST", "/api/v1/create_session", lambda c: c.engine.create_session(c.model(types.CreateSessionRequest), c.client)),
    ("POST", "/api/v1/session_heartbeat", lambda c: c.engine.heartbeat(str(c.json().get("session_id", "")), c.client)),
    ("POST", _SESSION + "/finish", lambda c: c.engine.finish_session(c.parts[0], c.client)),
    ("GET", "/api/v1/sessions", lambda c: c.engine.list_sessions(*c.page(), c.client)),
    ("GET", _SESSION, lambda c: c.engine.get_session(c.parts[0], c.client)),
    ("POST", "/api/v1/sessions/search", _unsupported("session search; list_sessions and get_session work")),
    ("PUT", _SESSION + "/project", _refused("assign_session_project")),
    ("GET", _SESSION + "/trace_export", _refused("export_session_trace")),
    # training
    ("POST", "/api/v1/create_model", lambda c: c.engine.create_model(c.model(types.CreateModelRequest), c.client)),
    ("POST", "/api/v1/get_info", lambda c: c.engine.get_info(c.model(types.GetInfoRequest), c.client)),
    ("POST", "/api/v1/forward_backward", _forward_backward),
    ("POST", "/api/v1/optim_step", lambda c: c.engine.optim_step(c.model(types.OptimStepRequest), c.client)),
    ("POST", "/api/v1/create_custom_loss", _unsupported("server-side custom losses; forward_backward_custom computes them client-side")),
    ("POST", "/api/v1/save_weights", lambda c: c.engine.save_weights(c.model(types.SaveWeightsRequest), c.client)),
    (
        "POST",
        "/api/v1/save_weights_external",
        lambda c: c.engine.save_weights_external(c.model(types.SaveWeightsExternalRequest), c.client),
    ),
    (
        "POST",
        "/api/v1/save_weights_for_sampler",
        lambda c: c.engine.save_weights_for_sampler(c.model(types.SaveWeightsForSamplerRequest), c.client),
    ),
    ("POST", "/api/v1/load_weights", lambda c: c.engine.load_weights(c.model(types.LoadWeightsRequest), c.client)),
    ("POST", "/api/v1/copy_weights", _refused("copy_weights")),
    # sampling
    (
        "POST",
        "/api/v1/create_sampling_session",
        lambda c: c.engine.create_sampling_session(c.model(types.CreateSamplingSessionRequest), c.client),
    ),
    ("POST", "/api/v1/join_sampling_session", _unsupported("joining sampling sessions; create a sampling client instead")),
    ("POST", "/api/v1/asample", lambda c: c.engine.sample(c.model(types.SampleRequest), c.client)),
    ("GET", r"/api/v1/samplers/([^/]+)", lambda c: c.engine.get_sampler(c.parts[0], c.client)),
    # results
    ("POST", "/api/v1/retrieve_future", _retrieve),
    ("POST", "/api/v1/retrieve_futures", _unsupported("batched result polling; poll /api/v1/retrieve_future")),
    # checkpoints and runs (the RestClient)
    ("GET", "/api/v1/checkpoints", lambda c: c.engine.user_checkpoints(*c.page(), c.client)),
    ("GET", "/api/v1/training_runs", lambda c: c.engine.training_runs(*c.page(), c.client)),
    ("GET", _RUN, lambda c: c.engine.training_run(c.parts[0], c.client)),
    ("GET", _RUN + "/checkpoints", lambda c: c.engine.run_checkpoints(c.parts[0], c.client)),
    ("DELETE", _CHECKPOINT, lambda c: c.engine.delete_checkpoint(c.parts[0], c.parts[1], c.client)),
    ("GET", _CHECKPOINT + "/external_weights_urls", _external_weights_urls),
    ("GET", DOWNLOADS + r"(.+)", lambda c: (200, c.server.downloads.file(c.url), "application/octet-stream")),
    ("PUT", _CHECKPOINT + "/ttl", _set_ttl),
    ("POST", _CHECKPOINT + "/publish", _refused("publish_checkpoint_from_tinker_path")),
    ("DELETE", _CHECKPOINT + "/publish", _refused("unpublish_checkpoint_from_tinker_path")),
    ("POST", "/api/v1/weights_info", lambda c: c.engine.weights_info(str(c.json().get("tinker_path", "")), c.client)),
    # the AdminClient's (RestClient's deprecated audit and billing calls reach these)
    ("GET", "/api/v1/audit", _unsupported("audit logs; it keeps none")),
    ("GET", r"/api/v1/billing/usage/(.+)", _unsupported("billing; nothing is billed")),
]
_COMPILED = [(method, re.compile(f"^{pattern}$"), handler) for method, pattern, handler in ROUTES]


#: Statuses the SDK retries with the same seq_id: a request refused with one keeps its place in its run's order.
_RETRIED = {408, 409, 429}
#: What to do about each refusal http.server makes itself, before a request reaches the routes.
_PROTOCOL_HINTS = {
    400: "send a request line of the form METHOD /path HTTP/1.1",
    414: "the request line is over 65536 bytes: send the data in the body",
    501: "minds serve answers GET, POST, PUT, DELETE and PATCH",
    505: "send HTTP/1.1 (or HTTP/1.0)",
}


class _HungUp(Exception):
    """The client went silent or away in the middle of a request: the connection is closed, nothing answered."""


class _HeaderBudget:
    """A request's reader while its headers are read: past ``left`` bytes in all, ``http.client.LineTooLong``, which
    http.server answers 431 (each line is read only up to what is left, so no more is ever held)."""

    def __init__(self, source: Any, left: int) -> None:
        self.source, self.left = source, left

    def readline(self, size: int = -1) -> bytes:
        wanted = self.left + 1 if size < 0 else min(size, self.left + 1)
        line = self.source.readline(wanted)
        self.left -= len(line)
        if self.left < 0:
            raise http.client.LineTooLong("headers past max_header_bytes")
        return line


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stalls
    server: TinkerServer

    def setup(self) -> None:
        self.timeout = self.server.limits.read_timeout_seconds  # applied to the socket: reads and writes
        self._answered = 0  # requests on this connection so far
        super().setup()

    def handle_one_request(self) -> None:
        """One request: its line and headers must arrive within ``header_timeout_seconds``, all of it within
        ``read_timeout_seconds``; after ``max_requests_per_connection`` of them the connection closes."""
        self.server.await_request(self.connection)
        try:
            super().handle_one_request()
        finally:
            self.server.answering(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would drown the training logs of a busy client."""

    def do_GET(self) -> None:
        self._status, self._call = 0, None
        body = lambda: self._call.parsed if self._call else None
        with self.server.metrics.track(self.command, urlsplit(self.path).path, lambda: self._status, body):
            self._handle()

    def log_request(self, code: Any = "-", size: Any = "-") -> None:
        """Remember the status answered, which ``metrics.track`` counts (and log nothing, as ``log_message``)."""
        self._status = int(code)

    do_POST = do_PUT = do_DELETE = do_PATCH = do_GET

    def _handle(self) -> None:
        self._body_read = False
        self._call: _Call | None = None
        self._answered += 1
        path = urlsplit(self.path).path
        self.server.await_body(self.connection)
        try:
            # a signed download URL stands in for the key (urllib sends none); a scraper on loopback needs none
            if not path.startswith(DOWNLOADS) and not self.server.metrics.open_to(path, self.client_address):
                self._check_key()
            raw = self._read_body()
            if self.server.answering(self.connection):  # cut off while it dripped in: a torn request
                raise _HungUp
            route = inference.find(path) if self.server.surface is not None else None
            if route is not None:
                return self._inference(route, raw)
            status, body, content_type = self._route(path, raw)
        except _HungUp:
            self.close_connection = True
            return
        except (HttpError, tinker.APIStatusError) as exc:
            status = exc.status if isinstance(exc, HttpError) else exc.status_code
            if self._call is not None and self._call.ordered and status < 500 and status not in _RETRIED:
                self.server.engine.refused(*self._call.ordered, self._call.client)
            self._send_detail(status, exc.detail if isinstance(exc, HttpError) else exc.message)
            return
        except Exception as exc:  # noqa: BLE001 - a bug: answered as a 500 naming it, the server keeps serving
            self._send_detail(500, f"minds serve failed on {self.command} {path}: {type(exc).__name__}: {exc}")
            return
        self._send(status, body, content_type)

    def parse_request(self) -> bool:
        """http.server's parsing, less HTTP/0.9 (no status line, no headers: nothing a Tinker client reads), with the
        headers read through ``_HeaderBudget``: a client can make the server hold and parse ``max_header_bytes`` of
        them at most (http.server alone takes 100 lines of 64 KiB, 6.4 MB, and its parser needs some 5 times that)."""
        source = self.rfile
        self.rfile = _HeaderBudget(source, self.server.limits.max_header_bytes)
        try:
            parsed = super().parse_request()
        finally:
            self.rfile = source
        if not parsed:
            return False
        if self.request_version == "HTTP/0.9":
            self.send_error(HTTPStatus.BAD_REQUEST, f"Bad request line {self.requestline[:200]!r}: no HTTP version")
            return False
        return True

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own refusals (a malformed request line, headers past its limits) as JSON, not an HTML page."""
        self._body_read = False  # whatever follows the request line is not read: the connection closes
        reason = message or HTTPStatus(code).phrase
        hint = _PROTOCOL_HINTS.get(code, "send a well-formed HTTP/1.1 request")
        if code == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE:
            reason, hint = "Request headers too large", (
                f"send at most 100 headers, of at most 65536 bytes each and {self.server.limits.max_header_bytes} bytes "
                "in all (this server's max_header_bytes; minds serve --max-header-bytes raises it)"
            )
        self._send_detail(code, f"{reason[:300]}: {hint}")

    def _send_detail(self, status: int, detail: str) -> None:
        """An error answer: ``{"detail": ...}``, the shape of every error this server sends, server paths hidden."""
        if self.request_version == "HTTP/0.9":  # a request line too broken to name a version still gets a status line
            self.request_version = "HTTP/1.0"
        route = inference.find(urlsplit(getattr(self, "path", "")).path) if self.server.surface is not None else None
        error: dict[str, Any] = {"detail": self.server.public(detail)}
        if route is not None:
            error = inference.error_body(route.family, ApiError(status, self.server.public(detail)))
        body = json.dumps(error).encode()
        self._send(status, body, "application/json")

    def _route(self, path: str, raw: bytes) -> tuple[int, bytes | Path, str]:
        if self.server.engine is None:  # a run's policy endpoint: the inference routes only
            raise NotFound(
                f"this endpoint serves the inference routes only ({', '.join(r.path for r in inference.ROUTES)}), not {path}"
            )
        allowed = []
        for method, pattern, handler in _COMPILED:
            match = pattern.match(path)
            if match is None:
                continue
            if method != self.command:
                allowed.append(method)
                continue
            client = self.server.caller(inference.request_key(self.headers))  # the key _check_key let in
            self._call = _Call(self.server.engine, client, match.groups(), self.path, raw, self.headers, self.server)
            value = handler(self._call)
            return value if isinstance(value, tuple) else _json(value)
        if allowed:
            raise MethodNotAllowed(f"minds serve serves {path} with {' and '.join(allowed)} only, not {self.command}")
        raise NotFound(f"minds serve does not serve {self.command} {path} (the routes it serves: minds_core.serve.http.ROUTES)")

    def _inference(self, route: inference.Route, raw: bytes) -> None:
        """An inference route: its JSON answer, or its events as ``text/event-stream`` (the connection then closes)."""
        assert self.server.surface is not None
        caller = self.server.caller(inference.request_key(self.headers))
        status, answer = inference.answer(self.server.surface, route, self.command, raw, caller)
        if not isinstance(answer, inference.Stream):
            self._send(status, json.dumps(answer).encode(), "application/json")
            return
        self.close_connection = True  # no Content-Length: the end of the stream is the end of the connection
        try:
            self.send_response(status)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            for event in answer.events:
                self.wfile.write(event.encode())
            self.wfile.flush()
        except OSError:  # the client went away
            pass

    def _send(self, status: int, body: bytes | Path, content_type: str) -> None:
        """Answer with ``body``: bytes, or a file (streamed: a signed download)."""
        if not self._body_read:  # what is left of the body would be read as the next request
            self.close_connection = True
        if self._answered >= self.server.limits.max_requests_per_connection:
            self.close_connection = True
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(body.stat().st_size if isinstance(body, Path) else len(body)))
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            if isinstance(body, Path):
                with open(body, "rb") as source:
                    shutil.copyfileobj(source, self.wfile, 1 << 20)
            else:
                self.wfile.write(body)
            self.wfile.flush()
            if not self._body_read:
                self._drain()
        except OSError:  # the client went away (or stopped reading past the timeout)
            self.close_connection = True

    def _drain(self) -> None:
        """Read and drop a little of a refused body, so the client reads the answer rather than a reset."""
        self.connection.shutdown(socket.SHUT_WR)
        self.connection.settimeout(1.0)
        dropped = 0
        while dropped < _DRAIN_BYTES and (piece := self.connection.recv(1 << 16)):
            dropped += len(piece)

    def _check_key(self) -> None:
        if not self.server.authorized(inference.request_key(self.headers)):
            raise Unauthorized(
                "Invalid API key: this server takes only the keys it was given (minds serve: --api-key); send one, "
                "as X-API-Key or Authorization: Bearer"
            )

    def _read_body(self) -> bytes:
        """The request body, refused (413) as soon as it passes ``max_body_bytes``; its Content-Encoding undone."""
        limit = self.server.limits.max_body_bytes
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            body = self._read_chunked(limit)
        else:
            given = self.headers.get("Content-Length") or "0"
            if not (given.isascii() and given.isdigit()):  # "²" is a digit to str.isdigit, not to int()
                raise BadRequest(f"Content-Length {given!r} is not a byte count")
            if int(given) > limit:
                raise _too_large(f"Content-Length {given}", limit)
            body = self._read_exactly(int(given))
        self._body_read = True
        return decode_body(body, self.headers.get("Content-Encoding", ""), self.server.limits.max_decompressed_bytes)

    def _read_chunked(self, limit: int) -> bytes:
        pieces, size = [], 0
        while True:
            line = self._read_line()
            size_field = line.split(b";", 1)[0].strip()
            if not _HEX.fullmatch(size_field):  # int() takes "-1", which read() takes as "all there is": no cap
                raise BadRequest(f"Bad chunk size line {line[:40]!r} in a chunked body: send hex digits")
            length = int(size_field, 16)
            if length == 0:
                while self._read_line() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(pieces)
            size += length
            if size > limit:
                raise _too_large("The chunked body", limit)
            pieces.append(self._read_exactly(length))
            self._read_line()  # the CRLF after the chunk

    def _read_line(self) -> bytes:
        try:
            line = self.rfile.readline(1024)
        except OSError:
            raise _HungUp from None
        if not line.endswith(b"\n"):
            raise _HungUp
        return line

    def _read_exactly(self, length: int) -> bytes:
        """``length`` bytes, in pieces; a client that stops sending is cut off (one that drips them past the read
        timeout in all has its socket shut by the server's deadline thread: the read ends)."""
        pieces, left = [], length
        while left:
            try:
                piece = self.rfile.read(min(left, 1 << 20))
            except OSError:
                raise _HungUp from None
            if not piece:
                raise _HungUp
            pieces.append(piece)
            left -= len(piece)
        return b"".join(pieces)


def _too_large(what: str, limit: int) -> PayloadTooLarge:
    return PayloadTooLarge(
        f"{what} is past this server's max_body_bytes of {limit}: send smaller requests "
        "(the SDK splits forward_backward into chunks), or start minds serve with a larger --max-body-bytes"
    )


def _json(value: Any) -> tuple[int, bytes, str]:
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json", exclude_none=True)
    return 200, json.dumps(value).encode(), "application/json"
