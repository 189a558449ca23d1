"""Where a training run's per-update metrics go, behind one small interface.

`metrics.jsonl` and `metrics.csv` in the run's folder are always written (`MetricsLog`: resuming
reads them back). `--log tensorboard` and `--log wandb` add one logger each, one run per seed:

    logger = make_logger("tensorboard", run_dir, name="lr=1e-4/seed_3", config=config, start_update=0)
    logger.log(rows)        # rows as `train_metrics.host_metrics` makes them, one per update
    logger.close()

Every scalar of a row is logged under its key with the row's `env_steps` as the step, so curves
of runs with other batch sizes share an x axis. TensorBoard's writer comes from `tensorboardX`,
W&B's from `wandb` (`pip install -e ".[log]"`); with `WANDB_MODE=offline` W&B writes under the
run's folder and sends nothing.
"""

from __future__ import annotations

import math
import os
import uuid
from pathlib import Path
from typing import Any, Protocol

from jaxarena.extras import require

LOGGERS = ("jsonl", "tensorboard", "wandb")
TENSORBOARD_DIR = "tensorboard"
WANDB_ID_FILE = "wandb_id.txt"
#: Row entries that are bookkeeping, not curves.
_NOT_LOGGED = ("update", "env_steps")


class Logger(Protocol):
    def log(self, rows: list[dict]) -> None: ...

    def close(self) -> None: ...


def scalars(row: dict) -> dict[str, float]:
    """The finite numbers of a metrics row (NaN where no episode ended is left out), bookkeeping aside."""
    out = {}
    for key, value in row.items():
        if key in _NOT_LOGGED or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            out[key] = float(value)
    return out


class NullLogger:
    """The jsonl choice: `MetricsLog` already writes metrics.jsonl and metrics.csv."""

    def log(self, rows: list[dict]) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """Event files under `run_dir/tensorboard`. A resumed run purges the steps past its checkpoint, so a
    curve has no doubled stretch where the lost chunk was trained twice."""

    def __init__(self, run_dir: Path, start_env_steps: int = 0):
        require("--log tensorboard", "tensorboardX")
        from tensorboardX import SummaryWriter

        purge = start_env_steps + 1 if start_env_steps else None
        # The suffix keeps a resumed run's file apart from the one it continues, even within the same second.
        self.writer = SummaryWriter(
            logdir=str(Path(run_dir) / TENSORBOARD_DIR), purge_step=purge, filename_suffix=f".from_{start_env_steps}"
        )

    def log(self, rows: list[dict]) -> None:
        for row in rows:
            for key, value in scalars(row).items():
                self.writer.add_scalar(key, value, global_step=int(row["env_steps"]))
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger:
    """One W&B run per training run, named by it and grouped by its batch; the run id is kept in
    `run_dir/wandb_id.txt`, so a resumed run goes on logging into the same W&B run."""

    def __init__(self, run_dir: Path, name: str, group: str, config: dict[str, Any], project: str):
        require("--log wandb", "wandb")
        import wandb

        id_file = Path(run_dir) / WANDB_ID_FILE
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id)
        self.run = wandb.init(
            project=project,
            name=name,
            group=group,
            id=run_id,
            resume="allow",
            dir=str(run_dir),
            config=config,
            reinit="create_new",  # several runs open at once: one per seed of the batch
        )

    def log(self, rows: list[dict]) -> None:
        for row in rows:
            self.run.log({**scalars(row), "env_steps": row["env_steps"]}, step=int(row["update"]))

    def close(self) -> None:
        self.run.finish()


def make_logger(
    kind: str,
    run_dir: Path,
    *,
    name: str,
    group: str = "",
    config: dict[str, Any] | None = None,
    start_env_steps: int = 0,
    project: str | None = None,
) -> Logger:
    """The logger `kind` (one of `LOGGERS`) for the run in `run_dir`."""
    if kind == "jsonl":
        return NullLogger()
    if kind == "tensorboard":
        return TensorBoardLogger(run_dir, start_env_steps)
    if kind == "wandb":
        return WandbLogger(run_dir, name, group, config or {}, project or os.environ.get("WANDB_PROJECT", "jaxarena"))
    raise ValueError(f"logger must be one of {LOGGERS}, got {kind!r}")
