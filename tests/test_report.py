"""`minds report`: the HTML page against metrics.jsonl and rollouts.jsonl of a real run, live and torn runs, the CLI, Chromium."""

from __future__ import annotations

import json
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from minds_core.base import logs
from minds_core.config import load_config
from minds_core.report import REPORT_FILE, write_report
from minds_core.report.charts import BOTTOM, HEIGHT, LEFT, PALETTE, RIGHT, STACKED, TOP, WIDTH
from minds_core.report.timing import slowest
from minds_core.sinks.report import ReportSink
from minds_core.testing import chromium, view_in_chromium
from minds_core.train import train
from minds_core.training.run_directory import read_jsonl

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

MIX = """\
envs:
  - id: toy_char_share
    weight: 1
    rewards: [{name: toy.share, weight: 1.0}]
    extra_rewards: [{name: toy.length, weight: 0.01}]
  - id: toy_two_turn
    weight: 1
    group_size: 2
trainer: {steps: 4, groups_per_batch: 2, group_size: 4, learning_rate: 0.01}
sampling: {max_tokens: 8}
metrics: {sinks: [report], report_every: 2, rollouts_per_step: 2}
"""


class Page(HTMLParser):
    """Start tags with their attributes, and the text of each ``td``, in document order."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.cells: list[tuple[str, str]] = []
        self._cell: list[str] | None = None
        self._cell_class = ""
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.tags.append((tag, attributes))
        if tag == "td":
            self._cell, self._cell_class = [], attributes.get("class", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._cell is not None:
            self.cells.append((self._cell_class, "".join(self._cell)))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)

    def all(self, tag: str, cls: str | None = None) -> list[dict[str, str]]:
        return [a for t, a in self.tags if t == tag and (cls is None or cls in a.get("class", "").split())]


@pytest.fixture(scope="module")
def run_dir(plugins, tmp_path_factory: pytest.TempPathFactory) -> Path:
    logs.configure("json", "warning")
    root = tmp_path_factory.mktemp("report")
    (root / "mix.yaml").write_text(MIX + f"runs_dir: {root}\nname: mix\n")
    summary = train(load_config(root / "mix.yaml", []), plugins=plugins)
    return Path(summary["run_dir"])


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_the_report_is_written_at_the_end_and_self_contained(run_dir: Path) -> None:
    text = (run_dir / REPORT_FILE).read_text()
    assert "status: finished" in text
    page = Page(text)
    assert not page.all("script") and not page.all("link") and not page.all("img")
    links = [a for _, a in page.tags if "src" in a or "href" in a]
    assert links == [{"class": "trace-link", "href": "trace.json"}]  # nothing to fetch: one link, to the run's own trace


def test_the_header_names_the_backend_auto_chose(run_dir: Path) -> None:
    assert "backend: auto" in MIX or "backend:" not in MIX  # the run left the choice to auto
    header = (run_dir / REPORT_FILE).read_text().split("</header>")[0]
    assert "backend: local" in header and "backend: auto" not in header
    assert "backend: local" in (run_dir / "config.yaml").read_text()


def test_curves_hold_exactly_the_values_of_metrics_jsonl(run_dir: Path) -> None:
    rows = _rows(run_dir / "metrics.jsonl")
    page = Page((run_dir / REPORT_FILE).read_text())
    series = {}
    for attrs_ in page.all("g", "series"):
        series.setdefault(attrs_["data-key"], attrs_)
    expected_keys = {
        "reward/mean", "env/toy_char_share/reward_mean", "env/toy_two_turn/reward_mean",
        "env/toy_char_share/reward/toy.share", "env/toy_char_share/reward/toy.length", "train/loss:sum",
        "kl/sampler_train", "tokens/completion/mean", "groups/zero_variance_frac", "stop/length_frac",
        "sampler/neg_logprob", "stop/stop", "stop/length", "rollouts/failed", "rollouts/timed_out",
        "groups/dropped_failures", "time/sample", "time/train", "time/save", "advantage/mean",
    }  # fmt: skip
    assert expected_keys <= set(series), expected_keys - set(series)
    for key, attrs_ in series.items():
        present = [r for r in rows if key in r]
        assert [int(s) for s in attrs_["data-steps"].split()] == [r["step"] for r in present], key
        assert [float(v) for v in attrs_["data-values"].split()] == [float(r[key]) for r in present], key


def test_the_step_time_is_stacked_by_part_and_the_slowest_spans_are_listed(run_dir: Path) -> None:
    rows = _rows(run_dir / "metrics.jsonl")
    page = Page((run_dir / REPORT_FILE).read_text())
    stacked = next(i for i, (t, a) in enumerate(page.tags) if t == "svg" and "stacked" in a.get("class", ""))
    after = [a for t, a in page.tags[stacked:] if t == "g" and "series" in a.get("class", "")]
    parts = {a["data-key"]: a for a in after if a["data-key"].startswith("phase/")}
    assert {"phase/sampling", "phase/environment", "phase/reward", "phase/training", "phase/saving"} <= set(parts)
    for key, attrs_ in parts.items():
        assert [float(v) for v in attrs_["data-values"].split()] == [r[key] for r in rows if key in r], key
    for row in rows:  # each bar is the step's wall time
        assert sum(row[k] for k in row if k.startswith("phase/")) == pytest.approx(row["time/step"], rel=0.05)
    tables = {a["data-kind"] for t, a in page.tags if t == "table" and "slowest" in a.get("class", "")}
    assert tables == {"episodes", "rewards"}
    text = (run_dir / REPORT_FILE).read_text()
    found = slowest(run_dir / "trace.json")
    assert len(found["episodes"]) == 10 and found["rewards"]
    for row in found["episodes"]:  # the names and tasks users see
        assert row["environment"] in ("toy_char_share", "toy_two_turn") and row["task"] and f"{row['seconds']:.3f}" in text
    assert {row["name"] for row in found["rewards"]} <= {"toy.share reward", "toy.length reward"}
    assert [row["seconds"] for row in found["episodes"]] == sorted((row["seconds"] for row in found["episodes"]), reverse=True)


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="needs Chromium: apt-get install chromium (.ci/run installs it)")
def test_chromium_draws_the_stacked_step_time(tmp_path: Path, run_dir: Path) -> None:
    view = view_in_chromium(run_dir / REPORT_FILE, tmp_path, height=6000)
    assert view.stacked is not None
    left, top, width, height = view.stacked
    assert width > 400 and height > 150 and top + height <= 6000
    assert sum(view.pixels_near(view.stacked, color) for color in STACKED) > 2000  # the bars, coloured by part


def test_the_reward_line_is_drawn_where_the_values_are(run_dir: Path) -> None:
    rows = _rows(run_dir / "metrics.jsonl")
    page = Page((run_dir / REPORT_FILE).read_text())
    index = next(i for i, (t, a) in enumerate(page.tags) if t == "g" and a.get("data-key") == "reward/mean")
    svg = [a for t, a in page.tags[:index] if t == "svg"][-1]
    polygon, polyline = page.tags[index + 1], page.tags[index + 2]
    assert polygon[0] == "polygon" and polyline[0] == "polyline"  # the min-max band, then the mean
    assert page.tags[index][1]["data-color"] == PALETTE[0]
    x0, x1, y0, y1 = (float(svg[k]) for k in ("data-x-min", "data-x-max", "data-y-min", "data-y-max"))
    width, height = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    points = [tuple(map(float, p.split(","))) for p in polyline[1]["points"].split()]
    assert len(points) == len(rows)
    for (x, y), row in zip(points, rows):
        assert x == pytest.approx(LEFT + (row["step"] - x0) / (x1 - x0) * width, abs=0.01)
        assert y == pytest.approx(TOP + (y1 - row["reward/mean"]) / (y1 - y0) * height, abs=0.01)
    assert y0 <= min(r["reward/min"] for r in rows) and y1 >= max(r["reward/max"] for r in rows)


def test_the_rollout_table_shows_every_recorded_rollout_turn_by_turn(run_dir: Path) -> None:
    groups = _rows(run_dir / "rollouts.jsonl")
    page = Page((run_dir / REPORT_FILE).read_text())
    # newest step first, each group's rollouts in order
    ordered = sorted(groups, key=lambda g: -g["step"])
    rewards = [r["reward"] for g in ordered for r in g["rollouts"]]
    shown = [text for cls, text in page.cells if "reward" in cls.split()]
    assert [float(t) for t in shown] == pytest.approx(rewards, rel=1e-3, abs=1e-9)
    assert [int(a["data-step"]) for a in page.all("details", "step")] == sorted({g["step"] for g in groups}, reverse=True)
    two_turn = [g for g in groups if g["env"] == "toy_two_turn"]
    assert two_turn, "the mix samples both environments"
    for rollout in two_turn[0]["rollouts"]:
        assert [m["role"] for m in rollout["messages"]] == ["assistant", "tool", "assistant"]
        assert [m["stop_reason"] in ("stop", "length") for m in rollout["messages"] if m["role"] == "assistant"] == [True, True]
    classes = [a["class"] for a in page.all("div", "msg")]
    assert "msg tool" in classes and "msg assistant" in classes and "msg system" in classes
    share = next(g for g in groups if g["env"] == "toy_char_share")["rollouts"][0]
    assert set(share["components"]) == {"toy.share", "toy.length"}
    assert any("toy.share = " in text for cls, text in page.cells if cls == "components")


def test_tool_calls_and_tool_results_are_shown_apart(tmp_path: Path, run_dir: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    call = '<tool_call>{"name": "add", "arguments": {"value": 2}}</tool_call>'
    record = {
        "step": 9, "env": "tools", "task": "t1", "dropped": None,
        "prompt": [{"role": "user", "content": "add 2 <b>now</b>"}],
        "rollouts": [{
            "completion": [f"<think>plan</think>calling {call}", "done: 44"], "reward": 1.0, "advantage": 0.5,
            "components": {"exact": 1.0}, "metrics": {}, "error": None, "timed_out": False, "truncated": False,
            "messages": [
                {"role": "assistant", "content": f"<think>plan</think>calling {call}", "stop_reason": "stop", "tokens": 20},
                {"role": "tool", "content": "44", "name": "add"},
                {"role": "assistant", "content": "done: 44\x1b[31m", "stop_reason": "length", "tokens": 5},
            ],
        }],
    }  # fmt: skip
    with (copy / "rollouts.jsonl").open("a") as fh:
        fh.write(json.dumps(record) + "\n")
    text = write_report(copy).read_text()
    assert '<span class="toolcall"><span class="role">tool call</span>&lt;tool_call&gt;{&quot;name&quot;: &quot;add&quot;' in text
    assert '<div class="msg tool"><span class="role">tool result · add</span>44</div>' in text
    assert '<span class="think">&lt;think&gt;plan&lt;/think&gt;</span>' in text
    assert "add 2 &lt;b&gt;now&lt;/b&gt;" in text and "<b>now</b>" not in text  # prompts are text, never markup
    assert "\x1b" not in text and "done: 44\u241b[31m" in text  # escape codes become visible, inert
    assert "20 tokens, stop: stop" in text and "5 tokens, stop: length" in text


def test_eval_metrics_get_their_own_curves(tmp_path: Path, run_dir: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    rows = _rows(copy / "metrics.jsonl")
    for row in rows:
        if row["step"] % 2 == 0:
            row.update({"eval/toy_char_share/reward/mean": 0.1 * row["step"]})
    apart = {"step": 2, "eval/toy_char_share/pass@1": 0.5}  # a line of its own for step 2 merges with the step's
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [*rows, apart]))
    page = Page(write_report(copy).read_text())
    assert next(a for a in page.all("g", "series") if a["data-key"] == "reward/mean")["data-steps"] == "0 1 2 3"
    evals = {a["data-key"]: a for a in page.all("g", "series") if a["data-key"].startswith("eval/")}
    assert evals["eval/toy_char_share/reward/mean"]["data-steps"] == "0 2"
    assert evals["eval/toy_char_share/reward/mean"]["data-values"] == "0.0 0.2"
    assert evals["eval/toy_char_share/pass@1"]["data-steps"] == "2"


def test_task_tags_and_an_environments_own_metrics_get_curves(tmp_path: Path, run_dir: Path) -> None:
    """What a cookbook env reports (its step metrics, its groups' logging tags) is drawn per step, not only listed."""
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    rows = _rows(copy / "metrics.jsonl")
    for row in rows:
        row.update({"env/toy_char_share/correct": 0.25 * row["step"], "tag/pairs/reward_mean": 0.5, "tag/pairs/groups": 2})
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = Page(write_report(copy).read_text())
    series = {a["data-key"]: a for a in page.all("g", "series")}
    steps = " ".join(str(r["step"]) for r in rows)
    assert series["env/toy_char_share/correct"]["data-steps"] == series["tag/pairs/reward_mean"]["data-steps"] == steps
    assert series["env/toy_char_share/correct"]["data-values"] == " ".join(str(0.25 * r["step"]) for r in rows)
    assert "env/toy_char_share/groups" not in series and "env/toy_char_share/reward_mean" in series  # counts stay in the table


def test_an_interrupted_run_with_a_torn_last_line_still_reports(tmp_path: Path, run_dir: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    rows = _rows(copy / "metrics.jsonl")
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:2]) + '{"step": 2, "reward/me')
    with (copy / "rollouts.jsonl").open("a") as fh:
        fh.write('{"step": 3, "env": "toy_char')
    text = write_report(copy).read_text()
    assert "status: running or interrupted" in text and "2 of 4" in text
    (series,) = [a for a in Page(text).all("g", "series") if a["data-key"] == "reward/mean"]
    assert series["data-steps"] == "0 1"


