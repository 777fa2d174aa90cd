"""Checkpoints on disk, addressed by tinker paths.

``tinker://<run_id>/weights/<name>`` (``save_state``: adapter + optimizer),
``tinker://<run_id>/sampler_weights/<name>`` (adapter only) and
``tinker://<run_id>/external_weights/<name>`` (``save_weights_external``: the
adapter for use outside minds) live in
``<root>/<run_id>/<kind>/<name>/``, holding a standard peft
adapter (``adapter_model.safetensors``, ``adapter_config.json``),
``minds_checkpoint.json`` (base model and LoRA settings) and, for ``weights``,
``optimizer.safetensors``. Each is written into a hidden staging directory
beside its final place and renamed into place, so a save killed midway leaves
no partial checkpoint; any service on the same root resolves the paths.

A checkpoint saved with ``ttl_seconds`` records ``expires_at`` in its metadata;
once past it, it is gone as far as any reader can tell (loading it is a 404,
listings leave it out), and its folder is removed by the next ``sweep`` (every
save and every listing runs one). ``set_ttl`` moves a saved checkpoint's
``expires_at`` (or clears it), as the SDK's ``set_checkpoint_ttl_from_tinker_path``.

Each checkpoint's metadata records the SHA-256 of every file it was saved with (``files``) and its own
tinker path; ``load`` checks both, so an adapter replaced by hand (an older checkpoint's copied over it)
or a checkpoint folder replaced by a link to another checkpoint is refused, naming the file, rather than
loaded as if it were the one asked for. ``MINDS_ACCEPT_CHANGED_CHECKPOINTS=1`` (``minds run
--accept-changed-checkpoints``) loads it anyway, with a warning.

A run's own ``user_metadata`` (given when its training client was made) is kept
in ``<root>/<run_id>/run.json``, for ``RestClient.get_training_run``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import torch
from peft import PeftConfig
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from minds_core.config.schema import ACCEPT_CHANGED_CHECKPOINTS as ACCEPT_CHANGED

from ..model.errors import LocalBadRequestError, LocalConflictError, LocalNotFoundError
from ..model.lora import AdapterState, LoraSpec
from .age import SUFFIX as AGE_SUFFIX
from .age import encrypt_files
from .engine import OptimizerState

__all__ = ["METADATA_FILE", "CheckpointContents", "CheckpointKind", "CheckpointStore", "parse_path"]

CheckpointKind = Literal["weights", "sampler_weights", "external_weights"]
KINDS: tuple[CheckpointKind, ...] = ("weights", "sampler_weights", "external_weights")

_FORMAT = "minds-local-checkpoint/1"
#: minds' own record of a checkpoint, beside its files (not one of the files a download hands out).
METADATA_FILE = "minds_checkpoint.json"
_ADAPTER = "adapter_model.safetensors"
_OPTIMIZER = "optimizer.safetensors"
_RUN = "run.json"
_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:=+-]*\Z")
#: Longest run id or checkpoint name: a file name is at most 255 bytes, and the store's staging and retired
#: names add up to ~70 characters around it (``.<name>.minds_checkpoint.json.<hex>.tmp``).
MAX_SEGMENT = 160
_SCHEME = "tinker://"
#: The range ``set_ttl`` takes, as the SDK documents ``set_checkpoint_ttl_from_tinker_path``'s: 1 hour to 10 years.
SET_TTL_RANGE = (3600, 10 * 365 * 24 * 3600)


@dataclass(frozen=True)
class CheckpointContents:
    """What a checkpoint holds: enough to rebuild the adapter (and its optimizer) on the base."""

    base_model: str
    lora: LoraSpec
    adapter: AdapterState
    optimizer: OptimizerState | None = None


class CheckpointStore:
    """Reads and writes checkpoints under one root directory."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def save(
        self,
        run_id: str,
        kind: CheckpointKind,
        name: str,
        checkpoint: CheckpointContents,
        adapter_config: PeftConfig,
        *,
        overwrite: bool,
        user_metadata: dict[str, str] | None = None,
        ttl_seconds: int | None = None,
        age_keys: Sequence[Any] = (),
    ) -> str:
        """Write ``checkpoint`` atomically; its tinker path. With ``ttl_seconds`` it expires that long from now.

        With ``age_keys`` (``age.parse_recipients``) its tensors and adapter config are written encrypted, as
        ``<file>.age``: such a checkpoint can be downloaded, not loaded."""
        _check_segment(name, "checkpoint name")
        if ttl_seconds is not None and (type(ttl_seconds) is not int or ttl_seconds < 1):
            raise LocalBadRequestError(f"ttl_seconds must be a whole number of seconds >= 1, or None; got {ttl_seconds!r}")
        self.sweep()
        path = f"{_SCHEME}{run_id}/{kind}/{name}"
        final = self.root / run_id / kind / name
        final.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=final.parent))
        try:
            adapter_config.save_pretrained(str(staging))
            _write_tensors(checkpoint.adapter, staging / _ADAPTER)
            if checkpoint.optimizer is not None:
                _write_tensors(checkpoint.optimizer, staging / _OPTIMIZER)
            if age_keys:
                encrypt_files(sorted(staging.iterdir()), age_keys)
            now = datetime.now(UTC)
            meta = {
                "format": _FORMAT,
                "path": path,
                "base_model": checkpoint.base_model,
                "lora": checkpoint.lora.to_json(),
                "created_at": now.isoformat(),
                "expires_at": _expires_at(ttl_seconds, now),
                "user_metadata": user_metadata or {},
                "files": {file.name: file_digest(file) for file in sorted(staging.iterdir())},
            }
            (staging / METADATA_FILE).write_text(json.dumps(meta, indent=2))
            os.chmod(staging, 0o755)
            _publish(staging, final, path, overwrite)
        except OSError as exc:
            if exc.filename or exc.errno is None:
                raise
            raise OSError(exc.errno, exc.strerror, str(staging)) from exc  # a failed write() names no file: name the folder
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return path

    def load(self, path: str, *, with_optimizer: bool) -> CheckpointContents:
        """The checkpoint at tinker ``path``; ``with_optimizer`` requires a ``weights`` checkpoint."""
        run_id, kind, name = parse_path(path)
        directory = self.root / run_id / kind / name
        meta = _read_meta(directory)
        if meta is None and (directory / METADATA_FILE).exists():
            raise LocalBadRequestError(
                f"Checkpoint {path} is damaged: {directory / METADATA_FILE} is not a checkpoint's metadata (not a JSON object)"
            )
        if meta is None:
            raise LocalNotFoundError(f"No checkpoint at {path} (looked in {directory}); {self._siblings(directory)}")
        if _is_expired(meta):
            raise LocalNotFoundError(f"Checkpoint {path} expired at {meta['expires_at']} (its ttl_seconds ran out)")
        if (directory / f"{_ADAPTER}{AGE_SUFFIX}").is_file():
            raise LocalBadRequestError(
                f"{path} was saved encrypted to its age_encryption_recipients: download it "
                "(get_external_weights_urls, tinker checkpoint download) and decrypt it; it cannot be loaded"
            )
        if with_optimizer and not (directory / _OPTIMIZER).is_file():
            raise LocalBadRequestError(
                f"{path} has no optimizer state: pass a tinker://<run>/weights/<name> path from save_state"
            )
        try:
            base_model, lora = meta["base_model"], LoraSpec.from_json(meta["lora"])
        except (KeyError, TypeError, ValueError) as exc:
            raise LocalBadRequestError(
                f"Checkpoint {path} is damaged: {directory / METADATA_FILE} lacks its LoRA settings ({exc!r})"
            ) from None
        contents = CheckpointContents(
            base_model=base_model,
            lora=lora,
            adapter=_tensors(directory / _ADAPTER, path),
            optimizer=_tensors(directory / _OPTIMIZER, path) if with_optimizer else None,
        )
        _check_unchanged(path, directory, meta, with_optimizer)  # after the reads: a damaged file is named as such
        return contents

    def metadata(self, run_id: str | None = None) -> Iterator[tuple[Path, dict[str, Any]]]:
        """``(folder, metadata)`` of every unexpired checkpoint (of ``run_id``, or of every run)."""
        if run_id is not None:
            _check_segment(run_id, "run id")
        pattern = "*" if run_id is None else run_id
        for kind in KINDS:
            for meta_path in self.root.glob(f"{pattern}/{kind}/*/{METADATA_FILE}"):
                meta = _read_meta(meta_path.parent)
                if meta is not None and not _is_expired(meta):
                    yield meta_path.parent, meta

    def sweep(self) -> None:
        """Remove the folders of expired checkpoints (readers already treat them as gone)."""
        for meta_path in self.root.glob(f"*/*/*/{METADATA_FILE}"):
            meta = _read_meta(meta_path.parent)
            if meta is not None and _is_expired(meta):
                retired = meta_path.parent.with_name(f".{meta_path.parent.name}.{uuid.uuid4().hex}.old")
                try:
                    os.rename(meta_path.parent, retired)
                except OSError:
                    continue  # another service swept it first
                shutil.rmtree(retired, ignore_errors=True)

    def save_run_metadata(self, run_id: str, user_metadata: Mapping[str, str]) -> None:
        """Record the run's ``user_metadata`` (replacing what was recorded)."""
        _check_segment(run_id, "run id")
        folder = self.root / run_id
        folder.mkdir(parents=True, exist_ok=True)
        _replace_json(folder / _RUN, {"user_metadata": dict(user_metadata)}, folder / f".{_RUN}.{uuid.uuid4().hex}.tmp")

    def run_metadata(self, run_id: str) -> dict[str, str]:
        """The ``user_metadata`` the run was made with ({} when none was given)."""
        try:
            return json.loads((self.root / run_id / _RUN).read_text())["user_metadata"]
        except FileNotFoundError:
            return {}

    def set_ttl(self, path: str, ttl_seconds: int | None) -> None:
        """Make the checkpoint at tinker ``path`` expire ``ttl_seconds`` from now, or never (None).

        A 404 when there is none (or it has expired), a 400 when ``ttl_seconds`` is outside ``SET_TTL_RANGE``.
        The metadata is replaced atomically, so a reader sees the old expiry or the new one."""
        low, high = SET_TTL_RANGE
        if ttl_seconds is not None and (type(ttl_seconds) is not int or not low <= ttl_seconds <= high):
            raise LocalBadRequestError(
                f"ttl_seconds must be a whole number of seconds from {low} (1 hour) to {high} (10 years), "
                f"or None to remove the expiry; got {ttl_seconds!r}"
            )
        directory, meta = self._live(path)
        meta["expires_at"] = _expires_at(ttl_seconds, datetime.now(UTC))
        staging = directory.parent / f".{directory.name}.{METADATA_FILE}.{uuid.uuid4().hex}.tmp"  # beside the folder: never downloaded
        try:
            _replace_json(directory / METADATA_FILE, meta, staging)
        except FileNotFoundError:  # deleted (or swept) meanwhile
            raise LocalNotFoundError(f"No checkpoint at {path} (it was deleted while its ttl was being set)") from None

    def _live(self, path: str) -> tuple[Path, dict[str, Any]]:
        """The folder and metadata of the checkpoint at tinker ``path``; a 404 when there is none, or it has expired."""
        run_id, kind, name = parse_path(path)
        directory = self.root / run_id / kind / name
        meta = _read_meta(directory)
        if meta is None or _is_expired(meta):
            raise LocalNotFoundError(f"No checkpoint at {path} (or it has expired)")
        return directory, meta

    def delete(self, path: str) -> None:
        """Remove the checkpoint at tinker ``path`` (404 when there is none, or it has expired)."""
        directory, _ = self._live(path)
        retired = directory.with_name(f".{directory.name}.{uuid.uuid4().hex}.old")
        os.rename(directory, retired)
        shutil.rmtree(retired, ignore_errors=True)

    def _siblings(self, directory: Path) -> str:
        if not directory.parent.is_dir():
            return f"this root ({self.root}) has no such run or checkpoint kind"
        names = sorted(p.name for p in directory.parent.iterdir() if not p.name.startswith("."))
        return f"that run has: {', '.join(names[:20]) or 'none'}"


