"""Every benchmark script runs in its ``--smoke`` mode, so a benchmark that breaks fails the suite.

Benchmarks are found by globbing ``benchmarks/*.py``: one added later is covered
without touching this file. Smoke runs print figures but assert no timings. Shell
scripts there (the GPU check) are only parsed.
"""

from __future__ import annotations

import gc
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))
SHELL_SCRIPTS = sorted(BENCHMARKS[0].parent.glob("*.sh"))


def test_the_benchmarks_are_found():
    assert {"pipeline.py", "cli_startup.py"} <= {p.name for p in BENCHMARKS}
    assert "gpu_check.sh" in {p.name for p in SHELL_SCRIPTS}  # else the parse test below would collect nothing


@pytest.mark.slow
@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.stem)
def test_benchmark_runs_in_smoke_mode(script: Path, tmp_path: Path):
    # a process boundary is the point: each script is run as its README/docstring says
    done = subprocess.run(
        [sys.executable, str(script), "--smoke"], capture_output=True, text=True, timeout=240, cwd=tmp_path, check=False
    )
    assert done.returncode == 0, f"{script.name} --smoke exited {done.returncode}:\n{done.stdout}\n{done.stderr[-4000:]}"
    assert done.stdout.strip(), f"{script.name} --smoke printed no figures"


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.name)
def test_shell_scripts_parse(script: Path):
    # gpu_check.sh runs only on a lent GPU machine: its syntax, at least, is checked here (its CPU rehearsal,
    # SMOKE=1, is documented in the script and takes minutes)
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, f"bash -n {script.name}: {done.stderr}"


@pytest.mark.slow
def test_gpu_steps_minds_contenders_hold_no_model_once_their_service_closes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    # the peft step is timed after them: a model they left alive (the base, a sampler's pooled tree with its decode
    # slots) would count in the peft step's peak GPU memory
    from transformers import PreTrainedModel

    monkeypatch.syspath_prepend(str(BENCHMARKS[0].parent))
    gpu_step = importlib.import_module("gpu_step")

    def models_alive() -> int:
        gc.collect()
        return sum(isinstance(o, PreTrainedModel) for o in gc.get_objects())

    config = gpu_step.smoke_config()
    model_dir = gpu_step.save_model(config, tmp_path / "smoke", "cpu")
    grouped, unrelated = (
        gpu_step.Batch(gpu_step.rl_rows(gpu_step.SMOKE, config.vocab_size, shared=shared), gpu_step.SMOKE.prompt_tokens)
        for shared in (True, False)
    )
    before = models_alive()
    results, plans, whole = gpu_step.minds_figures(model_dir, gpu_step.SMOKE, grouped, unrelated, config.vocab_size, "cpu")
    assert len(results) == 3 and whole.seconds > 0
    assert models_alive() == before
