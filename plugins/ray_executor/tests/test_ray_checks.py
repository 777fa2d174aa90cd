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


@pytest.mark.slow
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


def test_a_worker_reads_its_installed_versions_once_per_driver_versions(monkeypatch) -> None:
    from minds_ray import order, worker

    reads = []

    def counted(distributions: list[str]) -> dict[str, str]:
        reads.append(distributions)
        return installed_versions(distributions)

    monkeypatch.setattr(order, "installed_versions", counted)
    monkeypatch.setattr(worker, "_cache", {})
    here = installed_versions(["minds-core", "minds-plugin-ray"])
    for _ in range(3):  # episodes of one run: the metadata is read for the first only
        worker._check_versions_once(here, "n1")
    assert len(reads) == 1
    other = {**here, "minds-core": "9.9.9"}
    for _ in range(2):  # a driver with other versions is refused on every episode, each time read again
        with pytest.raises(WorkerRefused, match="minds-core 9.9.9 on the driver"):
            worker._check_versions_once(other, "n1")
    assert len(reads) == 3
