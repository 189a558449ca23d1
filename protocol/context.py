"""What the cells of one protocol run share: the configuration, loaded policies, compiled programs and
whatever a combination keeps for the run (an LLM, its selectors, a pricer).

A combination plays its cells through a `RunContext`: it resolves policy
specs once per run (`resolve`), compiles each program once and reuses it for
every bot (`program`), and keeps what it loads under a name of its own
(`shared`), so the runner needs to know none of it. `status` feeds the
progress bar; `close` releases what needs releasing (the LLM's event loop).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import ProtocolConfig, cell_name
from .policies import resolve_policy


class RunContext:
    """Shared state of one protocol run.

    Args:
      config: the run's `ProtocolConfig`.
      cells_dir: where the run's cells are stored (`results/<run-id>/cells`).
      cache_path: the LLM prompt cache (JSONL), or None for none.
    """

    def __init__(self, config: ProtocolConfig, cells_dir: Path, cache_path=None):
        self.config = config
        self.cells_dir = Path(cells_dir)
        self.cache_path = cache_path
        #: Load times and the like, reported in summary.json's timings (`policy_load_s`, `llm_load_s`, ...).
        self.session: dict[str, Any] = {"policy_load_s": 0.0, "llm_load_s": 0.0}
        self._policies: dict[str, tuple] = {}
        self._programs: dict[str, Any] = {}
        self._shared: dict[str, Any] = {}
        self._status: list[Callable[[], dict]] = []

    def resolve(self, spec: str) -> tuple:
        """`resolve_policy(spec)` -> (policy, params, checksum, source), once per run."""
        if spec not in self._policies:
            t = time.perf_counter()
            self._policies[spec] = resolve_policy(spec, greedy=self.config.greedy)
            self.session["policy_load_s"] += time.perf_counter() - t
        return self._policies[spec]

    def program(self, name: str, build: Callable[[], tuple[Any, float]]) -> tuple[Any, float]:
        """(program, compile s): `build() -> (program, compile s)` the first time `name` is asked for,
        then the same program at no cost. The bot type is a traced env param, so one program serves
        every bot."""
        if name in self._programs:
            return self._programs[name], 0.0
        self._programs[name], compile_s = build()
        return self._programs[name], compile_s

    def shared(self, name: str, make: Callable[[], Any]) -> Any:
        """What a combination keeps for the run under `name`, made on first use."""
        if name not in self._shared:
            self._shared[name] = make()
        return self._shared[name]

    def stored_fingerprint(self, label: str, bot: str) -> dict | None:
        """The fingerprint of a stored cell, unchecked (None where there is none)."""
        path = self.cells_dir / f"{cell_name(label, bot)}.json"
        if not path.exists():
            return None
        return json.loads(path.read_text(encoding="utf-8")).get("fingerprint", {})

    def add_status(self, fn: Callable[[], dict]) -> None:
        """Counters to show on the progress bar (`fn() -> {name: value}`)."""
        self._status.append(fn)

    def status(self) -> dict:
        return {k: v for fn in self._status for k, v in fn().items()}

    def close(self) -> None:
        for value in self._shared.values():
            if hasattr(value, "close"):
                value.close()
