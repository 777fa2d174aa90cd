"""The run directory: resolved config, metrics/rollouts/checkpoint logs, and resume.

``runs/<name>/`` holds ``config.yaml`` (secrets redacted), ``metrics.jsonl``
(one line per step), ``rollouts.jsonl`` (a few groups per step),
``checkpoints.jsonl`` (one line per saved state, written only after the state
is on the service) and ``resumes.jsonl`` (one line per resume: its step and the
settings it changed). A run claims its folder atomically: two runs never share
one. ``.checkpointed`` marks a run that has recorded a checkpoint, so that a resume
that finds ``checkpoints.jsonl`` missing refuses (``--start-over`` to train again
from step 0) where a run that never saved one starts at step 0. Resuming continues after the last checkpoint; lines of later steps
(written before a crash) are cut so no step is duplicated or lost. A resume may
change how a run proceeds (steps, logging, concurrency, ...) but not what it
is (``FIXED_ON_RESUME``).

One process at a time writes a run folder: a run or resume holds an exclusive
``flock`` on its ``.lock`` file for its whole life, ``minds eval`` for as long as
it evaluates into the folder's ``eval/`` (the OS drops it when the
process ends, ``kill -9`` included), and a second claimant is refused naming the
holder's pid. A write that fails (disk full, read-only folder) or a damaged
line in a file a resume reads stops the run with one line naming the file, the
errno and how to continue; lines already written are never rewritten on a guess.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import math
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import attrs

from minds_core.base.errors import MindsError, UsageError
from minds_core.base.masking import mask_data
from minds_core.base.secrets import is_secret_key, redact, shown_value, without_redacted
from minds_core.config import RunConfig, build_config, dump_yaml, read_config_file, to_dict
from minds_core.config.paths import get_path, split_key

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
ROLLOUTS_FILE = "rollouts.jsonl"
CHECKPOINTS_FILE = "checkpoints.jsonl"
RESUMES_FILE = "resumes.jsonl"
LOCK_FILE = ".lock"
#: Made beside ``checkpoints.jsonl`` once a run has recorded a checkpoint: a resume that finds the list missing
#: then knows it was deleted (and refuses), where a run that never saved one starts over at step 0.
CHECKPOINTED_FILE = ".checkpointed"
#: What a resume of a run whose checkpoint list is gone is told it may pass, to train it again from step 0.
START_OVER_FLAG = "--start-over"

#: Config keys (and everything under them) that make a run what it is: a resume may not change them.
FIXED_ON_RESUME = ("env", "envs", "model", "backend", "tinker.base_url", "seed", "name", "runs_dir", "trainer.mode", "sft.data",
                   "sft.eval_data", "sft.eval_fraction")
#: What the names of periodic state-only saves start with (``rolling-0``, ``rolling-1``: slots taken in turn).
ROLLING_PREFIX = "rolling-"
#: How many periodic saves a run keeps, across resumes: the newest.
ROLLING_KEPT = 2


class RunFileError(MindsError):
    """A run file that cannot be written or read (disk full, read-only, damaged); the message says how to continue."""


def file_error(exc: OSError, doing: str, run_dir: Path | None = None, file: Path | None = None) -> RunFileError:
    """One line for a failed file operation: what failed, the path (``file`` when the error has none; else the run's
    folder), the errno, and (given the run) the resume command."""
    code = errno.errorcode.get(exc.errno or 0, "")
    name = exc.filename or file
    where = f" {name}" if name else (f" in {run_dir}" if run_dir else "")
    reason = f"{exc.strerror or exc} ({code}, errno {exc.errno})" if code else str(exc)
    follow = f"; files already written are intact: fix the cause, then continue with: minds run --resume {run_dir}" if run_dir else ""
    return RunFileError(f"cannot {doing}{where}: {reason}{follow}")


class DamagedRunFile(RunFileError):
    """A run file holding what minds never writes (exit code 2: the run given is not usable as it is)."""

    exit_code = 2


def damaged(path: Path, problem: str) -> DamagedRunFile:
    """A run file that holds what minds never writes: say where, and refuse to guess."""
    return DamagedRunFile(
        f"{path}: {problem}; minds changes nothing in a damaged run: restore the file (or remove the bad line), then run again"
    )


class RunLock:
    """An exclusive claim on a run folder, held until ``release`` (or the process ends, however it ends)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._fd: int | None = None

    def acquire(self) -> Self:
        """Take the claim, or a UsageError naming the pid that holds it; the file records this process's pid."""
        path = self.folder / LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise file_error(exc, "claim the run folder (open its lock file)", self.folder) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise UsageError(
                f"run directory {self.folder} is in use by another minds process (pid {holder}): "
                f"one process writes a run at a time; wait for it to end (or stop it: kill {holder}), then run again"
            ) from None
        mine = f"{os.getpid()}\n".encode()
        os.pwrite(fd, mine, 0)
        os.ftruncate(fd, len(mine))
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *_: object) -> None:
        self.release()


