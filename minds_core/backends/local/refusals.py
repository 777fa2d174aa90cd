"""SDK calls with no meaning on one machine, and why: refused in the same words in process and through ``minds serve``."""

from __future__ import annotations

from typing import Any

from tinker.lib.public_interfaces.api_future import APIFuture

from .futures import failed_future
from .model.errors import LocalBadRequestError

__all__ = ["WHY", "refusal", "refused"]

#: SDK ``RestClient`` method -> why minds refuses it, and what to do instead
WHY = {
    "publish_checkpoint_from_tinker_path": (
        "checkpoints are not published: each stays with whoever saved it (in process, its checkpoint root; "
        "through minds serve, the API key that saved it), so share that to share them"
    ),
    "unpublish_checkpoint_from_tinker_path": "checkpoints are not published, so there is nothing to unpublish",
    "copy_weights": "there are no projects to copy weights between; load a checkpoint by its tinker:// path",
    "assign_session_project": "there are no projects; a session belongs to the client that created it",
    "export_session_trace": "minds keeps no trace of the requests of a session",
    "whoami": "there are no accounts, so no identity to report (through minds serve, an API key is all there is)",
}


def refusal(call: str) -> str:
    """The message of a refused ``call`` (a key of ``WHY``), naming it and saying why."""
    return f"minds does not support {call}: {WHY[call]}"


def refused(call: str) -> APIFuture[Any]:
    """A future failed with the 400 that ``minds serve`` answers ``call`` with."""
    return failed_future(LocalBadRequestError(refusal(call)))
