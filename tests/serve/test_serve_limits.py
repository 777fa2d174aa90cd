"""``ServeLimits`` and ``RunOwners`` without a server: what each check refuses and says, the flags,
gzip, deflate and zstd bombs decoded in bounded memory, keyed client digests."""

from __future__ import annotations

import argparse
import gzip
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest
import zstandard
from tinker import types
from tinker.proto.request_conv import forward_backward_request_to_proto

from minds_core.base.errors import UsageError
from minds_core.http.errors import BadRequest, PayloadTooLarge, UnsupportedMediaType, public_detail
from minds_core.http.limits import (
    ServeLimits,
    add_limit_arguments,
    limits_from_arguments,
)
from minds_core.serve.encodings import decode_body
from minds_core.serve.owners import SECRET_FILE, RunOwners
from minds_core.serve.wire import decode_forward_backward


def _sample(num_samples: int, max_tokens: int | None, prompt: int = 10, **extra: int) -> types.SampleRequest:
    return types.SampleRequest(
        num_samples=num_samples,
        base_model="minds-tiny",
        prompt=types.ModelInput.from_ints(list(range(prompt))),
        sampling_params=types.SamplingParams(max_tokens=max_tokens),
        **extra,
    )


@pytest.mark.parametrize(
    ("request_", "words"),
    [
        (_sample(10**6, 16), "num_samples = 1000000: this server accepts between 1 and 256 (max_num_samples)"),
        (_sample(4, 10**6), "sampling_params.max_tokens = 1000000"),
        (_sample(200, 8000), "200 x (10 + 8000) = 1602000 tokens is past this server's max_batch_tokens of 1048576"),
        (_sample(64, None), "unset, counted as 32768"),
        (_sample(1, 8, topk_prompt_logprobs=10**6), "topk_prompt_logprobs = 1000000"),
    ],
)
def test_a_sample_request_past_a_limit_is_refused_naming_the_field_the_limit_and_the_flag(
    request_: types.SampleRequest, words: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        ServeLimits().check_sample(request_)
    assert words in refused.value.detail and "--max-" in refused.value.detail


def test_requests_within_the_limits_pass() -> None:
    limits = ServeLimits()
    limits.check_sample(_sample(256, 4000))
    limits.check_lora(256)
    limits.check_shape("t", [1024, 1024])
    limits.check_batch(1000, 1 << 20, 1 << 24)
    with pytest.raises(BadRequest, match="1049 datums hold 1049000 tokens, past this server's max_batch_tokens"):
        limits.check_batch(1049, 1049 * 1000, 0)
    with pytest.raises(BadRequest, match="elements, all datums together = 16777217"):
        limits.check_batch(1, 1, (1 << 24) + 1)
    with pytest.raises(BadRequest, match=r"lora_config.rank = 0: this server accepts between 1 and 256"):
        limits.check_lora(0)
    with pytest.raises(BadRequest, match="negative dimension"):
        limits.check_shape("t", [4, -1])


def test_a_prompt_of_unknown_length_is_a_bad_request_not_a_server_error() -> None:
    image = types.ImageChunk(data=b"\x89PNG", format="png")  # no expected_tokens: its length is unknown
    request = types.SampleRequest(
        num_samples=1, base_model="minds-tiny", prompt=types.ModelInput(chunks=[image]),
        sampling_params=types.SamplingParams(max_tokens=2),
    )  # fmt: skip
    with pytest.raises(BadRequest, match=r"prompt: ImageChunk expected_tokens .* token chunks \(encoded_text\) only"):
        ServeLimits().check_sample(request)


def test_every_limit_has_a_flag_and_a_bad_value_names_it() -> None:
    parser = argparse.ArgumentParser()
    add_limit_arguments(parser)
    limits = limits_from_arguments(parser.parse_args(["--max-lora-rank", "8", "--read-timeout-seconds", "2.5"]))
    assert limits == ServeLimits(max_lora_rank=8, read_timeout_seconds=2.5)
    with pytest.raises(ValueError, match="--max-num-samples must be positive"):
        limits_from_arguments(parser.parse_args(["--max-num-samples", "0"]))
    for endless in ("inf", "1e300"):  # past time_t: every connection's socket timeout would fail, nothing served
        with pytest.raises(ValueError, match="--read-timeout-seconds must be at most 2147483647 seconds"):
            limits_from_arguments(parser.parse_args(["--read-timeout-seconds", endless]))


def _body(tokens: int) -> bytes:
    datum = types.Datum(
        model_input=types.ModelInput.from_ints([5] * tokens), loss_fn_inputs={"target_tokens": np.array([6] * tokens)}
    )
    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=[datum], loss_fn="cross_entropy"), model_id="m", seq_id=1
    )
    return forward_backward_request_to_proto(request).SerializeToString()


