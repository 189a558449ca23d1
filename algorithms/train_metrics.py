"""A training run's metrics: per-update rows from the jitted chunk, `metrics.csv`/`metrics.jsonl`, and the plot."""

from __future__ import annotations

import csv
import json
import math
import os
import time
from pathlib import Path

import numpy as np

from jaxarena.names import BOT_TYPES


def host_metrics(metrics: dict, i: int) -> dict:
    """Update `i` of a chunk's metrics as plain numbers: per-bot counts in their own columns, win rates added."""
    row = {}
    for key, value in metrics.items():
        v = np.asarray(value[i])
        if v.ndim == 0:
            row[key] = v.item()
        else:  # per-bot counts
            for j, name in enumerate(BOT_TYPES):
                row[f"{key}_{name}"] = int(v[j])
    for name in BOT_TYPES:
        n = row[f"episodes_per_bot_{name}"]
        row[f"npc_win_rate_{name}"] = row[f"npc_wins_per_bot_{name}"] / n if n else float("nan")
    row["update"] = int(row["update"])
    row["env_steps"] = int(row["env_steps"])
    return row


def log_chunk(metrics: dict, n: int, t0: float, log: MetricsLog, loggers=()) -> list[dict]:
    """A chunk's n updates as rows (with the run's wall time so far), appended to `log` and every logger."""
    rows = [host_metrics(metrics, i) for i in range(n)]
    for row in rows:
        row["wall_s"] = round(time.time() - t0, 2)
    log.append(rows)
    for logger in loggers:
        logger.log(rows)
    return rows


def json_line(row: dict) -> str:
    """A metrics row as a line of strict JSON: a NaN or infinite number (no episode ended) is written null."""
    finite = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}
    return json.dumps(finite, allow_nan=False) + "\n"


def read_row(line: str) -> dict:
    """A row of metrics.jsonl as the run held it: null read back as NaN (older files' bare NaN reads too)."""
    return {k: float("nan") if v is None else v for k, v in json.loads(line).items()}


class MetricsLog:
    """Append-only metrics.csv + metrics.jsonl (strict JSON, `json_line`); truncated to the restored update on resume.

    With `write=False` (the processes other than 0 of a multi-process run) nothing is read or written;
    the new rows are kept in memory only.
    """

    def __init__(self, run_dir: Path, upto_update: int, write: bool = True):
        self.csv_path, self.jsonl_path = run_dir / "metrics.csv", run_dir / "metrics.jsonl"
        self.write = write
        self.rows: list[dict] = []
        # Only the writer reads the old rows: another process could read a line process 0 is rewriting.
        if self.write and self.jsonl_path.exists():
            for line in self.jsonl_path.read_text().splitlines():
                if line.strip():
                    row = read_row(line)
                    if row["update"] <= upto_update:
                        self.rows.append(row)
        self._rewrite()

    def _rewrite(self):
        if not self.write:
            return
        with open(self.jsonl_path, "w") as f:
            f.writelines(json_line(row) for row in self.rows)
        with open(self.csv_path, "w", newline="") as f:
            if self.rows:
                w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
                w.writeheader()
                w.writerows(self.rows)

    def append(self, rows: list[dict]):
        new_file = not self.rows
        self.rows.extend(rows)
        if not self.write:
            return
        with open(self.jsonl_path, "a") as f:
            f.writelines(json_line(row) for row in rows)
            f.flush()
            os.fsync(f.fileno())
        with open(self.csv_path, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(self.rows[0]))
            if new_file:
                w.writeheader()
            w.writerows(rows)


def plot_curves(rows: list[dict], path: Path, title: str = "") -> Path | None:
    """Learning curves: episode return, NPC win rate per bot, entropy, vs env steps."""
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = np.array([r["env_steps"] for r in rows]) / 1e6

    def smooth(y, k=5):
        y = np.asarray(y, float)
        out = np.empty_like(y)
        for i in range(len(y)):
            w = y[max(0, i - k + 1) : i + 1]
            w = w[~np.isnan(w)]
            out[i] = w.mean() if len(w) else np.nan
        return out

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    axes[0].plot(x, smooth([r["return_mean"] for r in rows]))
    axes[0].set_ylabel("mean episode return (per NPC)")
    for name in BOT_TYPES:
        if any(r[f"episodes_per_bot_{name}"] for r in rows):
            axes[1].plot(x, smooth([r[f"npc_win_rate_{name}"] for r in rows]), label=name)
    axes[1].set_ylabel("NPC win rate")
    axes[1].set_ylim(-0.02, 1.02)
    if axes[1].lines:
        axes[1].legend()
    axes[2].plot(x, [r["entropy"] for r in rows])
    axes[2].set_ylabel("policy entropy (nats)")
    for ax in axes:
        ax.set_xlabel("env steps (millions)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
