"""minds_core's floors: docs/architecture.md draws the import-linter contracts of pyproject.toml, the tree keeps
them, and an import that runs up a floor breaks them (a lazy one inside a function too)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "minds_core"
DOC = ROOT / "docs" / "architecture.md"
PYPROJECT = ROOT / "pyproject.toml"


def contract(contract_id: str) -> dict:
    contracts = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    return next(c for c in contracts if c["id"] == contract_id)


def drawn_floors() -> list[str]:
    """The floors of the page's drawing, top to bottom, as the layers contract spells them (``a | b``, ``a : b``)."""
    text = DOC.read_text(encoding="utf-8")
    drawing = re.search(r"## The floors, top to bottom\n\n```\n(.*?)```", text, re.S)
    assert drawing, "docs/architecture.md has no drawing under '## The floors, top to bottom'"
    return [re.split(r"\s{2,}", line)[0] for line in drawing.group(1).splitlines() if line and not line[0].isspace()]


def floor_parts(floor: str) -> list[str]:
    return [part.strip() for part in re.split(r"[|:]", floor)]


def test_the_drawing_is_the_layers_contract() -> None:
    assert drawn_floors() == contract("floors")["layers"]


def test_every_part_of_minds_core_is_on_one_floor() -> None:
    on_floors = [part for floor in drawn_floors() for part in floor_parts(floor)]
    in_tree = sorted(
        p.stem if p.suffix == ".py" else p.name
        for p in CORE.iterdir()
        if (p.suffix == ".py" and p.stem != "__init__") or (p.is_dir() and (p / "__init__.py").is_file())
    )
    assert sorted(on_floors) == in_tree


def test_every_folder_and_file_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_]+(?:/[a-z_]+)*(?:/|\.py))`", text))
    assert {"rl/", "backends/local/", "contract/parts.py", "train.py"} <= named
    missing = sorted(name for name in named if not (ROOT / name if name.startswith(("minds_core/", "tests/")) else CORE / name).exists())
    assert not missing, f"docs/architecture.md names what minds_core/ does not hold: {missing}"


def test_the_tree_keeps_its_contracts(capsys) -> None:
    assert lint_imports(config_filename=str(PYPROJECT), no_logo=True, no_cache=True) == 0, capsys.readouterr().out


def test_an_import_up_a_floor_breaks_the_contract_even_inside_a_function(tmp_path: Path) -> None:
    """A copy of the tree where the base floor reaches for the CLI lazily, as a hidden upward arrow would."""
    copy = tmp_path / "minds_core"
    shutil.copytree(CORE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.safetensors"))
    errors = copy / "base" / "errors.py"
    errors.write_text(errors.read_text(encoding="utf-8") + "\n\ndef _planted():\n    from minds_core.cli import command\n")
    shutil.copy(PYPROJECT, tmp_path / "pyproject.toml")
    # a process of its own: the package it finds first is the copy, not the installed minds_core
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
         "--no-cache", "--config", str(tmp_path / "pyproject.toml")],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "minds_core.base.errors -> minds_core.cli.command" in done.stdout
    assert "minds_core's floors import only downwards" in done.stdout
