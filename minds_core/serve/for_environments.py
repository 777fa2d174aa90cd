"""The run's local engine for environment code that makes its own ``tinker.ServiceClient()``.

tinker-cookbook environments (and the seed harness's originals) reach Tinker themselves: a shadow
training client, an answerer or judge model. On the hosted backend that is the service they
always reached. On the local backend nothing answers it, so while such a run is open its engine is
served on 127.0.0.1 with a key of its own, and ``TINKER_BASE_URL`` / ``TINKER_API_KEY`` point there
(restored when the run ends). A ``TINKER_API_KEY`` already set is left alone: the environment's
own calls then go where the user sends them.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from minds_core.base.logs import get_logger

from .background import BackgroundServer, serve_in_background

log = get_logger("serve")

#: The variables the Tinker SDK reads where ``ServiceClient()`` is given no base_url or api_key.
VARIABLES = ("TINKER_BASE_URL", "TINKER_API_KEY")


class EnvironmentEndpoint:
    """The served engine and the variables it replaced; ``close()`` stops it and restores them."""

    def __init__(self, server: BackgroundServer, key: str) -> None:
        self.server = server
        self.before = {name: os.environ.get(name) for name in VARIABLES}
        os.environ["TINKER_BASE_URL"], os.environ["TINKER_API_KEY"] = server.url, key

    def close(self) -> None:
        for name, value in self.before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self.server.close()


def serve_for_environments(service: Any, base_model: str) -> EnvironmentEndpoint | None:
    """Serve the local ``service`` for environment code on loopback (see the module docstring); None when
    ``TINKER_API_KEY`` is already set."""
    if os.environ.get("TINKER_API_KEY"):
        return None
    key = "tml-" + secrets.token_urlsafe(24)
    endpoint = EnvironmentEndpoint(serve_in_background(service, [base_model], "127.0.0.1", key), key)
    log.info("the run's engine is served for environments calling tinker.ServiceClient()", url=endpoint.server.url)
    return endpoint
