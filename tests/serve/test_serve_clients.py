"""``minds serve`` as Tinker programs meet it: a user's script, several clients at once, keys, SIGTERM."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import tinker
from tinker import types

from .conftest import KEY, Served, start_server

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("sdk_driver.py")


def test_a_tinker_users_script_trains_against_the_server(served: Served, tmp_path: Path) -> None:
    # a process boundary is the point: the script finds the service through the SDK's environment variables only
    env = {**os.environ, "TINKER_BASE_URL": served.url, "TINKER_API_KEY": "tml-any-key-works"}
    done = subprocess.run(
        [sys.executable, str(DRIVER)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    losses = summary["sft_losses"]
    assert losses[-1] < 0.8 * losses[0], losses  # SFT learns the repeated text
    assert len(summary["samples"]) == 4 and all(len(s) == 6 for s in summary["samples"])
    assert all(isinstance(text, str) for text in summary["decoded"])  # the SDK's get_tokenizer() works offline
    assert "loss:sum" in summary["rl_metrics"] and summary["optim_metrics"]["grad_norm:mean"] > 0
    assert summary["checkpoint"].startswith("tinker://") and summary["checkpoint"].endswith("/weights/final")


def test_several_clients_train_at_once_without_mixing_runs(served: Served) -> None:
    data = [
        types.Datum(
            model_input=types.ModelInput.from_ints([7, 8, 9, 10, 11]),
            loss_fn_inputs={"target_tokens": np.array([8, 9, 10, 11, 12])},
        )
    ]
    results: dict[int, list[float]] = {}
    errors: list[BaseException] = []

    def train(index: int) -> None:
        try:
            service = tinker.ServiceClient(base_url=served.url, api_key=KEY)
            trainer = service.create_lora_training_client("minds-tiny", rank=4, seed=42).result()
            losses = []
            for _ in range(3):
                fb = trainer.forward_backward(data, "cross_entropy")
                trainer.optim_step(types.AdamParams(learning_rate=0.05 * (index + 1)))
                losses.append(fb.result().metrics["loss:sum"])
            results[index] = losses
            service.close("success").result()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=train, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    # same seed, same first loss; different learning rates, so their later losses differ: runs kept apart
    assert results[0][0] == pytest.approx(results[1][0]) == pytest.approx(results[2][0])
    assert len({round(losses[-1], 4) for losses in results.values()}) == 3


def test_api_key_is_required_when_set_and_never_echoed(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--model", "minds-tiny", "--api-key", "tml-the-right-key")
    try:
        with pytest.raises(tinker.AuthenticationError) as caught:
            wrong = tinker.ServiceClient(base_url=server.url, api_key="tml-a-wrong-key")
            wrong.create_lora_training_client("minds-tiny", rank=2).result(timeout=60)
        assert "tml-the-right-key" not in str(caught.value)
        service = tinker.ServiceClient(base_url=server.url, api_key="tml-the-right-key")
        trainer = service.create_lora_training_client("minds-tiny", rank=2).result()
        assert trainer.get_info().model_data.model_name == "minds-tiny"
        service.close("success").result()
    finally:
        assert server.stop() == 0
    assert "tml-the-right-key" not in server.process.stderr.read()


def test_sigterm_stops_the_server_cleanly_while_a_client_waits(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--model", "minds-tiny")
    service = tinker.ServiceClient(base_url=server.url, api_key=KEY)
    service.create_lora_training_client("minds-tiny", rank=2).result()
    assert server.stop() == 0
    assert "minds serve: stopped" in server.process.stderr.read()


def test_the_ipv6_loopback_is_served_as_it_is_named(tmp_path: Path) -> None:
    # ::1 is a loopback host (no key needed); it was refused as "not a name this machine resolves"
    server = start_server(tmp_path, "--model", "minds-tiny", "--host", "::1")
    assert server.url.startswith("http://[::1]:"), server.url
    service = tinker.ServiceClient(base_url=server.url, api_key=KEY)
    service.create_lora_training_client("minds-tiny", rank=2).result()
    assert server.stop() == 0


def test_bad_arguments_exit_2_without_a_traceback(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "minds_core.cli.command", "serve", "--port", "0", "--model", "no-such-model-dir"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},  # no network here
    )
    assert done.returncode == 2, done.stderr
    assert "--model" in done.stderr and "Traceback" not in done.stderr


def test_the_readme_example_runs_against_the_server(served: Served) -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", readme, re.DOTALL) if "tinker.ServiceClient(base_url" in b]
    code = block.replace("http://127.0.0.1:8000", served.url)
    exec(compile(code, "README:minds-serve", "exec"), {})  # noqa: S102 - our own README
