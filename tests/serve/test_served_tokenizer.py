"""The tokenizer of a built-in model sampled over HTTP (a Ray worker's sampler of the run's served engine) is read
from the directory the local backend makes, never looked up on the Hugging Face hub, which has no such model
(offline, the SDK's lookup retried for about a minute, once per worker)."""

from __future__ import annotations

from pathlib import Path

import pytest
import tinker

from minds_core import sampler_tokenizer, serve_in_background
from minds_core.backends.local import TINY_MODEL, ServiceClient

KEY = "tml-served-tokenizer"


def test_a_built_in_models_tokenizer_over_http_is_read_here_without_the_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def hub(self: tinker.SamplingClient) -> None:  # a FAKE of the SDK's lookup on the hub: it must not be called
        raise AssertionError("the SDK's get_tokenizer (a lookup on the Hugging Face hub) was called")

    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as local:
        server = serve_in_background(local, [TINY_MODEL], "127.0.0.1", KEY)
        try:
            remote = tinker.ServiceClient(base_url=server.url, api_key=KEY)
            sampler = remote.create_sampling_client(base_model=TINY_MODEL)
            monkeypatch.setattr(tinker.SamplingClient, "get_tokenizer", hub)
            tokenizer = sampler_tokenizer(sampler, TINY_MODEL)
            here = local.create_sampling_client(base_model=TINY_MODEL).result().get_tokenizer()
            assert tokenizer.encode("The cat sat.") == here.encode("The cat sat.")
            remote.close("success").result(timeout=30)
        finally:
            server.close()
