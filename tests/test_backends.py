"""Backend choice and the hosted-Tinker backend's errors (the service itself is unreachable here)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from minds_core import BackendFit
from minds_core.backends import BackendChoice, LocalBackend, choose_backend
from minds_core.backends.tinker import create_tinker_service, resolve_api_key
from minds_core.base.errors import UsageError
from minds_core.config import load_config
from minds_core.contract.plugins import Registry, load_plugins


@pytest.fixture(scope="module")
def registry():
    return load_plugins().registry


def test_auto_picks_tinker_only_when_a_key_is_configured(monkeypatch, registry):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert choose_backend(load_config(None, ["env.id=x", "model.base_model=Qwen/Qwen3-8B"]), registry).name == "local"
    monkeypatch.setenv("TINKER_API_KEY", "tml-abc")
    chosen = choose_backend(load_config(None, ["env.id=x", "model.base_model=Qwen/Qwen3-8B"]), registry)
    assert chosen.name == "tinker" and "$TINKER_API_KEY" in chosen.reason and "tml-abc" not in chosen.reason
    assert choose_backend(load_config(None, ["env.id=x", "backend=local"]), registry).name == "local"


def test_auto_never_sends_a_local_only_model_to_the_hosted_service(monkeypatch, tmp_path, registry):
    monkeypatch.setenv("TINKER_API_KEY", "tml-abc")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints" / "my-model").mkdir(parents=True)
    for model, why in [
        ("minds-tiny", "built by the local backend"),
        (str(tmp_path / "checkpoints" / "my-model"), "is a local directory"),
        ("checkpoints/my-model", "is a local directory"),  # relative, as typed in a config
        ("./not-made-yet", "is a local directory"),
        ("~/models/qwen", "is a local directory"),
    ]:
        chosen = choose_backend(load_config(None, ["env.id=x", f"model.base_model={model}"]), registry)
        assert chosen.name == "local", model
        assert why in chosen.reason and "cannot serve" in chosen.reason and "tml-abc" not in chosen.reason
    assert choose_backend(load_config(None, ["env.id=x", "model.base_model=meta-llama/Llama-3.2-1B"]), registry).name == "tinker"


def test_auto_asks_every_registered_backend_and_names_none_in_the_core(monkeypatch):
    class Cluster:
        def __init__(self, serves: bool) -> None:
            self.serves = serves

        def __call__(self, config, run_dir):
            return None

        def can_serve(self, config):
            return BackendFit(self.serves, "the cluster " + ("is up" if self.serves else "is down"), preference=5)

    config = load_config(None, ["env.id=x"])
    plugins = Registry()
    plugins.add("backends", "local", LocalBackend(), "", "minds_core")
    plugins.add("backends", "cluster", Cluster(serves=True), "", "mine")
    assert choose_backend(config, plugins) == BackendChoice("cluster", "the cluster is up")
    plugins = Registry()
    plugins.add("backends", "local", LocalBackend(), "", "minds_core")
    plugins.add("backends", "cluster", Cluster(serves=False), "", "mine")
    chosen = choose_backend(config, plugins)
    assert chosen.name == "local" and chosen.reason.startswith("the cluster is down; ")
    plugins = Registry()
    plugins.add("backends", "cluster", Cluster(serves=False), "", "mine")
    with pytest.raises(UsageError, match="no registered backend can serve this run \\(cluster: the cluster is down\\)"):
        choose_backend(config, plugins)


@pytest.mark.slow
def test_auto_with_a_key_exported_trains_minds_tiny_locally_and_says_why(run_minds, tmp_path):
    # `make demo` with TINKER_API_KEY exported: the default model stays on this machine
    # (4 groups of 8 replies of 32 tokens, so that rewards differ and the step trains: a run that trains nothing exits 1)
    result = run_minds(
        ["--log-format", "json", "run", "--env", "toy_char_share", "--steps", "1", "--set", "sampling.max_tokens=32",
         "--set", "trainer.group_size=8", "--set", "trainer.groups_per_batch=4", "--set", "metrics.sinks=[]"],
        plugins=["toy_plugin"],
        env={"TINKER_API_KEY": "tml-exported-key", "TINKER_BASE_URL": "http://127.0.0.1:9"},
    )
    assert result.returncode == 0, result.stderr
    (line,) = [json.loads(x) for x in result.stderr.splitlines() if '"backend chosen"' in x]
    assert line["backend"] == "local" and "is built by the local backend" in line["reason"]
    assert "tml-exported-key" not in result.stderr


def test_key_comes_from_the_config_or_the_named_variable(monkeypatch):
    monkeypatch.setenv("MY_TINKER", "tml-from-env")
    assert resolve_api_key(load_config(None, ["tinker.api_key_env=MY_TINKER"]).tinker) == "tml-from-env"
    assert resolve_api_key(load_config(None, ["tinker.api_key=tml-inline"]).tinker) == "tml-inline"


def test_missing_key_is_a_clear_usage_error(monkeypatch):
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    with pytest.raises(UsageError, match="export TINKER_API_KEY"):
        create_tinker_service(load_config(None, ["env.id=x", "backend=tinker"]), None)


@pytest.mark.slow
def test_tinker_backend_without_key_fails_before_any_work(run_minds, tmp_path):
    result = run_minds(["run", "--env", "toy_char_share", "--backend", "tinker"], plugins=["toy_plugin"])
    assert result.returncode == 2
    assert "needs an API key" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_missing_tinker_package_is_a_clear_error(tmp_path):
    code = (
        "import sys; sys.modules['tinker'] = None\n"
        "from minds_core.backends.tinker import create_tinker_service\n"
        "from minds_core.config import load_config\n"
        "from minds_core.base.errors import UsageError\n"
        "try:\n    create_tinker_service(load_config(None, ['tinker.api_key=tml-secret-value']), None)\n"
        "except UsageError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install tinker" in out and "tml-secret-value" not in out


def test_a_key_without_the_tinker_prefix_is_a_usage_error_naming_where_it_came_from(monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "not-a-key")
    with pytest.raises(UsageError, match=r"\$TINKER_API_KEY does not look like one") as caught:
        create_tinker_service(load_config(None, ["backend=tinker"]), None)
    assert "not-a-key" not in str(caught.value)


@pytest.mark.slow
def test_bad_model_fails_before_any_run_directory(run_minds, tmp_path):
    result = run_minds(["run", "--env", "toy_char_share", "--model", "no/such-model", "--backend", "local"],
                       plugins=["toy_plugin"], env={"HF_HUB_OFFLINE": "1"})  # no hub here: fail at once
    assert result.returncode == 2
    # checked before torch loads: not in the cache, and the hub is off
    assert "model.base_model = 'no/such-model': not in the Hugging Face cache" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "runs" / "toy_char_share").exists() and not list((tmp_path / "runs").glob("toy*"))


def test_the_backend_chosen_line_shows_the_local_backends_switches(registry):
    from structlog.testing import capture_logs

    from minds_core.base import logs as minds_logs
    from minds_core.session.service import ServiceLifetime

    minds_logs.configure("json", "info")  # a test run before in this process may have raised the level
    config = load_config(None, ["env.id=x", "backend=local", "local.cuda_graphs=off"])
    with capture_logs() as logs:
        ServiceLifetime.choose(config, registry)
    (line,) = [log for log in logs if log["event"] == "backend chosen"]
    assert (line["backend"], line["device"], line["cuda_graphs"], line["compile"]) == ("local", "auto", "off", "auto")
