"""Canonical tasks: an arena id, a scenario, a bot and a reward, named once.

    env, params = jaxarena.make_task("paper-balanced")
    obs, state = env.reset(key, params)

A task pins what a result is measured on, so two papers' numbers, two
trainers' curves or a run and its evaluation compare on the same thing. The
rows are the paper's three bots on its own arena (`paper`), and the same
bots on the two presets calibrated with a trained squad (`brute`, `raid`;
docs/arena.md, "Scenarios"), each with the team reward (Combination A's),
plus the paper's three bots with the Table 5 shaping switched on
(Combination B's training reward). `TASKS` is the table; docs/arena.md
("Tasks") prints it, and a test keeps the two equal.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from .names import BOT_TYPES

#: reward name -> the `EnvParams` fields that select it.
REWARDS = MappingProxyType(
    {
        # The shared team reward alone: bot damage / bot HP scale, +1 kill, -1 wipe.
        "team": MappingProxyType({"shaping_weight": 0.0}),
        # The team reward plus Table 5's shaping for the active tag, at weight 1.
        "team+table5": MappingProxyType({"shaping_weight": 1.0, "shaping_recipe": 0}),
    }
)


@dataclasses.dataclass(frozen=True)
class Task:
    """One row of `TASKS`: `make_task(task_id)` is `make(env_id, bot=bot, scenario=scenario, **REWARDS[reward])`."""

    task_id: str
    env_id: str
    scenario: str
    bot: str
    reward: str

    def kwargs(self) -> dict:
        """The arguments of `jaxarena.make` after the env id."""
        return {"bot": self.bot, "scenario": self.scenario, **REWARDS[self.reward]}


def _rows():
    for scenario in ("paper", "brute", "raid"):
        for bot in BOT_TYPES:
            yield Task(f"{scenario}-{bot}", "Arena-v0", scenario, bot, "team")
    for bot in BOT_TYPES:
        yield Task(f"paper-{bot}-tags", "Arena-v0", "paper", bot, "team+table5")


#: task id -> `Task`, in table order.
TASKS = MappingProxyType({task.task_id: task for task in _rows()})


def make_task(task_id: str, **overrides):
    """`(env, params)` of a canonical task; `overrides` (any `EnvParams` field) win over the row's.

    Raises ValueError listing the task ids on an unknown one.
    """
    from .registry import make

    if task_id not in TASKS:
        raise ValueError(f"unknown task {task_id!r}; tasks: {', '.join(TASKS)}")
    task = TASKS[task_id]
    return make(task.env_id, **{**task.kwargs(), **overrides})


def markdown_table() -> str:
    """`TASKS` as the Markdown table docs/arena.md prints."""
    lines = ["| Task | Env id | Scenario | Bot | Reward |", "|---|---|---|---|---|"]
    for t in TASKS.values():
        lines.append(f"| `{t.task_id}` | `{t.env_id}` | `{t.scenario}` | {t.bot} | {t.reward} |")
    return "\n".join(lines)


def compact_table() -> str:
    """`TASKS` with one row per (env id, scenario, reward) and the bots in a cell, as the README prints it."""
    groups: dict[tuple[str, str, str], list[Task]] = {}
    for t in TASKS.values():
        groups.setdefault((t.env_id, t.scenario, t.reward), []).append(t)
    lines = ["| Tasks | Env id | Scenario | Reward |", "|---|---|---|---|"]
    for (env_id, scenario, reward), tasks in groups.items():
        ids = ", ".join(f"`{t.task_id}`" for t in tasks)
        lines.append(f"| {ids} | `{env_id}` | `{scenario}` | {reward} |")
    return "\n".join(lines)
