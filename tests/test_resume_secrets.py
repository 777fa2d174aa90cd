"""--resume of a run whose config held secrets (not saved with the run): the resume goes on when they come again
(``--set``, or the environment variable the environment reads) and otherwise stops naming the keys to pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from minds_core.cli.command import main
from minds_core.run_directory import read_jsonl

SECRET, AGAIN = "sk-test-secret-4242", "sk-given-again-7373"

#: A seed-style environment that needs a key: from its args, else from KEYED_TEST_KEY.
KEYED_ENV = """\
import os


class Keyed:
    def initial_observation(self):
        return "Say something."

    def step(self, action_text):
        return {"reward": len(set(action_text)) / 8}


def load_environment(api_key=None, auth=None):
    if not (api_key or (auth or {}).get("token") or os.environ.get("KEYED_TEST_KEY")):
        raise ValueError("no API key: pass api_key or set KEYED_TEST_KEY")
    return Keyed()
"""

#: The two shapes a secret takes in [env.args]: a key of its own, or inside a table of its own.
SHAPES = {
    "api_key": ('api_key = "{secret}"', "env.args.api_key"),
    "auth": ('auth = {{ token = "{secret}" }}', "env.args.auth.token"),
}


@pytest.fixture(params=sorted(SHAPES))
def keyed_run(request, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A one-step run of the keyed environment, its key given in [env.args]; (its folder, the secret's key)."""
    line, key = SHAPES[request.param]
    folder = f"keyed_{tmp_path.name}"  # a module name of its own: modules imported by earlier tests stay imported
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "__init__.py").write_text(KEYED_ENV)
    (tmp_path / "run.toml").write_text(
        f'[env]\nid = "./{folder}"\n\n[env.args]\n{line.format(secret=SECRET)}\n\n'
        "[trainer]\ngroup_size = 4\ngroups_per_batch = 1\n\n[sampling]\nmax_tokens = 4\n\n[metrics]\nsinks = []\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KEYED_TEST_KEY", raising=False)
    assert main(["run", "run.toml", "--steps", "1", "--backend", "local", "--name", "r"]) == 0
    return tmp_path / "runs" / "r", key


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_a_resume_goes_on_when_the_secret_comes_from_the_environment(keyed_run, monkeypatch, capsys):
    run_dir, key = keyed_run
    monkeypatch.setenv("KEYED_TEST_KEY", "from-the-environment")
    assert main(["run", "--resume", str(run_dir), "--steps", "2"]) == 0
    err = capsys.readouterr().err
    assert "secrets are not saved with a run" in err and key in err
    assert "cannot change" not in err
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1]
    assert SECRET.encode() not in b"".join(_files(run_dir).values())


@pytest.mark.slow
def test_a_resume_goes_on_when_the_secret_is_passed_again(keyed_run, capsys):
    run_dir, key = keyed_run
    assert main(["run", "--resume", str(run_dir), "--steps", "2", "--set", f"{key}={AGAIN}"]) == 0
    assert "cannot change" not in capsys.readouterr().err
    assert [row["step"] for row in read_jsonl(run_dir / "metrics.jsonl")] == [0, 1]
    written = b"".join(_files(run_dir).values())
    assert SECRET.encode() not in written and AGAIN.encode() not in written


@pytest.mark.slow
def test_a_resume_without_the_secret_stops_naming_it_and_changes_nothing(keyed_run, capsys):
    run_dir, key = keyed_run
    before = _files(run_dir)
    assert main(["run", "--resume", str(run_dir), "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert f"not given again: {key}; pass them again (--set KEY=VALUE)" in err
    assert "no API key" in err and "Traceback" not in err and "cannot change" not in err
    assert _files(run_dir) == before
