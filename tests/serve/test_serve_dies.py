"""A run on the Tinker protocol whose server dies: exit 1 within ``tinker.unreachable_timeout``, one message naming
the step, the request and the checkpoint to resume from (the SDK alone retried for minutes, printing only its own lines).

A real ``minds serve`` on 127.0.0.1:0 and a real ``minds run --backend tinker`` subprocess; the server is killed
with SIGKILL by the toy plugin's code at a chosen point of step 1 (or by its metric sink after step 0 is logged).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import KEY, Served, start_server

pytestmark = pytest.mark.slow

UNREACHABLE = 3  #: tinker.unreachable_timeout of these runs, seconds
COMMAND = [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json"]


@contextlib.contextmanager
def _served_then_killed(tmp_path: Path) -> Iterator[Served]:
    """A ``minds serve`` of minds-tiny, killed (if the test has not) when the block ends."""
    served = start_server(tmp_path, "--model", "minds-tiny")
    try:
        yield served
    finally:
        served.process.kill()
        served.process.wait(timeout=30)


def _train_one_step(url: str, environ: dict[str, str], runs: Path) -> None:
    """A one-step run ``runs/r`` on the server at ``url``, its checkpoint saved there (its server lives on)."""
    trained = subprocess.run(
        [*COMMAND, "run", "--env", "toy_server_dies", "--set", "env.args.phase=none", "--model", "minds-tiny",
         "--backend", "tinker", "--set", f"tinker.base_url={url}", "--steps", "1", "--name", "r", "--set", f"runs_dir={runs}",
         "--set", "trainer.group_size=2", "--set", "trainer.groups_per_batch=1", "--set", "sampling.max_tokens=8",
         "--set", "metrics.sinks=[]"],
        cwd=runs, env=environ, capture_output=True, text=True, timeout=90,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]


def _exited_naming_the_lost_service(returncode: int, stderr: str, failed: str, url: str, after: str = "") -> None:
    """Exit 1, and a last line ``minds: error: <failed> got no answer (ServiceLost: ...)<after>`` (regexes)."""
    last = stderr.strip().splitlines()[-1]
    assert returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
    assert re.fullmatch(
        rf"minds: error: {failed} got no answer \(ServiceLost: the service at {re.escape(url)} has not answered for \d+ s "
        rf"\(tinker\.unreachable_timeout = {UNREACHABLE}; last: .+\)\){after}",
        last,
    ), last


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
    _exited_naming_the_lost_service(run.returncode, run.stderr, f"step 1: {failed_request}", served.url,
                                    r"; the last checkpoint is step 0: minds run --resume \S+ continues from step 1")  # fmt: skip
    assert seconds < 60, f"the run took {seconds:.0f} s to give up"  # start-up and step 0 included
    assert (Path(tmp_path) / "r" / "checkpoints.jsonl").read_text().count("\n") == 1


def test_an_evaluation_whose_server_dies_exits_1_naming_it(installed_plugin, tmp_path):
    # minds eval of a served checkpoint waited on the SDK's retries for minutes (over 150 s, printing only its lines)
    with _served_then_killed(tmp_path) as served:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "TINKER_"))}
        environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), TINKER_API_KEY=KEY,
                       TOY_SERVER_PID=str(served.process.pid), TOY_SERVER_URL=served.url)  # fmt: skip
        _train_one_step(served.url, environ, tmp_path)
        began = time.monotonic()
        evaluated = subprocess.run(  # the third episode kills the server before its second turn samples
            [*COMMAND, "eval", str(tmp_path / "r"), "--samples", "4", "--split", "train", "--set", "env.args.phase=sample",
             "--set", f"tinker.unreachable_timeout={UNREACHABLE}"],
            cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        seconds = time.monotonic() - began
    _exited_naming_the_lost_service(evaluated.returncode, evaluated.stderr, r"evaluation: sampling tinker://\S+", served.url)
    assert seconds < 60, f"the evaluation took {seconds:.0f} s to give up"


def _stopped_once_asked(served: Served, route: str, command: list[str], cwd: Path, environ: dict[str, str], stop: signal.Signals) -> tuple[int, str, float]:
    """Run ``command``; once the server has answered one more ``route`` request than before, send it ``stop``
    (SIGKILL: dead; SIGSTOP: alive and silent, continued afterwards). The command's exit code, its stderr and the
    seconds it took to exit after the signal."""

    def answered() -> float:
        found = re.search(rf'requests_total\{{route="{route}",status="200"\}} (\S+)', httpx.get(served.url + "/metrics").text)
        return float(found.group(1)) if found else 0.0

    before = answered()
    process = subprocess.Popen(command, cwd=cwd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while answered() == before:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()[1][-2000:]
        time.sleep(0.02)
    os.kill(served.process.pid, stop)
    began = time.monotonic()
    try:
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
        if stop == signal.SIGSTOP:
            os.kill(served.process.pid, signal.SIGCONT)
    return process.returncode, stderr, time.monotonic() - began


def test_a_sample_whose_server_dies_exits_1_naming_it(installed_plugin, tmp_path):
    # minds sample (and chat) waited on the SDK's futures without a watch: as long as the SDK retried
    with _served_then_killed(tmp_path) as served:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "TINKER_"))}
        environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), TINKER_API_KEY=KEY)
        _train_one_step(served.url, environ, tmp_path)
        sampling = [*COMMAND, "sample", str(tmp_path / "r"), "--prompt", "hi", "-n", "64", "--max-tokens", "4000",
                    "--set", f"tinker.unreachable_timeout={UNREACHABLE}"]  # fmt: skip
        # long enough on minds-tiny that the server dies while it samples
        code, stderr, seconds = _stopped_once_asked(served, "POST /api/v1/asample", sampling, tmp_path, environ, signal.SIGKILL)
    _exited_naming_the_lost_service(code, stderr, r"minds sample: sampling tinker://\S+", served.url)
    assert seconds < 30, f"minds sample took {seconds:.0f} s to give up"


def test_an_export_whose_server_stops_answering_exits_1_naming_it(installed_plugin, tmp_path):
    # minds export waited on the SDK's futures (load, save_weights_external, the download's URLs) without a watch
    with _served_then_killed(tmp_path) as served:
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "TINKER_"))}
        environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), TINKER_API_KEY=KEY)
        _train_one_step(served.url, environ, tmp_path)
        exporting = [*COMMAND, "export", str(tmp_path / "r"), str(tmp_path / "out"), "--set", f"tinker.unreachable_timeout={UNREACHABLE}"]
        # once the export asks for the saved state, the server goes silent: the SDK would retry its polls for minutes
        code, stderr, seconds = _stopped_once_asked(served, "POST /api/v1/load_weights", exporting, tmp_path, environ, signal.SIGSTOP)
    _exited_naming_the_lost_service(code, stderr, r"export of tinker://\S+: its requests", served.url)
    assert seconds < 30, f"minds export took {seconds:.0f} s to give up"
    assert not (tmp_path / "out").exists()  # nothing half-written
