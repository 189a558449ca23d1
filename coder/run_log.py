"""A coder run's record on disk: `config.json`, the append-only `events.jsonl` and readable copies per round.

A killed run resumes from `events.jsonl`: a step whose line is there is never
redone; a line cut off by the kill is dropped.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from .loop_config import RESUMABLE, LoopConfig, LoopError
from .score_types import Score


class RunLog:
    """`events.jsonl`: append-only, one JSON object per finished step, flushed and synced."""

    def __init__(self, path: Path):
        self.path = path
        self.events: list[dict] = []
        if path.exists():
            raw = path.read_bytes()
            lines = raw.split(b"\n")
            good = 0
            for line in lines:
                if not line.strip():
                    good += len(line) + 1
                    continue
                try:
                    self.events.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line cut off by a kill: it and anything after it is dropped
                good += len(line) + 1
            if good < len(raw):
                with open(path, "r+b") as f:
                    f.truncate(min(good, len(raw)))

    def append(self, event: dict) -> None:
        event.setdefault("time", round(time.time(), 3))  # wall clock, for traces; never read back
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(event) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.events.append(event)

    def find(self, kind: str, round_index: int, candidate: int | None = None) -> dict | None:
        for e in self.events:
            if e["event"] == kind and e["round"] == round_index and e.get("candidate") == candidate:
                return e
        return None


def prepare_run_dir(run_dir: Path, config: LoopConfig) -> None:
    """Creates the run folder, or checks that an existing one was started with the same config."""
    path = run_dir / "config.json"
    if path.exists():
        old = json.loads(path.read_text())
        new = config.to_json()
        differ = sorted(k for k in set(old) | set(new) if k not in RESUMABLE and old.get(k) != new.get(k))
        if differ:
            diffs = "; ".join(f"{k}: {old.get(k)!r} there, {new.get(k)!r} now" for k in differ)
            raise LoopError(
                f"{run_dir} holds a run with a different config ({diffs}); resume it with the same settings "
                "or choose another --run name"
            )
    elif run_dir.exists() and any(run_dir.iterdir()):
        raise LoopError(f"{run_dir} exists and is not a coder run (no config.json); choose another --run name")
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config.to_json(), indent=2) + "\n")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def round_dir(run_dir: Path, r: int) -> Path:
    return run_dir / f"round_{r:02d}"


def prompt_json(prompt) -> dict:
    return {"system": prompt.system, "user": prompt.user}


def prompt_md(prompt: dict, reply: str) -> str:
    return f"# System\n\n{prompt['system']}\n\n# User\n\n{prompt['user']}\n\n# Reply\n\n{reply}\n"


def load_events(run_dir: str | Path) -> list[dict]:
    """A run's events (for reading a finished or interrupted run)."""
    return RunLog(Path(run_dir) / "events.jsonl").events


def best_candidate(events: list[dict]) -> dict[str, Any] | None:
    """The best scored candidate of a run (the earliest on ties): round, candidate, source and Score."""
    best = None
    for e in sorted((e for e in events if e["event"] == "scored"), key=lambda e: e["round"]):
        for i, (source, score) in enumerate(zip(e["sources"], e["scores"], strict=True), 1):
            if best is None or score["reward"] > best["score"].reward:
                best = {"round": e["round"], "candidate": i, "source": source, "score": Score.from_json(score)}
    return best