@attrs.frozen
class CheckpointRecord:
    """One line of ``checkpoints.jsonl``: where the training state saved after ``step`` lives on the service.

    ``state_path`` resumes training; ``sampler_path`` is what
    ``create_sampling_client(model_path=...)`` takes to sample from the adapter.
    """

    step: int
    state_path: str
    sampler_path: str | None = None

    @property
    def rolling(self) -> bool:
        """Whether this is a periodic save in a rolling slot (its name starts with ``ROLLING_PREFIX``)."""
        return self.state_path.rstrip("/").rpartition("/")[2].startswith(ROLLING_PREFIX)


def run_config_path(run_dir: Path) -> Path:
    """The config file of an existing run folder; a UsageError naming the folder when it is not one."""
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise UsageError(f"{run_dir} is not a minds run folder (no {CONFIG_FILE}); runs live under runs/<name>/")
    return path


def default_run_name(config: RunConfig) -> str:
    """``<first env>-<UTC time>-<6 random hex digits>``, safe as a folder name; runs started in the same second differ."""
    env_ids = [e.id for e in config.environments] or ["run"]
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(env_ids[0]).name)
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(3)}"


def _exists_message(path: Path) -> str:
    return f"run directory {path} already exists: pick another --name, or continue that run with --resume {path}"


def check_resume_changes(run_dir: Path, config: RunConfig, start_over: bool = False) -> dict[str, tuple[Any, Any]]:
    """The settings ``config`` changes from the run saved in ``run_dir``; a UsageError when one is in FIXED_ON_RESUME,
    or when ``config`` leaves no step to train after the run's last checkpoint (a resume would do nothing), or
    when the run's checkpoint list is gone and ``start_over`` is not given (``RunDirectory.resume_checkpoint``).

    Secret-named keys are not compared: secrets are never saved, so they are given again.
    """
    last = RunDirectory(run_dir).resume_checkpoint(start_over)
    if last is not None and last.step + 1 >= config.trainer.steps:
        raise UsageError(
            f"run {run_dir} has trained steps 0 to {last.step} (its last checkpoint is of step {last.step}) and "
            f"trainer.steps = {config.trainer.steps}: nothing left to train: pass --steps N with N > {last.step + 1} "
            "to train on"
        )
    changes = config_changes(_saved_config(run_dir), config)
    fixed = {key: change for key, change in changes.items() if _is_fixed(key)}
    if fixed:
        lines = "\n".join(f"  - {key}: {_show(key, old)} -> {_show(key, new)}" for key, (old, new) in fixed.items())
        raise UsageError(
            f"--resume {run_dir}: a resumed run cannot change what it trains (the task, model, LoRA rank or backend):\n{lines}\n"
            "drop these overrides, or start a new run with them (minds run ... --name NEW_NAME)"
        )
    return changes


@attrs.frozen
class StartPoint:
    """Where a run's training starts."""

    #: the first step to train
    step: int
    #: the state the training client loads: the run's last checkpoint on a resume, else ``trainer.resume_from``
    #: (None: fresh weights)
    state_path: str | None
    #: whether it continues after a checkpoint of its own (it then loads the optimizer state too)
    resumed: bool


def start_point(config: RunConfig, resume_dir: Path | None, start_over: bool = False) -> StartPoint:
    """Where ``config``'s training starts: after the last checkpoint in ``resume_dir``, else at step 0 (a new run's
    folder must not exist yet: a UsageError, checked before any work). ``start_over``: see ``resume_checkpoint``."""
    if resume_dir is None:
        RunDirectory.ensure_new(config)
    last = RunDirectory(resume_dir).resume_checkpoint(start_over) if resume_dir is not None else None
    if last is None:
        return StartPoint(0, config.trainer.resume_from or None, resumed=False)
    return StartPoint(last.step + 1, last.state_path, resumed=True)


