"""Trajectory upload to OpenReward: off by default, complete when on, off by itself when unreachable."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from tinker import types

from minds_core.base.errors import ConfigError, UsageError
from minds_core.config import RolloutConfig
from minds_core.contract.environment import Context
from minds_core.envs.render import Renderer
from minds_core.episodes.groups import EpisodeSettings, Group
from minds_core.episodes.rollout import run_group
from minds_openreward.environment import OpenRewardEnvironment, load_environment
from minds_openreward.local_server import serve_app
from minds_openreward.settings import parse_settings

local = pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

UPLOAD_KEY = "sk-or-upload-7e3a"
SELF_HOSTED_KEY = "selfhosted-token-91b2"


class FakeOpenRewardAPI:
    """A fake of the hosted OpenReward API's rollout endpoint (the real service is unreachable here)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.keys: list[str | None] = []
        self.app = FastAPI()
        self.app.post("/v1/rollouts")(self.receive)

    async def receive(self, request: Request) -> dict[str, bool]:
        self.keys.append(request.headers.get("x-api-key"))
        self.events.extend((await request.json())["events"])
        return {"ok": True}


@pytest.fixture
def fake_api(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenRewardAPI]:
    fake = FakeOpenRewardAPI()
    with serve_app(fake.app) as url:
        monkeypatch.setenv("OPENREWARD_API_URL", url)
        monkeypatch.setenv("OPENREWARD_API_KEY", UPLOAD_KEY)
        yield fake


async def play(env: OpenRewardEnvironment, tmp_path: Path, group_size: int) -> Group:
    service = local.ServiceClient(checkpoint_root=tmp_path)
    sampler = await service.create_sampling_client(base_model=local.TINY_MODEL)
    tokenizer = sampler.get_tokenizer()
    renderer = Renderer(tokenizer)
    ctx = Context(sampler=sampler, tokenizer=tokenizer, service=service, renderer=renderer, base_model=local.TINY_MODEL)
    settings = EpisodeSettings(renderer, types.SamplingParams(max_tokens=8), RolloutConfig(retries=0, max_total_tokens=1024))
    task = env.tasks("train")[0]
    group = await run_group("lab", env, task, group_size, lambda: ctx, settings, asyncio.Semaphore(4), max_failing=0, seed=1)
    await env.close()
    return group


@pytest.mark.slow
async def test_trajectories_are_uploaded_only_when_a_run_name_is_set(ors_server, fake_api, tmp_path: Path) -> None:
    quiet = load_environment(name="toollab", base_url=ors_server.url)
    assert quiet.uploader is None
    await play(quiet, tmp_path, 2)
    assert fake_api.events == []

    env = load_environment(name="toollab", base_url=ors_server.url, upload_run_name="nightly")
    group = await play(env, tmp_path, 2)
    assert group.failures == 0 and env.uploader.uploaded == 2
    starts = [e for e in fake_api.events if e["eventType"] == "rollout"]
    assert [(e["runName"], e["environment"], e["split"]) for e in starts] == [("nightly", "toollab", "train")] * 2
    assert set(fake_api.keys) == {UPLOAD_KEY}
    rewards = sorted(r.reward for r in group.rollouts)
    for start in starts:
        messages = sorted(
            (e for e in fake_api.events if e.get("rolloutEventId") == start["eventId"]), key=lambda e: e["index"]
        )
        assert [m["type"] for m in messages] == ["system_message", "user_message", "assistant_message", "tool_call", "tool_result"]
        assert messages[3]["name"] == "answer"
        assert messages[-1]["isFinished"] is True
        rewards.remove(messages[-1]["reward"])
    assert rewards == []


@pytest.mark.slow
async def test_an_unreachable_service_turns_uploading_off_without_failing_rollouts(ors_server, monkeypatch, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setenv("OPENREWARD_API_URL", f"http://127.0.0.1:{closed}")
    monkeypatch.setenv("OPENREWARD_API_KEY", UPLOAD_KEY)
    env = load_environment(name="toollab", base_url=ors_server.url, upload_run_name="nightly")
    group = await play(env, tmp_path, 3)
    assert group.failures == 0
    assert env.uploader.enabled is False and env.uploader.uploaded == 0


@pytest.mark.slow
async def test_a_self_hosted_servers_key_never_reaches_the_hosted_upload(ors_server, fake_api, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MY_SELFHOSTED_TOKEN", SELF_HOSTED_KEY)
    start = len(ors_server.log.keys)
    env = load_environment(name="toollab", base_url=ors_server.url, api_key_env="MY_SELFHOSTED_TOKEN", upload_run_name="nightly")
    group = await play(env, tmp_path, 2)
    assert group.failures == 0 and env.uploader.uploaded == 2
    assert set(ors_server.log.keys[start:]) == {SELF_HOSTED_KEY}  # the server gets its own key
    assert fake_api.keys and set(fake_api.keys) == {UPLOAD_KEY}  # the hosted upload gets OPENREWARD_API_KEY's


@pytest.mark.slow
async def test_upload_api_key_env_names_the_upload_key(ors_server, fake_api, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MY_UPLOAD_KEY", "sk-or-dedicated-42")
    env = load_environment(name="toollab", base_url=ors_server.url, upload_run_name="nightly", upload_api_key_env="MY_UPLOAD_KEY")
    await play(env, tmp_path, 1)
    assert fake_api.keys and set(fake_api.keys) == {"sk-or-dedicated-42"}


def test_a_hosted_environment_uploads_with_its_own_key_variable() -> None:
    hosted = parse_settings({"name": "Org/Lab", "api_key_env": "MY_OR_KEY", "upload_run_name": "nightly"})
    assert hosted.upload_key_env == "MY_OR_KEY"  # the same service the environment's key is for
    assert parse_settings({"name": "Org/Lab", "upload_run_name": "nightly"}).upload_key_env == "OPENREWARD_API_KEY"
    with pytest.raises(ConfigError, match="upload_api_key_env = 'MY_UPLOAD_KEY': only used with upload_run_name"):
        parse_settings({"name": "Org/Lab", "upload_api_key_env": "MY_UPLOAD_KEY"})


@pytest.mark.parametrize("server_key_env", ["", "MY_SELFHOSTED_TOKEN"])
def test_upload_needs_a_key(ors_server, monkeypatch, server_key_env: str) -> None:
    monkeypatch.delenv("OPENREWARD_API_KEY", raising=False)
    monkeypatch.setenv("MY_SELFHOSTED_TOKEN", SELF_HOSTED_KEY)
    with pytest.raises(UsageError, match="trajectory upload: set the environment variable OPENREWARD_API_KEY"):
        load_environment(name="toollab", base_url=ors_server.url, api_key_env=server_key_env, upload_run_name="nightly")
