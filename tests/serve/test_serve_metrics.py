"""``GET /metrics`` of a real ``minds serve`` (Prometheus' text format, read by prometheus_client's own parser),
open without a key on loopback only, and the per-session traces of served requests."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import tinker
from prometheus_client.parser import text_string_to_metric_families

from minds_core.base.tracing import read_trace
from minds_core.serve.metrics import ServeMetrics

from .conftest import KEY, Served, start_server

pytestmark = pytest.mark.slow  # a real `minds serve` process, started for this module


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Served, Path]]:
    root = tmp_path_factory.mktemp("metrics")
    served = start_server(root, "--model", "minds-tiny", "--api-key", KEY)
    yield served, root / "ckpt"
    assert served.stop() == 0


def _get(url: str, key: str | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, headers={"X-API-Key": key} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _samples(served: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, body = _get(f"{served.url}/metrics")
    assert status == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body.decode())
        for sample in family.samples
    }


def _count(samples: dict, route: str, status: str) -> float:
    return samples.get(("minds_serve_requests_total", (("route", route), ("status", status))), 0.0)


def test_metrics_count_exactly_the_requests_sent(server: tuple[Served, Path]) -> None:
    served, _ = server
    before = _samples(served)
    for _ in range(7):
        assert _get(f"{served.url}/api/v1/healthz", KEY)[0] == 200
    for _ in range(3):
        assert _get(f"{served.url}/api/v1/healthz", "wrong-key")[0] == 401
    assert _get(f"{served.url}/api/v1/sessions/abc", KEY)[0] == 404  # counted under its route, not its path
    after = _samples(served)
    assert _count(after, "GET /api/v1/healthz", "200") - _count(before, "GET /api/v1/healthz", "200") == 7
    assert _count(after, "GET /api/v1/healthz", "401") - _count(before, "GET /api/v1/healthz", "401") == 3
    assert _count(after, "GET /api/v1/sessions/([^/]+)", "404") - _count(before, "GET /api/v1/sessions/([^/]+)", "404") == 1
    assert _count(after, "GET /metrics", "200") - _count(before, "GET /metrics", "200") == 1  # the scrape before
    latency = ("minds_serve_request_seconds_count", (("route", "GET /api/v1/healthz"),))
    assert after[latency] - before.get(latency, 0.0) == 10
    assert after[("minds_serve_in_flight_requests", ())] == 1  # the scrape itself
    assert after[("minds_serve_memory_bytes", (("kind", "rss"),))] > 10e6


def test_sampling_shows_in_sessions_samplers_tokens_and_its_sessions_trace(server: tuple[Served, Path]) -> None:
    served, root = server
    before = _samples(served)
    client = tinker.ServiceClient(base_url=served.url, api_key=KEY)
    try:
        sampler = client.create_sampling_client(base_model="minds-tiny").result()
        params = tinker.types.SamplingParams(max_tokens=5, temperature=1.0, seed=1)
        result = sampler.sample(tinker.types.ModelInput.from_ints([5, 6, 7]), 3, params).result(timeout=120)
        during = _samples(served)
    finally:
        client.close("success").result(timeout=30)
    sampled = sum(len(s.tokens) for s in result.sequences)
    assert during[("minds_serve_tokens_sampled_total", ())] - before.get(("minds_serve_tokens_sampled_total", ()), 0.0) == sampled
    assert during[("minds_serve_sessions", ())] >= 1 and during[("minds_serve_samplers", ())] >= 1
    assert _count(during, "POST /api/v1/asample", "200") - _count(before, "POST /api/v1/asample", "200") == 1
    traces = {path.name: read_trace(path) for path in (root / "traces").glob("*.json")}
    sessions = {name: events for name, events in traces.items() if name != "server.json"}
    assert sessions, traces.keys()
    samples = [e for events in sessions.values() for e in events if e.get("name") == "POST /api/v1/asample"]
    assert len(samples) == 1 and samples[0]["args"]["status"] == 200 and samples[0]["ts"] > 1.6e15  # wall-clock µs
    assert "GET /api/v1/healthz" in {e.get("name") for e in traces["server.json"]}  # no session: the server's trace


def test_metrics_need_a_key_unless_read_from_loopback() -> None:
    assert ServeMetrics.open_to("/metrics", ("127.0.0.1", 5000)) and ServeMetrics.open_to("/metrics", ("::1", 5000, 0, 0))
    assert not ServeMetrics.open_to("/metrics", ("10.1.2.3", 5000))
    assert not ServeMetrics.open_to("/api/v1/healthz", ("127.0.0.1", 5000))