def file_digest(file: Path) -> str:
    """``sha256:<hex>`` of a file's bytes."""
    digest = hashlib.sha256()
    with file.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def _check_unchanged(path: str, directory: Path, meta: Mapping[str, Any], with_optimizer: bool) -> None:
    """A 400 naming what changed since the checkpoint at ``path`` was saved: its folder now holds another
    checkpoint (a link or copy of it), or a file's bytes differ from the digest recorded when it was written.

    Checkpoints saved before digests were recorded have none to check. ``ACCEPT_CHANGED`` loads it anyway."""
    problems = []
    if meta.get("path", path) != path:
        shown = f"{directory} links to {directory.resolve()}" if directory.is_symlink() else f"{directory} holds it"
        problems.append(f"its folder holds checkpoint {meta['path']} ({shown}): replaced by another checkpoint")
    recorded = meta.get("files")
    if isinstance(recorded, dict):
        for name, digest in sorted(recorded.items()):
            file = directory / name
            if name == _OPTIMIZER and not with_optimizer:
                continue
            if not file.is_file():
                problems.append(f"{file} is missing")
            elif file_digest(file) != digest:
                problems.append(f"{file} is not the file saved with it (its SHA-256 differs: replaced or edited)")
    if not problems:
        return
    message = f"Checkpoint {path} changed after it was saved: {'; '.join(problems)}"
    if os.environ.get(ACCEPT_CHANGED, "") not in ("", "0"):
        print(f"warning: {message}; loading it anyway ({ACCEPT_CHANGED} is set)", file=sys.stderr)
        return
    raise LocalBadRequestError(
        f"{message}. Restore it, resume from another checkpoint, or load it knowingly with "
        f"--accept-changed-checkpoints ({ACCEPT_CHANGED}=1)"
    )


