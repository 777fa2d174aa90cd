"""The tracer: spans that nest across asyncio tasks, the trace file a run writes (readable however the run ends,
capped), OTLP export, and a real run's trace on minds-tiny (nesting, phases that add up, plugin spans, errors; an SFT run's)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

import minds_core
from minds_core.base import logs
from minds_core.base.tracing import OtlpSink, TraceFile, Tracer, read_trace, span, tracing
from minds_core.config import load_config
from minds_core.train import train
from minds_core.training.pacing import PARTS

FAST = ["model.base_model=minds-tiny", "sampling.max_tokens=8", "metrics.sinks=[]", "rollout.retries=0"]


def _spans(path: Path) -> dict[int, dict[str, Any]]:
    return {e["args"]["span_id"]: e for e in read_trace(path) if e.get("ph") == "X"}


def _ancestors(spans: dict[int, dict[str, Any]], event: dict[str, Any]) -> list[dict[str, Any]]:
    chain = []
    while (parent := event["args"]["parent_id"]) is not None:
        event = spans[parent]
        chain.append(event)
    return chain


def _inside(child: dict[str, Any], parent: dict[str, Any]) -> bool:
    return parent["ts"] <= child["ts"] + 1 and child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 1  # µs rounding


def test_spans_nest_across_asyncio_tasks_and_record_their_errors(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"

    async def episode(index: int) -> None:
        with span("episode", lane=True, index=index):
            await asyncio.sleep(0.01)
            with span("sample"):
                await asyncio.sleep(0.01)
            if index == 1:
                with span("broken reward"):
                    raise ValueError("no score")

    async def main() -> None:
        with span("step", step=0):
            await asyncio.gather(*(episode(i) for i in range(3)), return_exceptions=True)

    with tracing(Tracer([TraceFile(path)])):
        asyncio.run(main())
    json.loads(path.read_text())  # closed: plain JSON
    spans = _spans(path)
    (step,) = [e for e in spans.values() if e["name"] == "step"]
    episodes = [e for e in spans.values() if e["name"] == "episode"]
    assert len(episodes) == 3 and len({e["tid"] for e in episodes}) == 3  # each its own track
    for event in spans.values():
        if event is not step:
            assert step in _ancestors(spans, event) and _inside(event, step)
    (broken,) = [e for e in spans.values() if e["name"] == "broken reward"]
    assert broken["args"]["error"] == "ValueError: no score" and broken["cat"] == "error"
    assert _ancestors(spans, broken)[0]["args"]["index"] == 1


def test_without_a_tracer_a_span_costs_nothing_and_yields_none() -> None:
    with minds_core.span("anything", key=1) as opened:
        assert opened is None


def test_the_trace_file_is_readable_before_it_is_closed_and_rotates_at_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "trace.json"
    sink = TraceFile(path, cap_bytes=4000)
    tracer = Tracer([sink])
    for index in range(100):
        tracer.close(tracer.open("work", None, {"index": index}))
        if index == 3:
            assert [e["args"]["index"] for e in read_trace(path) if e["ph"] == "X"] == [0, 1, 2, 3]  # as it goes
    older = tmp_path / "trace.1.json"
    assert older.exists() and path.stat().st_size < 4400 and older.stat().st_size < 4400  # at most twice the cap
    newest = [e["args"]["index"] for e in read_trace(path) if e["ph"] == "X"]
    assert newest[-1] == 99 and [e["args"]["index"] for e in read_trace(older) if e["ph"] == "X"][-1] == newest[0] - 1
    tracer.shutdown()
    assert json.loads(path.read_text())[-1] == {}


def test_spans_reach_the_otel_sdk_with_their_parents() -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    with tracing(Tracer([OtlpSink("minds run test", exporter=exporter)])):
        with span("step", step=3), span("episode", task="t1"):
            with pytest.raises(RuntimeError), span("env.step"):
                raise RuntimeError("down")
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert set(spans) == {"step", "episode", "env.step"}
    assert spans["episode"].parent.span_id == spans["step"].context.span_id
    assert spans["env.step"].parent.span_id == spans["episode"].context.span_id
    assert spans["episode"].attributes["task"] == "t1" and spans["step"].attributes["step"] == 3
    assert spans["env.step"].status.description == "RuntimeError: down"
    assert spans["step"].resource.attributes["service.name"] == "minds run test"


def test_spans_reach_a_real_otlp_receiver_over_http() -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    received: list[ExportTraceServiceRequest] = []

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if self.path == "/v1/traces" and self.headers["Content-Type"] == "application/x-protobuf":
                received.append(ExportTraceServiceRequest.FromString(body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}/v1/traces"
        with tracing(Tracer([OtlpSink("minds run otlp", endpoint)])):  # leaving flushes the batch
            with span("step", step=0), span("forward_backward"):
                time.sleep(0.001)
    finally:
        server.shutdown()
    names = {s.name: s for r in received for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert set(names) == {"step", "forward_backward"}
    assert names["forward_backward"].parent_span_id == names["step"].span_id
    assert names["forward_backward"].end_time_unix_nano > names["forward_backward"].start_time_unix_nano > 1.6e18


@pytest.fixture(scope="module")
def traced_run(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs.configure("json", "warning")
    root = tmp_path_factory.mktemp("traced")
    config = load_config(
        None,
        [
            *FAST,
            f"runs_dir={root}",
            "name=traced",
            "env.id=toy_traced",
            "trainer.steps=2",
            "trainer.group_size=2",
            "trainer.groups_per_batch=2",
        ],
    )
    return Path(train(config, plugins=plugins)["run_dir"])


@pytest.mark.slow
def test_a_run_writes_a_trace_whose_spans_nest(traced_run: Path) -> None:
    spans = _spans(traced_run / "trace.json")
    names = {e["name"] for e in spans.values()}
    assert {
        "step",
        "wait_for_batch",
        "group",
        "episode",
        "sample",
        "sample.queued",
        "sample.compute",
        "env.initial_observation",
        "env.step",
        "toy.traced reward",
        "toy.fails reward",
        "advantages",
        "train",
        "forward_backward",
        "optim_step",
        "sampler_snapshot",
        "save",
        "checkpoint",
    } <= names, names
    steps = [e for e in spans.values() if e["name"] == "step"]
    assert sorted(e["args"]["step"] for e in steps) == [0, 1]
    episodes = [e for e in spans.values() if e["name"] == "episode"]
    assert len(episodes) == 2 * 2 * 2
    for episode in episodes:
        (step,) = [a for a in _ancestors(spans, episode) if a["name"] == "step"]
        assert _inside(episode, step)
        assert episode["args"]["environment"] == "toy_traced" and episode["args"]["task"] in ("t0", "fails")
    for sample in (e for e in spans.values() if e["name"] == "sample"):
        (episode,) = [a for a in _ancestors(spans, sample) if a["name"] == "episode"]
        assert _inside(sample, episode)
    for part in (e for e in spans.values() if e["name"] in ("sample.queued", "sample.compute")):
        assert "sample" in [a["name"] for a in _ancestors(spans, part)]


def test_the_phases_of_a_step_add_up_to_its_wall_time(traced_run: Path) -> None:
    spans = _spans(traced_run / "trace.json")
    for step in (e for e in spans.values() if e["name"] == "step"):
        children = [e for e in spans.values() if e["args"]["parent_id"] == step["args"]["span_id"]]
        assert abs(sum(c["dur"] for c in children) - step["dur"]) <= 0.05 * step["dur"], (step, children)
    for row in (json.loads(line) for line in (traced_run / "metrics.jsonl").read_text().splitlines()):
        parts = sum(row[f"phase/{part}"] for part in PARTS)
        assert abs(parts - row["time/step"]) <= 0.05 * row["time/step"], row
        assert row["phase/sampling"] > 0 and row["phase/training"] > 0 and row["phase/reward"] > 0


def test_a_plugins_span_lies_under_its_episode_and_a_failing_reward_shows_its_error(traced_run: Path) -> None:
    spans = _spans(traced_run / "trace.json")
    lookups = [e for e in spans.values() if e["name"] == "toy.lookup"]
    assert lookups and all(e["args"]["table"] == "letters" for e in lookups)
    for lookup in lookups:
        chain = [a["name"] for a in _ancestors(spans, lookup)]
        assert chain[:3] == ["toy.traced reward", "env.step", "episode"], chain
    failed = [e for e in spans.values() if e["name"] == "toy.fails reward" and "error" in e["args"]]
    assert failed and all(e["args"]["error"] == "ValueError: reward exploded" for e in failed)
    for reward in failed:
        (episode,) = [a for a in _ancestors(spans, reward) if a["name"] == "episode"]
        assert episode["args"]["task"] == "fails" and "reward exploded" in episode["args"]["error"]


def test_a_hanging_environment_shows_as_an_episode_that_timed_out(plugins, tmp_path: Path) -> None:
    logs.configure("json", "warning")
    config = load_config(
        None,
        [
            *FAST,
            f"runs_dir={tmp_path}",
            "name=hung",
            "env.id=toy_flaky",
            "env.args.modes=[hang, ok]",
            "trainer.steps=1",
            "trainer.group_size=2",
            "trainer.groups_per_batch=2",
            "rollout.timeout=1",
        ],
    )
    spans = _spans(Path(train(config, plugins=plugins)["run_dir"]) / "trace.json")
    hung = [e for e in spans.values() if e["name"] == "episode" and e["args"]["task"] == "hang"]
    assert len(hung) == 2 and all("timed out" in e["args"]["error"] for e in hung)
    assert all(e["dur"] >= 0.9e6 for e in hung)
    steps = [
        e for e in spans.values() if e["name"] == "env.step" and "hang" in [a["args"].get("task") for a in _ancestors(spans, e)]
    ]
    assert steps and all(e["args"]["error"] == "CancelledError" for e in steps)  # cut off by the timeout


def _start(tmp_path: Path, name: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    args = [
        "--env",
        "ghost_trace",
        "--steps",
        "200",
        "--name",
        name,
        "--set",
        "model.base_model=minds-tiny",
        "--set",
        "trainer.group_size=2",
        "--set",
        "trainer.groups_per_batch=1",
        "--set",
        "sampling.max_tokens=4",
        "--set",
        "metrics.sinks=[]",
        "--set",
        "trainer.save_every=0",
    ]
    return subprocess.Popen(
        [sys.executable, "-m", "minds_core.cli.command", "run", *args],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _wait_for_steps(proc: subprocess.Popen, trace: Path, steps: int) -> None:
    deadline = time.time() + 240
    while not (trace.exists() and sum(e["name"] == "step" for e in read_trace(trace) if e.get("ph") == "X") >= steps):
        assert proc.poll() is None and time.time() < deadline, "the run ended or hung before its steps"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGINT])
def test_kill_9_and_ctrl_c_leave_a_readable_trace(tmp_path: Path, signum: int) -> None:
    proc = _start(tmp_path, "stopped")
    trace = tmp_path / "runs" / "stopped" / "trace.json"
    try:
        _wait_for_steps(proc, trace, 2)
        proc.send_signal(signum)
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    events = read_trace(trace)
    assert sum(e["name"] == "step" for e in events if e.get("ph") == "X") >= 2
    if signum == signal.SIGINT:  # stopped cleanly: the file is closed, plain JSON
        assert json.loads(trace.read_text())[-1] == {}


def test_with_the_trace_off_no_file_is_written_and_the_phases_still_split_each_step(plugins, tmp_path: Path) -> None:
    logs.configure("json", "warning")
    settings = [*FAST, f"runs_dir={tmp_path}", "name=untraced", "env.id=toy_char_share", "trainer.steps=1", "metrics.trace=false"]
    settings += ["trainer.group_size=2", "trainer.groups_per_batch=1"]
    run_dir = Path(train(load_config(None, settings), plugins=plugins)["run_dir"])
    assert not (run_dir / "trace.json").exists()
    (row,) = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sum(row[f"phase/{part}"] for part in PARTS) == pytest.approx(row["time/step"], rel=0.05)
    assert row["phase/sampling"] > 0


@pytest.mark.parametrize("ending", ["closed", "cut"])
def test_a_resumed_run_continues_its_trace(tmp_path: Path, ending: str) -> None:
    path = tmp_path / "trace.json"
    first = Tracer([TraceFile(path)])
    for index in range(3):
        first.close(first.open("step", None, {"step": index}))
    if ending == "closed":
        first.shutdown()
    else:  # as kill -9 leaves it: a last line cut short
        with path.open("a") as file:
            file.write('{"ph":"X","name":"st')
    second = Tracer([TraceFile(path)])
    second.close(second.open("step", None, {"step": 3}))
    second.shutdown()
    events = json.loads(path.read_text())  # one array again, closed
    assert [e["args"]["step"] for e in events if e.get("ph") == "X"] == [0, 1, 2, 3]


@pytest.mark.slow
def test_an_sft_run_writes_a_trace_of_its_steps_updates_evaluations_and_saves(tmp_path: Path) -> None:
    logs.configure("json", "warning")
    chats = [
        {"messages": [{"role": "user", "content": f"Say {word}."}, {"role": "assistant", "content": word}]}
        for word in ["cat", "dog", "sun", "map", "cup", "pen"]
    ]
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(chat) + "\n" for chat in chats))
    settings = ["trainer.mode=sft", f"sft.data={data}", "sft.batch_size=2", "sft.eval_fraction=0.34", "sft.eval_every=2"]
    settings += ["trainer.steps=3", "trainer.save_every=2", "model.base_model=minds-tiny", "metrics.sinks=[]"]
    run_dir = Path(train(load_config(None, [*settings, f"runs_dir={tmp_path}", "name=sft"]))["run_dir"])
    spans = _spans(run_dir / "trace.json")
    steps = {e["args"]["step"]: e for e in spans.values() if e["name"] == "step"}
    assert sorted(steps) == [0, 1, 2]

    def under_step(name: str) -> list[int]:
        """The steps whose span holds a ``name`` span, one per such span (spans at the top level left out)."""
        found = []
        for event in (e for e in spans.values() if e["name"] == name and e["args"]["parent_id"] is not None):
            (step,) = [a for a in _ancestors(spans, event) if a["name"] == "step"]
            assert _inside(event, step)
            found.append(step["args"]["step"])
        return sorted(found)

    assert under_step("train") == under_step("forward_backward") == under_step("optim_step") == [0, 1, 2]
    assert under_step("write_metrics") == [0, 1, 2]
    assert under_step("save") == under_step("checkpoint") == [1, 2]  # save_every=2, and the last step
    assert under_step("evaluation") == [1, 2]  # eval_every=2, and the last step
    before = [e for e in spans.values() if e["name"] == "evaluation" and e["args"]["parent_id"] is None]
    assert [e["args"]["step"] for e in before] == [0]  # the held-out loss before training, outside any step
