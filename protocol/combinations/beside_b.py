"""A tag source played with B's policy on B's paired episodes (`play_b_squad`), and its report section
(`beside_b`): its win % per bot and, where the run has B, its paired difference from B. Combinations R
and T are made of the two."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from jaxarena.names import NPC_WIN

from ..combination import Played, ReportSection, Results, win_entry
from ..playing import arena, compile_rollout, episodes, timed_call


def play_b_squad(make_source: Callable) -> Callable:
    """A combination's `play`: B's policy on its shaped arena, the tags from `make_source(env_params)`."""

    def play(context, label: str, bot: str, key, progress) -> Played:
        c = context.config
        policy, params = context.resolve(c.policy_b)[:2]
        env, env_params = arena(context, policy, bot, shaped=True)
        source = make_source(env_params)
        program, compile_s = context.program(
            label, lambda: compile_rollout(context, env, env_params, policy, params, source)
        )
        result, wall = timed_call(program, params, env_params, key)
        return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall)

    return play


def beside_b(name: str, key: str, title: str, rank: int, extra: dict | None = None) -> ReportSection:
    """The section of combination `name`, as summary.json's `key` (with `extra`'s entries) and report.md's
    `### title`."""

    def summarize(results: Results) -> dict:
        from .. import stats  # scipy: loaded when a summary is made, not when the registry is read

        c = results.config
        by_bot = {}
        for bot in c.bots:
            cell = results.by.get(name, {}).get(bot)
            if cell is None:
                continue
            entry = win_entry(results.descriptive[name][bot])
            b_cell = results.by.get("B", {}).get(bot)
            if b_cell is not None:
                won, b_won = (np.asarray(x["episodes"]["outcome"]) == NPC_WIN for x in (cell, b_cell))
                diff, lo, hi = stats.paired_bootstrap_diff(won, b_won, n_boot=c.n_boot, seed=c.seed)
                entry["vs_B"] = {"win_pct_points": 100 * diff, "ci95": [100 * lo, 100 * hi]}
            by_bot[bot] = entry
        return {
            **(extra or {}),
            "win": "squad (NPC) win %, with its percentile-bootstrap 95% CI; vs_B: minus B's on the same paired "
            "episodes, in percentage points, 95% CI from a paired bootstrap",
            "by_bot": by_bot,
        }

    def render(section: dict) -> list[str]:
        lines = [f"### {title}", "", "| Bot | NPC Win % (95% CI) | Win − B (pp, 95% CI) |", "|---|---:|---:|"]
        for bot, r in section["by_bot"].items():
            vs = r.get("vs_B")
            lines.append(
                f"| {bot.capitalize()} | {r['win_pct']:.1f}% ({r['ci95'][0]:.1f}–{r['ci95'][1]:.1f}) | "
                + (f"{vs['win_pct_points']:+.1f} ({vs['ci95'][0]:+.1f}, {vs['ci95'][1]:+.1f})" if vs else "—")
                + " |"
            )
        return lines + [""]

    def console(section: dict) -> None:
        print(f"  {key} {name}: squad win % (95% CI), minus B's in pp")
        for bot, r in section["by_bot"].items():
            vs = r.get("vs_B")
            print(
                f"    {bot:<10} {name} {r['win_pct']:5.1f}% ({r['ci95'][0]:.0f}-{r['ci95'][1]:.0f})"
                + (f"  {vs['win_pct_points']:+.1f} vs B" if vs else "")
            )

    applies: Callable = lambda config: name in config.combinations  # noqa: E731
    return ReportSection(key=key, rank=rank, applies=applies, summarize=summarize, render=render, console=console)
