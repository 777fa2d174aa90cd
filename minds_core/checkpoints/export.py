"""Exporting a trained adapter as a standard PEFT directory (and, optionally, a merged transformers model).

The result loads without minds::

    base = AutoModelForCausalLM.from_pretrained(BASE_DIR_OR_HUB_ID)
    model = PeftModel.from_pretrained(base, OUT_DIR)

The backend holding the checkpoint writes the adapter's files
(``BackendFactory.export_adapter``, asked through the command's
``ServiceLifetime``); minds adds the provenance and model card, and merges.
The local backend reads its own store (``export_local``). The hosted one
downloads the way the tinker SDK downloads a checkpoint (``export_hosted``): the saved state is
loaded into a training client, written out as *external weights* (a PEFT
adapter: ``adapter_config.json`` + ``adapter_model.safetensors``), fetched
file by file through the signed URLs of ``RestClient.get_external_weights_urls``,
and the temporary export is deleted. Sampler checkpoints
(``tinker://.../sampler_weights/...``) cannot be downloaded from the service.

Importing this module does not import torch; exporting does.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minds_core.backends.model_source import MERGED_DIR
from minds_core.base.errors import MindsError, UsageError
from minds_core.base.logs import get_logger
from minds_core.checkpoints.reference import CheckpointRef
from minds_core.config import RunConfig

if TYPE_CHECKING:
    from minds_core.session.service import ServiceLifetime

log = get_logger("export")

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: Provenance written beside the adapter (ignored by peft).
EXPORT_INFO = "minds_export.json"
#: The model card: what the adapter is, where it came from, how to load it.
MODEL_CARD = "README.md"
#: Lifetime of the temporary hosted export (the service's minimum).
_EXPORT_TTL_SECONDS = 3600


def export_checkpoint(ref: CheckpointRef, out_dir: Path, door: ServiceLifetime, *, merge: bool = False) -> dict[str, Any]:
    """Write ``ref``'s adapter to ``out_dir`` (and the merged model to ``out_dir/merged``); what was written.

    ``out_dir`` must not exist or be empty; it is filled in a staging folder
    and renamed into place, so a failed export leaves nothing half-written.
    ``door`` is the open service of the backend holding the checkpoint; it writes the adapter's files.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"{out_dir} is a file, not a folder: export to a new folder")
    if out_dir.exists() and any(out_dir.iterdir()):
        raise UsageError(f"{out_dir} already exists and is not empty: export to a new folder")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    try:
        source = ref.state_path or ref.sampler_path  # the full state when known: a hosted service lets only it be downloaded
        base_model = door.export_adapter(source, staging)
        _check_adapter(staging, base_model)
        info = {"source": source, "base_model": base_model, "step": ref.step}
        (staging / EXPORT_INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        (staging / MODEL_CARD).write_text(model_card(ref, staging, source), encoding="utf-8")  # over peft's blank template
        if merge:
            merge_adapter(staging, staging / MERGED_DIR)
        os.chmod(staging, 0o755)
        if out_dir.exists():
            out_dir.rmdir()
        os.rename(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {"adapter": str(out_dir), "merged": str(out_dir / MERGED_DIR) if merge else None, **info}


def model_card(ref: CheckpointRef, adapter_dir: Path, source: str) -> str:
    """A model card for the exported adapter: the base model and LoRA rank (from ``adapter_config.json``), how minds
    trained it (mode, environments or SFT data, steps) and how to load it with transformers + peft."""
    adapter = json.loads((adapter_dir / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    base = adapter.get("base_model_name_or_path") or "?"
    cfg = ref.config
    if cfg.trainer.mode == "sft":
        trained = f"supervised fine-tuning (cross_entropy) on `{cfg.sft.data or 'the environment tasks'}`"
    else:
        envs = ", ".join(f"`{e.id}`" for e in cfg.environments) or "?"
        trained = f"reinforcement learning (`{cfg.trainer.loss_fn}`) on the environment(s) {envs}"
    step = "" if ref.step is None else f", saved after step {ref.step}"
    return (
        f"---\nbase_model: {json.dumps(base)}\nlibrary_name: peft\ntags: [minds, lora]\n---\n\n"
        f"# LoRA adapter for {base}\n\n"
        f"A LoRA adapter (rank {adapter.get('r', '?')}) for the base model `{base}`, trained with minds by {trained}"
        f"{step}; exported from `{source}`.\n\n"
        "Load it with transformers + peft (no minds needed):\n\n"
        "```python\nfrom peft import PeftModel\nfrom transformers import AutoModelForCausalLM, AutoTokenizer\n\n"
        f"base = AutoModelForCausalLM.from_pretrained({base!r})\ntokenizer = AutoTokenizer.from_pretrained({base!r})\n"
        "model = PeftModel.from_pretrained(base, \"path/to/this/folder\")\n```\n\n"
        f"`{EXPORT_INFO}` records the checkpoint it came from.\n"
    )


def export_local(config: RunConfig, path: str, out: Path) -> str:
    """The local store's adapter, put on its base model and saved by peft itself; the base model's name."""
    from minds_core.backends import local_checkpoint_root
    from minds_core.backends.local.checkpoints import CheckpointStore
    from minds_core.backends.local.errors import LocalBadRequestError, LocalNotFoundError
    from minds_core.backends.local.lora import attach_lora, load_adapter_state
    from minds_core.backends.local.models import BaseModelRegistry
    from minds_core.backends.local.placement import resolve_placement

    try:
        checkpoint = CheckpointStore(local_checkpoint_root(config)).load(path, with_optimizer=False)
        base = BaseModelRegistry(resolve_placement("cpu")).get(checkpoint.base_model)  # float32 on the CPU: exact adapter weights
    except (LocalNotFoundError, LocalBadRequestError) as exc:
        raise UsageError(f"cannot export {path}: {exc}") from None
    model = attach_lora(base.model, checkpoint.lora, seed=0)
    load_adapter_state(model, checkpoint.adapter)
    model.save_pretrained(str(out), save_embedding_layers=False)  # the adapter only, as the store keeps it
    return checkpoint.base_model


def export_hosted(path: str, out: Path, service: Any, rest: Any) -> str:
    """Download a hosted checkpoint's adapter into ``out`` through ``service`` (a ``tinker.ServiceClient``) and
    ``rest`` (its ``RestClient``); the base model's name."""
    if "/sampler_weights/" in path:
        raise UsageError(
            f"{path} is a sampler checkpoint, which the service does not let anyone download: "
            "export the run folder or its tinker://.../weights/... state_path (checkpoints.jsonl)"
        )
    if "/external_weights/" in path:
        download_external_weights(rest, path, out)
    else:
        training = service.create_training_client_from_state(path, user_metadata={"created_by": "minds export"}).result()
        export = training.save_weights_external("minds-export", ttl_seconds=_EXPORT_TTL_SECONDS).result().path
        try:
            download_external_weights(rest, export, out)
        finally:
            try:
                rest.delete_checkpoint_from_tinker_path(export).result()
            except Exception as exc:  # noqa: BLE001 - the download stands; the export expires on its own
                log.warning("could not delete the temporary export; it expires in an hour", path=export, error=str(exc))
    return rest.get_weights_info_by_tinker_path(path).result().base_model


def download_external_weights(rest: Any, path: str, out: Path) -> list[str]:
    """Fetch every file of an external-weights checkpoint into ``out``; the relative names written."""
    response = rest.get_external_weights_urls(path).result()
    if not response.urls:
        raise MindsError(f"{path}: the service lists no files for this checkpoint")
    root = out.resolve()
    written = []
    for name, url in sorted(response.urls.items()):
        if name.endswith(".age"):
            raise UsageError(f"{path} holds age-encrypted files ({name}): decrypt them with age, then load with peft")
        target = (out / name).resolve()
        if not target.is_relative_to(root) or target == root:
            raise MindsError(f"{path}: the service named an unsafe file path {name!r}; nothing was exported")
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with urllib.request.urlopen(url, timeout=60) as response_body, open(target, "wb") as sink:
                shutil.copyfileobj(response_body, sink, 1 << 20)
        except (urllib.error.URLError, TimeoutError) as exc:
            raise MindsError(f"{path}: downloading {name} failed: {exc}") from None
        written.append(name)
    return written


def _check_adapter(out: Path, base_model: str) -> None:
    """Check the backend wrote a PEFT adapter and that its config names the base model."""
    config_path = out / ADAPTER_CONFIG
    if not config_path.is_file() or not (out / ADAPTER_WEIGHTS).is_file():
        found = ", ".join(sorted(p.name for p in out.iterdir())) or "nothing"
        raise MindsError(f"the exported checkpoint is not a PEFT adapter (expected {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}; got {found})")
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if not isinstance(config.get("base_model_name_or_path"), str) or not config["base_model_name_or_path"]:
        config["base_model_name_or_path"] = base_model
        config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def merge_adapter(adapter_dir: Path, out: Path) -> None:
    """Load the adapter on its base model with plain transformers + peft, merge, save model and tokenizer."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_name = json.loads((adapter_dir / ADAPTER_CONFIG).read_text(encoding="utf-8"))["base_model_name_or_path"]
    try:
        base = AutoModelForCausalLM.from_pretrained(base_name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(base_name)
    except OSError as exc:
        raise UsageError(f"--merge needs the base model {base_name!r} on this machine or from the hub: {exc}") from None
    with warnings.catch_warnings():  # peft reads a deprecated transformers property: noise for our users
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