def _replace_json(file: Path, data: Mapping[str, Any], staging: Path) -> None:
    """``file`` replaced at once by ``data`` as JSON, written first to ``staging`` (gone afterwards, whatever happens)."""
    try:
        staging.write_text(json.dumps(data, indent=2))
        os.replace(staging, file)
    finally:
        staging.unlink(missing_ok=True)


def _expires_at(ttl_seconds: int | None, now: datetime) -> str | None:
    """The ``expires_at`` a checkpoint records: ``ttl_seconds`` after ``now``, or None (it never expires)."""
    return None if ttl_seconds is None else (now + timedelta(seconds=ttl_seconds)).isoformat()


def _is_expired(meta: Mapping[str, Any]) -> bool:
    """Whether a checkpoint's metadata says its ``ttl_seconds`` has run out."""
    expires_at = meta.get("expires_at")
    return expires_at is not None and datetime.fromisoformat(expires_at) <= datetime.now(UTC)


def _read_meta(directory: Path) -> dict[str, Any] | None:
    """The checkpoint's metadata, or None when ``directory`` holds no finished checkpoint (or its metadata is damaged)."""
    try:
        meta = json.loads((directory / METADATA_FILE).read_text())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _write_tensors(tensors: Mapping[str, torch.Tensor], file: Path) -> None:
    """``save_file``, its I/O failures (a full disk, a read-only folder) raised as the OSError they are."""
    try:
        save_file(dict(tensors), file)
    except SafetensorError as exc:  # e.g. "I/O error: No space left on device (os error 28)"
        code = re.search(r"\(os error (\d+)\)", str(exc))
        if code is None:
            raise
        raise OSError(int(code[1]), os.strerror(int(code[1])), str(file)) from exc


