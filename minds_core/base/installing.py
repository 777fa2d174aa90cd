"""The pip commands minds prints in its hints: they install into the Python running minds, and take
minds-core from the checkout it runs from (minds-core is not on PyPI)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

#: The checkout minds-core runs from, when it is installed editable from one (its pyproject.toml beside the package).
CHECKOUT = Path(__file__).resolve().parents[2]


def pip_install(*paths: str | Path, extras: str = "") -> str:
    """A pip command for this interpreter installing minds-core (with ``extras``) and the editable ``paths``.

    From a checkout it installs minds-core from there, with its constraints.txt (which pins torch);
    otherwise minds-core is already installed and only ``paths`` are named (plus the extras when asked).
    """
    words = [sys.executable, "-m", "pip", "install"]
    if (CHECKOUT / "pyproject.toml").is_file() and (CHECKOUT / "minds_core").is_dir():
        if (CHECKOUT / "constraints.txt").is_file():
            words += ["-c", str(CHECKOUT / "constraints.txt")]
        words += ["-e", f"{CHECKOUT}[{extras}]" if extras else str(CHECKOUT)]
    elif extras:
        words.append(f"minds-core[{extras}]")
    for path in paths:
        words += ["-e", str(path)]
    return shlex.join(words)