def _deflate(data: bytes, wbits: int) -> bytes:
    packer = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return packer.compress(data) + packer.flush()


@pytest.mark.parametrize(
    ("encoding", "pack"),
    [
        ("zstd", lambda data: zstandard.ZstdCompressor().compress(data)),
        ("gzip", lambda data: gzip.compress(data, 9)),
        ("deflate", lambda data: _deflate(data, zlib.MAX_WBITS)),
        ("deflate", lambda data: _deflate(data, -zlib.MAX_WBITS)),  # raw deflate, as some clients send it
    ],
    ids=["zstd", "gzip", "deflate-zlib", "deflate-raw"],
)
@pytest.mark.slow  # a CPU-second or more of float64 numerics or bombs: the whole suite runs it
def test_a_compressed_bomb_is_refused_before_its_output_is_held(encoding: str, pack) -> None:
    limit = 1 << 20
    bomb = pack(bytes(64 << 20)) * 16  # 1 GiB once decompressed (gzip and zstd: 16 members or frames)
    tracemalloc.start()
    try:
        with pytest.raises(PayloadTooLarge, match=f"The {encoding} body decompresses to more than .* of 1048576"):
            decode_body(bomb, encoding, limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * limit, peak
    assert decode_body(pack(b'{"a": 1}'), encoding, limit) == b'{"a": 1}'
    with pytest.raises(BadRequest, match=f"not valid {encoding}|ends in the middle of its {encoding} stream"):
        decode_body(pack(bytes(1000))[:-9], encoding, limit)


def test_content_encodings_are_undone_in_order_and_others_refused() -> None:
    body = b'{"session_id": "s"}'
    assert decode_body(body, "", 100) == decode_body(body, "identity", 100) == body
    assert decode_body(gzip.compress(zstandard.ZstdCompressor().compress(body)), "zstd, GZIP", 100) == body
    with pytest.raises(UnsupportedMediaType, match="Content-Encoding 'br' is not supported: .* gzip, deflate, zstd"):
        decode_body(body, "gzip, br", 100)
    with pytest.raises(BadRequest, match="not valid gzip"):
        decode_body(body, "gzip", 100)
    with pytest.raises(BadRequest, match="stacks 5 codings"):
        decode_body(body, "gzip," * 5, 100)


def test_a_forward_backward_body_is_counted_from_its_bytes() -> None:
    body = _body(1000)
    request, forward_only = decode_forward_backward(body, ServeLimits())
    assert request.forward_backward_input.data[0].model_input.length == 1000 and not forward_only
    with pytest.raises(BadRequest, match="max_batch_tokens of 999"):  # counted from the bytes, before any list is built
        decode_forward_backward(body, ServeLimits(max_batch_tokens=999))
    with pytest.raises(BadRequest, match="max_tensor_elements"):  # target_tokens: 1000 int64 elements
        decode_forward_backward(body, ServeLimits(max_tensor_elements=999))


def test_server_paths_are_named_not_shown() -> None:
    hidden = {"/srv/ckpt": "<checkpoint root>", "/srv/ckpt/real": "<checkpoint root>"}
    shown = public_detail("No checkpoint (looked in /srv/ckpt/real/run/weights/x)", hidden)
    assert shown == "No checkpoint (looked in <checkpoint root>/run/weights/x)"


def test_clients_are_kept_as_keyed_digests_that_a_restarted_server_on_the_root_recomputes(tmp_path: Path) -> None:
    owners = RunOwners(tmp_path)
    alice, bob = owners.client_of("tml-alice"), owners.client_of("tml-bob")
    assert alice != bob and owners.client_of("tml-alice") == alice
    owners.claim("local-run", alice)
    again = RunOwners(tmp_path)  # a restarted server on the same root
    assert again.client_of("tml-alice") == alice
    assert again.visible("local-run", alice) and not again.visible("local-run", bob)
    assert again.visible("local-unclaimed", bob)  # runs no client of a server made are shared
    assert RunOwners(tmp_path / "other").client_of("tml-alice") != alice  # another root, another secret
    stored = "".join(path.read_text() for path in tmp_path.iterdir() if path.is_file())
    assert "tml-alice" not in stored
    assert (tmp_path / SECRET_FILE).stat().st_mode & 0o077 == 0
    (tmp_path / SECRET_FILE).write_text("not hex")
    with pytest.raises(UsageError, match="serve-owners.secret in the --checkpoint-root is not minds serve's"):
        RunOwners(tmp_path)
