"""I/O errors and damaged run files: one line naming the file, the errno and how to continue; data never corrupted.

A full disk and a read-only filesystem are made for real (a small tmpfs in a
user namespace, where the machine allows one); the in-process tests simulate
them at the write call with fakes that fail with the real errno (chmod does not
stop root). Everything else is real.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

import minds_core.backends.local.training.checkpoints as checkpoint_files
from minds_core import hookimpl
from minds_core.base.errors import MindsError, UsageError
from minds_core.cli.command import main
from minds_core.config import load_config
from minds_core.contract.parts import CustomLoss
from minds_core.contract.plugins import load_plugins
from minds_core.train import train
from minds_core.training.run_directory import (
    CHECKPOINTS_FILE,
    LOCK_FILE,
    METRICS_FILE,
    CheckpointRecord,
    RunDirectory,
    RunFileError,
    append_line,
    read_jsonl,
)

# big enough that rewards differ within a group and steps train
SETTINGS = ["env.id=toy_char_share", "trainer.group_size=8", "trainer.groups_per_batch=2", "sampling.max_tokens=16",
            "metrics.sinks=[]", "trainer.save_every=1", "backend=local"]  # fmt: skip


def _config(runs: Path, *overrides: str):
    return load_config(None, [*SETTINGS, f"runs_dir={runs}", "name=r", *overrides])


def _resume(run: Path, plugins, *overrides: str) -> dict:
    config = load_config(run / "config.yaml", overrides, drop_redacted=True)
    return train(config, resume_dir=run, plugins=plugins)


def _strict_rows(path: Path) -> list[dict]:
    """Every line as strict JSON (NaN and Infinity are not JSON)."""
    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} in {path}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


class FakeFullFolder:
    """A fake for a full (or read-only) filesystem below ``folder``: opening a file there for writing works,
    but its first write fails with ``code``, as a real full disk fails at the write call."""

    def __init__(self, folder: Path, code: int, armed: Callable[[], bool] = lambda: True) -> None:
        self.folder, self.code, self.armed = folder.resolve(), code, armed
        self.failures = 0

    def applies(self, path: Path, mode: str) -> bool:
        return any(c in mode for c in "wax+") and path.resolve().is_relative_to(self.folder) and self.armed()

    def error(self, path: Path) -> OSError:
        self.failures += 1
        return OSError(self.code, os.strerror(self.code), str(path))


class _FailingFile:
    def __init__(self, fake: FakeFullFolder, path: Path) -> None:
        self.fake, self.path = fake, path

    def __enter__(self) -> _FailingFile:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def write(self, _text: str) -> int:
        raise self.fake.error(self.path)


@pytest.fixture
def full_folder(monkeypatch) -> Iterator[Callable[..., FakeFullFolder]]:
    real_open = Path.open
    fakes: list[FakeFullFolder] = []

    def fake_open(self: Path, mode: str = "r", *args, **kwargs):
        for fake in fakes:
            if fake.applies(self, mode):
                return _FailingFile(fake, self)
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", fake_open)

    def make(folder: Path, code: int = errno.ENOSPC, armed: Callable[[], bool] = lambda: True) -> FakeFullFolder:
        fakes.append(FakeFullFolder(folder, code, armed))
        return fakes[-1]

    yield make
    fakes.clear()


# ---------------------------------------------------------------- writes that fail


@pytest.mark.slow
def test_disk_full_mid_run_stops_with_one_line_and_the_run_resumes_whole(plugins, tmp_path, full_folder):
    run = tmp_path / "r"
    fake = full_folder(run, errno.ENOSPC, armed=lambda: len(read_jsonl(run / METRICS_FILE)) >= 2)
    with pytest.raises(RunFileError) as stopped:
        train(_config(tmp_path, "trainer.steps=4"), plugins=plugins)
    message = str(stopped.value)
    assert fake.failures >= 1
    assert f"cannot write {run}/" in message and "No space left on device (ENOSPC, errno 28)" in message
    assert message.endswith(f"continue with: minds run --resume {run}") and "\n" not in message
    assert [row["step"] for row in _strict_rows(run / METRICS_FILE)] == [0, 1]
    fake.armed = lambda: False  # space freed
    _resume(run, plugins)
    assert [row["step"] for row in _strict_rows(run / METRICS_FILE)] == [0, 1, 2, 3]


@pytest.mark.slow
def test_a_full_checkpoint_store_stops_the_run_naming_the_file(plugins, tmp_path, monkeypatch):
    def full(tensors, filename, *args, **kwargs):  # what safetensors raises on a full disk (seen on a full tmpfs)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(checkpoint_files, "save_file", full)  # the checkpoint store's write call
    with pytest.raises(RunFileError) as stopped:
        train(_config(tmp_path, "trainer.steps=1"), plugins=plugins)
    message = str(stopped.value)
    assert "adapter_model.safetensors: No space left on device (ENOSPC, errno 28)" in message
    assert f"minds run --resume {tmp_path / 'r'}" in message


@pytest.mark.slow
def test_a_read_only_run_folder_refuses_a_resume_before_any_work(finished_run, tmp_path, monkeypatch, capsys, minds_plugin):
    import minds_toy_plugin

    minds_plugin(minds_toy_plugin, name="toy")  # its environment names check before the resume claims the folder
    run = _copy(finished_run, tmp_path)
    before = _contents(run)
    real_os_open = os.open

    def read_only(path, flags, *args, **kwargs):
        if Path(path).resolve().is_relative_to(run.resolve()) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)  # a fake for a read-only mount: the lock's open is the first write
    code = main(["run", "--resume", str(run), "--steps", "3"])  # a step left to train: only the folder is in the way
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert f"cannot claim the run folder (open its lock file) {run}/.lock: Read-only file system (EROFS, errno 30)" in err
    assert _contents(run) == before


def test_any_other_os_error_is_one_line_without_a_traceback(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    code = main(["new-plugin", "foo", "--dir", str(tmp_path / "file")])  # a folder to write in that is a file
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err
    assert err == f"minds: error: cannot read or write {tmp_path}/file/foo: Not a directory (ENOTDIR, errno 20)\n"


FULL_FS_SCRIPT = """
mount -t tmpfs -o size=900k tmpfs fs || exit 99
"$PY" -m minds_core.cli.command run $ARGS --steps 8 --name r --set runs_dir=fs/runs > first.out 2> first.err; echo $? > first.rc
cp -r fs/runs after_first
mount -o remount,size=64m fs
"$PY" -m minds_core.cli.command run --resume fs/runs/r > second.out 2> second.err; echo $? > second.rc
cp -r fs/runs after_second
"""


def _can_mount_tmpfs() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


def _in_namespace(script: str, tmp_path: Path, installed_plugin) -> None:
    """Run ``script`` (sh) in tmp_path as root of its own user and mount namespace, where it can mount tmpfs on ./fs."""
    (tmp_path / "fs").mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ.update(PYTHONPATH=str(installed_plugin("toy_plugin")), PY=sys.executable, ARGS=" ".join(
        ["--env", "toy_char_share", "--model", "minds-tiny", "--set", "trainer.group_size=8", "--set", "trainer.groups_per_batch=4",
         "--set", "sampling.max_tokens=32", "--set", "metrics.sinks=[]", "--set", "trainer.save_every=1"]))  # fmt: skip
    done = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                          cwd=tmp_path, env=environ, timeout=600)  # fmt: skip
    assert done.returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs user namespaces (unshare -Urm) to mount a small tmpfs")
def test_a_real_full_filesystem_mid_run_then_resume_after_freeing_space(installed_plugin, tmp_path):
    # a 900 KiB tmpfs holds about three checkpoints of the tiny model: the run fills it a few steps in
    _in_namespace(FULL_FS_SCRIPT, tmp_path, installed_plugin)
    first_err = (tmp_path / "first.err").read_text()
    assert (tmp_path / "first.rc").read_text().strip() == "1", first_err[-2000:]
    assert "Traceback" not in first_err
    last = first_err.strip().splitlines()[-1]
    assert last.startswith("minds: error: cannot write ") and "No space left on device (ENOSPC, errno 28)" in last
    assert "/fs/runs/" in last  # the file that failed, absolute (paths are absolute from the start)
    assert last.endswith("continue with: minds run --resume fs/runs/r")
    steps = [row["step"] for row in _strict_rows(tmp_path / "after_first" / "r" / METRICS_FILE)]
    assert steps == list(range(len(steps))) and len(steps) < 8
    assert (tmp_path / "second.rc").read_text().strip() == "0", (tmp_path / "second.err").read_text()[-2000:]
    assert [row["step"] for row in _strict_rows(tmp_path / "after_second" / "r" / METRICS_FILE)] == list(range(8))


def test_a_run_that_cannot_write_its_config_leaves_no_folder_behind(tmp_path, full_folder):
    full_folder(tmp_path, errno.ENOSPC)
    with pytest.raises(RunFileError) as refused:
        RunDirectory.create(_config(tmp_path))
    assert str(refused.value) == f"cannot write {tmp_path}/r/.config.yaml.tmp: No space left on device (ENOSPC, errno 28)"
    assert not (tmp_path / "r").exists()  # nothing to resume: the same command starts it again


def test_a_log_file_that_cannot_be_written_is_dropped_without_ending_the_run(capsys):
    from minds_core.base import logs

    class FullLogFile:
        """A fake for train.log on a full disk."""

        name = "runs/r/train.log"

        def write(self, _text: str) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    full = FullLogFile()
    logs.configure("json", "info")
    logs.add_log_file(full)
    logs.get_logger("test").info("still logged")
    logs.get_logger("test").info("and again")
    err = capsys.readouterr().err
    assert err.count("minds: cannot write runs/r/train.log (No space left on device): logs go to stderr only") == 1
    assert '"event": "still logged"' in err and '"event": "and again"' in err
    logs.remove_log_file(full)


READ_ONLY_SCRIPT = """
mount -t tmpfs -o size=64m tmpfs fs || exit 99
"$PY" -m minds_core.cli.command run $ARGS --steps 1 --name r --set runs_dir=fs/runs > first.out 2> first.err; echo $? > first.rc
cp -r fs/runs before
mount -o remount,ro fs
"$PY" -m minds_core.cli.command run --resume fs/runs/r --steps 2 > second.out 2> second.err; echo $? > second.rc
cp -r fs/runs after
"""


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount_tmpfs(), reason="needs user namespaces (unshare -Urm) to mount a small tmpfs")
def test_a_resume_on_a_real_read_only_filesystem_stops_before_any_work(installed_plugin, tmp_path):
    _in_namespace(READ_ONLY_SCRIPT, tmp_path, installed_plugin)
    assert (tmp_path / "first.rc").read_text().strip() == "0", (tmp_path / "first.err").read_text()[-2000:]
    err = (tmp_path / "second.err").read_text()
    assert (tmp_path / "second.rc").read_text().strip() == "1" and "Traceback" not in err, err[-2000:]
    last = err.strip().splitlines()[-1]  # paths are absolute from the start: the folder as minds holds it
    assert last.startswith("minds: error: cannot claim the run folder (open its lock file) ")
    assert "fs/runs/r/.lock: Read-only file system (EROFS, errno 30); files already written are intact: fix the cause, " in last
    assert last.endswith("fs/runs/r") and "continue with: minds run --resume " in last
    assert _tree(tmp_path / "after") == _tree(tmp_path / "before")


def _tree(root: Path) -> dict[str, bytes]:
    return {str(f.relative_to(root)): f.read_bytes() for f in sorted(root.rglob("*")) if f.is_file()}


# ---------------------------------------------------------------- damaged files


@pytest.fixture(scope="module")
def finished_run(plugins, tmp_path_factory) -> Path:
    runs = tmp_path_factory.mktemp("runs")
    train(_config(runs, "trainer.steps=2"), plugins=plugins)
    return runs / "r"


def _copy(run: Path, tmp_path: Path) -> Path:
    """A copy of the finished run (its checkpoints too: the store lives beside it in runs_dir)."""
    runs = tmp_path / "runs"
    shutil.copytree(run.parent, runs)
    return runs / run.name


def _contents(run: Path) -> dict[str, bytes]:
    """Every file of the runs folder (run files and checkpoints) but the run's lock, which records its last claimant."""
    files = sorted(p for p in run.parent.rglob("*") if p.is_file() and p.name != LOCK_FILE)
    return {str(p.relative_to(run.parent)): p.read_bytes() for p in files}


