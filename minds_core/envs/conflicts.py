"""Library conflicts known to break environments at load, named with the installed versions and what to change."""

from __future__ import annotations

import importlib.metadata


def _versions(*names: str) -> str:
    found = []
    for name in names:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} (not installed)")
    return ", ".join(found)


def known_conflict(exc: BaseException) -> str | None:
    """What to tell the user when ``exc`` is a known conflict between installed libraries; None for anything else."""
    text = f"{type(exc).__name__}: {exc}"
    if "MonthDayNano" in text and "ickl" in text:
        return (
            f"a known conflict of the installed {_versions('datasets', 'pyarrow', 'dill')}: datasets' fingerprint hashing "
            "pickles with dill, which cannot pickle pyarrow's MonthDayNano type. The failure is in those libraries, not in "
            "minds or the environment: install the datasets, pyarrow and dill versions the environment was written against "
            "(pip install -c constraints.txt 'datasets==...' 'pyarrow==...' 'dill==...')"
        )
    return None
