"""The wire protocol's edges, spoken directly over HTTP: sessions, heartbeats, ordering, refusals.

These are the parts the SDK relies on but a well-behaved SDK run never shows:
a request that arrives before its predecessor, a finished session's heartbeat, a
body in the wrong format. Requests are built with the SDK's own types and proto converter.
"""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto
from tinker.proto.response_conv import deserialize_forward_backward_output

from .conftest import KEY, Served

pytestmark = pytest.mark.slow

PROTO = "application/x-protobuf"


@pytest.fixture
def http(served: Served):
    with httpx.Client(base_url=served.url, headers={"X-API-Key": KEY}, timeout=60) as client:
        yield client


def _session(http: httpx.Client) -> str:
    body = types.CreateSessionRequest(tags=[], user_metadata={}, sdk_version="test").model_dump(mode="json")
    return http.post("/api/v1/create_session", json=body).json()["session_id"]


def _result(http: httpx.Client, future: dict, proto: bool = False) -> httpx.Response:
    while True:
        response = http.post(
            "/api/v1/retrieve_future", json={"request_id": future["request_id"]}, headers={"Accept": PROTO} if proto else {}
        )
        if response.headers["content-type"] != "application/json" or response.json().get("type") != "try_again":
            return response


def _fwdbwd(model_id: str, seq_id: int, loss_fn: str = "cross_entropy") -> bytes:
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5, 6, 7, 8]), loss_fn_inputs={"target_tokens": np.array([6, 7, 8, 9])}
    )
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn=loss_fn), model_id=model_id, seq_id=seq_id
    )
    return forward_backward_request_to_proto(request).SerializeToString()


def test_requests_of_a_run_execute_in_seq_id_order(http: httpx.Client) -> None:
    session = _session(http)
    create = types.CreateModelRequest(
        session_id=session, model_seq_id=0, base_model="minds-tiny", lora_config=types.LoraConfig(rank=2, seed=0)
    )
    model_id = _result(http, http.post("/api/v1/create_model", json=create.model_dump(mode="json")).json()).json()["model_id"]
    # the optimizer step (seq 2) arrives before the forward_backward (seq 1) it must follow
    step = types.OptimStepRequest(optim_params=types.AdamParams(learning_rate=0.005), model_id=model_id, seq_id=2)
    step_future = http.post("/api/v1/optim_step", json=step.model_dump(mode="json")).json()
    fb_future = http.post(
        "/api/v1/forward_backward", content=_fwdbwd(model_id, 1), headers={"Content-Type": PROTO}
    ).json()
    assert _result(http, step_future).json()["metrics"]["grad_norm:mean"] > 0  # it saw seq 1's gradients
    first = deserialize_forward_backward_output(_result(http, fb_future, proto=True).content)
    again = http.post("/api/v1/forward_backward", content=_fwdbwd(model_id, 3), headers={"Content-Type": PROTO}).json()
    second = deserialize_forward_backward_output(_result(http, again, proto=True).content)
    assert second.metrics["loss:sum"] < first.metrics["loss:sum"]
    repeated = http.post("/api/v1/forward_backward", content=_fwdbwd(model_id, 3), headers={"Content-Type": PROTO})
    assert repeated.status_code == 400 and "seq_id 3" in repeated.json()["detail"]


def test_heartbeats_until_the_session_finishes(http: httpx.Client) -> None:
    session = _session(http)
    assert http.post("/api/v1/session_heartbeat", json={"session_id": session}).json() == {"type": "session_heartbeat"}
    assert http.post(f"/api/v1/sessions/{session}/finish", json={"reason": {"type": "success"}}).status_code == 200
    assert http.post("/api/v1/session_heartbeat", json={"session_id": session}).status_code == 410
    assert http.post("/api/v1/session_heartbeat", json={"session_id": "nope"}).status_code == 404


def test_refusals_say_what_is_wrong(http: httpx.Client) -> None:
    unknown = http.post("/api/v1/no_such_route", json={})
    assert unknown.status_code == 404 and "POST /api/v1/no_such_route" in unknown.json()["detail"]
    json_fb = http.post("/api/v1/forward_backward", json={})
    assert json_fb.status_code == 400 and PROTO in json_fb.json()["detail"]
    bad = http.post("/api/v1/create_model", json={"session_id": "x"})
    assert bad.status_code == 400 and "model_seq_id" in bad.json()["detail"]
    gone = http.post("/api/v1/retrieve_future", json={"request_id": "req-unknown"})
    assert gone.status_code == 404
