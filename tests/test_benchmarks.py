"""Every benchmark script runs in its ``--smoke`` mode, so a benchmark that breaks fails the suite.

Benchmarks are found by globbing ``benchmarks/*.py``: one added later is covered
without touching this file. Smoke runs print figures but assert no timings. Shell
scripts there (the GPU check) are only parsed.
"""

from __future__ import annotations

import ast
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


def gpu_only_tests(source: str) -> list[str]:
    """The test functions of a test module's ``source`` that are skipped without a GPU: marked, or in a module marked,
    ``skipif(not torch.cuda.is_available(), ...)``, directly or through a module-level name for that mark."""
    tree = ast.parse(source)
    condition = "not torch.cuda.is_available()"
    marks = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign) and "mark.skipif(" + condition in (ast.get_source_segment(source, node) or "")
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    names = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
            decorators = [ast.get_source_segment(source, d) or "" for d in node.decorator_list]
            if "pytestmark" in marks or any(d in marks or "skipif(" + condition in d for d in decorators):
                names.append(node.name)
    return names


def test_the_gpu_checks_test_selection_keeps_every_test_that_needs_a_gpu():
    # gpu_check.sh runs every test file asking torch.cuda.is_available with -k 'not cpu', which deselects the CPU's
    # parametrizations by a substring of the test's name (or its file's): a test that needs a GPU must not say 'cpu'
    files = [p for p in sorted(Path(__file__).parent.rglob("test_*.py")) if "cuda.is_available" in p.read_text()]
    needing = [f"{p.name}::{name}" for p in files for name in gpu_only_tests(p.read_text())]
    assert len(needing) >= 20, needing  # the parse finds them: test_cuda*.py's (marked module-wide) ...
    assert any(test.startswith("test_device_sampling.py::") for test in needing)  # ... and tests marked alone
    assert not [test for test in needing if "cpu" in test.lower()]


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
