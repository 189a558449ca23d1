"""Running the protocol's cells: (label, bot) batches of seeded episodes, resumable, with progress.

A *cell* is one label of a combination against one bot type
(`protocol.config`). The runner knows cells, not combinations: each cell's
combination (`protocol.combinations`) plays it through the run's
`RunContext` (which keeps the loaded policies, the compiled programs and
whatever the combination loads, for the whole run) and says what its results
depend on. The runner adds the run's settings to that fingerprint, stores
each finished cell atomically, resumes the cells already stored and drives
the progress bar.

Paired design: a cell's key depends only on (seed, bot), so every combination
meets the same spawns, the same balanced-bot schedules and the same
policy-sampling keys episode for episode (the episode runner derives episode
i's keys from (key, i)).

Resume: each finished cell is written atomically to `cells/<label>_<bot>.json`
(episodes, that cell's decisions, counters and timings) together with a
fingerprint of everything that determines its results. A re-run loads the
cells whose fingerprint matches and computes only the missing ones; a cell is
either complete on disk or absent, never half written.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np

from jaxarena.cli_errors import UserError
from jaxarena.files import write_atomic
from jaxarena.scenarios import DEFAULT_SCENARIO

from .combinations import of_label
from .config import CELL_FORMAT, ProtocolConfig, cell_key_data, cell_name
from .context import RunContext


class StoredCellMismatch(UserError, RuntimeError):
    """A stored cell belongs to another release or configuration; the message says how to go on."""


class ProtocolRunner:
    """Runs (or resumes) the cells of one protocol run into `run_dir/cells/`.

    Args:
      config: the run's `ProtocolConfig`.
      run_dir: `results/<run-id>`.
      cache_path: the LLM prompt cache (JSONL, shared across runs so a re-run
        is warm); None disables caching.
      progress: show a tqdm bar (cells, episodes, the combinations' counters, ETA).
      after_cell: called as `after_cell(name, cell)` once a cell is on disk
        (tests use it to simulate a kill between cells).
      preflight: before computing any cell, let each combination with cells to compute check what
        they need (`Combination.preflight`: its LLM answers), so a run that cannot work stops at once.
    """

    def __init__(
        self,
        config: ProtocolConfig,
        run_dir: str | os.PathLike,
        *,
        cache_path: str | os.PathLike | None = None,
        progress: bool = True,
        after_cell: Callable[[str, dict], None] | None = None,
        preflight: bool = True,
    ):
        self.config = config
        self.preflight = preflight
        self.run_dir = Path(run_dir)
        self.cells_dir = self.run_dir / "cells"
        self.progress = progress
        self.after_cell = after_cell
        self.context = RunContext(config, self.cells_dir, cache_path)
        self.session = self.context.session  # load times and the like, for summary.json
        self.computed: list[str] = []  # cells computed (not loaded) in this session
        self._status: dict = {}  # what the cell being played shows beside the bar

    # -- identity --
    def squads(self, label: str) -> dict[str, tuple]:
        """What plays a label: {label in summary.json's policies: (spec, policy, params, checksum, source)}."""
        squads = of_label(label).squads(self.context, label)
        return {name: (spec, *self.context.resolve(spec)) for name, spec in squads.items()}

    def policy(self, label: str) -> tuple:
        """(policy, params, checksum, source) of a label played by one squad."""
        squads = self.squads(label)
        if len(squads) != 1:
            raise ValueError(f"{label} plays {len(squads)} squads ({', '.join(squads)}); see squads()")
        return next(iter(squads.values()))[1:]

    def fingerprint(self, label: str) -> dict:
        """Everything a cell's results depend on; a stored cell is reused only if this matches."""
        c = self.config
        checksums = {name: squad[3] for name, squad in self.squads(label).items()}
        fp = {
            "format": CELL_FORMAT,
            "episodes": c.episodes,
            "seed": c.seed,
            "policy": next(iter(checksums.values())) if len(checksums) == 1 else checksums,
            "greedy": c.greedy,
            "num_periods": c.num_periods,
            **of_label(label).fingerprint(self.context, label),
        }
        # Only where it is not the paper's arena: cells stored before scenarios existed still resume.
        if c.scenario != DEFAULT_SCENARIO:
            fp["scenario"] = c.scenario
        return fp

    # -- cells on disk --
    def cell_path(self, label: str, bot: str) -> Path:
        return self.cells_dir / f"{cell_name(label, bot)}.json"

    def load_cell(self, label: str, bot: str) -> dict | None:
        """The stored cell, or None; raises if it belongs to a different configuration."""
        path = self.cell_path(label, bot)
        if not path.exists():
            return None
        cell = json.loads(path.read_text(encoding="utf-8"))
        stored_format = (cell.get("fingerprint") or {}).get("format")
        if stored_format != CELL_FORMAT:
            raise StoredCellMismatch(
                f"{path} was written by another jaxarena release (cell format {stored_format}, this one writes "
                f"{CELL_FORMAT}); use --fresh to recompute the run, or another --run-id"
            )
        if cell.get("fingerprint") != self.fingerprint(label):
            raise StoredCellMismatch(
                f"{path} was produced by a different configuration "
                f"({cell.get('fingerprint')} != {self.fingerprint(label)}); "
                "use another --run-id, or --fresh to discard it"
            )
        return cell

    # -- computing --
    def run_cell(self, label: str, bot: str, on_progress: Callable[..., None] = lambda n, **status: None) -> dict:
        """Computes one cell and writes it atomically; returns it. `on_progress(episodes done, **status)`."""
        import jax

        key = jax.numpy.asarray(cell_key_data(self.config.seed, bot))
        try:
            played = of_label(label).play(self.context, label, bot, key, on_progress)
        finally:
            self._status = {}
        cell = {
            "format": CELL_FORMAT,
            "combination": label,
            "bot": bot,
            "fingerprint": self.fingerprint(label),
            "key": [int(x) for x in np.asarray(key)],
            **played.episodes,
            "decisions": played.decisions,
            "llm": played.llm,
            "timing": {
                "compile_s": played.compile_s,
                "wall_s": played.wall_s,
                "llm_s": 0.0,
                "simulation_s": played.wall_s,
                **played.timing,
            },
        }
        write_atomic(self.cell_path(label, bot), json.dumps(cell))
        self.computed.append(cell_name(label, bot))
        return cell

    def run(self) -> dict[str, dict]:
        """All cells of the config, loaded or computed, by name in run order."""
        cells: dict[str, dict] = {}
        todo = []
        # A kill during a write can leave a temp file behind (never a torn cell); drop it.
        for stale in self.cells_dir.glob(".*.tmp") if self.cells_dir.exists() else ():
            stale.unlink(missing_ok=True)
        for label, bot in self.config.cells():
            cell = self.load_cell(label, bot)
            if cell is None:
                todo.append((label, bot))
            else:
                cells[cell_name(label, bot)] = cell
        self._check_before_cells(todo)
        bar = self._bar(len(cells), len(self.config.cells()))
        try:
            for label, bot in todo:
                name = cell_name(label, bot)
                cells[name] = self.run_cell(label, bot, self._on_progress(bar, name))
                if bar is not None:
                    bar.n = self._cell_base + self.config.episodes
                    self._cells_done += 1
                    self._postfix(bar)
                if self.after_cell is not None:
                    self.after_cell(name, cells[name])
        finally:
            if bar is not None:
                bar.close()
        return {cell_name(c, b): cells[cell_name(c, b)] for c, b in self.config.cells()}

    def close(self) -> None:
        self.context.close()

    def _check_before_cells(self, todo: list[tuple[str, str]]) -> None:
        """Fail before the first cell, not after an hour: resolve the policies that will play, and (with
        `preflight`) let each combination check what its cells need. Only cells still to compute count:
        a resumed run needs no LLM server for its stored cells."""
        labels = list(dict.fromkeys(label for label, _ in todo))
        for label in labels:
            self.squads(label)  # a policy spec that names nothing fails here
        if self.preflight:
            for name in dict.fromkeys(of_label(label).name for label in labels):
                of_label(name).preflight(self.context)

    # -- progress display --
    def _bar(self, done_cells: int, total_cells: int):
        self._cells_done, self._cells_total = done_cells, total_cells
        if not self.progress:
            return None
        from tqdm.auto import tqdm

        bar = tqdm(
            total=total_cells * self.config.episodes,
            initial=done_cells * self.config.episodes,
            unit="ep",
            dynamic_ncols=True,
            smoothing=0.05,
        )
        self._postfix(bar)
        return bar

    def _on_progress(self, bar, name: str) -> Callable[..., None]:
        """The cell's `on_progress(episodes done, **status)`, moving the bar from where the cell starts."""
        self._cell_base = bar.n if bar is not None else 0
        if bar is not None:
            bar.set_description(f"cell {name}")

        def on_progress(n: int, **status) -> None:
            self._status = status  # e.g. a planner's decision period, or the states priced so far
            if bar is not None:
                bar.n = self._cell_base + n
                self._postfix(bar)

        return on_progress

    def _postfix(self, bar) -> None:
        post = {"cells": f"{self._cells_done}/{self._cells_total}", **self.context.status(), **self._status}
        bar.set_postfix(post, refresh=False)
        bar.refresh()
