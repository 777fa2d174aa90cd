"""What a CHECKPOINT argument names: a run folder (its last checkpoint) or a ``tinker://`` path.

A run folder brings its own config (``config.yaml``, secrets dropped) and its
checkpoints (``checkpoints.jsonl``). A ``tinker://`` path takes its config from
``--config`` and ``--set``. With ``backend = "auto"``, a checkpoint that the
local backend holds under ``<runs_dir>/_checkpoints`` is read locally.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from minds_core.backends import choose_backend, local_checkpoint_root
from minds_core.base.errors import UsageError
from minds_core.config import RunConfig, load_config
from minds_core.training.run_directory import CHECKPOINTS_FILE, CONFIG_FILE, RunDirectory

if TYPE_CHECKING:
    from minds_core.contract.plugins import Registry

SCHEME = "tinker://"


@attrs.frozen
class CheckpointRef:
    """A resolved checkpoint.

    ``sampler_path`` is what a sampling client loads; ``state_path`` (a
    ``tinker://.../weights/...`` or ``.../external_weights/...`` path, when known)
    is the full saved state, which can be exported;
    ``run_dir`` and ``step`` are set for a run folder; ``config`` is the run's
    (or the given) configuration, its ``backend`` the one holding the checkpoint.
    """

    config: RunConfig
    sampler_path: str
    state_path: str | None = None
    run_dir: Path | None = None
    step: int | None = None

    @property
    def label(self) -> str:
        """A short name for files: ``step-000019`` for a run's checkpoint, else the path's last segment."""
        if self.step is not None:
            return f"step-{self.step:06d}"
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in self.sampler_path.rstrip("/").rsplit("/", 1)[-1])


def resolve_checkpoint(
    text: str,
    config_file: str | None = None,
    overrides: Sequence[str] = (),
    step: int | None = None,
    registry: Registry | None = None,
) -> CheckpointRef:
    """A run folder or a tinker:// path as a CheckpointRef; a UsageError saying what is wrong otherwise.

    ``registry`` (the loaded plugins') picks the backend when the config's is ``auto``.
    """
    if text.startswith(SCHEME):
        if step is not None:
            raise UsageError("--step picks a checkpoint of a run folder; a tinker:// path already names one")
        config = load_config(config_file, overrides)
        state = text if _kind(text) in ("weights", "external_weights") else None
        return CheckpointRef(_with_backend(config, text, registry), text, state)
    run_dir = Path(text)
    if not (run_dir / CONFIG_FILE).is_file():
        hint = "no such folder" if not run_dir.exists() else f"no {CONFIG_FILE} in it"
        raise UsageError(f"checkpoint {text!r}: not a run folder ({hint}) nor a tinker:// path; runs live under runs/<name>/")
    if config_file:
        raise UsageError(f"{text} is a run folder and brings its own config: drop --config (change keys with --set)")
    config = load_config(run_dir / CONFIG_FILE, overrides, drop_redacted=True)
    config = attrs.evolve(config, name=run_dir.name, runs_dir=str(run_dir.parent))
    saved = RunDirectory(run_dir).checkpoints()
    if not saved:
        raise UsageError(
            f"run {run_dir} has no checkpoint yet ({CHECKPOINTS_FILE} is empty): a run saves at its last step "
            "and every trainer.save_every steps"
        )
    if step is not None:
        chosen = [c for c in saved if c.step == step]
        if not chosen:
            raise UsageError(f"run {run_dir} has no checkpoint of step {step}; saved steps: {', '.join(str(c.step) for c in saved)}")
        checkpoint = chosen[-1]
    else:
        checkpoint = saved[-1]
    sampler = checkpoint.sampler_path or checkpoint.state_path
    return CheckpointRef(_with_backend(config, sampler, registry), sampler, checkpoint.state_path, run_dir, checkpoint.step)


def _kind(path: str) -> str:
    parts = path[len(SCHEME) :].split("/")
    return parts[1] if len(parts) >= 3 else ""


def _with_backend(config: RunConfig, path: str, registry: Registry | None) -> RunConfig:
    """The config with the backend that holds ``path`` (auto: local when the local store has it)."""
    if config.backend != "auto":
        return config
    if (local_checkpoint_root(config) / path[len(SCHEME) :]).is_dir():
        return attrs.evolve(config, backend="local")
    if registry is None:
        raise UsageError(f"{path}: set backend (the plugins are not loaded, so backend = auto cannot choose)")
    return attrs.evolve(config, backend=choose_backend(config, registry).name)