def test_a_live_run_before_its_first_step_and_the_periodic_refresh(tmp_path: Path, run_dir: Path) -> None:
    live = tmp_path / "live"
    live.mkdir()
    shutil.copy(run_dir / "config.yaml", live / "config.yaml")
    assert "No step has finished yet" in write_report(live).read_text()
    sink = ReportSink(live, every=2)
    shutil.copy(run_dir / "metrics.jsonl", live / "metrics.jsonl")
    before = (live / REPORT_FILE).read_text()
    sink.write({"step": 0})
    assert (live / REPORT_FILE).read_text() == before  # not a refresh step
    sink.write({"step": 1})
    assert "status: running" in (live / REPORT_FILE).read_text()
    sink.close({"stopped": "early"})
    assert "status: stopped early" in (live / REPORT_FILE).read_text()


@pytest.mark.slow
def test_minds_report_command(run_minds, tmp_path: Path, run_dir: Path) -> None:
    out = tmp_path / "elsewhere.html"
    done = run_minds(["report", str(run_dir), "-o", str(out)])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(out) and "reward/mean" in out.read_text()
    missing = run_minds(["report", str(tmp_path / "nope")])
    assert missing.returncode == 2 and "is not a minds run folder" in missing.stderr and "Traceback" not in missing.stderr
    unwritable = run_minds(["report", str(run_dir), "-o", str(tmp_path / "no" / "such" / "dir.html")])
    assert unwritable.returncode == 2 and "cannot write the report to" in unwritable.stderr and "Traceback" not in unwritable.stderr
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text("trainer: {steps: [\n")
    bad = run_minds(["report", str(broken)])
    assert bad.returncode == 2 and f"{broken / 'config.yaml'}:2:1: invalid YAML" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="needs Chromium: apt-get install chromium (.ci/run installs it)")
