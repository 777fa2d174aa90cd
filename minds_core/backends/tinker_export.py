"""Exporting a hosted checkpoint as a PEFT adapter's files (the tinker backend's ``BackendExport``).

It downloads the way the tinker SDK downloads a checkpoint: the saved state is loaded into a training
client, written out as *external weights* (a PEFT adapter: ``adapter_config.json`` +
``adapter_model.safetensors``), fetched file by file through the signed URLs of
``RestClient.get_external_weights_urls``, and the temporary export is deleted. Sampler checkpoints
(``tinker://.../sampler_weights/...``) cannot be downloaded from the service.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from minds_core.base.errors import MindsError, UsageError
from minds_core.base.logs import get_logger

__all__ = ["download_external_weights", "export_hosted"]

log = get_logger("export")

#: Lifetime of the temporary hosted export (the service's minimum).
_EXPORT_TTL_SECONDS = 3600


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
