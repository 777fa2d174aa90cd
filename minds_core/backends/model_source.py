"""Where the local backend finds a base model, checked before torch is imported and before the hub is asked.

A name is a built-in model (``minds-small``, ``minds-tiny``: made on this machine), a model directory, or a Hugging Face hub id.
A hub id is looked up in the hub's cache first; one that is not there fails at once, naming the
cache, when the hub is off (``HF_HUB_OFFLINE=1``/``TRANSFORMERS_OFFLINE=1``) or cannot be reached
(one connection, a few seconds at most), instead of going through the hub client's retries.
"""

from __future__ import annotations

import os
import socket
import urllib.parse
from pathlib import Path

from minds_core.base.errors import ConfigError
from minds_core.config import BUILTIN_MODELS

#: The subfolder ``minds export --merge`` writes the merged model to.
MERGED_DIR = "merged"

#: Seconds to wait for a connection to the hub before calling it unreachable.
HUB_PROBE_TIMEOUT = 3.0
_TRUE = ("1", "on", "yes", "true")


def check_model_source(name: str, key: str = "model.base_model") -> None:
    """A ConfigError (naming ``key``) when the local backend cannot have model ``name`` without a long wait."""
    if name in BUILTIN_MODELS:
        return
    if os.path.isdir(name):
        check_model_directory(name, key)
        return
    hint = (
        f"use {BUILTIN_MODELS[0]!r} (a small model that ships with minds), {BUILTIN_MODELS[1]!r} (random), "
        "a directory holding a transformers model, or a Hugging Face hub id"
    )
    if not name or name.startswith(("/", "./", "../", "~")) or name.count("/") > 1:
        raise ConfigError(f"{key} = {name!r}: no such model directory; {hint}")
    from huggingface_hub import constants, try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        raise ConfigError(f"{key} = {name!r}: not a model directory, nor a valid hub id ({exc}); {hint}") from None
    if isinstance(try_to_load_from_cache(name, "config.json"), str):
        return
    cache = constants.HF_HUB_CACHE
    offline = next((v for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE") if os.environ.get(v, "").lower() in _TRUE), None)
    if offline:
        raise ConfigError(
            f"{key} = {name!r}: not in the Hugging Face cache ({cache}) and the hub is off ({offline} is set); "
            f"download it while online, or {hint}"
        )
    unreachable = _hub_unreachable(constants.ENDPOINT)
    if unreachable:
        raise ConfigError(
            f"{key} = {name!r}: not in the Hugging Face cache ({cache}) and the hub cannot be reached ({unreachable}); "
            f"download it while online, or {hint}"
        )


def check_model_directory(path: str, key: str = "model.base_model") -> None:
    """A ConfigError (naming ``key``) when directory ``path`` is not a transformers model, saying what it is instead."""
    folder = Path(path)
    if (folder / "config.json").is_file():
        return
    merged = folder / MERGED_DIR
    if (merged / "config.json").is_file():
        raise ConfigError(
            f"{key} = {path!r} is a `minds export` folder: it holds the LoRA adapter (adapter_config.json, "
            f"adapter_model.safetensors) and, in {MERGED_DIR}/, the merged model; use {str(merged)!r}"
        )
    if (folder / "adapter_config.json").is_file():
        raise ConfigError(
            f"{key} = {path!r} holds a LoRA adapter, not a model: export it with `minds export CHECKPOINT {path} --merge` "
            f"and use {str(merged)!r}, or start from its checkpoint with trainer.resume_from"
        )
    raise ConfigError(f"{key} = {path!r}: the directory has no config.json, so it is not a transformers model directory")


def _hub_unreachable(endpoint: str) -> str:
    """Why the hub at ``endpoint`` cannot be reached, or '' (also when a proxy stands between, which is not probed)."""
    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return ""
    url = urllib.parse.urlsplit(endpoint)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=HUB_PROBE_TIMEOUT):
            return ""
    except OSError as exc:
        return f"{host}:{port}: {exc.strerror or exc}"