def _tensors(file: Path, path: str) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint's safetensors ``file``; a 400 naming it when it is damaged or holds NaN/inf."""
    try:
        tensors = load_file(file)
    except (OSError, SafetensorError) as exc:
        raise LocalBadRequestError(f"Checkpoint {path} is damaged: cannot read {file} ({exc})") from None
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise LocalBadRequestError(
                f"Checkpoint {path} holds non-finite values (NaN or inf) in {name} of {file.name}: the training it saved had "
                "diverged; resume from an earlier checkpoint"
            )
    return tensors


def parse_path(path: str) -> tuple[str, CheckpointKind, str]:
    """``(run id, kind, name)`` of a checkpoint's tinker path; a 400 when it is not one."""
    if not isinstance(path, str) or not path.startswith(_SCHEME):
        raise LocalBadRequestError(f"Not a tinker path: {path!r} (expected tinker://<run_id>/weights/<name>)")
    parts = path[len(_SCHEME) :].split("/")
    if len(parts) != 3 or parts[1] not in KINDS:
        raise LocalBadRequestError(
            f"Not a checkpoint path: {path!r} (expected tinker://<run_id>/<kind>/<name>, kind one of {', '.join(KINDS)})"
        )
    run_id, kind, name = parts
    _check_segment(run_id, "run id")
    _check_segment(name, "checkpoint name")
    return run_id, kind, name  # type: ignore[return-value]


def _check_segment(value: str, what: str) -> None:
    if not _SEGMENT.match(value):
        raise LocalBadRequestError(
            f"Invalid {what} {value!r}: use letters, digits and _ . : = + - (not starting with . or -)"
        )
    if len(value) > MAX_SEGMENT:
        raise LocalBadRequestError(f"Invalid {what} {value[:40]!r}...: {len(value)} characters, at most {MAX_SEGMENT}")


def _publish(staging: Path, final: Path, path: str, overwrite: bool) -> None:
    """Rename the finished staging directory into place (replacing an old one only if asked)."""
    if not final.exists():
        os.rename(staging, final)
        return
    if not overwrite:
        raise LocalConflictError(f"Checkpoint {path} already exists; pass overwrite=True to replace it")
    retired = final.with_name(f".{final.name}.{uuid.uuid4().hex}.old")
    os.rename(final, retired)
    os.rename(staging, final)
    shutil.rmtree(retired, ignore_errors=True)
