"""Signed download URLs of checkpoint files, as the SDK's ``get_external_weights_urls`` hands them out.

``tinker checkpoint download`` (and ``minds export``) fetch each file of an
external-weights checkpoint with plain ``urllib``, which sends no API key: the
URL itself is the permission. ``minds serve`` signs ``/api/v1/downloads/<run>/
<kind>/<name>/<file>?expires=...&signature=...`` with a secret of its own (made
at start, never sent), so a URL works for its one file until it expires (an
hour, or the checkpoint's own expiry if sooner), and reveals no server folder.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

from tinker import types

from minds_core.backends.local.catalog import Catalog
from minds_core.backends.local.training.checkpoints import parse_path
from minds_core.http.errors import BadRequest, NotFound, Unauthorized

__all__ = ["DOWNLOADS_PREFIX", "Downloads"]

DOWNLOADS_PREFIX = "/api/v1/downloads/"
#: How long a signed URL works (the SDK re-signs within five minutes of the end).
URL_SECONDS = 3600


class Downloads:
    """Signs and checks download URLs of one checkpoint catalog's files."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._secret = secrets.token_bytes(32)

    def urls(self, run_id: str, checkpoint_id: str, base_url: str) -> types.ExternalWeightsUrlsResponse:
        """One signed URL per file of the checkpoint ``tinker://<run_id>/<checkpoint_id>`` (404 when there is none)."""
        tinker_path = f"tinker://{run_id}/{checkpoint_id}"
        if parse_path(tinker_path)[1] != "external_weights":
            raise BadRequest(f"{tinker_path}: download URLs are for external weights (save_weights_external) only")
        files = self.catalog.files(tinker_path)
        expires = int(time.time()) + URL_SECONDS
        ends = self.catalog.checkpoint(tinker_path).expires_at
        if ends is not None:
            expires = min(expires, int(ends.timestamp()))
        urls = {}
        for name in files:
            target = f"{run_id}/{checkpoint_id}/{name}"
            urls[name] = f"{base_url}{DOWNLOADS_PREFIX}{quote(target)}?expires={expires}&signature={self._sign(target, expires)}"
        return types.ExternalWeightsUrlsResponse(urls=urls, expires=datetime.fromtimestamp(expires, UTC))

    def file(self, url: str) -> Path:
        """The file a signed URL names; 401 when its signature is wrong or it has expired, 404 when the file is gone."""
        parts = urlsplit(url)
        target = unquote(parts.path.removeprefix(DOWNLOADS_PREFIX))
        query = parse_qs(parts.query)
        try:
            expires = int(query["expires"][0])
            signature = query["signature"][0]
        except (KeyError, ValueError):
            raise Unauthorized("A download URL needs its expires and signature: ask get_external_weights_urls for one") from None
        if not hmac.compare_digest(signature, self._sign(target, expires)):
            raise Unauthorized("This download URL's signature does not match: ask get_external_weights_urls for a new one")
        if expires <= time.time():
            raise Unauthorized("This download URL has expired: ask get_external_weights_urls for a new one")
        run_id, kind, name, file_name = target.split("/", 3)
        found = self.catalog.files(f"tinker://{run_id}/{kind}/{name}").get(file_name)
        if found is None:
            raise NotFound(f"tinker://{run_id}/{kind}/{name} has no file {file_name!r}")
        return found

    def _sign(self, target: str, expires: int) -> str:
        return hmac.new(self._secret, f"{target}\n{expires}".encode(), hashlib.sha256).hexdigest()