def config_changes(old: RunConfig, new: RunConfig) -> dict[str, tuple[Any, Any]]:
    """Dotted key -> (old, new) for every setting that differs; secrets are left out (as a saved config forgets
    them: in tables and lists of tables, a URL's password), so a table that held only secrets is the same table
    as before, and a secret given again is no change."""
    before, after = _flatten(_without_secrets(to_dict(old))), _flatten(_without_secrets(to_dict(new)))
    return {key: (before.get(key), after.get(key)) for key in sorted(before.keys() | after.keys()) if before.get(key) != after.get(key)}


def secrets_not_given(run_dir: Path, config: RunConfig) -> list[str]:
    """Dotted keys of the secrets the run in ``run_dir`` had (its saved config holds ``***`` for them) that
    ``config`` lacks: they were not passed again."""
    redacted: list[str] = []
    without_redacted(read_config_file(run_config_path(run_dir)), "", redacted)
    given = to_dict(config)
    return [key for key in redacted if get_path(given, split_key(key)) in (None, "")]


def _saved_config(run_dir: Path) -> RunConfig:
    path = run_config_path(run_dir)
    return build_config(read_config_file(path), source=str(path))


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value of every setting; an empty table is a setting of its own (``{}``)."""
    if isinstance(value, dict) and (value or not prefix):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}" if not prefix else f"{prefix}.{key}"))
        return out
    return {prefix: value}


def _without_secrets(value: Any) -> Any:
    """``value`` without its secrets at any depth: secret-named keys (given, unset or forgotten alike) and what else
    a saved config forgets (a secret header's value, a URL with its password)."""
    return without_redacted(redact(_without_secret_keys(value)), "", [])


def _without_secret_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _without_secret_keys(item) for key, item in value.items() if not is_secret_key(str(key))}
    if isinstance(value, list):
        return [_without_secret_keys(item) for item in value]
    return value


def _is_fixed(key: str) -> bool:
    return any(key == root or key.startswith((f"{root}.", f"{root}[")) for root in FIXED_ON_RESUME)


def _show(key: str, value: Any) -> str:
    return shown_value(key.rpartition(".")[2], value)


