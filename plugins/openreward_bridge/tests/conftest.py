"""A real ORS server (openreward.environments.Server on 127.0.0.1) serving the environments of ors_environments.py.

The server and its environments are imported by the first test that asks for a server, not when the tests are
collected: the ORS server SDK takes seconds to import, in every worker that imports it.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from minds_core.testing import skip_unless_installed

pytest_pycollect_makemodule = skip_unless_installed("minds_openreward", "pip install -c constraints.txt -e plugins/openreward_bridge")

os.environ["OPENREWARD_DISABLE_UPDATE_CHECK"] = "1"
os.environ.setdefault("OPENREWARD_LOG_LEVEL", "WARNING")

#: The module name ors_environments.py is imported under (pydantic resolves its models' annotations through it).
ENVIRONMENTS = "minds_openreward_test_environments"


@functools.cache
def environments() -> ModuleType:
    """ors_environments.py, imported once (this folder is not on sys.path: pytest imports it by file)."""
    spec = importlib.util.spec_from_file_location(ENVIRONMENTS, Path(__file__).with_name("ors_environments.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[ENVIRONMENTS] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def ors_server() -> Iterator[Any]:
    """The real ORS server, shared by the tests of a session."""
    envs = environments()
    yield from envs.serve_with(envs.HeaderLog)


@pytest.fixture(scope="session")
def hosted_server() -> Iterator[Any]:
    """The same server behind the fake hosted auth gate."""
    envs = environments()
    yield from envs.serve_with(envs.FakeHostedAuth)


@pytest.fixture(autouse=True)
def fresh_census() -> Iterator[None]:
    """Every test starts with empty censuses (once a test has imported the environments)."""
    if ENVIRONMENTS in sys.modules:
        for env in (environments().ToolLab, environments().Maze, environments().Catalog):
            env.census.reset()
    yield


@pytest.fixture
def hosted_env(hosted_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Point the SDK's hosted URLs at the fake hosted service, with the valid key set."""
    monkeypatch.setenv("OPENREWARD_SESSION_URL", hosted_server.url)
    monkeypatch.setenv("OPENREWARD_API_URL", hosted_server.url)
    monkeypatch.setenv("OPENREWARD_API_KEY", hosted_server.hosted_key)
    return hosted_server
