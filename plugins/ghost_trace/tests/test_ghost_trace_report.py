"""Done-when of the run report: a default-length ghost_trace run writes a report Chromium draws with its reward curve and rollouts."""

import re
from pathlib import Path

import pytest

from minds_core.report.charts import PALETTE
from minds_core.testing import chromium, run_minds, view_in_chromium
from minds_core.training.run_directory import read_jsonl

pytest.importorskip("minds_core.backends.local", reason="the local backend (torch + peft) is not installed")

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "ghost_trace.toml"


@pytest.mark.slow
@pytest.mark.skipif(chromium() is None, reason="needs Chromium: apt-get install chromium (.ci/run installs it)")
def test_a_default_ghost_trace_run_reports_its_reward_curve_and_rollouts(tmp_path: Path) -> None:
    run = run_minds(str(CONFIG), runs_dir=tmp_path, name="gt", quiet=False)  # the config's length, the default sinks
    assert run.exit_code == 0
    assert run.steps == list(range(20))
    report = run.run_dir / "report.html"
    text = report.read_text()
    assert "status: finished" in text
    series = re.search(r'<g class="series" data-key="reward/mean"[^>]*data-values="([^"]*)"', text)
    assert [float(v) for v in series.group(1).split()] == [row["reward/mean"] for row in run.metrics]
    view = view_in_chromium(report, tmp_path / "view")
    assert view.pixels_near(view.chart, PALETTE[0]) > 300  # twenty points and the line between them
    assert view.table is not None and view.table[1] + 200 < 2000  # the rollout table is on screen
    assert view.pixels_near(view.table, "#212529", 60) > 500
    last = max(row["step"] for row in read_jsonl(run.run_dir / "rollouts.jsonl"))
    assert last == 19 and '<details class="step" data-step="19" open=""><summary>step 19: ' in view.dom  # newest step, open