def test_chromium_draws_the_reward_curve_and_the_rollout_table(tmp_path: Path, run_dir: Path) -> None:
    view = view_in_chromium(run_dir / REPORT_FILE, tmp_path)
    _, top, width, height = view.chart
    assert width > 400 and height > 150 and top + height <= 2000  # the first chart lies inside the screenshot
    assert view.pixels_near(view.chart, PALETTE[0]) > 200  # the reward curve, its markers and band edge
    assert view.pixels_near([0, 0, 1400, 40], PALETTE[0]) == 0  # the header holds none of that colour
    assert view.table is not None and view.table[1] < 2000  # the rollout table starts on screen
    assert view.pixels_near(view.table, "#212529", 60) > 500  # with text in it
    assert view.dom.count('class="rollout"') == sum(len(g["rollouts"]) for g in _rows(run_dir / "rollouts.jsonl"))


def _glossary_patterns() -> list[str]:
    """The metric names of the README's glossary as regular expressions."""
    import re

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("### Metrics glossary", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    patterns = []
    for line in rows:
        previous = ""
        for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
            name = name.replace("...", previous)
            pattern = re.sub(r"\\\{([^}]*)\\\}", lambda m: "(" + m.group(1).replace(",", "|") + ")", re.escape(name))
            pattern = re.sub(r"<[a-z]+>|\\\*", ".+", pattern)
            patterns.append(pattern)
            previous = name
    return patterns


def test_every_metric_of_a_run_is_in_the_readme_glossary(run_dir: Path) -> None:
    import re

    patterns = _glossary_patterns()
    keys = {k for row in _rows(run_dir / "metrics.jsonl") for k in row} - {"step"}
    assert keys and not [k for k in sorted(keys) if not any(re.fullmatch(p, k) for p in patterns)]
    assert not any(re.fullmatch(p, "made/up") for p in patterns)


def test_health_notes_say_when_a_run_cannot_learn(tmp_path: Path, run_dir: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    rows = _rows(copy / "metrics.jsonl")
    healthy = [dict(r, **{"groups/zero_variance_frac": 0.25, "stop/length_frac": 0.1, "rollouts/failed": 0, "sampler/neg_logprob": 2.0}) for r in rows]
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in healthy))
    assert '<div class="notes">' not in write_report(copy).read_text()
    stuck = [dict(r, **{"groups/zero_variance_frac": 1.0, "stop/length_frac": 0.75, "rollouts/failed": r["rollouts/total"] // 2,
                        "sampler/neg_logprob": 0.01}) for r in rows]  # fmt: skip
    (copy / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in stuck))
    text = write_report(copy).read_text()
    assert "100% of groups gave every rollout the same reward over the last 4 steps" in text
    assert "75% of sampled turns stopped at max_tokens" in text
    assert "50% of rollouts failed" in text and "nearly deterministic" in text


