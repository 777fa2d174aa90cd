"""Loading an openreward environment turns off the SDK's PyPI update check (no unrequested network calls)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.slow
def test_the_loader_disables_the_sdk_update_check():
    code = (
        "import os\n"
        "from minds_openreward import load_openreward_environment, UPDATE_CHECK_VARIABLE\n"
        "try:\n    load_openreward_environment()\nexcept Exception:\n    pass\n"
        "print(os.environ.get(UPDATE_CHECK_VARIABLE))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "OPENREWARD_DISABLE_UPDATE_CHECK"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.strip() == "1"
