"""``minds serve`` under malformed HTTP, spoken over raw sockets and the SDK: every answer is JSON ``{"detail"}``.

A Tinker client reads every error body as JSON; an HTML page (http.server's own ``send_error``) reaches it
as an undecodable body instead of the reason. Each case here is answered with the status, a detail that
names what was wrong and how to fix it, and the server goes on serving.
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import time
import zlib
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
import tinker
import zstandard
from tinker import types
from tinker.proto.response_conv import deserialize_sample_response

from .conftest import KEY, Served, start_server

pytestmark = pytest.mark.slow


def _raw(served: Served, data: bytes) -> tuple[int, str, dict]:
    """Send ``data`` as it is on a fresh socket; the status, the Content-Type and the JSON body of the answer."""
    address = urlsplit(served.url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as conn:
        conn.sendall(data)
        answer = b""
        while b"\r\n\r\n" not in answer:
            piece = conn.recv(65536)
            assert piece, f"the server closed without an answer: {answer!r}"
            answer += piece
        header, rest = answer.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"(?i)Content-Length: (\d+)", header).group(1))
        while len(rest) < length:
            rest += conn.recv(65536)
    content_type = re.search(rb"(?i)Content-Type: ([^\r\n]+)", header).group(1).decode()
    return int(header.split()[1]), content_type, json.loads(rest[:length])


@pytest.mark.parametrize(
    ("request_bytes", "status", "words"),
    [
        (b"GARBAGE\r\n\r\n", 400, "request line"),
        (b"POST /api/v1/healthz HTTP/1.1 extra\r\n\r\n", 400, "request line"),
        (b"GET /api/v1/healthz\r\n\r\n", 400, "no HTTP version"),
        (b"GET /api/v1/healthz HTTP/9.9\r\n\r\n", 505, "HTTP/1.1"),
        (b"GET /api/v1/healthz HTTP/x.y\r\n\r\n", 400, "HTTP/1.1"),
        (b"GET /" + b"a" * 70000 + b" HTTP/1.1\r\n\r\n", 414, "65536"),
        (b"GET /api/v1/healthz HTTP/1.1\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n", 431, "headers"),
        (b"GET /api/v1/healthz HTTP/1.1\r\n" + b"X-Many: 1\r\n" * 150 + b"\r\n", 431, "headers"),
        (b"GET /api/v1/healthz HTTP/1.1\r\n" + (b"X-Big: " + b"a" * 8000 + b"\r\n") * 20 + b"\r\n", 431, "65536 bytes in all"),
        # the headers are refused as soon as they pass the bound, not held (and parsed) while the rest arrives
        (b"GET /api/v1/healthz HTTP/1.1\r\n" + (b"X-Big: " + b"a" * 8000 + b"\r\n") * 20, 431, "max_header_bytes"),
        (b"BREW /api/v1/healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n", 501, "GET, POST"),
        # a chunk of size -1 was read to the end of the stream, past max_body_bytes (300 MB held, then a 500)
        (b"POST /api/v1/create_session HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n" + b"a" * 65536, 400, "hex digits"),
        (b"POST /api/v1/create_session HTTP/1.1\r\nContent-Length: \xb2\r\n\r\nab", 400, "not a byte count"),
    ],
    ids=[
        "no-words", "four-words", "http-0.9", "version-9.9", "version-garbage", "uri-too-long", "header-too-long",
        "too-many-headers", "headers-too-large", "headers-too-large-unfinished", "method", "negative-chunk",
        "unicode-digit-length",
    ],  # fmt: skip
)
def test_malformed_http_is_answered_json(served: Served, request_bytes: bytes, status: int, words: str) -> None:
    got, content_type, body = _raw(served, request_bytes)
    assert (got, content_type) == (status, "application/json"), body
    assert set(body) == {"detail"} and words in body["detail"], body
    assert httpx.get(f"{served.url}/api/v1/healthz", headers={"X-API-Key": KEY}).json() == {"status": "ok"}


def test_a_compressed_body_is_decoded_or_refused_with_415(served: Served) -> None:
    session = {"tags": [], "user_metadata": {}, "sdk_version": "test"}
    plain = json.dumps(session).encode()
    packer = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    bodies = {
        "gzip": gzip.compress(plain),
        "deflate": zlib.compress(plain),
        "zstd": zstandard.ZstdCompressor().compress(plain),
        "Deflate": packer.compress(plain) + packer.flush(),  # raw deflate; the coding's name is case-insensitive
    }
    with httpx.Client(base_url=served.url, headers={"X-API-Key": KEY}, timeout=60) as http:
        for encoding, body in bodies.items():
            answer = http.post("/api/v1/create_session", content=body, headers={"Content-Encoding": encoding})
            assert answer.status_code == 200 and answer.json()["session_id"], (encoding, answer.text)
        brotli = http.post("/api/v1/create_session", content=plain, headers={"Content-Encoding": "br"})
        assert brotli.status_code == 415 and brotli.headers["content-type"] == "application/json"
        assert "Content-Encoding 'br' is not supported" in brotli.json()["detail"]
        bomb = http.post(
            "/api/v1/create_session", content=gzip.compress(bytes(256 << 20)), headers={"Content-Encoding": "gzip"}
        )  # 256 KiB sent, 256 MiB once decompressed: past the default 128 MiB
        assert bomb.status_code == 413 and "max_decompressed_bytes" in bomb.json()["detail"]
        lying = http.post("/api/v1/create_session", content=plain, headers={"Content-Encoding": "gzip"})
        assert lying.status_code == 400 and "not valid gzip" in lying.json()["detail"]
        assert http.post("/api/v1/create_session", content=plain).status_code == 200  # the connection goes on


def test_sampling_params_out_of_the_sdks_ranges_fail_naming_the_field(served: Served) -> None:
    service = tinker.ServiceClient(base_url=served.url, api_key=KEY)
    sampler = service.create_sampling_client(base_model="minds-tiny").result(timeout=60)
    prompt = types.ModelInput.from_ints([5, 6, 7])
    for params, words in (
        (types.SamplingParams(max_tokens=2, top_k=0), "top_k must be -1 (no limit) or at least 1, got 0"),
        (types.SamplingParams(max_tokens=2, top_k=-7), "top_k must be -1 (no limit) or at least 1, got -7"),
    ):
        with pytest.raises(tinker.RequestFailedError) as refused:
            sampler.sample(prompt, 1, params).result(timeout=60)
        assert words in str(refused.value)
    for top_k in (-1, 1, 10**9):  # no limit, greedy-like, more than the vocabulary: all sample
        assert len(sampler.sample(prompt, 1, types.SamplingParams(max_tokens=2, top_k=top_k)).result(timeout=60).sequences) == 1
    with httpx.Client(base_url=served.url, headers={"X-API-Key": KEY}, timeout=60) as http:  # NaN: JSON the SDK never sends
        body = b'{"num_samples": 1, "base_model": "minds-tiny", "prompt": {"chunks": [{"type": "encoded_text", "tokens": [5]}]},'
        future = http.post("/api/v1/asample", content=body + b' "sampling_params": {"max_tokens": 2, "temperature": NaN}}').json()
        answer = http.post("/api/v1/retrieve_future", json={"request_id": future["request_id"]}).json()
        assert answer["category"] == "user" and "temperature must be 0 (greedy) or a finite positive number, got nan" in answer["error"]
    service.close("success").result(timeout=30)


def test_a_sample_result_retrieved_as_json_says_to_ask_for_protobuf(served: Served) -> None:
    request = types.SampleRequest(
        num_samples=1, base_model="minds-tiny", prompt=types.ModelInput.from_ints([5, 6]),
        sampling_params=types.SamplingParams(max_tokens=2),
    )  # fmt: skip
    with httpx.Client(base_url=served.url, headers={"X-API-Key": KEY}, timeout=60) as http:
        future = http.post("/api/v1/asample", json=request.model_dump(mode="json")).json()
        while (answer := http.post("/api/v1/retrieve_future", json=future)).status_code == 200:
            assert answer.json()["type"] == "try_again", answer.text
        assert answer.status_code == 406 and answer.headers["content-type"] == "application/json"
        assert "Accept: application/x-protobuf" in answer.json()["detail"]
        proto = http.post("/api/v1/retrieve_future", json=future, headers={"Accept": "application/x-protobuf"})
    assert len(deserialize_sample_response(proto.content).sequences[0].tokens) == 2


def test_an_image_prompt_is_a_400_not_a_server_error(served: Served) -> None:
    body = {
        "num_samples": 1, "base_model": "minds-tiny", "sampling_params": {"max_tokens": 2},
        "prompt": {"chunks": [{"type": "image", "data": "iVBORw0K", "format": "png"}]},
    }  # fmt: skip
    with httpx.Client(base_url=served.url, headers={"X-API-Key": KEY}, timeout=60) as http:
        answer = http.post("/api/v1/asample", json=body)
    assert answer.status_code == 400 and "token chunks (encoded_text) only" in answer.json()["detail"], answer.text


def test_a_refused_training_request_does_not_hold_up_the_runs_next_ones(served: Served) -> None:
    """The SDK numbers a run's requests (seq_id) and the server runs them in that order: a request refused with a
    4xx the SDK does not retry never runs, and the ones after it must not wait for it forever."""
    service = tinker.ServiceClient(base_url=served.url, api_key=KEY)
    trainer = service.create_lora_training_client("minds-tiny", rank=2, seed=0).result(timeout=60)
    datum = types.Datum(model_input=types.ModelInput.from_ints([5, 6, 7]), loss_fn_inputs={"target_tokens": np.array([6, 7, 8])})
    image = types.Datum(
        model_input=types.ModelInput(chunks=[types.ImageChunk(data=b"\x89PNG", format="png", expected_tokens=3)]),
        loss_fn_inputs={"target_tokens": np.array([6, 7, 8])},
    )
    with pytest.raises(tinker.NotFoundError), pytest.warns(FutureWarning):  # refused by the engine, before the run's queue
        trainer.load_state("tinker://local-nothing/weights/none").result(timeout=60)
    with pytest.raises(tinker.BadRequestError, match="only token chunks"):  # refused while its body is decoded
        trainer.forward_backward([image], "cross_entropy").result(timeout=60)
    loss = trainer.forward_backward([datum], "cross_entropy").result(timeout=60).metrics["loss:sum"]
    assert trainer.optim_step(types.AdamParams(learning_rate=0.01)).result(timeout=60).metrics is not None
    assert loss > 0
    service.close("success").result(timeout=30)


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory):
    server = start_server(tmp_path_factory.mktemp("impatient"), "--model", "minds-tiny", "--read-timeout-seconds", "2")
    yield server
    assert server.stop() == 0


@pytest.mark.parametrize(
    "opening",
    [b"GET /api/v1/healthz HTTP/1.1\r\nX-Slow: ", b"POST /api/v1/create_session HTTP/1.1\r\nContent-Length: 100000\r\n\r\n{"],
    ids=["headers", "body"],
)
def test_a_client_that_drips_its_request_is_cut_off_at_the_read_timeout(impatient: Served, opening: bytes) -> None:
    """A byte a second never leaves the socket silent for the timeout, but the request as a whole must arrive in it:
    else a few hundred such clients hold every connection the server allows."""
    address = urlsplit(impatient.url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as conn:
        conn.sendall(opening)
        started = time.monotonic()
        cut = False
        while time.monotonic() - started < 15:
            time.sleep(0.5)
            try:
                conn.sendall(b"a")
            except OSError:
                cut = True
                break
            conn.setblocking(False)
            try:
                cut = conn.recv(65536) == b""
            except BlockingIOError:
                pass
            except OSError:
                cut = True
            conn.setblocking(True)
            if cut:
                break
    assert cut and time.monotonic() - started < 8, "the server kept a dripping request past its read timeout"
    assert httpx.get(f"{impatient.url}/api/v1/healthz", headers={"X-API-Key": KEY}).json() == {"status": "ok"}