@pytest.mark.slow
def test_a_report_of_a_run_while_it_trains_and_after_kill_9(installed_plugin, tmp_path: Path) -> None:
    import os
    import re
    import signal
    import subprocess
    import time

    environ = {k: v for k, v in os.environ.items() if not k.startswith("MINDS_")}
    environ["PYTHONPATH"] = str(installed_plugin("toy_plugin"))
    argv = [sys.executable, "-m", "minds_core.cli.command", "run", "--env", "toy_char_share", "--steps", "500", "--name", "live",
            "--set", f"runs_dir={tmp_path}", "--set", "sampling.max_tokens=4", "--set", "trainer.group_size=2",
            "--set", "trainer.groups_per_batch=1", "--set", "metrics.sinks=[]"]  # fmt: skip
    process = subprocess.Popen(argv, env=environ, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = tmp_path / "live" / "metrics.jsonl"
    try:
        deadline = time.monotonic() + 120
        while not (metrics.exists() and metrics.read_text().count("\n") >= 2):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        text = write_report(tmp_path / "live").read_text()  # while it trains
        assert "status: running or interrupted" in text
        shown = int(re.search(r"<b>(\d+) of 500</b>", text).group(1))
        assert shown >= 2
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=300)  # a hang guard
    rows = read_jsonl(metrics)  # whole lines only: a kill may tear the last
    text = write_report(tmp_path / "live").read_text()  # after kill -9
    assert f"<b>{len(rows)} of 500</b>" in text and len(rows) >= shown


