"""``minds serve`` under hostile input, on a real server bounded in memory: every bomb is answered 4xx while
another client's training goes on; clients cannot reach each other's state; every SDK route answers JSON.

The server process runs under an address-space limit (``RLIMIT_AS``), so a request that makes it allocate
without bound fails the test (a crash, or a 500 for the ``MemoryError``) instead of passing by luck.
"""

from __future__ import annotations

import base64
import json
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
import tinker
import zstandard
from tinker import types
from tinker.proto import tinker_public_pb2 as pb

from .conftest import Served, start_server

pytestmark = pytest.mark.slow

PROTO = "application/x-protobuf"
VICTIM, ATTACKER = "tml-victim-key", "tml-attacker-key"
MEMORY_LIMIT = 3 << 30  # about 1 GiB is the server's own (torch, the tiny model, threads); a bomb is more
DECOMPRESSED_CAP = 32 << 20
BODY_CAP = 8 << 20


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = start_server(
        tmp_path_factory.mktemp("guarded"),
        "--max-decompressed-bytes", str(DECOMPRESSED_CAP),
        "--max-body-bytes", str(BODY_CAP),
        "--model", "minds-tiny",
        "--device", "cpu",  # RLIMIT_AS bounds host memory; CUDA's address-space reservations would not fit it
        memory_limit=MEMORY_LIMIT,
    )  # fmt: skip
    yield server
    assert server.stop() == 0


def _client(served: Served, key: str) -> httpx.Client:
    return httpx.Client(base_url=served.url, headers={"X-API-Key": key}, timeout=120)


def _raw(served: Served, head: str, body: bytes = b"") -> tuple[int, dict]:
    """Send ``head`` (request line and headers) and ``body`` on a fresh socket; the status and JSON answer."""
    address = urlsplit(served.url)
    with socket.create_connection((address.hostname, address.port), timeout=60) as conn:
        conn.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += conn.recv(65536)
        header, rest = answer.split(b"\r\n\r\n", 1)
        length = int(re.search(rb"Content-Length: (\d+)", header).group(1))
        while len(rest) < length:
            rest += conn.recv(65536)
    return int(header.split()[1]), json.loads(rest[:length])


def _session(http: httpx.Client) -> str:
    body = types.CreateSessionRequest(tags=[], user_metadata={}, sdk_version="test").model_dump(mode="json")
    return http.post("/api/v1/create_session", json=body).json()["session_id"]


def _result(http: httpx.Client, future: dict) -> dict:
    while True:
        answer = http.post("/api/v1/retrieve_future", json={"request_id": future["request_id"]}).json()
        if answer.get("type") != "try_again":
            return answer


def _zstd_bomb(decompressed: int) -> bytes:
    """A zstd body of a few hundred KB that decompresses to ``decompressed`` bytes of zeros (frames repeated)."""
    piece = 64 << 20
    frame = zstandard.ZstdCompressor(level=3).compress(bytes(piece))
    return frame * (decompressed // piece)


def _sparse_bomb() -> bytes:
    """A forward_backward body whose one sparse tensor declares 10^18 elements (a dense copy would never fit)."""
    tensor = pb.Tensor(dtype=pb.DTYPE_FLOAT32)
    tensor.shape.extend([10**9, 10**9])
    tensor.sparse_csr.CopyFrom(pb.SparseCsr(values=b"", crow_indices=b"", col_indices=b""))
    datum = pb.Datum()
    datum.model_input.add().encoded_text.tokens = np.asarray([5, 6, 7], dtype=np.int32).tobytes()
    datum.loss_fn_inputs["weights"].CopyFrom(tensor)
    request = pb.ForwardBackwardRequest(model_id="any", seq_id=1, loss_fn="cross_entropy")
    request.data.append(datum)
    return request.SerializeToString()


def _train(served: Served, steps: int, out: dict) -> None:
    """The victim: an SDK client training on the server while the bombs land."""
    try:
        service = tinker.ServiceClient(base_url=served.url, api_key=VICTIM)
        trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=0).result()
        datum = types.Datum(
            model_input=types.ModelInput.from_ints([7, 8, 9, 10, 11, 12]),
            loss_fn_inputs={"target_tokens": np.array([8, 9, 10, 11, 12, 13])},
        )
        losses = []
        for _ in range(steps):
            fb = trainer.forward_backward([datum], "cross_entropy")
            trainer.optim_step(types.AdamParams(learning_rate=0.02))
            losses.append(fb.result().metrics["loss:sum"])
        out["losses"] = losses
        service.close("success").result()
    except BaseException as exc:  # noqa: BLE001 - reported by the test
        out["error"] = exc


