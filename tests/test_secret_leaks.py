"""No secret minds knows leaves a real `minds run`: not its files, not W&B's, not stdout or stderr.

The run is given secrets every way a user gives them (``--set`` on the command line,
a URL's password, an environment variable) and its environment echoes them in a
print and in an exception, with the console, report and W&B (offline) sinks on.
Every file under the test's folder, and both streams, are searched for each value.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

#: Found, not imported: the run imports wandb in its own process, and importing it here costs every worker a second.
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("wandb") is None, reason="the W&B half needs wandb (the dev extra installs it)"
)

ON_COMMAND_LINE = "tml-cmdline-secret-8d1c"  # tinker.api_key=..., which W&B would store with sys.argv
GIVEN_TO_PLUGIN = "sk-plugin-arg-4c2e91"  # env.args.secret, echoed by the environment
URL_PASSWORD = "url-pass-77aa51"
IN_ENVIRONMENT = "hf-env-token-0b9f3d"  # HOSTILE_JUDGE_TOKEN, echoed by the environment
SECRETS = (ON_COMMAND_LINE, GIVEN_TO_PLUGIN, URL_PASSWORD, IN_ENVIRONMENT)


@pytest.mark.slow
def test_a_run_whose_plugin_echoes_secrets_writes_and_prints_none(installed_plugin, tmp_path):
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "WANDB_"))}
    environ.update(PYTHONPATH=str(installed_plugin("hostile_plugin")), HOSTILE_JUDGE_TOKEN=IN_ENVIRONMENT,
                   WANDB_MODE="offline", WANDB_DIR=str(tmp_path), WANDB_SILENT="true")  # fmt: skip
    sets = ["env.args.escape=echo_secret", f"env.args.secret={GIVEN_TO_PLUGIN}", f"tinker.api_key={ON_COMMAND_LINE}",
            f"env.args.endpoint=https://bob:{URL_PASSWORD}@judge.example.com/v1", "metrics.sinks=[console, report, wandb]",
            "metrics.wandb_project=minds-test", "sampling.max_tokens=4", "trainer.group_size=2", "trainer.groups_per_batch=1",
            "trainer.steps=1", f"runs_dir={tmp_path / 'runs'}"]  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "minds_core.cli.command", "run", "--env", "hostile", "--backend", "local", "--name", "run",
         *(arg for s in sets for arg in ("--set", s))],
        check=False, capture_output=True, text=True, cwd=tmp_path, env=environ, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1 and "no step trained" in done.stderr, done.stderr  # every rollout failed, as meant

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    for secret in SECRETS:
        assert secret not in done.stdout and secret not in done.stderr
        assert not [p for p in files if secret.encode() in p.read_bytes()]

    run = tmp_path / "runs" / "run"
    (group,) = map(json.loads, (run / "rollouts.jsonl").read_text().splitlines())
    assert {r["error"] for r in group["rollouts"]} == {"RuntimeError: the judge refused the key *** (token ***)"}
    assert "judge key ***, token ***" in done.stdout and "judge key ***, token ***" in done.stderr
    assert "the judge refused the key ***" in (run / "train.log").read_text()
    assert "the judge refused the key ***" in (run / "report.html").read_text()
    assert "https://bob:***@judge.example.com/v1" in (run / "config.yaml").read_text()
    wandb_files = [p for p in files if "wandb" in p.parts and p.parent != run]
    assert any(b"tinker.api_key=***" in p.read_bytes() for p in wandb_files)  # W&B did store the command line