def test_minds_report_of_a_folder_that_is_no_run_names_the_report_not_resume(tmp_path: Path, capsys) -> None:
    from minds_core.cli.command import main

    for folder in (tmp_path / "nope", tmp_path):
        assert main(["report", str(folder)]) == 2
        err = capsys.readouterr().err
        assert f"{folder} is not a minds run folder (no config.yaml)" in err and "--resume" not in err, err


def test_minds_report_never_writes_over_the_runs_own_files(tmp_path: Path, run_dir: Path, capsys) -> None:
    from minds_core.cli.command import main

    run = Path(shutil.copytree(run_dir, tmp_path / "copy"))
    (run / "eval").mkdir(exist_ok=True)
    (run / "eval" / "step-000001.jsonl").write_text("{}\n")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for own in ("metrics.jsonl", "config.yaml", "rollouts.jsonl", "checkpoints.jsonl", "eval/step-000001.jsonl"):
        assert main(["report", str(run), "-o", str(run / own)]) == 2, own
        err = capsys.readouterr().err
        assert f"-o {run / own}: that is a file of the run, not its report" in err and "Traceback" not in err, err
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before  # nothing overwritten with HTML
    assert main(["report", str(run), "-o", str(run / "again.html")]) == 0  # a report of its own name beside them is fine


