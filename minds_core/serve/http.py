"""The HTTP face of ``minds serve``: the Tinker API routes the SDK calls, over the ``Engine``.

A threaded stdlib server speaking HTTP/1.1 with keep-alive: every connection gets a
thread, so a ``/retrieve_future`` long-poll never holds up other clients. JSON bodies
are parsed with the SDK's own request models; forward/backward and its results travel
as protobuf (``wire``).
"""

from __future__ import annotations

import hmac
import json
import re
import shutil
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pydantic
import tinker
from tinker import types

from minds_core.backends.local.catalog import Catalog
from minds_core.backends.local.checkpoints import CheckpointStore

from .downloads import DOWNLOADS_PREFIX, Downloads
from .engine import Engine
from .errors import BadRequest, HttpError, NotFound, Unauthorized
from .wire import (
    PROTO_CONTENT_TYPE,
    decode_forward_backward,
    encode_forward_backward,
    encode_sample,
)

__all__ = ["TinkerServer"]

Json = dict[str, Any]
_FINISH = re.compile(r"^/api/v1/sessions/([^/]+)/finish$")
_RUN = re.compile(r"^/api/v1/training_runs/([^/]+)$")
_RUN_CHECKPOINTS = re.compile(r"^/api/v1/training_runs/([^/]+)/checkpoints$")
_CHECKPOINT = re.compile(r"^/api/v1/training_runs/([^/]+)/checkpoints/([^/]+/[^/]+)$")
_EXTERNAL_URLS = re.compile(r"^/api/v1/training_runs/([^/]+)/checkpoints/([^/]+/[^/]+)/external_weights_urls$")


