"""Exporting a trained adapter as a standard PEFT directory (and, optionally, a merged transformers model).

The result loads without minds::

    base = AutoModelForCausalLM.from_pretrained(BASE_DIR_OR_HUB_ID)
    model = PeftModel.from_pretrained(base, OUT_DIR)

The backend holding the checkpoint writes the adapter's files (``BackendExport.export_adapter``,
asked through the command's ``ServiceLifetime``); minds adds the provenance and model card, and merges.
The local backend reads its own store (``minds_core.backends.local.export``); the hosted one downloads
the way the tinker SDK downloads a checkpoint (``minds_core.backends.tinker_export``).

Importing this module does not import torch; exporting does.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from minds_core.backends.model_source import MERGED_DIR
from minds_core.base.errors import MindsError, UsageError
from minds_core.checkpoints.reference import CheckpointRef

if TYPE_CHECKING:
    from minds_core.session.service import ServiceLifetime

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
#: Provenance written beside the adapter (ignored by peft).
EXPORT_INFO = "minds_export.json"
#: The model card: what the adapter is, where it came from, how to load it.
MODEL_CARD = "README.md"


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
