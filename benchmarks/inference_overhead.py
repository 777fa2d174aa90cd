"""What the inference surfaces cost: a served chat completion vs the in-process sample of the same tokens, and capture.

Run: ``python benchmarks/inference_overhead.py`` (``--smoke``: seconds, figures mean nothing).

* served vs in-process: ``minds serve --port 0`` on minds-tiny in a subprocess, asked by the official
  ``openai`` SDK (one client, keep-alive) for a chat completion of 64 tokens; the in-process side
  samples the same prompt tokens with the same seed from a local ``SamplingClient`` (the same tokens
  come back: checked). Trials alternate between the sides; the medians are compared.
  Target: served within 15% of in-process at 64 tokens.
* capture overhead per call: a run's policy endpoint (``serve.policy_endpoint``: every call recorded
  for its episode's key) vs the same server and sampler without recording, both in this process,
  asked alike; the difference of the medians is the capture's cost per call, and the recording and
  trajectory code alone is timed too. The server without recording is also set against the in-process
  sample: what serving costs when the server is not a second process on the same cores.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import openai
from tinker import types

from minds_core.backends.local import TINY_MODEL, ServiceClient
from minds_core.envs.render import Renderer
from minds_core.http.limits import ServeLimits
from minds_core.inference.capture import Capture, trajectory
from minds_core.inference.sampling import Policy
from minds_core.inference.surface import Surface
from minds_core.serve.http import HttpServer
from minds_core.serve.listener import listen
from minds_core.serve.policy_endpoint import PolicyEndpoint

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Count from one to twenty, in words."}]


def median_seconds(work: Callable[[], Any], trials: int) -> float:
    times = []
    for _ in range(trials):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def alternate(sides: dict[str, Callable[[], Any]], trials: int) -> dict[str, float]:
    """The median seconds of each side, their trials taken in turns (a slow spell falls on all alike)."""
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(trials):
        for name, work in sides.items():
            start = time.perf_counter()
            work()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


class _FixedModel:
    """Models answering every call with one policy (the server without capture)."""

    def __init__(self, policy: Policy) -> None:
        self._policy = policy

    def names(self) -> list[str]:
        return [self._policy.name]

    def policy(self, model: Any, caller: str) -> Policy:
        return self._policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="a run of seconds (figures mean nothing)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens each completion samples (default 64)")
    parser.add_argument("--trials", type=int, default=30, help="trials per side (default 30)")
    args = parser.parse_args()
    trials = 2 if args.smoke else args.trials
    tokens = 8 if args.smoke else args.tokens

    service = ServiceClient(device="cpu")
    sampler = service.create_sampling_client(base_model=TINY_MODEL).result()
    renderer = Renderer(sampler.get_tokenizer())
    prompt = renderer.prompt_tokens(MESSAGES)
    params = types.SamplingParams(max_tokens=tokens, temperature=1.0, seed=5)
    ask = {"model": TINY_MODEL, "messages": MESSAGES, "max_tokens": tokens, "seed": 5}

    with tempfile.TemporaryDirectory() as root:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "minds_core.cli.command",
                "serve",
                "--port",
                "0",
                "--device",
                "cpu",
                "--model",
                TINY_MODEL,
                "--checkpoint-root",
                root,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            url = json.loads(server.stdout.readline())["url"]  # type: ignore[union-attr]
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="bench", max_retries=0)
            served = client.chat.completions.create(**ask)
            local = sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result().sequences[0]
            assert served.prompt_token_ids == prompt and served.choices[0].token_ids == local.tokens, (
                "the sides sampled different tokens"
            )
            medians = alternate(
                {
                    "served": lambda: client.chat.completions.create(**ask),
                    "in_process": lambda: sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result(),
                },
                trials,
            )
        finally:
            server.terminate()
            server.wait(timeout=60)
    ratio = medians["served"] / medians["in_process"]
    print(
        f"served chat completion vs in-process sample, {len(local.tokens)} tokens, {len(prompt)}-token prompt: "
        f"{medians['served'] * 1e3:.1f} ms vs {medians['in_process'] * 1e3:.1f} ms, ratio {ratio:.3f} (target <= 1.15)"
    )

    policy = Policy(sampler, renderer, "policy", version=0)
    limits = ServeLimits()
    endpoint = PolicyEndpoint(Capture(), limits)
    episode = endpoint.capture.open(policy, max_calls=1 << 30)
    plain = HttpServer(listen("127.0.0.1", 0, limits.backlog), (), limits, Surface(_FixedModel(policy), limits))
    threading.Thread(target=plain.serve_forever, daemon=True).start()
    try:
        captured = openai.OpenAI(base_url=endpoint.openai_url, api_key=episode.key, max_retries=0)
        uncaptured = openai.OpenAI(base_url="http://{}:{}/v1".format(*plain.server_address[:2]), api_key="x", max_retries=0)
        medians = alternate(
            {
                "captured": lambda: captured.chat.completions.create(**ask),
                "plain": lambda: uncaptured.chat.completions.create(**ask),
                "in_process": lambda: sampler.sample(types.ModelInput.from_ints(prompt), 1, params).result(),
            },
            trials,
        )
    finally:
        endpoint.close()
        plain.shutdown()
        plain.server_close()
    calls = endpoint.capture.close(episode)
    fresh = endpoint.capture.open(policy, max_calls=1 << 30)
    bookkeeping = median_seconds(lambda: (endpoint.capture.record(fresh.key, calls[0]), trajectory(calls[-8:])), max(trials, 5))
    print(
        f"capture per call: {(medians['captured'] - medians['plain']) * 1e3:+.2f} ms over {medians['plain'] * 1e3:.1f} ms "
        f"(ratio {medians['captured'] / medians['plain']:.3f}); recording and trajectory code alone {bookkeeping * 1e6:.0f} us"
    )
    print(
        f"served from this process (no second process on the cores): {medians['plain'] * 1e3:.1f} ms vs the in-process "
        f"sample {medians['in_process'] * 1e3:.1f} ms, ratio {medians['plain'] / medians['in_process']:.3f}"
    )
    service.close("success")


if __name__ == "__main__":
    sys.exit(main())
