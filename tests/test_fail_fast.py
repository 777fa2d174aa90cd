"""Mistakes a newcomer makes fail at once: a model name the machine cannot have, a misspelled name, before torch loads."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from huggingface_hub import constants

from minds_core import hookimpl, load_plugins
from minds_core.backends.model_source import check_model_source
from minds_core.base.errors import ConfigError
from minds_core.config import load_config
from minds_core.contract.names import check_names
from minds_core.testing import run_minds

#: A hub id that is in no cache a test makes.
HUB_ID = "Qwen/Qwen3-0.6B"


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Hugging Face cache, no proxy, the hub not declared off."""
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "hub"


def test_an_uncached_hub_id_with_the_hub_off_fails_naming_the_cache(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    expected = rf"model.base_model = '{HUB_ID}': not in the Hugging Face cache \({empty_cache}\) and the hub is off \(HF_HUB_OFFLINE"
    with pytest.raises(ConfigError, match=expected):
        check_model_source(HUB_ID)


def test_an_uncached_hub_id_with_the_hub_unreachable_fails_at_once(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: nothing listens there
    with pytest.raises(ConfigError, match=r"not in the Hugging Face cache .* the hub cannot be reached \(127\.0\.0\.1:9: "):
        check_model_source(HUB_ID, "--model")


def test_a_cached_hub_id_a_model_directory_and_the_builtin_models_pass(empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    snapshot = empty_cache / "models--Qwen--Qwen3-0.6B" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (empty_cache / "models--Qwen--Qwen3-0.6B" / "refs").mkdir()
    (empty_cache / "models--Qwen--Qwen3-0.6B" / "refs" / "main").write_text("abc123")
    check_model_source(HUB_ID)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    check_model_source(str(tmp_path / "model"))
    check_model_source("minds-tiny")
    check_model_source("minds-small")


def test_an_export_folder_or_an_adapter_given_as_the_model_says_which_path_to_use(tmp_path: Path) -> None:
    """`minds export ... --merge` writes the adapter at the top and the model in merged/: the error names merged/."""
    export = tmp_path / "my-adapter"
    (export / "merged").mkdir(parents=True)
    (export / "adapter_config.json").write_text("{}")
    (export / "merged" / "config.json").write_text("{}")
    with pytest.raises(ConfigError, match=rf"is a `minds export` folder: .* use '{export / 'merged'}'"):
        check_model_source(str(export))
    check_model_source(str(export / "merged"))
    (export / "merged" / "config.json").unlink()
    with pytest.raises(ConfigError, match="holds a LoRA adapter, not a model: export it with `minds export CHECKPOINT"):
        check_model_source(str(export), "--model")
    with pytest.raises(ConfigError, match="the directory has no config.json"):
        check_model_source(str(export / "merged"))


@pytest.mark.parametrize(
    ("name", "message"),
    [("./no-such-dir", "no such model directory"), ("a/b/c", "no such model directory"), ("bad name!", "nor a valid hub id")],
)
def test_names_that_are_neither_a_directory_nor_a_hub_id_are_refused(empty_cache: Path, name: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_model_source(name)


def _minds_in_process(args: list[str], tmp_path: Path, **environ: str) -> tuple[subprocess.CompletedProcess, float]:
    """``minds ARGS`` in a fresh interpreter that prints whether torch got imported; with its wall time."""
    code = (
        "import sys\nfrom minds_core.cli.command import main\n"
        f"code = main({args!r})\n"
        "print('TORCH=' + str('torch' in sys.modules))\nsys.exit(code)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MINDS_", "HF_", "TINKER_"))}
    env.update(HF_HOME=str(tmp_path / "hf"), **environ)
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300, check=False)  # a hang guard
    return done, time.monotonic() - began


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["run", "--env", "ghost_trace", "--backend", "local", "--model", HUB_ID, "--steps", "1"],
            "model.base_model = 'Qwen/Qwen3-0.6B': not in the Hugging Face cache",
        ),
        (["serve", "--model", "no-such-dir", "--port", "0"], "--model = 'no-such-dir': not in the Hugging Face cache"),
        (["run", "--env", "ghost_trac", "--backend", "local"], "unknown environment 'ghost_trac' (did you mean ghost_trace?)"),
        (["run", "--env", "ghost_trace", "--set", "trainer.loss_fn=pp"], "unknown loss 'pp'"),
    ],
)
def test_offline_bad_models_and_name_typos_fail_before_torch_loads(args: list[str], message: str, tmp_path: Path) -> None:
    done, seconds = _minds_in_process(args, tmp_path, HF_HUB_OFFLINE="1")
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr
    assert done.stdout.splitlines()[-1] == "TORCH=False"
    print(f"{' '.join(args)}: exit 2 after {seconds:.1f} s")


