"""The tokenizer of a built-in model sampled over HTTP (a Ray worker's sampler of the run's served engine) is read
from the directory the local backend makes, never looked up on the Hugging Face hub, which has no such model
(offline, the SDK's lookup retried for about a minute, once per worker), and without importing the local backend or
transformers' model code (seconds of every Ray worker's start-up)."""

from __future__ import annotations

import json
import subprocess
import sys
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


#: A worker's process: the tokenizer of the served built-in model, and which heavy modules it imported for it.
WORKER = """
import json, sys
import tinker
from minds_core import sampler_tokenizer
remote = tinker.ServiceClient(base_url=sys.argv[1], api_key=sys.argv[2])
tokenizer = sampler_tokenizer(remote.create_sampling_client(base_model=sys.argv[3]), sys.argv[3])
heavy = [name for name in ("minds_core.backends.local", "transformers.modeling_utils") if name in sys.modules]
print(json.dumps({"ids": tokenizer.encode("The cat sat."), "heavy": heavy}))
remote.close("success").result(timeout=30)
"""


@pytest.mark.slow  # a process of its own (it imports the SDK, and with it torch)
def test_a_worker_process_reads_it_without_importing_the_local_backend(tmp_path: Path) -> None:
    with ServiceClient(checkpoint_root=tmp_path, device="cpu") as local:
        server = serve_in_background(local, [TINY_MODEL], "127.0.0.1", KEY)  # the folder is made: the engine loaded it
        try:
            done = subprocess.run(
                [sys.executable, "-c", WORKER, server.url, KEY, TINY_MODEL], capture_output=True, text=True, timeout=120, check=False
            )
        finally:
            server.close()
        assert done.returncode == 0, done.stderr[-3000:]
        worker = json.loads(done.stdout.splitlines()[-1])
        here = local.create_sampling_client(base_model=TINY_MODEL).result().get_tokenizer()
    assert worker["heavy"] == [] and worker["ids"] == here.encode("The cat sat.")
