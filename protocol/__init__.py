"""The paper's evaluation protocol: batched A/B episodes (and C/F/O/W), statistics, report and figures.

Installed as `jaxarena.protocol`. It sits above the policies it compares and the zoo that names
them, and below the LLM's and the coder's tuning (docs/layout.md, "Layers").

- `config`: `ProtocolConfig` (the run's settings and each combination's options), its cells, cell
  names and cell keys.
- `combination`: what a combination is (`Combination`, its `Options` and `ReportSection`s);
  `combinations`: one module per combination (C's a package: its selectors, numbers, tables and
  figures) and the registry that finds them.
- `runner`: `ProtocolRunner` (cells, paired seeds, resume, progress); `context`: what a run's cells
  share (policies, compiled programs, what a combination loads); `playing`: how a cell is played.
- `policies`: `resolve_policy` (spec -> policy, params, checksum) and `directory_checksum`.
- `pricing`: `DecisionPricer`, the oracle's verdict on every decision of a cell (regret, agreement).
- `stats`: Tables 6-9 statistics (numpy/scipy only).
- `summary`: `summarize`, episodes.csv and decisions.jsonl rows, versions; `write_outputs` writes them all.
- `tables`: report.md (the paper's Tables 6-9 beside ours); `figures`: Figs. 5-9 (matplotlib).
- `cli`: `evaluate(...)` and `main(argv)`, the `jaxarena-evaluate` command.

    from jaxarena.protocol import ProtocolConfig, evaluate
    summary = evaluate(ProtocolConfig(episodes=100))     # results/<run-id>/report.md
    evaluate(ProtocolConfig(combinations=("A", "W"), options={"A": {"tag": 2}}))   # a combination's options

Names are loaded on first use, so importing `jaxarena.protocol.stats` stays light.
"""

from __future__ import annotations

import importlib

from jaxarena.extras import require

require("jaxarena.protocol", "optax", "distrax", "orbax", "scipy", "matplotlib", "tqdm")

_EXPORTS = {
    "ProtocolConfig": "config",
    "ProtocolRunner": "runner",
    "evaluate": "cli",
    "main": "cli",
}

__all__ = ["ProtocolConfig", "ProtocolRunner", "evaluate", "main"]


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