class RunDirectory:
    """Reads and writes one run's files; one made by ``create`` holds the folder's lock until ``close``."""

    def __init__(self, path: Path, lock: RunLock | None = None) -> None:
        self.path = path
        self.lock = lock
        #: How messages name the folder (``minds run --resume ...``): relative to the working directory when inside it.
        self.shown = path.relative_to(Path.cwd()) if path.is_absolute() and path.is_relative_to(Path.cwd()) else path

    @staticmethod
    def ensure_new(config: RunConfig) -> None:
        """A UsageError when the run's directory already exists (checked early; ``create`` claims it atomically)."""
        path = Path(config.runs_dir) / config.name
        if path.exists():
            raise UsageError(_exists_message(path))

    @classmethod
    def create(cls, config: RunConfig) -> RunDirectory:
        """Claim a new run directory (one mkdir: of two runs racing for a name, exactly one wins), lock it and write the config."""
        path = Path(config.runs_dir) / config.name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir()
        except FileExistsError:
            if not path.parent.is_dir():
                raise UsageError(f"runs_dir = {config.runs_dir}: not a folder (a file is in the way); pick another runs_dir") from None
            raise UsageError(_exists_message(path)) from None
        except OSError as exc:
            raise file_error(exc, "make the run folder") from None
        lock = RunLock(path).acquire()
        try:
            _write_config(path, config)
        except OSError as exc:  # nothing of the run was written yet: leave no half-made folder to resume
            lock.release()
            shutil.rmtree(path, ignore_errors=True)
            raise file_error(exc, "write", file=path / CONFIG_FILE) from None
        return cls(path, lock)

    @classmethod
    def resume(cls, path: Path, config: RunConfig, next_step: int) -> RunDirectory:
        """An existing run continued at ``next_step``: later lines are cut, the changed settings recorded, the config rewritten.

        The caller holds the folder's lock (``RunLock``) from before it read the last checkpoint.
        """
        run = cls(path)
        changes = config_changes(_saved_config(path), config)
        run.truncate_after(next_step)
        if next_step == 0:  # started over: no checkpoint of the run is kept
            (path / CHECKPOINTED_FILE).unlink(missing_ok=True)
        with run._writing(path / RESUMES_FILE):
            append_line(path / RESUMES_FILE, {"step": next_step, "time": time.time(), "changed": redact({k: list(v) for k, v in changes.items()})})
        run.write_config(config)
        return run

    def close(self) -> None:
        """Release the folder's lock (when this object holds it)."""
        if self.lock is not None:
            self.lock.release()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _writing(self, file: Path) -> Iterator[None]:
        """A failed write of ``file`` (disk full, read-only folder) as one line saying how to continue the run."""
        try:
            yield
        except OSError as exc:
            raise file_error(exc, "write", self.path, file) from None

    def write_config(self, config: RunConfig) -> None:
        with self._writing(self.path / CONFIG_FILE):
            _write_config(self.path, config)

    def checkpoints(self) -> list[CheckpointRecord]:
        """Every checkpoint line; a RunFileError naming the line when one is not what minds writes."""
        path = self.path / CHECKPOINTS_FILE
        return [_checkpoint(path, number, row) for number, row in _read_whole(path)]

    def last_checkpoint(self) -> CheckpointRecord | None:
        """The latest checkpoint; None when the run never saved one, an error when its file was emptied."""
        saved = self.checkpoints()
        path = self.path / CHECKPOINTS_FILE
        if not saved and path.exists():
            logged = len(_read_whole(self.path / METRICS_FILE))
            raise damaged(
                path,
                f"holds no checkpoint (emptied?) while {logged} steps are logged; resuming would start over at step 0 "
                f"(pass {START_OVER_FLAG} to do that knowingly)",
            )
        return saved[-1] if saved else None

    def resume_checkpoint(self, start_over: bool = False) -> CheckpointRecord | None:
        """The checkpoint a resume continues after (None: it starts at step 0).

        A run that recorded checkpoints and whose ``checkpoints.jsonl`` is now missing or emptied is refused
        (exit code 2), naming the file, unless ``start_over`` says to train it again from step 0; ``start_over``
        on a run that has its checkpoints is refused too (continue it, or start a new run).
        """
        path = self.path / CHECKPOINTS_FILE
        if start_over:
            saved = self.checkpoints() if path.exists() else []
            if saved:
                raise UsageError(
                    f"{START_OVER_FLAG}: run {self.shown} has its checkpoints (the last of step {saved[-1].step} in {path}); "
                    f"drop {START_OVER_FLAG} to continue after it, or start a new run with --name"
                )
            return None
        if not path.exists() and (self.path / CHECKPOINTED_FILE).exists():
            logged = len(_read_whole(self.path / METRICS_FILE)) if (self.path / METRICS_FILE).exists() else 0
            raise DamagedRunFile(
                f"{path} is missing: run {self.shown} saved checkpoints and logged {logged} steps, and without the list "
                f"of its checkpoints a resume would start over at step 0, dropping them; restore the file (or copy the "
                f"run folder again), or pass {START_OVER_FLAG} to train this run again from step 0"
            )
        return self.last_checkpoint()

    def record_checkpoint(self, checkpoint: CheckpointRecord) -> list[CheckpointRecord]:
        """Append ``checkpoint``; the periodic saves it outdates; the caller deletes them from the service.

        Earlier lines naming the same state (a rolling slot now overwritten) are dropped; so are the
        periodic saves older than the newest ``ROLLING_KEPT``: those of a run before its resume sit in
        slots of their own (the resumed run saves under another training run) and are returned.
        """
        path = self.path / CHECKPOINTS_FILE
        lines = _read_whole(path)
        earlier = [(row, _checkpoint(path, number, row)) for number, row in lines]
        earlier = [(row, record) for row, record in earlier if record.state_path != checkpoint.state_path]
        rolling = [index for index, (_, record) in enumerate(earlier) if record.rolling]
        outdated = set(rolling[: max(0, len(rolling) + checkpoint.rolling - ROLLING_KEPT)])
        with self._writing(path):
            (self.path / CHECKPOINTED_FILE).touch()
            if len(earlier) == len(lines) and not outdated:
                append_line(path, attrs.asdict(checkpoint))
                return []
            kept = [row for index, (row, _) in enumerate(earlier) if index not in outdated]  # as written, keys of other versions too
            _rewrite_jsonl(path, [*kept, attrs.asdict(checkpoint)])
        return [earlier[index][1] for index in sorted(outdated)]

    def log_metrics(self, record: dict[str, Any]) -> None:
        """Append one step's metrics to metrics.jsonl, durable when this returns."""
        with self._writing(self.path / METRICS_FILE):
            append_line(self.path / METRICS_FILE, record)

    def log_rollouts(self, records: list[dict[str, Any]]) -> None:
        with self._writing(self.path / ROLLOUTS_FILE):
            for record in records:
                append_line(self.path / ROLLOUTS_FILE, record)

    def truncate_after(self, next_step: int) -> None:
        """Drop metric, rollout and checkpoint lines of steps >= next_step and torn last lines; a damaged line stops it, changing nothing."""
        kept = {}
        for name in (METRICS_FILE, ROLLOUTS_FILE, CHECKPOINTS_FILE):
            path = self.path / name
            if path.exists():
                kept[path] = [row for number, row in _read_whole(path) if _step_of(path, number, row) < next_step]
        for path, rows in kept.items():
            with self._writing(path):
                _rewrite_jsonl(path, rows)