def test_every_bomb_is_refused_while_another_clients_training_goes_on(guarded: Served) -> None:
    victim: dict = {}
    training = threading.Thread(target=_train, args=(guarded, 8, victim))
    training.start()
    refused: dict[str, tuple[int, str]] = {}
    with _client(guarded, ATTACKER) as http:
        session = _session(http)
        zstd = http.post(
            "/api/v1/forward_backward",
            content=_zstd_bomb(4 << 30),  # 4 GiB once decompressed, past the server's whole address space
            headers={"Content-Type": PROTO, "Content-Encoding": "zstd"},
        )
        refused["zstd"] = zstd.status_code, zstd.json()["detail"]
        big = http.post("/api/v1/create_session", content=b"x" * (BODY_CAP + 1))
        refused["body"] = big.status_code, big.json()["detail"]
        status, answer = _raw(guarded, "POST /api/v1/create_session HTTP/1.1\nHost: x\nContent-Length: 1500000000\n")
        refused["content-length"] = status, answer["detail"]
        status, answer = _raw(
            guarded, "POST /api/v1/create_session HTTP/1.1\nHost: x\nTransfer-Encoding: chunked\n", b"40000000\r\n" + b"x" * 1000
        )
        refused["chunked"] = status, answer["detail"]
        sparse = http.post("/api/v1/forward_backward", content=_sparse_bomb(), headers={"Content-Type": PROTO})
        refused["sparse"] = sparse.status_code, sparse.json()["detail"]
        for name, samples, max_tokens in (("num_samples", 10**6, 16), ("batch", 200, 8000)):
            request = types.SampleRequest(
                num_samples=samples,
                base_model="minds-tiny",
                prompt=types.ModelInput.from_ints([5, 6, 7]),
                sampling_params=types.SamplingParams(max_tokens=max_tokens),
            )
            answer = http.post("/api/v1/asample", json=request.model_dump(mode="json"))
            refused[name] = answer.status_code, answer.json()["detail"]
        for name, base, rank in (("rank", "minds-tiny", 10**6), ("base_model", "/etc", 4)):
            create = types.CreateModelRequest(
                session_id=session, model_seq_id=0, base_model=base, lora_config=types.LoraConfig(rank=rank)
            )
            answer = http.post("/api/v1/create_model", json=create.model_dump(mode="json"))
            refused[name] = answer.status_code, answer.json()["detail"]
        nested = http.post("/api/v1/create_session", content=b"[" * 200_000)
        refused["nested"] = nested.status_code, nested.json()["detail"]
    training.join(timeout=300)

    expected = {
        "zstd": (413, "max_decompressed_bytes"),
        "body": (413, "max_body_bytes"),
        "content-length": (413, "Content-Length 1500000000"),
        "chunked": (413, "chunked body"),
        "sparse": (400, "max_tensor_elements"),
        "num_samples": (400, "num_samples = 1000000"),
        "batch": (400, "max_batch_tokens"),
        "rank": (400, "lora_config.rank = 1000000"),
        "base_model": (400, "'minds-tiny'"),
        "nested": (400, "not JSON"),
    }
    for name, (status, words) in expected.items():
        assert refused[name][0] == status and words in refused[name][1], (name, refused[name])
    assert "error" not in victim, victim.get("error")
    assert len(victim["losses"]) == 8 and victim["losses"][-1] < victim["losses"][0]
    assert guarded.process.poll() is None
    assert httpx.get(f"{guarded.url}/api/v1/healthz").json() == {"status": "ok"}


