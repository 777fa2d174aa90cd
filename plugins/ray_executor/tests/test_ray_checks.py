"""What the ray executor refuses before any episode runs (no cluster needed): workers with other minds
versions, and secrets in an environment's args, which would travel in every task."""

from __future__ import annotations

import pytest
from ray_cluster import ENV

from minds_core.testing import run_minds
from minds_ray.order import WorkerRefused, check_versions, installed_versions


def test_a_worker_with_other_minds_versions_is_refused_naming_both() -> None:
    here = installed_versions(["minds-core", "minds-plugin-ray"])
    check_versions(here, "n1")  # the same versions: accepted
    driver = {**here, "minds-core": "9.9.9", "minds-plugin-elsewhere": "1.0"}
    with pytest.raises(WorkerRefused) as info:
        check_versions(driver, "node-7")
    message = str(info.value)
    assert f"minds-core 9.9.9 on the driver, {here['minds-core']} on the worker" in message
    assert "minds-plugin-elsewhere 1.0 on the driver, not installed on the worker" in message
    assert "node-7" in message and "minds-plugin-ray" not in message  # only what differs


def test_a_secret_in_an_environment_s_args_stops_the_run_before_ray_starts(tmp_path, capsys) -> None:
    secret = "sk-do-not-ship-7f3a9c"
    result = run_minds(
        "--env", ENV, "--backend", "local", runs_dir=tmp_path,
        overrides=["rollout.executor=ray", f"env.args.api_key={secret}", "trainer.group_size=2"],
    )  # fmt: skip
    err = capsys.readouterr().err
    assert result.exit_code == 2
    assert "hold a secret, which every Ray task would carry to its worker" in err and "an *_env arg" in err
    assert secret not in err and "Traceback" not in err
    assert not (tmp_path / "test").exists()