def _write_config(folder: Path, config: RunConfig) -> None:
    """``config.yaml`` replaced at once (secrets redacted)."""
    tmp = folder / f".{CONFIG_FILE}.tmp"
    tmp.write_text(dump_yaml(config), encoding="utf-8")
    os.replace(tmp, folder / CONFIG_FILE)


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line with a single write, flushed to disk (after a torn last line, on a new line);
    secrets masked.

    Non-finite numbers are written as null: every line stays valid JSON.
    """
    record = _finite(mask_data(record))
    line = json.dumps(record, sort_keys=True, default=lambda value: _finite(float(value)), allow_nan=False) + "\n"
    if _ends_torn(path):
        line = "\n" + line
    with path.open("a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity (in nested dicts and lists too) replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def _ends_torn(path: Path) -> bool:
    """Whether the file's last line lacks its newline (a write cut short by a kill)."""
    if not path.exists() or path.stat().st_size == 0:
        return False
    with path.open("rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) != b"\n"


def _rewrite_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """Replace a jsonl file's lines at once (a kill leaves the old file or the new one)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(mask_data(row), sort_keys=True) + "\n" for row in rows), encoding="utf-8")
    os.replace(tmp, path)


def _parsed_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None, bool]]:
    """``(line number, the line's JSON object or None, whether it is the last line and lacks its newline)``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return
    except OSError as exc:
        raise file_error(exc, "read") from None
    lines = text.splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        torn = number == len(lines) and not text.endswith("\n")
        yield number, row if isinstance(row, dict) else None, torn


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The JSON-object rows of a jsonl file ([] when missing), for readers that show what is there: other lines are skipped."""
    return [row for _, row, _ in _parsed_lines(path) if row is not None]


def _read_whole(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """``(line number, row)`` of every line; a torn last line (killed mid-write) is skipped, any other bad line is an error."""
    rows = []
    for number, row, torn in _parsed_lines(path):
        if row is None:
            if torn:
                continue
            raise damaged(path, f"line {number} is not a JSON object")
        rows.append((number, row))
    return rows


def _step_of(path: Path, number: int, row: dict[str, Any]) -> int:
    step = row.get("step")
    if type(step) is not int:
        raise damaged(path, f"line {number} has no whole-number 'step' (got {step!r})")
    return step


def _checkpoint(path: Path, number: int, row: dict[str, Any]) -> CheckpointRecord:
    state, sampler = row.get("state_path"), row.get("sampler_path")
    if not isinstance(state, str) or not state or not (sampler is None or isinstance(sampler, str)):
        raise damaged(path, f"line {number} is not a checkpoint record (expected step, state_path and sampler_path)")
    return CheckpointRecord(step=_step_of(path, number, row), state_path=state, sampler_path=sampler)