def _last_checkpoint_folder(run: Path) -> Path:
    state = read_jsonl(run / CHECKPOINTS_FILE)[-1]["state_path"]
    run_id, kind, name = state.removeprefix("tinker://").split("/")
    return run.parent / "_checkpoints" / run_id / kind / name


def _checkpoint_folders(run: Path) -> list[Path]:
    """The folders of the run's saved states, oldest first."""
    folders = []
    for row in read_jsonl(run / CHECKPOINTS_FILE):
        run_id, kind, name = row["state_path"].removeprefix("tinker://").split("/")
        folders.append(run.parent / "_checkpoints" / run_id / kind / name)
    return folders


def _older_adapter_copied_in(run: Path) -> None:
    older, last = _checkpoint_folders(run)[-2:]
    shutil.copyfile(older / "adapter_model.safetensors", last / "adapter_model.safetensors")


def _folder_linked_to_older(run: Path) -> None:
    older, last = _checkpoint_folders(run)[-2:]
    shutil.rmtree(last)
    last.symlink_to(older, target_is_directory=True)


def _nan_adapter(folder: Path) -> None:
    tensors = load_file(folder / "adapter_model.safetensors")
    first = sorted(tensors)[0]
    tensors[first] = torch.full_like(tensors[first], math.nan)
    save_file(tensors, folder / "adapter_model.safetensors")


