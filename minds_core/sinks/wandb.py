"""The wandb sink: only when installed and configured (metrics.wandb_project).

A run keeps one W&B run across resumes: its id is written to ``<run_dir>/wandb.json``
with the first record, and a resumed run logs to that id again, its steps
continuing where the run stopped. What it sends is masked: the config redacted,
the command line (which W&B stores) without secret values, records and summary
masked; W&B's console capture is off (it would copy output before masking).
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from minds_core.base.errors import UsageError
from minds_core.base.masking import mask, mask_data
from minds_core.base.secrets import REDACTED, is_secret_key, redact
from minds_core.config import RunConfig, to_dict

ID_FILE = "wandb.json"


class WandbSink:
    """Logs each step's record to a Weights & Biases run; a resumed run continues the same W&B run."""

    @staticmethod
    def check(config: RunConfig) -> None:
        """A UsageError when the sink cannot start: no metrics.wandb_project, or no wandb package (checked before the run)."""
        if not config.metrics.wandb_project:
            raise UsageError('metric sink "wandb" needs metrics.wandb_project (e.g. --set metrics.wandb_project=my-project)')
        if importlib.util.find_spec("wandb") is None:
            raise UsageError('metric sink "wandb" needs the wandb package: pip install "minds-core[wandb]"')

    def __init__(self, config: RunConfig, run_dir: Path) -> None:
        self.check(config)
        import wandb

        self.id_file = Path(run_dir) / ID_FILE
        saved = _saved_id(self.id_file)
        command, sys.argv = sys.argv, redact_arguments(sys.argv)  # W&B stores the command line with the run
        try:
            self.run = wandb.init(
                project=config.metrics.wandb_project,
                name=config.metrics.wandb_run_name or config.name,
                config=mask_data(redact(to_dict(config))),
                id=saved or secrets.token_hex(4),
                resume="allow",
                # console capture would copy output before it is masked; the run's train.log holds it
                settings=wandb.Settings(console="off"),
            )
        except wandb.errors.Error as exc:  # no key, a rejected key, W&B unreachable: the user's to fix
            raise UsageError(
                f'metric sink "wandb" could not start a W&B run: {exc} '
                "(export WANDB_API_KEY=... or run `wandb login`; WANDB_MODE=offline logs locally; "
                "or drop wandb from metrics.sinks)"
            ) from None
        finally:
            sys.argv = command
        self.id_saved = saved == self.run.id

    def write(self, record: dict[str, Any]) -> None:
        if not self.id_saved:  # with the first record: the run directory exists by then
            tmp = self.id_file.with_name(f".{ID_FILE}.tmp")
            tmp.write_text(json.dumps({"id": self.run.id, "project": self.run.project}), encoding="utf-8")
            os.replace(tmp, self.id_file)
            self.id_saved = True
        self.run.log(mask_data(record), step=int(record["step"]))

    def close(self, summary: dict[str, Any]) -> None:
        self.run.summary.update(mask_data(summary))
        self.run.finish()


def redact_arguments(argv: list[str]) -> list[str]:
    """A command line with its secrets masked: known values, and the value of any ``KEY=VALUE`` whose key is secret."""
    shown = []
    for argument in argv:
        prefix = "--set=" if argument.startswith("--set=") else ""
        key, equals, _ = argument[len(prefix) :].partition("=")
        if equals and is_secret_key(key.rpartition(".")[2]):
            shown.append(f"{prefix}{key}={REDACTED}")
        else:
            shown.append(mask(argument))
    return shown


def _saved_id(path: Path) -> str | None:
    """The W&B run id an earlier session of this run wrote, if any."""
    try:
        return str(json.loads(path.read_text(encoding="utf-8"))["id"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