def test_another_client_finds_nothing_of_a_clients_state(guarded: Served, tmp_path: Path) -> None:
    owner = tinker.ServiceClient(base_url=guarded.url, api_key=VICTIM)
    trainer = owner.create_lora_training_client("minds-tiny", rank=2, seed=0).result()
    checkpoint = trainer.save_state("mine").result().path
    sampler = trainer.save_weights_and_get_sampling_client().result()
    handle = sampler.get_sampler_handle()  # what a program passes to its workers: it carries no key
    run_id = checkpoint.removeprefix("tinker://").split("/")[0]
    with _client(guarded, VICTIM) as mine:
        session = _session(mine)  # a session of the owner's key, with a pending result
        create = types.CreateModelRequest(
            session_id=session, model_seq_id=0, base_model="minds-tiny", lora_config=types.LoraConfig(rank=2)
        )
        future = mine.post("/api/v1/create_model", json=create.model_dump(mode="json")).json()
        model_id = _result(mine, future)["model_id"]
    sampler_id = json.loads(base64.urlsafe_b64decode(handle))["sampling_session_id"]

    with _client(guarded, ATTACKER) as other:
        attempts = {
            "get_info": other.post("/api/v1/get_info", json={"model_id": model_id}),
            "optim_step": other.post(
                "/api/v1/optim_step",
                json=types.OptimStepRequest(optim_params=types.AdamParams(learning_rate=1.0), model_id=model_id, seq_id=1).model_dump(mode="json"),
            ),
            "retrieve": other.post("/api/v1/retrieve_future", json={"request_id": future["request_id"]}),
            "heartbeat": other.post("/api/v1/session_heartbeat", json={"session_id": session}),
            "finish": other.post(f"/api/v1/sessions/{session}/finish", json={}),
            "get_session": other.get(f"/api/v1/sessions/{session}"),
            "training_run": other.get(f"/api/v1/training_runs/{run_id}"),
            "run_checkpoints": other.get(f"/api/v1/training_runs/{run_id}/checkpoints"),
            "weights_info": other.post("/api/v1/weights_info", json={"tinker_path": checkpoint}),
            "delete": other.delete(f"/api/v1/training_runs/{run_id}/checkpoints/weights/mine"),
            "sampler": other.get(f"/api/v1/samplers/{sampler_id}"),
        }
        listed_runs = other.get("/api/v1/training_runs").json()["training_runs"]
        listed_checkpoints = other.get("/api/v1/checkpoints").json()["checkpoints"]
        listed_sessions = other.get("/api/v1/sessions").json()["sessions"]
        nowhere = other.post("/api/v1/weights_info", json={"tinker_path": "tinker://local-nowhere/weights/mine"})
        other_session = _session(other)
        load = types.LoadWeightsRequest(path=checkpoint, session_id=other_session, model_seq_id=0, optimizer=False)
        stolen = other.post("/api/v1/load_weights", json=load.model_dump(mode="json"))
        sample = types.SampleRequest(
            num_samples=1, sampling_session_id=sampler_id, prompt=types.ModelInput.from_ints([5]),
            sampling_params=types.SamplingParams(max_tokens=2),
        )  # fmt: skip
        borrowed = other.post("/api/v1/asample", json=sample.model_dump(mode="json"))

    for name, answer in {**attempts, "load_weights": stolen, "asample": borrowed}.items():
        assert answer.status_code == 404, (name, answer.status_code, answer.text)
    assert attempts["weights_info"].json() == {"detail": nowhere.json()["detail"].replace("tinker://local-nowhere/weights/mine", checkpoint)}
    assert run_id not in json.dumps(listed_runs) and run_id not in json.dumps(listed_checkpoints)
    assert session not in listed_sessions
    with pytest.raises(tinker.NotFoundError):  # the SDK's own way in, with another key
        borrowed_client = tinker.SamplingClient.from_sampler_handle(handle, api_key=ATTACKER)
        borrowed_client.sample(types.ModelInput.from_ints([5]), 1, types.SamplingParams(max_tokens=2)).result()

    # the owner still has all of it
    assert trainer.get_info().model_data.model_name == "minds-tiny"
    rest = tinker.RestClient(base_url=guarded.url, api_key=VICTIM)
    assert any(item.tinker_path == checkpoint for item in rest.list_user_checkpoints().result().checkpoints)
    assert rest.get_weights_info_by_tinker_path(checkpoint).result().base_model == "minds-tiny"
    assert len(sampler.sample(types.ModelInput.from_ints([5]), 1, types.SamplingParams(max_tokens=2)).result().sequences) == 1
    owner.close("success").result()


