"""The installed distribution adds ghost_trace to `minds envs`; without it, `minds run` fails clearly.

"Without it" is the distribution disabled (MINDS_DISABLE_PLUGINS) for one test, so plugin
discovery skips its entry point as if it were not installed; the environment is never changed.
"""

import importlib.metadata
import json
from pathlib import Path

import pytest

from minds_core.cli.command import main

DISTRIBUTION = "minds-plugin-ghost-trace"


def _environments(capsys: pytest.CaptureFixture[str]) -> dict[str, str | None]:
    assert main(["envs", "--json"]) == 0
    return {row["name"]: row["distribution"] for row in json.loads(capsys.readouterr().out)}


def test_without_the_distribution_the_environment_is_unknown_and_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    try:
        importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{DISTRIBUTION} is not installed: pip install -e plugins/ghost_trace")
    monkeypatch.chdir(tmp_path)
    assert _environments(capsys).get("ghost_trace") == DISTRIBUTION

    with monkeypatch.context() as absent:
        absent.setenv("MINDS_DISABLE_PLUGINS", DISTRIBUTION)
        others = _environments(capsys)
        assert "ghost_trace" not in others and others
        code = main(["run", "--env", "ghost_trace", "--backend", "local", "--set", f"runs_dir={tmp_path}"])
        message = capsys.readouterr().err
        assert code == 2, message
        assert "unknown environment 'ghost_trace'" in message
        assert "Available:" in message
        for other in others:
            assert other in message
        # installed but skipped: its own metadata names what it provides, so the message says why it is missing
        assert f"provided by {DISTRIBUTION}, installed but not loaded" in message
        assert "Traceback" not in message
        assert not (tmp_path / "ghost_trace").exists()

    assert _environments(capsys).get("ghost_trace") == DISTRIBUTION
