"""Who created what on ``minds serve``: each client, known by its API key, sees only its own state.

A client is the ``X-API-Key`` it sends, kept as a keyed digest (HMAC-SHA256 under a random
secret of the checkpoint root, ``serve-owners.secret``, readable by its owner only), never as the key. Sessions, training
runs, sampling sessions and pending results are kept per client in memory (``engine``); training
runs, and so their checkpoints, are also recorded in ``<checkpoint root>/serve-owners.jsonl``, so
that a server restarted on the same root keeps clients apart. Another client asking for any of
them is answered 404, as if it did not exist. Runs the file does not name (checkpoints written to
the root by an in-process minds run, say) are shared by every client.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path

from minds_core.base.errors import UsageError

__all__ = ["OWNERS_FILE", "SECRET_FILE", "RunOwners"]

OWNERS_FILE = "serve-owners.jsonl"
SECRET_FILE = "serve-owners.secret"


class RunOwners:
    """The client that created each training run, read from and appended to ``root / OWNERS_FILE``."""

    def __init__(self, root: Path) -> None:
        self._file = root / OWNERS_FILE
        self._secret = _secret(root / SECRET_FILE)
        self._lock = threading.Lock()
        self._owners: dict[str, str] = {}
        if self._file.is_file():
            for line in self._file.read_text().splitlines():
                try:
                    record = json.loads(line)
                    self._owners[str(record["run"])] = str(record["client"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line of a server that was killed mid-write

    def client_of(self, api_key: str) -> str:
        """The client an ``X-API-Key`` stands for (an absent key is one client too)."""
        return hmac.new(self._secret, api_key.encode(), hashlib.sha256).hexdigest()[:32]

    def claim(self, run_id: str, client: str) -> None:
        """Record ``client`` as the creator of ``run_id``."""
        with self._lock:
            self._owners[run_id] = client
            self._file.parent.mkdir(parents=True, exist_ok=True)
            with self._file.open("a") as out:
                out.write(json.dumps({"run": run_id, "client": client}) + "\n")

    def visible(self, run_id: str, client: str) -> bool:
        """Whether ``client`` may see ``run_id``: it created it, or no client of this server did."""
        with self._lock:
            owner = self._owners.get(run_id)
        return owner is None or owner == client


def _secret(path: Path) -> bytes:
    """The root's digest secret: read, or made (owner-only, whole or not at all) by the first server on the root."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        staging = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        descriptor = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as out:
            out.write(secrets.token_hex(32))
        try:
            os.link(staging, path)
        except FileExistsError:
            pass  # another server on the same root made it first: theirs is the one
        finally:
            staging.unlink()
    try:
        return bytes.fromhex(path.read_text().strip())
    except ValueError:
        raise UsageError(
            f"{path.name} in the --checkpoint-root is not minds serve's (hex expected): remove it, and with it "
            f"{OWNERS_FILE} (clients then no longer own the runs listed there)"
        ) from None