class TinkerServer(ThreadingHTTPServer):
    """Serves ``engine`` on ``(host, port)``; ``api_key`` (when set) must come in every ``X-API-Key``."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], engine: Engine, api_key: str | None) -> None:
        super().__init__(address, _Handler)
        self.engine = engine
        self.rest = engine.service.create_rest_client()  # checkpoint listings, as the in-process RestClient's
        self.downloads = Downloads(Catalog(CheckpointStore(Path(engine.service.checkpoint_root))))
        self.api_key = api_key


def _model(cls: type[pydantic.BaseModel], body: Json) -> Any:
    try:
        return cls.model_validate(body)
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in exc.errors()[:5])
        raise BadRequest(f"Invalid {cls.__name__}: {problems}") from None


def _json_routes(engine: Engine) -> dict[str, Callable[[Json], Any]]:
    """POST path -> handler of the parsed JSON body, returning a pydantic model or a dict."""
    return {
        "/api/v1/client/config": lambda body: types.ClientConfigResponse(
            pjwt_auth_enabled=False, proto_compress_fwdbwd=False
        ),
        "/api/v1/client/dynamic_config": lambda body: types.ClientDynamicConfigResponse(),
        "/api/v1/telemetry": lambda body: {"status": "accepted"},
        "/api/v1/create_session": lambda body: engine.create_session(_model(types.CreateSessionRequest, body)),
        "/api/v1/session_heartbeat": lambda body: engine.heartbeat(str(body.get("session_id", ""))),
        "/api/v1/create_model": lambda body: engine.create_model(_model(types.CreateModelRequest, body)),
        "/api/v1/get_info": lambda body: engine.get_info(_model(types.GetInfoRequest, body)),
        "/api/v1/optim_step": lambda body: engine.optim_step(_model(types.OptimStepRequest, body)),
        "/api/v1/save_weights": lambda body: engine.save_weights(_model(types.SaveWeightsRequest, body)),
        "/api/v1/save_weights_external": lambda body: engine.save_weights_external(
            _model(types.SaveWeightsExternalRequest, body)
        ),
        "/api/v1/save_weights_for_sampler": lambda body: engine.save_weights_for_sampler(
            _model(types.SaveWeightsForSamplerRequest, body)
        ),
        "/api/v1/load_weights": lambda body: engine.load_weights(_model(types.LoadWeightsRequest, body)),
        "/api/v1/create_sampling_session": lambda body: engine.create_sampling_session(
            _model(types.CreateSamplingSessionRequest, body)
        ),
        "/api/v1/asample": lambda body: engine.sample(_model(types.SampleRequest, body)),
    }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms delayed-ACK stalls
    server: TinkerServer

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per request would drown the training logs of a busy client."""

    def do_GET(self) -> None:
        self._handle(self._get)

    def do_POST(self) -> None:
        self._handle(self._post)

    def do_DELETE(self) -> None:
        self._handle(self._delete)

    def _handle(self, route: Callable[[], tuple[int, bytes | Path, str]]) -> None:
        """Answer with ``route()``'s status and body: bytes, or a file (streamed) from a signed download."""
        try:
            if not self.path.startswith(DOWNLOADS_PREFIX):  # a signed download URL stands in for the key: urllib sends none
                self._check_key()
            status, body, content_type = route()
        except HttpError as exc:
            status, body, content_type = exc.status, json.dumps({"detail": exc.detail}).encode(), "application/json"
        except tinker.APIStatusError as exc:  # the local backend's 4xx (catalog lookups)
            status, content_type = exc.status_code, "application/json"
            body = json.dumps({"detail": exc.message}).encode()
        except Exception as exc:  # noqa: BLE001 - a bug: answered as a 500 naming it, the server keeps serving
            detail = f"minds serve failed on {self.path}: {type(exc).__name__}: {exc}"
            status, body, content_type = 500, json.dumps({"detail": detail}).encode(), "application/json"
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(body.stat().st_size if isinstance(body, Path) else len(body)))
        self.end_headers()
        if isinstance(body, Path):
            with open(body, "rb") as source:
                shutil.copyfileobj(source, self.wfile, 1 << 20)
        else:
            self.wfile.write(body)

    def _check_key(self) -> None:
        expected = self.server.api_key
        if expected and not hmac.compare_digest(self.headers.get("X-API-Key", "").encode(), expected.encode()):
            raise Unauthorized("Invalid API key: this minds serve was started with --api-key; send that key")

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _get(self) -> tuple[int, bytes | Path, str]:
        self._body()
        path = self.path.split("?", 1)[0]
        engine = self.server.engine
        if path.startswith(DOWNLOADS_PREFIX):
            return 200, self.server.downloads.file(self.path), "application/octet-stream"
        if path == "/api/v1/healthz":
            return _json({"status": "ok"})
        if path == "/api/v1/get_server_capabilities":
            return _json(engine.capabilities())
        if path == "/api/v1/checkpoints":
            return _json(self.server.rest.list_user_checkpoints(*_page(self.path)).result())
        if path == "/api/v1/training_runs":
            return _json(self.server.rest.list_training_runs(*_page(self.path)).result())
        if (match := _EXTERNAL_URLS.match(path)) is not None:
            host = self.headers.get("Host") or "{}:{}".format(*self.server.server_address[:2])
            return _json(self.server.downloads.urls(match.group(1), match.group(2), f"http://{host}"))
        if (match := _RUN_CHECKPOINTS.match(path)) is not None:
            return _json(self.server.rest.list_checkpoints(match.group(1)).result())
        if (match := _RUN.match(path)) is not None:
            return _json(self.server.rest.get_training_run(match.group(1)).result())
        if path.startswith("/api/v1/samplers/"):
            return _json(engine.get_sampler(path.removeprefix("/api/v1/samplers/")))
        raise NotFound(f"minds serve does not serve GET {path}")

    def _post(self) -> tuple[int, bytes, str]:
        raw = self._body()
        path = self.path.split("?", 1)[0]
        engine = self.server.engine
        if path == "/api/v1/forward_backward":
            if PROTO_CONTENT_TYPE not in self.headers.get("Content-Type", ""):
                raise BadRequest(f"forward_backward takes a protobuf body (Content-Type: {PROTO_CONTENT_TYPE})")
            request, forward_only = decode_forward_backward(raw, self.headers.get("Content-Encoding", ""))
            return _json(engine.forward_backward(request, forward_only))
        body = _parse_json(raw)
        if path == "/api/v1/weights_info":
            return _json(self.server.rest.get_weights_info_by_tinker_path(str(body.get("tinker_path", ""))).result())
        if path == "/api/v1/retrieve_future":
            value = engine.retrieve(str(body.get("request_id", "")))
            return self._result(value)
        if (match := _FINISH.match(path)) is not None:
            engine.finish_session(match.group(1))
            return _json(None)
        route = _json_routes(engine).get(path)
        if route is None:
            raise NotFound(f"minds serve does not serve POST {path} (see `minds serve --help` for what it supports)")
        return _json(route(body))

    def _delete(self) -> tuple[int, bytes, str]:
        self._body()
        path = self.path.split("?", 1)[0]
        if (match := _CHECKPOINT.match(path)) is None:
            raise NotFound(f"minds serve does not serve DELETE {path}")
        self.server.rest.delete_checkpoint(match.group(1), match.group(2)).result()
        return _json(None)

    def _result(self, value: Any) -> tuple[int, bytes, str]:
        wants_proto = PROTO_CONTENT_TYPE in self.headers.get("Accept", "")
        if wants_proto and isinstance(value, types.ForwardBackwardOutput):
            return 200, encode_forward_backward(value), PROTO_CONTENT_TYPE
        if wants_proto and isinstance(value, types.SampleResponse):
            return 200, encode_sample(value), PROTO_CONTENT_TYPE
        return _json(value)


def _page(url: str) -> tuple[int, int]:
    """``limit`` and ``offset`` of a listing's query string (the SDK's defaults when absent)."""
    query = parse_qs(urlsplit(url).query)
    try:
        return int(query.get("limit", ["20"])[0]), int(query.get("offset", ["0"])[0])
    except ValueError:
        raise BadRequest("limit and offset must be integers") from None


def _parse_json(raw: bytes) -> Json:
    try:
        body = json.loads(raw or b"{}")
    except ValueError as exc:
        raise BadRequest(f"The request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("The request body must be a JSON object")
    return body


def _json(value: Any) -> tuple[int, bytes, str]:
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json", exclude_none=True)
    return 200, json.dumps(value).encode(), "application/json"

