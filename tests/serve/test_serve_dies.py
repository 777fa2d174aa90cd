"""A run on the Tinker protocol whose server dies: exit 1 within ``tinker.unreachable_timeout``, one message naming
the step, the request and the checkpoint to resume from (the SDK alone retried for minutes, printing only its own lines).

A real ``minds serve`` on 127.0.0.1:0 and a real ``minds run --backend tinker`` subprocess; the server is killed
with SIGKILL by the toy plugin's code at a chosen point of step 1 (or by its metric sink after step 0 is logged).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .conftest import KEY, start_server

pytestmark = pytest.mark.slow

UNREACHABLE = 3  #: tinker.unreachable_timeout of these runs, seconds


@pytest.mark.parametrize(
    ("phase", "failed_request"),
    [
        ("sample", r"sampling \(policy v1\)"),
        ("request", "forward_backward"),
        ("between", r"sampling \(policy v1\)"),
        # whichever request was in flight 50 ms after the first turn
        ("in-flight", r"(sampling \(policy v1\)|forward_backward|optim_step|save_state|save_weights_and_get_sampling_client)"),
    ],
)
def test_a_run_whose_server_dies_exits_1_naming_the_step_the_request_and_the_checkpoint(installed_plugin, tmp_path, phase, failed_request):
    served = start_server(tmp_path, "--model", "minds-tiny")  # byte noise: a step's two rewards differ, so it trains
    try:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "TINKER_"))}
        environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), TINKER_API_KEY=KEY,
                       TOY_SERVER_PID=str(served.process.pid), TOY_SERVER_URL=served.url)  # fmt: skip
        sinks = '["toy_kill_server"]' if phase == "between" else "[]"
        began = time.monotonic()
        run = subprocess.run(
            [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "run", "--env", "toy_server_dies", "--model", "minds-tiny",
             "--set", f"env.args.phase={phase}", "--backend", "tinker", "--set", f"tinker.base_url={served.url}",
             "--set", f"tinker.unreachable_timeout={UNREACHABLE}", "--steps", "4", "--name", "r", "--set", f"runs_dir={tmp_path}",
             "--set", "trainer.group_size=2", "--set", "trainer.groups_per_batch=1", "--set", "trainer.save_every=1",
             "--set", "sampling.max_tokens=8", "--set", f"metrics.sinks={sinks}"],
            cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        seconds = time.monotonic() - began
    finally:
        served.process.kill()
        served.process.wait(timeout=30)
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert re.fullmatch(
        rf"minds: error: step 1: {failed_request} got no answer \(ServiceLost: the service at {re.escape(served.url)} has not "
        rf"answered for \d+ s \(tinker\.unreachable_timeout = {UNREACHABLE}; last: .+\)\); the last checkpoint is step 0: "
        rf"minds run --resume \S+ continues from step 1",
        last,
    ), last
    assert seconds < 60, f"the run took {seconds:.0f} s to give up"  # start-up and step 0 included
    assert (Path(tmp_path) / "r" / "checkpoints.jsonl").read_text().count("\n") == 1


def test_an_evaluation_whose_server_dies_exits_1_naming_it(installed_plugin, tmp_path):
    # minds eval of a served checkpoint waited on the SDK's retries for minutes (over 150 s, printing only its lines)
    served = start_server(tmp_path, "--model", "minds-tiny")
    try:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "TINKER_"))}
        environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), TINKER_API_KEY=KEY,
                       TOY_SERVER_PID=str(served.process.pid), TOY_SERVER_URL=served.url)  # fmt: skip
        command = [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json"]
        trained = subprocess.run(
            [*command, "run", "--env", "toy_server_dies", "--model", "minds-tiny", "--set", "env.args.phase=none",
             "--backend", "tinker", "--set", f"tinker.base_url={served.url}", "--steps", "1", "--name", "r",
             "--set", f"runs_dir={tmp_path}", "--set", "trainer.group_size=2", "--set", "trainer.groups_per_batch=1",
             "--set", "sampling.max_tokens=8", "--set", "metrics.sinks=[]"],
            cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert trained.returncode == 0, trained.stderr[-2000:]
        began = time.monotonic()
        evaluated = subprocess.run(  # the third episode kills the server before its second turn samples
            [*command, "eval", str(tmp_path / "r"), "--samples", "4", "--split", "train", "--set", "env.args.phase=sample",
             "--set", f"tinker.unreachable_timeout={UNREACHABLE}"],
            cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        seconds = time.monotonic() - began
    finally:
        served.process.kill()
        served.process.wait(timeout=30)
    last = evaluated.stderr.strip().splitlines()[-1]
    assert evaluated.returncode == 1 and "Traceback" not in evaluated.stderr, evaluated.stderr[-3000:]
    assert re.fullmatch(
        rf"minds: error: evaluation: sampling tinker://\S+ got no answer \(ServiceLost: the service at {re.escape(served.url)} "
        rf"has not answered for \d+ s \(tinker\.unreachable_timeout = {UNREACHABLE}; last: .+\)\)",
        last,
    ), last
    assert seconds < 60, f"the evaluation took {seconds:.0f} s to give up"


def test_a_sample_whose_server_dies_exits_1_naming_it(installed_plugin, tmp_path):
    # minds sample (and chat) waited on the SDK's futures without a watch: as long as the SDK retried
    served = start_server(tmp_path, "--model", "minds-tiny")
    try:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "TINKER_"))}
        environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), TINKER_API_KEY=KEY)
        command = [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json"]
        trained = subprocess.run(
            [*command, "run", "--env", "toy_server_dies", "--set", "env.args.phase=none", "--model", "minds-tiny", "--backend", "tinker",
             "--set", f"tinker.base_url={served.url}", "--steps", "1", "--name", "r", "--set", f"runs_dir={tmp_path}",
             "--set", "trainer.group_size=2", "--set", "trainer.groups_per_batch=1", "--set", "sampling.max_tokens=8",
             "--set", "metrics.sinks=[]"],
            cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        assert trained.returncode == 0, trained.stderr[-2000:]
        def samples_taken() -> float:
            found = re.search(r'route="POST /api/v1/asample",status="200"\} (\S+)', httpx.get(served.url + "/metrics").text)
            return float(found.group(1)) if found else 0.0

        trained_samples = samples_taken()
        sampling = subprocess.Popen(  # long enough on minds-tiny that the server dies while it samples
            [*command, "sample", str(tmp_path / "r"), "--prompt", "hi", "-n", "64", "--max-tokens", "4000",
             "--set", f"tinker.unreachable_timeout={UNREACHABLE}"],
            cwd=tmp_path, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while samples_taken() == trained_samples:  # until its sample request is taken
            assert sampling.poll() is None and time.monotonic() < deadline, sampling.communicate()[1][-2000:]
            time.sleep(0.1)
        served.process.kill()
        began = time.monotonic()
        try:
            _, stderr = sampling.communicate(timeout=60)
        finally:
            sampling.kill()
        seconds = time.monotonic() - began
    finally:
        served.process.kill()
        served.process.wait(timeout=30)
    last = stderr.strip().splitlines()[-1]
    assert sampling.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert re.fullmatch(
        rf"minds: error: minds sample: sampling tinker://\S+ got no answer \(ServiceLost: the service at "
        rf"{re.escape(served.url)} has not answered for \d+ s \(tinker\.unreachable_timeout = {UNREACHABLE}; last: .+\)\)",
        last,
    ), last
    assert seconds < 30, f"minds sample took {seconds:.0f} s to give up"
