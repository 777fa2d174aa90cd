"""Fixtures of the verifiers v1 bridge tests: verifiers' own interpreter, the tasksets shipped with the bridge."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from minds_core.testing import skip_unless_installed

pytest_pycollect_makemodule = skip_unless_installed("minds_verifiers_v1", "pip install -c constraints.txt -e plugins/verifiers_v1")

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def vf_python() -> str:
    """The interpreter with verifiers 0.4 and uv: $MINDS_VERIFIERS_PYTHON, else the checkout's .venv-verifiers."""
    python = os.environ.get("MINDS_VERIFIERS_PYTHON") or str(ROOT / ".venv-verifiers" / "bin" / "python")
    if not Path(python).is_file():
        pytest.skip("verifiers 0.4 has no venv here: `make verifiers-v1` builds .venv-verifiers (`make test` does)")
    return python


@pytest.fixture
def tasksets() -> Path:
    """The folder of the v1 tasksets shipped with the bridge (``[env.args] path``)."""
    return Path(__file__).resolve().parents[1] / "tasksets"