def test_minds_report_to_a_folder_says_it_is_one(tmp_path: Path, run_dir: Path, monkeypatch, capsys) -> None:
    from minds_core.cli.command import main

    run = Path(shutil.copytree(run_dir, tmp_path / "copy"))
    monkeypatch.chdir(tmp_path)
    for folder in (".", "/", str(run)):  # '.' and '/' have no name: a ValueError traceback (exit 1)
        assert main(["report", str(run), "-o", folder]) == 2, folder
        err = capsys.readouterr().err
        assert f"-o {folder}: is a folder; pass a file path, e.g. {Path(folder) / 'report.html'}" in err, err
        assert "Traceback" not in err


def test_lines_minds_never_writes_are_left_out_and_counted_not_a_traceback(tmp_path: Path, run_dir: Path, capsys) -> None:
    from minds_core.cli.command import main

    run = Path(shutil.copytree(run_dir, tmp_path / "edited"))  # a hand edit, or another version's files
    good = _rows(run / "rollouts.jsonl")
    foreign = [
        {"step": "a"},
        {"step": 9, "prompt": "a prompt as text"},
        {"step": 9, "rollouts": 5},
        {"step": 9, "rollouts": [1, "x"]},
        {"step": 9, "rollouts": [{"reward": 1, "messages": "hi", "components": [1]}]},
        {"step": 9, "rollouts": [{"reward": 1, "messages": [{"role": "assistant", "content": "x", "tool_calls": 5}]}]},
    ]
    with (run / "rollouts.jsonl").open("a") as fh:
        fh.write("".join(json.dumps(line) + "\n" for line in foreign))
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write(json.dumps({"step": 4, "reward/mean": "high", "time/step": {"s": 1}, "loss": [1]}) + "\n")
        fh.write(json.dumps({"step": "4"}) + "\n")
    config = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(config.replace("\nmodel:\n", "\nmodel: minds-tiny\nold_model:\n"))
    assert main(["report", str(run)]) == 0, capsys.readouterr().err
    text = (run / REPORT_FILE).read_text()
    for note in ("1 line(s) of metrics.jsonl without a whole-number step", "3 value(s) in metrics.jsonl that are not numbers",
                 f"{len(foreign)} line(s) of rollouts.jsonl not in the shape minds writes"):
        assert note in text
    assert text.count('class="rollout"') == sum(len(group["rollouts"]) for group in good)
    assert "model: minds-tiny" in text


def test_a_config_yaml_that_is_no_yaml_is_named_with_its_line(tmp_path: Path, run_dir: Path, capsys) -> None:
    from minds_core.cli.command import main

    run = Path(shutil.copytree(run_dir, tmp_path / "edited"))
    (run / "config.yaml").write_text("name: [unclosed\n")
    assert main(["report", str(run)]) == 2
    assert f"{run / 'config.yaml'}:2:1: invalid YAML" in capsys.readouterr().err
