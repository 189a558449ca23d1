"""The critic's statistics: per candidate, the win rate per bot and how its episodes went, from per-job results;
`ok_score` makes a played candidate's `Score` of them."""

from __future__ import annotations

import math

import numpy as np

from jaxarena.names import ACTIONS, BOT_WIN, NPC_WIN, NUM_ACTIONS, TIMEOUT, bot_index

from .score_types import Score, ScoreConfig, error_score


def summarize(results: dict, jobs: dict, k: int, config: ScoreConfig, dt: float = 0.1) -> list[dict]:
    """Per candidate: win rate per bot and the critic's statistics, from per-job results."""
    res = {name: np.asarray(v) for name, v in results.items()}
    out = []
    for c in range(k):
        win_rate, stats = {}, {}
        invalid = 0
        for name in config.bots:
            sel = (jobs["cand"] == c) & (jobs["bot"] == bot_index(name))
            outcome = res["outcome"][sel]
            counts = res["counts"][sel].sum(axis=0)
            invalid += int(res["invalid"][sel].sum())
            win_rate[name] = float(np.mean(outcome == NPC_WIN))
            stats[name] = {
                "win": win_rate[name],
                "loss": float(np.mean(outcome == BOT_WIN)),
                "timeout": float(np.mean(outcome == TIMEOUT)),
                "damage_dealt": float(np.mean(res["damage_dealt"][sel])),
                "damage_taken": float(np.mean(res["damage_taken"][sel])),
                "episode_s": float(np.mean(res["t"][sel]) * dt),
                "action_share": {a: float(x) for a, x in zip(ACTIONS, counts / max(counts.sum(), 1), strict=True)},
            }
        out.append({"win_rate": win_rate, "stats": stats, "invalid_actions": invalid})
    return out


def mean_win_rate(win_rate: dict[str, float]) -> float:
    return float(math.fsum(win_rate.values()) / len(win_rate))


def ok_score(summary: dict, config: ScoreConfig) -> Score:
    """A played candidate's Score: its mean win rate, or -0.5 where it returned an invalid action."""
    if summary["invalid_actions"]:
        return error_score(
            f"runtime: the policy returned an action outside 0..{NUM_ACTIONS - 1} on {summary['invalid_actions']} "
            "NPC-ticks (a computed value, not one of the six action names?); such a tick does nothing",
            "runtime",
        )
    return Score(
        reward=mean_win_rate(summary["win_rate"]),
        status="ok",
        win_rate=summary["win_rate"],
        stats=summary["stats"],
        episodes_per_bot=config.episodes_per_bot,
    )