def test_keys_sent_as_bearer_tokens_keep_clients_apart_as_x_api_key_does(guarded: Served) -> None:
    # the server lets a key in as X-API-Key or Authorization: Bearer; the Tinker routes knew a client by X-API-Key
    # only, so every Bearer client was the same "no key" client: one retrieved another's results
    def bearer(key: str) -> httpx.Client:
        return httpx.Client(base_url=guarded.url, headers={"Authorization": f"Bearer {key}"}, timeout=120)

    with bearer(VICTIM) as mine:
        create = types.CreateModelRequest(
            session_id=_session(mine), model_seq_id=0, base_model="minds-tiny", lora_config=types.LoraConfig(rank=2)
        )
        future = mine.post("/api/v1/create_model", json=create.model_dump(mode="json")).json()
        model_id = _result(mine, future)["model_id"]
    with bearer(ATTACKER) as other:
        assert other.post("/api/v1/retrieve_future", json={"request_id": future["request_id"]}).status_code == 404
        assert other.post("/api/v1/get_info", json={"model_id": model_id}).status_code == 404
    with _client(guarded, VICTIM) as same:  # the same key, sent the SDK's way: the same client
        assert same.post("/api/v1/get_info", json={"model_id": model_id}).status_code == 200


def _sdk_routes() -> list[tuple[str, str]]:
    """(method, path) of every ``/api/v1`` call in the installed SDK's sources, placeholders filled in."""
    sources = Path(tinker.__file__).parent
    calls = set()
    for source in [*sources.glob("lib/**/*.py"), *sources.glob("resources/*.py")]:
        if source.name.endswith("_test.py"):
            continue
        text = source.read_text()
        pattern = r"\.(_?)(get|post|put|delete|patch)\(\s*f?\"(/api/v1/[^\"]+)\""
        for _, method, path in re.findall(pattern, text):
            path = path.replace("{checkpoint_id}", "weights/nothing")
            calls.add((method.upper(), re.sub(r"\{[^}]+\}", "nothing", path)))
    return sorted(calls)


def test_every_route_the_sdk_calls_answers_json_and_no_server_error(guarded: Served, tmp_path: Path) -> None:
    routes = _sdk_routes()
    assert ("PUT", "/api/v1/training_runs/nothing/checkpoints/weights/nothing/ttl") in routes  # the parse found them
    assert len(routes) > 30
    with _client(guarded, VICTIM) as http:
        for method, path in routes:
            answer = http.request(method, path, json={}, headers={"Content-Type": "application/json"})
            assert answer.headers["content-type"] in ("application/json", PROTO), (method, path, answer.text[:200])
            assert answer.status_code < 500, (method, path, answer.text)
            if answer.status_code >= 400:
                assert answer.json()["detail"], (method, path)


def test_the_rest_client_gets_working_answers_or_a_4xx_saying_what_to_do(guarded: Served) -> None:
    service = tinker.ServiceClient(base_url=guarded.url, api_key=VICTIM)
    trainer = service.create_lora_training_client("minds-tiny", rank=2, seed=0).result()
    path = trainer.save_state("ttl").result().path
    rest = tinker.RestClient(base_url=guarded.url, api_key=VICTIM)
    rest.set_checkpoint_ttl_from_tinker_path(path, 3600).result()
    with pytest.raises(tinker.BadRequestError, match="from 3600 .1 hour. to"):
        rest.set_checkpoint_ttl_from_tinker_path(path, 59).result()
    with pytest.raises(tinker.BadRequestError, match="not published"):
        rest.publish_checkpoint_from_tinker_path(path).result()
    with pytest.raises(tinker.NotFoundError):
        rest.set_checkpoint_ttl_from_tinker_path(path.replace("/ttl", "/gone"), 3600).result()
    sessions = rest.list_sessions().result().sessions
    assert sessions
    assert rest.get_session(sessions[0]).result().training_run_ids is not None
    with pytest.raises(tinker.NotFoundError) as missing:
        service.create_training_client_from_state("tinker://local-none/weights/x").result()
    assert "ckpt" not in str(missing.value) and str(Path.cwd()) not in str(missing.value)  # no server folder named
    service.close("success").result()
