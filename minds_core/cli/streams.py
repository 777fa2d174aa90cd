"""Where the commands' output goes: stdout for the command's reader, stderr for whatever plugin code prints."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def plugin_prints_to_stderr() -> Iterator[None]:
    """While plugin code runs (imports, environments, rollouts), what it prints goes to stderr: stdout holds only
    what the command prints for its reader (``--json``, a dry run's config), so ``minds eval --json | jq`` works."""
    with contextlib.redirect_stdout(sys.stderr):
        yield