def _wrong_shape_adapter(folder: Path) -> None:
    tensors = load_file(folder / "adapter_model.safetensors")
    save_file({k: torch.zeros(*v.shape[:-1], v.shape[-1] + 1) for k, v in tensors.items()}, folder / "adapter_model.safetensors")


def _truncate(file: Path) -> None:
    file.write_bytes(file.read_bytes()[: file.stat().st_size // 2])


def _edit_lines(file: Path, edit: Callable[[list[str]], list[str]]) -> None:
    file.write_text("".join(line + "\n" for line in edit(file.read_text().splitlines())))


DAMAGE: dict[str, tuple[Callable[[Path], None], str]] = {
    "deleted checkpoints.jsonl": (
        lambda run: (run / CHECKPOINTS_FILE).unlink(),
        "checkpoints.jsonl is missing: run",
    ),
    "adapter replaced by an older checkpoint's": (
        _older_adapter_copied_in,
        "adapter_model.safetensors is not the file saved with it (its SHA-256 differs",
    ),
    "checkpoint folder replaced by a link to an older one": (
        lambda run: _folder_linked_to_older(run),
        "its folder holds checkpoint tinker://",
    ),
    "emptied checkpoints.jsonl": (
        lambda run: (run / CHECKPOINTS_FILE).write_text(""),
        "checkpoints.jsonl: holds no checkpoint (emptied?) while 2 steps are logged; resuming would start over at step 0",
    ),
    "garbage checkpoint line": (
        lambda run: _edit_lines(run / CHECKPOINTS_FILE, lambda lines: ["#!garbage", *lines]),
        "checkpoints.jsonl: line 1 is not a JSON object",
    ),
    "checkpoint line of the wrong shape": (
        lambda run: _edit_lines(run / CHECKPOINTS_FILE, lambda lines: [*lines, '{"step": "two", "state_path": "x"}']),
        "checkpoints.jsonl: line 3 has no whole-number 'step' (got 'two')",
    ),
    "checkpoint line without a state": (
        lambda run: _edit_lines(run / CHECKPOINTS_FILE, lambda lines: [*lines, '{"step": 5}']),
        "checkpoints.jsonl: line 3 is not a checkpoint record",
    ),
    "garbage metrics line": (
        lambda run: _edit_lines(run / METRICS_FILE, lambda lines: [lines[0], "[1, 2]", *lines[1:]]),
        "metrics.jsonl: line 2 is not a JSON object",
    ),
    "metrics line without a step": (
        lambda run: _edit_lines(run / METRICS_FILE, lambda lines: [lines[0], '{"reward/mean": 1}', *lines[1:]]),
        "metrics.jsonl: line 2 has no whole-number 'step' (got None)",
    ),
    "truncated adapter": (
        lambda run: _truncate(_last_checkpoint_folder(run) / "adapter_model.safetensors"),
        "is damaged: cannot read",
    ),
    "empty adapter": (
        lambda run: (_last_checkpoint_folder(run) / "adapter_model.safetensors").write_bytes(b""),
        "is damaged: cannot read",
    ),
    "truncated optimizer state": (
        lambda run: _truncate(_last_checkpoint_folder(run) / "optimizer.safetensors"),
        "optimizer.safetensors (",
    ),
    "adapter of the wrong shape": (
        lambda run: _wrong_shape_adapter(_last_checkpoint_folder(run)),  # a well-formed file, not the one saved
        "adapter_model.safetensors is not the file saved with it",
    ),
    "NaN adapter": (
        lambda run: _nan_adapter(_last_checkpoint_folder(run)),
        "holds non-finite values (NaN or inf)",
    ),
    "garbage minds_checkpoint.json": (
        lambda run: (_last_checkpoint_folder(run) / "minds_checkpoint.json").write_text("\x00\x01garbage"),
        "minds_checkpoint.json is not a checkpoint's metadata",
    ),
    "minds_checkpoint.json of the wrong shape": (
        lambda run: (_last_checkpoint_folder(run) / "minds_checkpoint.json").write_text('{"base_model": "minds-tiny"}'),
        "minds_checkpoint.json lacks its LoRA settings",
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_run_is_refused_on_resume_naming_the_file_and_changing_nothing(finished_run, plugins, tmp_path, damage):
    run = _copy(finished_run, tmp_path)
    make, expected = DAMAGE[damage]
    make(run)
    before = _contents(run)
    with pytest.raises(MindsError) as refused:
        _resume(run, plugins, "trainer.steps=3")
    message = str(refused.value)
    assert expected in message, message
    assert refused.value.exit_code == 2
    assert "tinker://" in message or str(run) in message  # which file or checkpoint
    assert _contents(run) == before


@pytest.mark.slow
def test_a_damaged_run_is_exit_2_from_the_command_line(run_minds, finished_run, tmp_path):
    run = _copy(finished_run, tmp_path)
    (run / CHECKPOINTS_FILE).write_text("")
    result = run_minds(["run", "--resume", str(run)], plugins=["toy_plugin"])
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "holds no checkpoint (emptied?)" in result.stderr


@pytest.mark.slow
def test_a_run_whose_checkpoint_list_was_deleted_starts_over_only_when_told(finished_run, tmp_path, run_minds):
    run = _copy(finished_run, tmp_path)
    (run / CHECKPOINTS_FILE).unlink()
    refused = run_minds(["run", "--resume", str(run), "--steps", "3"], plugins=["toy_plugin"])
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "checkpoints.jsonl is missing" in refused.stderr and "--start-over" in refused.stderr
    started = run_minds(["run", "--resume", str(run), "--steps", "3", "--start-over"], plugins=["toy_plugin"])
    assert started.returncode == 0, started.stderr[-2000:]
    assert [row["step"] for row in read_jsonl(run / METRICS_FILE)] == [0, 1, 2]
    again = run_minds(["run", "--resume", str(run), "--steps", "4", "--start-over"], plugins=["toy_plugin"])
    assert again.returncode == 2 and "has its checkpoints (the last of step 2" in again.stderr


@pytest.mark.slow
@pytest.mark.parametrize("change", ["adapter replaced by an older checkpoint's", "checkpoint folder replaced by a link to an older one"])
def test_a_changed_checkpoint_resumes_when_accepted_knowingly(finished_run, tmp_path, run_minds, change):
    run = _copy(finished_run, tmp_path)
    DAMAGE[change][0](run)
    resumed = run_minds(["run", "--resume", str(run), "--steps", "3", "--accept-changed-checkpoints"], plugins=["toy_plugin"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "changed after it was saved" in resumed.stderr and "loading it anyway" in resumed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("command", [["sample", "--prompt", "hi", "--max-tokens", "2"], ["eval", "--tasks", "1"]])
def test_a_changed_checkpoint_loads_from_the_checkpoint_commands_only_when_accepted(finished_run, tmp_path, run_minds, command):
    # their refusal said "load it knowingly with --accept-changed-checkpoints", a flag only minds run took
    run = _copy(finished_run, tmp_path)
    older = _checkpoint_folders(run)[-2]
    run_id, kind, name = read_jsonl(run / CHECKPOINTS_FILE)[-1]["sampler_path"].removeprefix("tinker://").split("/")
    sampler = run.parent / "_checkpoints" / run_id / kind / name  # what sample and eval load
    shutil.copyfile(older / "adapter_model.safetensors", sampler / "adapter_model.safetensors")
    refused = run_minds([command[0], str(run), *command[1:]], plugins=["toy_plugin"])
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "adapter_model.safetensors is not the file saved with it" in refused.stderr, refused.stderr[-2000:]
    assert "--accept-changed-checkpoints" in refused.stderr
    loaded = run_minds([command[0], str(run), *command[1:], "--accept-changed-checkpoints"], plugins=["toy_plugin"])
    assert loaded.returncode == 0, loaded.stderr[-2000:]
    assert "changed after it was saved" in loaded.stderr and "loading it anyway" in loaded.stderr


def test_a_run_that_never_saved_resumes_at_step_0(tmp_path):
    run = RunDirectory.create(_config(tmp_path))
    append_line(run.path / METRICS_FILE, {"step": 0})
    assert run.last_checkpoint() is None  # no checkpoints.jsonl at all: nothing was lost to a damaged file
    run.close()


def test_a_save_recorded_after_lines_of_another_version_keeps_them_as_written(tmp_path):
    run = RunDirectory.create(_config(tmp_path))
    path = run.path / CHECKPOINTS_FILE
    older = [{"step": s, "state_path": f"tinker://r/weights/rolling-{s % 2}", "sampler_path": None, "saved_at": s} for s in (4, 9)]
    path.write_text("".join(json.dumps(row) + "\n" for row in older))  # a key this version does not write
    outdated = run.record_checkpoint(CheckpointRecord(14, "tinker://q/weights/rolling-0"))
    assert [record.step for record in outdated] == [4]
    assert read_jsonl(path) == [older[1], {"step": 14, "state_path": "tinker://q/weights/rolling-0", "sampler_path": None}]
    path.write_text(path.read_text() + "not json\n" + json.dumps(older[0]) + "\n")
    with pytest.raises(RunFileError, match=rf"{path}: line 3 is not a JSON object"):
        run.record_checkpoint(CheckpointRecord(19, "tinker://q/weights/rolling-1"))  # never dropped on a rewrite
    run.close()


# ---------------------------------------------------------------- non-finite numbers


def test_non_finite_numbers_are_written_as_null(tmp_path):
    path = tmp_path / "metrics.jsonl"
    append_line(path, {"step": 0, "a": math.nan, "b": [math.inf, 1.0], "c": {"d": -math.inf}, "e": torch.tensor(math.nan)})
    assert _strict_rows(path) == [{"step": 0, "a": None, "b": [None, 1.0], "c": {"d": None}, "e": None}]


def _nan_loss(data, logprobs):
    loss = sum(lp.sum() for lp in logprobs) * math.nan
    return loss, {}


class NanLossPlugin:
    """A plugin whose loss is NaN: the training it drives diverges at once."""

    @hookimpl
    def minds_register_losses(self, register):
        register("test_nan_loss", CustomLoss(_nan_loss), "NaN")


@pytest.mark.slow
def test_a_non_finite_loss_stops_the_run_and_nothing_non_finite_is_written(tmp_path):
    import minds_toy_plugin

    plugins = load_plugins(extra=[("toy", minds_toy_plugin), ("nan", NanLossPlugin())])
    with pytest.raises(MindsError) as stopped:
        train(_config(tmp_path, "trainer.steps=3", "trainer.loss_fn=test_nan_loss"), plugins=plugins)
    message = str(stopped.value)
    assert "step 0: the loss is not finite (train/loss:sum = nan): training diverged" in message
    assert "no checkpoint was saved" in message and not isinstance(stopped.value, UsageError)
    run = tmp_path / "r"
    assert not (run / METRICS_FILE).exists()  # no line for the diverged step
    assert not (run / CHECKPOINTS_FILE).exists()  # nor its state
