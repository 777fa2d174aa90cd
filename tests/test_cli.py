"""The command line: version, help speed, no torch on light commands, hook documentation, logs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from minds_core import __version__
from minds_core.cli.command import main

ROOT = Path(__file__).resolve().parents[1]


def test_version(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"minds {__version__}"


@pytest.mark.slow
def test_help_and_plugins_do_not_import_torch():
    code = (
        "import sys\n"
        "from minds_core.cli.command import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "main(['plugins', '--json']); main(['envs', '--json'])\n"
        "heavy = sorted(m for m in ('torch', 'peft', 'transformers') if m in sys.modules)\n"
        "print('HEAVY=' + ','.join(heavy))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "HEAVY=", result.stdout[-300:]


def test_no_command_prints_help_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: minds" in capsys.readouterr().out


@pytest.mark.slow
def test_unknown_environment_is_a_usage_error_without_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "minds_core.cli.command", "--log-format", "json", "run", "--env", "nope", "--set", "trainer.loss_fn=ppo"],
        capture_output=True, text=True, cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "unknown environment 'nope'" in result.stderr and "Traceback" not in result.stderr


def test_json_renderer_writes_json_lines(capsys):
    from minds_core.base import logs

    logs.configure("json")
    logs.get_logger("test").info("hello", answer=42)
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert json.loads(line)["answer"] == 42
