"""Backends: services speaking the Tinker client API (the hosted service, or local torch)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import attrs

from minds_core.backends.tinker import resolve_api_key
from minds_core.config import DEFAULT_BASE_MODEL, RunConfig
from minds_core.errors import UsageError


@attrs.frozen
class BackendChoice:
    """The backend a run uses and why (logged on one line when ``backend = "auto"``)."""

    name: str  #: a registered backend name (``local``, ``tinker``, a plugin's)
    reason: str  #: one sentence: what made ``auto`` pick it, or that the config named it


def local_only_model(model: str) -> str | None:
    """Why the hosted service cannot serve ``model`` (a model only this machine has), else None."""
    if model == DEFAULT_BASE_MODEL:
        return f"model {model!r} is built by the local backend"
    if model.startswith(("/", "./", "../", "~")) or os.path.isdir(os.path.expanduser(model)):
        return f"model {model!r} is a local directory"
    return None


def sampler_tokenizer(sampler: Any, base_model: str) -> Any:
    """The tokenizer of a sampling client.

    The hosted SDK loads it by the model's name from the Hugging Face hub; a model
    only this machine has (``minds-tiny`` behind ``minds serve``) is read from the
    directory the local backend builds it into. Any other failure is a UsageError.
    """
    try:
        return sampler.get_tokenizer()
    except OSError as exc:
        if base_model != DEFAULT_BASE_MODEL:
            raise UsageError(f"cannot load the tokenizer of {base_model!r}: {exc}") from None
    from transformers import AutoTokenizer

    from minds_core.backends.local.tiny_model import tiny_model_path

    return AutoTokenizer.from_pretrained(str(tiny_model_path()))


def choose_backend(config: RunConfig) -> BackendChoice:
    """``auto``: the hosted service when an API key is configured and it can serve the model, else local."""
    if config.backend != "auto":
        return BackendChoice(config.backend, "set by backend")
    where = "[tinker] api_key" if config.tinker.api_key else f"${config.tinker.api_key_env}"
    if not resolve_api_key(config.tinker):
        return BackendChoice("local", f"no Tinker API key ({where} is not set)")
    local_only = local_only_model(config.model.base_model)
    if local_only:
        return BackendChoice("local", f"{local_only}, which the hosted service cannot serve; the key in {where} is not used")
    return BackendChoice("tinker", f"a Tinker API key is configured ({where}) and model {config.model.base_model!r} is not local")


def local_checkpoint_root(config: RunConfig) -> Path:
    """Where the local backend keeps checkpoints: ``<runs_dir>/_checkpoints``."""
    return Path(config.runs_dir) / "_checkpoints"


def create_local_service(config: RunConfig, run_dir: Path) -> Any:
    """The in-process torch + peft service on ``local.device``; checkpoints live under the runs directory."""
    try:
        from minds_core.backends.local import LocalBadRequestError, create_service_client
    except ImportError as exc:
        raise UsageError(f'the local backend needs torch and peft: pip install "minds-core[local]" ({exc})') from None
    try:
        return create_service_client(local_checkpoint_root(config), config.local.device)
    except LocalBadRequestError as exc:
        raise UsageError(str(exc)) from None