def test_a_serve_checkpoint_root_that_is_a_file_is_named_before_the_model_loads(tmp_path: Path, capsys) -> None:
    from minds_core.cli.command import main

    root = tmp_path / "afile"
    root.write_text("")
    assert main(["serve", "--checkpoint-root", str(root), "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert f"--checkpoint-root {root}: not a folder that can be made (File exists)" in err, err
    assert "cannot listen" not in err and "--port" not in err  # the port was never the problem


def test_a_taken_port_fails_at_once_naming_it_before_torch_loads(tmp_path: Path) -> None:
    """``minds serve`` binds its port before it loads a model (seconds): a second server on a busy port fails at once,
    exit 2, in one line naming the port (issue 40)."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done, seconds = _minds_in_process(["serve", "--port", str(port)], tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stderr.strip().splitlines() == [
        f"minds: error: cannot listen on 127.0.0.1:{port}: Address already in use; pick another --port (0 picks a free one)"
    ]
    assert done.stdout.splitlines()[-1] == "TORCH=False"
    print(f"serve on a taken port: exit 2 after {seconds:.1f} s")


def test_a_sink_or_span_export_that_cannot_start_stops_the_run_before_anything_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """wandb without its project, and span export without the otel extra (its absence simulated: this venv has the
    extra): both named at once, exit 2, before any service opens (opening one fails the test), and no run folder is made."""
    monkeypatch.setattr("minds_core.contract.names.otel_installed", lambda: False)

    def no_service(config, run_dir):
        raise AssertionError("the run opened a service before naming what its sinks lack")

    monkeypatch.setattr("minds_core.backends.create_local_service", no_service)
    result = run_minds(
        "--env", "ghost_trace", "--steps", "1", runs_dir=tmp_path / "runs",
        overrides=['metrics.sinks=["console", "wandb"]', "metrics.otlp_endpoint=http://127.0.0.1:9/v1/traces"],
    )  # fmt: skip
    said = capsys.readouterr().err
    assert result.exit_code == 2
    assert 'metric sink "wandb" needs metrics.wandb_project' in said and "needs the otel extra" in said
    assert not (tmp_path / "runs").exists()


def test_a_plugin_sink_whose_check_fails_is_named_with_its_plugin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Fussy:
        """A sink factory whose check(config) breaks (a plugin's bug, not a missing setting)."""

        def __call__(self, config, run_dir):
            raise AssertionError("never made: the check stops the run first")

        @staticmethod
        def check(config) -> None:
            raise KeyError("region")

    class FussyPlugin:
        @hookimpl
        def minds_register_metric_sinks(self, register) -> None:
            register("fussy", Fussy(), "a sink whose check breaks")

    plugins = load_plugins(extra=[("fussy_plugin", FussyPlugin())])
    config = load_config(None, ["env.id=ghost_trace", 'metrics.sinks=["fussy"]'])
    with pytest.raises(ConfigError, match=r"metric sink \"fussy\" \(plugin fussy_plugin\): its check\(config\) raised KeyError: 'region'"):
        check_names(config, plugins.registry)
