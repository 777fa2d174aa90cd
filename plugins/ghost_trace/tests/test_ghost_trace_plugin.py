"""The installed distribution registers its parts and does not import torch at import time."""

import subprocess
import sys

from minds_core.contract.plugins import load_plugins
from minds_ghost_trace.environment import REWARD_NAME


def test_plugin_registers_the_environment_and_reward() -> None:
    loaded = load_plugins()
    info = next(p for p in loaded.plugins if p.name == "ghost_trace")
    assert info.ok, info.errors
    assert info.registered == {"environments": ["ghost_trace"], "reward_functions": [REWARD_NAME]}


def test_importing_the_plugin_does_not_import_torch() -> None:
    code = "import sys, minds_ghost_trace; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"
