"""Combination R: B's policy with the tags in a fixed rotation, one tag per decision period.

A tag source that knows nothing of the game: 0, 1, 2, 3, 0, ... every 5 s
(`jaxarena.runner.schedule_tags`), on B's paired episodes. Beside B it says
how much of B's result a schedule without information reaches; its section
gives each bot's win % and, where the run has B, the paired difference.
"""

from __future__ import annotations

import numpy as np

from jaxarena.names import NPC_WIN, TAG_NAMES

from ..combination import Combination, Played, ReportSection, Results
from ..playing import arena, compile_rollout, episodes, period_s, timed_call

#: The tags in turn, one per decision period.
ROTATION = (0, 1, 2, 3)


def _play(context, label: str, bot: str, key, progress) -> Played:
    from jaxarena.runner import schedule_tags

    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    source = schedule_tags(ROTATION, period_s(env_params))
    program, compile_s = context.program(
        label, lambda: compile_rollout(context, env, env_params, policy, params, source)
    )
    result, wall = timed_call(program, params, env_params, key)
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall)


def _summarize(results: Results) -> dict:
    """Per bot: R's squad win % (95% CI) and, with B in the run, R minus B on the same episodes."""
    from .. import stats  # scipy: loaded when a summary is made, not when the registry is read

    c = results.config
    by_bot = {}
    for bot in c.bots:
        cell = results.by.get("R", {}).get(bot)
        if cell is None:
            continue
        row = results.descriptive["R"][bot]
        entry = {"win_pct": row["npc_win_pct"], "ci95": list(row["ci95"]["npc_win"]), "n": row["n"]}
        b_cell = results.by.get("B", {}).get(bot)
        if b_cell is not None:
            won, b_won = (np.asarray(x["episodes"]["outcome"]) == NPC_WIN for x in (cell, b_cell))
            diff, lo, hi = stats.paired_bootstrap_diff(won, b_won, n_boot=c.n_boot, seed=c.seed)
            entry["vs_B"] = {"win_pct_points": 100 * diff, "ci95": [100 * lo, 100 * hi]}
        by_bot[bot] = entry
    return {
        "rotation": [TAG_NAMES[t] for t in ROTATION],
        "win": "squad (NPC) win %, with its percentile-bootstrap 95% CI; vs_B: minus B's on the same paired "
        "episodes, in percentage points, 95% CI from a paired bootstrap",
        "by_bot": by_bot,
    }


def _render(section: dict) -> list[str]:
    lines = [
        f"### Rotation (R): B's policy with the tags in turn ({' → '.join(section['rotation'])}), one per period",
        "",
        "| Bot | NPC Win % (95% CI) | Win − B (pp, 95% CI) |",
        "|---|---:|---:|",
    ]
    for bot, r in section["by_bot"].items():
        vs = r.get("vs_B")
        lines.append(
            f"| {bot.capitalize()} | {r['win_pct']:.1f}% ({r['ci95'][0]:.1f}–{r['ci95'][1]:.1f}) | "
            + (f"{vs['win_pct_points']:+.1f} ({vs['ci95'][0]:+.1f}, {vs['ci95'][1]:+.1f})" if vs else "—")
            + " |"
        )
    return lines + [""]


def _console(section: dict) -> None:
    print("  rotation R: squad win % (95% CI), minus B's in pp")
    for bot, r in section["by_bot"].items():
        vs = r.get("vs_B")
        print(
            f"    {bot:<10} R {r['win_pct']:5.1f}% ({r['ci95'][0]:.0f}-{r['ci95'][1]:.0f})"
            + (f"  {vs['win_pct_points']:+.1f} vs B" if vs else "")
        )


COMBINATION = Combination(
    name="R",
    about="B's policy with the tags in a fixed rotation (0, 1, 2, 3, ...), one per decision period",
    squads=lambda context, label: {label: context.config.policy_b},
    play=_play,
    fingerprint=lambda context, label: {"rotation": list(ROTATION)},
    sections=(
        ReportSection(
            key="rotation",
            rank=40,
            applies=lambda config: "R" in config.combinations,
            summarize=_summarize,
            render=_render,
            console=_console,
        ),
    ),
)
