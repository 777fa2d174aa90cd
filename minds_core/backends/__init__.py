"""Backends: services speaking the Tinker client API (the hosted service, or local torch)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from minds_core.backends.builtin_folders import made_builtin_folder
from minds_core.base.errors import UsageError
from minds_core.config import BUILTIN_MODELS, RunConfig
from minds_core.config.schema import LOCAL_CHECKPOINTS
from minds_core.contract.parts import BackendFit

if TYPE_CHECKING:
    from minds_core.contract.plugins import Registry

@attrs.frozen
class BackendChoice:
    """The backend a run uses and why (logged on one line, the ``backend chosen`` line)."""

    name: str  #: a registered backend name (``local``, ``tinker``, a plugin's)
    reason: str  #: one sentence: what made ``auto`` pick it, or that the config named it


def sampler_tokenizer(sampler: Any, base_model: str) -> Any:
    """The tokenizer of a sampling client.

    The hosted SDK loads it by the model's name from the Hugging Face hub; a model
    only this machine has (``minds-small`` or ``minds-tiny`` behind ``minds serve``) is read
    from the folder the local backend makes it in, without asking the hub (which has no such
    model: offline, the SDK's lookup retried for about a minute before failing). Where that folder
    is made already, neither the local backend nor transformers' model code is imported (seconds
    in each Ray worker): the built-in models' tokenizer is a ``PreTrainedTokenizerFast``. The local
    backend's own samplers give theirs. Any other failure is a UsageError.
    """
    import tinker

    if base_model in BUILTIN_MODELS and isinstance(sampler, tinker.SamplingClient):
        from transformers import PreTrainedTokenizerFast

        folder = made_builtin_folder(base_model)
        if folder is None:  # not made on this machine yet: the local backend makes it
            from minds_core.backends.local.model.builtin_models import builtin_model_path

            folder = builtin_model_path(base_model)
        return PreTrainedTokenizerFast.from_pretrained(str(folder))
    try:
        return sampler.get_tokenizer()
    except OSError as exc:
        raise UsageError(f"cannot load the tokenizer of {base_model!r}: {exc}") from None


def model_tokenizer(base_model: str) -> Any:
    """The tokenizer of ``base_model`` before any client exists, from where the local backend reads the model
    (an embedded default's folder, a model directory, the Hugging Face cache, then the hub)."""
    from transformers import AutoTokenizer

    from minds_core.backends.local.model.models import locate

    source = locate(base_model)
    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=True)
    except OSError:  # not in the cache: the hub
        return AutoTokenizer.from_pretrained(source)


def choose_backend(config: RunConfig, registry: Registry) -> BackendChoice:
    """The backend the config names, or for ``auto`` the registered backend that serves the run and is preferred most.

    ``auto`` asks every registered backend with ``can_serve(config)``; the reason says why the
    chosen one serves and why each backend preferred over it does not. Ties go to the first name.
    """
    if config.backend != "auto":
        return BackendChoice(config.backend, "set by backend")
    fits: dict[str, BackendFit] = {
        entry.name: entry.obj.can_serve(config)
        for entry in registry.entries("backends")
        if callable(getattr(entry.obj, "can_serve", None))
    }
    serving = sorted((name for name, fit in fits.items() if fit.serves), key=lambda name: (-fits[name].preference, name))
    if not serving:
        why = "; ".join(f"{name}: {fit.reason}" for name, fit in fits.items()) or "no backend takes part in auto"
        raise UsageError(f"backend = auto: no registered backend can serve this run ({why}); set backend to one")
    chosen = serving[0]
    passed = [fit.reason for fit in fits.values() if not fit.serves and fit.preference > fits[chosen].preference]
    return BackendChoice(chosen, "; ".join([*passed, fits[chosen].reason]))


def rest_client(service: Any) -> Any:
    """The service's ``RestClient`` (checkpoints: list, info, delete), on the service's own URL and key.

    Both built-in backends make one with ``create_rest_client()``; the SDK deprecates it (with a
    FutureWarning) for ``tinker.RestClient()``, which only the hosted backend could build.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return service.create_rest_client()


def local_checkpoint_root(config: RunConfig) -> Path:
    """Where the local backend keeps checkpoints: ``<runs_dir>/_checkpoints``."""
    return Path(config.runs_dir) / LOCAL_CHECKPOINTS


class LocalBackend:
    """The ``local`` BackendFactory: the in-process torch + peft service; under ``auto``, the fallback."""

    def __call__(self, config: RunConfig, run_dir: Path) -> Any:
        return create_local_service(config, run_dir)

    def can_serve(self, config: RunConfig) -> BackendFit:
        return BackendFit(True, "the local backend trains on this machine", preference=0)

    def export_adapter(self, config: RunConfig, service: Any, checkpoint: str, out_dir: Path) -> str:
        """The adapter of ``checkpoint``, read from the local store (the service is not needed)."""
        from minds_core.backends.local.export import export_local

        return export_local(local_checkpoint_root(config), checkpoint, out_dir)


def create_local_service(config: RunConfig, run_dir: Path) -> Any:
    """The in-process torch + peft service on ``local.device``; checkpoints live under the runs directory."""
    try:
        from minds_core.backends.local import LocalBadRequestError, create_service_client
    except ImportError as exc:
        from minds_core.base.installing import pip_install

        raise UsageError(f"the local backend needs torch and peft: {pip_install(extras='local')} ({exc})") from None
    try:
        return create_service_client(
            local_checkpoint_root(config),
            config.local.device,
            config.local.cuda_graphs,
            config.local.compile,
            run_shape(config),
        )
    except LocalBadRequestError as exc:
        raise UsageError(str(exc)) from None


def run_shape(config: RunConfig) -> Any:
    """What a run declares to the local backend's memory plan (``memory_plan.RunShape``): the rows it samples at
    once (its rollouts per step, within ``rollout.concurrency``; one for SFT), the tokens of a sequence, the rank."""
    from minds_core.backends.local.model.memory_plan import RunShape

    trainer, sampling = config.trainer, config.sampling
    rows = 1 if trainer.mode == "sft" else min(trainer.group_size * trainer.groups_per_batch, config.rollout.concurrency)
    return RunShape(
        rows=rows,
        context=config.rollout.max_total_tokens,
        rank=config.model.lora_rank,
        temperature=sampling.temperature,
        truncated=sampling.top_k != -1 or sampling.top_p < 1,
    )


def backend_settings(config: RunConfig, backend: str) -> dict[str, str]:
    """The settings the ``backend chosen`` line shows beside the backend (the local backend's device switches)."""
    if backend != "local":
        return {}
    local = config.local
    return {"device": local.device, "cuda_graphs": local.cuda_graphs, "compile": local.compile}
