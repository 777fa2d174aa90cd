"""The Makefile's targets keep what a user made: `make clean` removes the venv and spares runs/."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_clean_spares_runs(tmp_path: Path) -> None:
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    checkpoint = tmp_path / "runs" / "my-run" / "checkpoints" / "000002" / "adapter.safetensors"
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"weights")
    subprocess.run(["make", "clean"], cwd=tmp_path, check=True, capture_output=True, timeout=120)
    assert not (tmp_path / ".venv").exists()
    assert checkpoint.read_bytes() == b"weights"
