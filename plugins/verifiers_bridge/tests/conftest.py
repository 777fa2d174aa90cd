"""Fixtures of the verifiers bridge tests: the test environments importable by id, a local policy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from minds_core.testing import skip_unless_installed

pytest_pycollect_makemodule = skip_unless_installed("minds_verifiers", "pip install -c constraints.txt -e plugins/verifiers_bridge")

VF_ENVIRONMENTS = Path(__file__).resolve().parent / "vf_environments"


@pytest.fixture
def vf_environments(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make ``minds_vf_*`` importable, as ``vf.load_environment`` imports environments by id."""
    monkeypatch.syspath_prepend(str(VF_ENVIRONMENTS))
    return VF_ENVIRONMENTS


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Any]:
    """A local service on the tiny model."""
    pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")
    from minds_core.backends.local import create_service_client

    client = create_service_client(tmp_path / "checkpoints")
    yield client
    client.close("success")

