"""What a score is: the reward constants, how programs are scored (`ScoreConfig`) and the result (`Score`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxarena.names import BOT_TYPES, bot_index
from jaxarena.scenarios import DEFAULT_SCENARIO, scenario_overrides

#: The reward of a reply with no program in it.
NO_CODE = -1.0
#: The reward of a program that does not compile, raises, returns the wrong shape/dtype or an invalid action.
PROGRAM_ERROR = -0.5


@dataclasses.dataclass(frozen=True)
class ScoreConfig:
    """How programs are scored. The defaults: >= 1,000 episodes per bot, all three bots.

    lanes: episodes played side by side (one `BatchedArena` batch, compiled once per process).
    batch: candidates per policy program, which share the lanes. A shared pool keeps the lanes busy (one
      candidate's last long episodes leave most lanes idle), but every lane computes every candidate's
      program (`lax.switch` over a per-lane index is a select under vmap), so the policy's cost grows with
      the batch (benchmarks/coder_throughput.py measures the trade-off).
    chunk_s: game time between refills of lanes whose episode has ended; a
      whole number of ticks (dt = 0.1 s).
    """

    episodes_per_bot: int = 1000
    scenario: str = DEFAULT_SCENARIO
    seed: int = 0
    bots: tuple[str, ...] = BOT_TYPES
    lanes: int = 2048
    batch: int = 4
    chunk_s: float = 1.0

    def __post_init__(self):
        if not isinstance(self.episodes_per_bot, int) or self.episodes_per_bot < 1:
            raise ValueError(f"episodes_per_bot must be a positive int, got {self.episodes_per_bot!r}")
        if not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"lanes must be a positive int, got {self.lanes!r}")
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"batch must be a positive int, got {self.batch!r}")
        scenario_overrides(self.scenario)  # ValueError naming the presets
        if not self.bots:
            raise ValueError(f"bots must name at least one of {', '.join(BOT_TYPES)}")
        for bot in self.bots:
            bot_index(bot)
        if len(set(self.bots)) != len(self.bots):
            raise ValueError(f"bots repeat: {self.bots}")
        ticks = self.chunk_s / 0.1
        if self.chunk_s <= 0 or abs(ticks - round(ticks)) > 1e-6:
            raise ValueError(f"chunk_s must be a positive whole number of 0.1 s ticks, got {self.chunk_s!r}")


@dataclasses.dataclass(frozen=True)
class Score:
    """One candidate's reward and what the critic reads about it.

    status: "no_code" (reward -1), "error" (-0.5) or "ok" (the mean win rate).
    error: the critic-readable reason for "error" ("line N: kind: message" where known).
    win_rate: NPC win rate per bot (empty unless "ok").
    stats: per bot: loss and timeout rates, mean damage dealt/taken, mean
      episode length (s), and the share of living-NPC ticks spent on each action.
    """

    reward: float
    status: str
    error: str | None = None
    error_kind: str | None = None
    error_line: int | None = None
    win_rate: dict[str, float] = dataclasses.field(default_factory=dict)
    stats: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    episodes_per_bot: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Score:
        return cls(**data)


def no_code_score() -> Score:
    return Score(reward=NO_CODE, status="no_code", error="no program found in the reply")


def error_score(message: str, kind: str | None = None, line: int | None = None) -> Score:
    return Score(reward=PROGRAM_ERROR, status="error", error=message, error_kind=kind, error_line=line)


def rollout_error_score(exc: BaseException) -> Score:
    """The Score of a program that raised while its episodes ran (full scoring and racing say it alike)."""
    return error_score(f"runtime: the program failed in the rollout: {type(exc).__name__}: {exc}", "runtime")
