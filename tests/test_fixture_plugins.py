"""Fixture plugins (tests/plugins) are imported and built from copies in temporary folders: no test writes into
the tree, and nothing a build left there (``*.egg-info``) registers a plugin for the tests of a session."""

from __future__ import annotations

import importlib.metadata
import sys
import tomllib
from pathlib import Path

from minds_core.contract.plugins import ENTRY_POINT_GROUP

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_PLUGINS = ROOT / "tests" / "plugins"


def test_the_toy_plugin_is_imported_from_a_copy_outside_the_tree() -> None:
    import minds_toy_plugin

    assert not Path(minds_toy_plugin.__file__).resolve().is_relative_to(ROOT), minds_toy_plugin.__file__
    inside = [entry for entry in sys.path if entry and Path(entry).resolve().is_relative_to(FIXTURE_PLUGINS)]
    assert not inside, f"fixture plugin folders on sys.path: {inside}"


def test_no_fixture_plugin_is_discovered_unless_a_test_registers_it() -> None:
    fixtures = {
        name
        for pyproject in FIXTURE_PLUGINS.glob("*/pyproject.toml")
        for name in tomllib.loads(pyproject.read_text())["project"]["entry-points"]["minds"]
    }
    assert {"toy", "example", "broken", "hostile"} <= fixtures
    discovered = {ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert not discovered & fixtures
