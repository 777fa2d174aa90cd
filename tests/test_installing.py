"""The install commands minds prints work as written: minds-core comes from this checkout (it is not on PyPI)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from minds_core.backends import create_local_service
from minds_core.base.errors import UsageError
from minds_core.base.installing import pip_install
from minds_core.config import load_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_command_installs_minds_core_from_the_checkout_into_this_python() -> None:
    expected = [sys.executable, "-m", "pip", "install", "-c", str(ROOT / "constraints.txt"), "-e", f"{ROOT}[local]", "-e", "plugins/x"]
    assert shlex.split(pip_install("plugins/x", extras="local")) == expected


def test_without_torch_the_local_backend_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "minds_core.backends.local", None)  # as if torch and peft were not installed
    with pytest.raises(UsageError, match="the local backend needs torch and peft") as raised:
        create_local_service(load_config(None, ["env.id=x", f"runs_dir={tmp_path}"]), tmp_path)
    assert pip_install(extras="local") in str(raised.value) and "minds-core[local]" not in str(raised.value)
