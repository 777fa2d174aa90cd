"""Who created what on ``minds serve``: each client, known by its API key, sees only its own state.

A client is the ``X-API-Key`` it sends (kept as a digest, never as the key). Sessions, training
runs, sampling sessions and pending results are kept per client in memory (``engine``); training
runs, and so their checkpoints, are also recorded in ``<checkpoint root>/serve-owners.jsonl``, so
that a server restarted on the same root keeps clients apart. Another client asking for any of
them is answered 404, as if it did not exist. Runs the file does not name (checkpoints written to
the root by an in-process minds run, say) are shared by every client.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

__all__ = ["OWNERS_FILE", "RunOwners", "client_of"]

OWNERS_FILE = "serve-owners.jsonl"


def client_of(api_key: str) -> str:
    """The client an ``X-API-Key`` stands for: a digest of it (an absent key is one client too)."""
    return hashlib.sha256(api_key.encode()).hexdigest()[:32]


class RunOwners:
    """The client that created each training run, read from and appended to ``root / OWNERS_FILE``."""

    def __init__(self, root: Path) -> None:
        self._file = root / OWNERS_FILE
        self._lock = threading.Lock()
        self._owners: dict[str, str] = {}
        if self._file.is_file():
            for line in self._file.read_text().splitlines():
                try:
                    record = json.loads(line)
                    self._owners[str(record["run"])] = str(record["client"])
                except (ValueError, KeyError, TypeError):
                    continue  # a torn last line of a server that was killed mid-write

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
