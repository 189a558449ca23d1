"""Noticing a training run that has stopped learning, while it trains.

A seed can fail untold: its policy settles on a way of playing that never wins (a retreat from
the evasive bot that lets the clock run out) and its entropy falls, so it will not find the way
out. `CollapseWatch` reads a run's metric rows as they arrive and applies its scenario's
`TrainingStandard` (`jaxarena.scenarios`): once past `after_steps`, a run is *collapsing* when over
the last `window_steps` it won no training episode (`no_wins`), or its entropy stayed under the
floor while it won under `stuck_win_rate` of its episodes (`entropy_collapse`). The watch says so
when it starts and when it clears; `status()` is what the summary records.

The checks read training episodes (sampled actions, the training bots), not held-out play: they
warn early and cheaply; the held-out summary is what judges a final policy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from jaxarena.names import BOT_TYPES
from jaxarena.scenarios import TrainingStandard

NO_WINS = "no_wins"
ENTROPY_COLLAPSE = "entropy_collapse"


class CollapseWatch:
    """One run's collapse checks over its metric rows (`train_metrics.host_metrics` rows)."""

    def __init__(self, standard: TrainingStandard, bots: Sequence[str]):
        self.standard = standard
        self.bots = [b for b in BOT_TYPES if b in set(bots)]
        self.rows: list[dict] = []
        self.flag: str | None = None  # the current verdict: None, NO_WINS or ENTROPY_COLLAPSE
        self.events: list[dict] = []  # {"env_steps", "flag"}: each change of verdict, None when it clears

    def update(self, rows: Sequence[dict]) -> str | None:
        """Takes a chunk's rows; returns a one-line message if the verdict changed, else None.

        The verdict is taken after every row, so a run's events do not depend on how its rows were
        chunked: the summary, which reads a whole metrics.jsonl at once, finds the training's own."""
        message = None
        for row in rows:
            self.rows.append(row)
            now = int(row["env_steps"])
            flag = self._verdict(now)
            if flag != self.flag:
                self.flag = flag
                self.events.append({"env_steps": now, "flag": flag})
                message = self._message(now, flag)
        return message

    def _verdict(self, now: int) -> str | None:
        s = self.standard
        if now < s.after_steps:
            return None
        window = []
        for r in reversed(self.rows):  # the rows of the last window_steps, newest first
            if int(r["env_steps"]) <= now - s.window_steps:
                break
            window.append(r)
        episodes = sum(r[f"episodes_per_bot_{b}"] for r in window for b in self.bots)
        wins = sum(r[f"npc_wins_per_bot_{b}"] for r in window for b in self.bots)
        if episodes and wins == 0:
            return NO_WINS
        entropies = [r["entropy"] for r in window if not _missing(r.get("entropy"))]
        entropy = sum(entropies) / len(entropies) if entropies else math.inf
        if entropy < s.entropy_floor and episodes and wins / episodes < s.stuck_win_rate:
            return ENTROPY_COLLAPSE
        return None

    def _message(self, now: int, flag: str | None) -> str:
        s = self.standard
        if flag is None:
            return f"recovered at {now / 1e6:.1f}M env steps: winning training episodes again"
        if flag == NO_WINS:
            why = f"no training episode won in the last {s.window_steps / 1e6:g}M env steps"
        else:
            why = (
                f"policy entropy under {s.entropy_floor:g} nats while winning under {s.stuck_win_rate:.0%} "
                f"of training episodes over the last {s.window_steps / 1e6:g}M env steps"
            )
        return f"collapsing at {now / 1e6:.1f}M env steps: {why}; this seed is unlikely to learn"

    def status(self) -> dict:
        """The verdict at the last row, and each change of it, for summary.json."""
        return {"collapsing": self.flag is not None, "flag": self.flag, "events": list(self.events)}


def _missing(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))
