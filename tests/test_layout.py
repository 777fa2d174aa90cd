"""minds_core reads as its floors: a root of four modules, a folder per floor, and one meaning per public function name."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import minds_core
import minds_core.contract.hookspecs

CORE = Path(minds_core.__file__).resolve().parent
#: the public face, the core's plugin (builtins), train and testing: everything else lives on a floor (docs/architecture.md)
MAX_ROOT_MODULES = 4


def root_modules(package: Path) -> list[str]:
    """The modules directly in ``package`` (``__init__`` included); subpackages are folders, not counted."""
    return sorted(p.stem for p in package.glob("*.py"))


def hook_names() -> set[str]:
    """The hooks: every plugin (the core's builtins too) implements them under the same names, by design."""
    tree = ast.parse(Path(minds_core.contract.hookspecs.__file__).read_text(encoding="utf-8"))
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef) and node.name.startswith("minds_")}


def shared_function_names(package: Path, allowed: set[str]) -> dict[str, list[str]]:
    """Public module-level function names defined in more than one module of ``package`` (``allowed`` aside)."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
                where[node.name].append(path.relative_to(package.parent).as_posix())
    return {name: paths for name, paths in where.items() if len(paths) > 1 and name not in allowed}


def test_the_root_of_minds_core_holds_at_most_4_modules() -> None:
    modules = root_modules(CORE)
    assert len(modules) <= MAX_ROOT_MODULES, f"{len(modules)} modules at minds_core/'s root (put new ones in a floor's folder: docs/architecture.md): {modules}"


def test_no_two_core_modules_define_the_same_public_function_name() -> None:
    assert shared_function_names(CORE, hook_names()) == {}


def test_the_scan_finds_a_name_defined_in_two_modules_and_lets_hooks_through(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "rl").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "rl" / "datums.py").write_text("def build_datum(tokens):\n    return tokens\n")
    (package / "sft.py").write_text(
        "def build_datum(tokens, weights):\n    return tokens\n\n\n"
        "def minds_register_losses(register):\n    pass\n\n\n"
        "def _helper():\n    pass\n\n\n"
        "class Loop:\n    def build_datum(self):\n        pass\n"
    )
    (package / "builtins.py").write_text("def minds_register_losses(register):\n    pass\n\n\ndef _helper():\n    pass\n")
    assert shared_function_names(package, hook_names()) == {"build_datum": ["pkg/rl/datums.py", "pkg/sft.py"]}
    assert "minds_register_losses" in shared_function_names(package, set())
    assert root_modules(package) == ["__init__", "builtins", "sft"]


def test_the_names_allowed_to_repeat_are_the_hooks() -> None:
    names = hook_names()
    assert "minds_register_environments" in names and "minds_register_backends" in names
    assert all(name.startswith("minds_register_") for name in names)
