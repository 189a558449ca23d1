"""Combination W: the white-box squads, baselines written in the squad-policy language (docs/coder.md).

Each baseline (`jaxarena.coder.language.BASELINES`: rush, kite,
surround_strike) is a squad of its own, translated to JAX and played as A is
(A's fixed tag, the team reward) on A's paired episodes: one program per
squad, and one cell per bot that holds every squad's episode set ("W:rush", ...).
"""

from __future__ import annotations

import numpy as np

from jaxarena.names import BOT_TYPES, NPC_WIN

from ...zoo import DEFAULT_ENV_ID
from ..combination import Combination, Played, ReportSection, win_entry
from ..playing import arena, compile_rollout, episodes, timed_call
from ..tables import format_p, md_row, win_with_ci


def specs() -> dict[str, str]:
    """W's squads: baseline name -> its policy spec ("coder:rush", ...; see `policies.resolve_policy`)."""
    from jaxarena.coder.language import BASELINES

    return {name: f"coder:{name}" for name in BASELINES}


def _squads(context, label: str) -> dict[str, str]:
    return {f"{label}:{name}": spec for name, spec in specs().items()}


def _fingerprint(context, label: str) -> dict:
    # Every squad's checksum: editing a baseline invalidates the cell.
    tag = context.config.options_of("A").tag
    return {"policy": {name: context.resolve(spec)[2] for name, spec in specs().items()}, "tag": tag}


def _play(context, label: str, bot: str, key, progress) -> Played:
    c, tag = context.config, context.config.options_of("A").tag  # W plays as A does, A's tag included
    # The squad-policy language reads Arena-v0's observation; no tag choice, so no shaping is logged.
    env, env_params = arena(context, None, bot, shaped=False, env_id=DEFAULT_ENV_ID)
    programs, compile_s = {}, 0.0
    for name, spec in specs().items():
        policy, params = context.resolve(spec)[:2]
        programs[name], seconds = context.program(
            f"{label}:{name}",
            lambda policy=policy, params=params: compile_rollout(context, env, env_params, policy, params, tag),
        )
        compile_s += seconds
    sets, wall = {}, 0.0
    for i, (name, program) in enumerate(programs.items()):
        result, seconds = timed_call(program, context.resolve(specs()[name])[1], env_params, key)
        sets[name] = episodes(result, key, c.episodes)
        wall += seconds
        progress((i + 1) * c.episodes // len(programs))
    return Played({"episodes_by_squad": sets}, compile_s, wall)


# -- the white-box section: summary.json's `whitebox`, its report table and its console lines --
def _outcome_row(row: dict) -> dict:
    return {
        **win_entry(row),
        "bot_win_pct": row["bot_win_pct"],
        "timeout_pct": row["timeout_pct"],
        "mean_s": row["mean_s"],
        "median_s": row["median_s"],
    }


def whitebox_summary(by: dict, descriptive: dict, config) -> dict:
    """Per bot: A and each white-box squad (W), each squad also against A on the same paired
    episodes: the win-rate difference with a paired bootstrap CI, and Table 8's Mann-Whitney
    test of time-to-defeat (A's durations first, so U is A's statistic)."""
    from jaxarena.coder.language import BASELINES

    from .. import stats  # scipy: loaded when a summary is made, not when the registry is read

    by_bot = {}
    for bot in config.bots:
        w_cell = by.get("W", {}).get(bot)
        if w_cell is None:
            continue
        a_cell = by.get("A", {}).get(bot)
        row: dict = {"A": _outcome_row(descriptive["A"][bot])} if a_cell is not None else {}
        squads = {}
        for name, e in w_cell["episodes_by_squad"].items():
            entry = _outcome_row(descriptive[f"W:{name}"][bot])
            if a_cell is not None:
                a = a_cell["episodes"]
                won, a_won = (np.asarray(x["outcome"]) == NPC_WIN for x in (e, a))
                diff, lo, hi = stats.paired_bootstrap_diff(won, a_won, n_boot=config.n_boot, seed=config.seed)
                mw = stats.mann_whitney(a["duration_s"], e["duration_s"])
                # Table 8's test with the squad in B's place: say so in its direction.
                mw["direction"] = mw["direction"].replace("B ", "squad ")
                entry["vs_A"] = {"win_pct_points": 100 * diff, "ci95": [100 * lo, 100 * hi], "mann_whitney": mw}
            squads[name] = entry
        row["squads"] = squads
        by_bot[bot] = row
    names = sorted({name for per_bot in by_bot.values() for name in per_bot["squads"]})
    return {
        "scenario": config.scenario,
        "squads": {
            name: {"source": f"coder/baselines/{name}.py", "lines": len(BASELINES[name].splitlines())}
            for name in names
            if name in BASELINES
        },
        "win": "squad (NPC) win %, with its percentile-bootstrap 95% CI (as in Tables 6-7)",
        "vs_A": "win % minus A's on the same paired episodes, in percentage points, 95% CI from a paired "
        "bootstrap over episodes; Mann-Whitney U of time-to-defeat, A vs the squad (U is A's statistic, "
        "r and r_rb < 0 when the squad's episodes are shorter)",
        "by_bot": by_bot,
    }


def whitebox_table(whitebox: dict) -> list[str]:
    """Per bot: A, then each white-box squad (W) with its win % (95% CI), outcome shares and
    time-to-defeat, and its difference from A on the same paired episodes."""
    squads = ", ".join(f"`{s['source']}` ({s['lines']} lines)" for s in whitebox["squads"].values())
    lines = [
        "### White-box squads (docs/coder.md)",
        "",
        "| Bot | Squad | NPC Win % (95% CI) | Bot Win % | Timeout % | Mean (s) | Median (s) "
        "| Win − A (pp, 95% CI) | Time vs A: Mann–Whitney p, r_rb |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|",
    ]

    def row(bot: str, squad: str, r: dict) -> str:
        vs = r.get("vs_A")
        mw = vs["mann_whitney"] if vs else None
        return md_row(
            bot.capitalize(),
            squad,
            win_with_ci(r),
            f"{r['bot_win_pct']:.1f}%",
            f"{r['timeout_pct']:.1f}%",
            f"{r['mean_s']:.2f}",
            f"{r['median_s']:.2f}",
            f"{vs['win_pct_points']:+.1f} ({vs['ci95'][0]:+.1f}, {vs['ci95'][1]:+.1f})" if vs else "—",
            f"{format_p(mw['p'])}{mw['stars']}, {mw['r_rb']:+.3f} ({mw['direction']})" if mw else "—",
        )

    for bot in BOT_TYPES:
        if bot not in whitebox["by_bot"]:
            continue
        r = whitebox["by_bot"][bot]
        if "A" in r:
            lines.append(row(bot, "A", r["A"]))
        lines += [row(bot, name, entry) for name, entry in r["squads"].items()]
    lines += [
        "",
        (
            f"Squads: the baselines written in the squad-policy language ({squads}), translated to JAX and "
            "played by the same episode runner as A, with A's fixed tag, on the same paired episodes. Win %: "
            "the squad's (NPC) win rate with its 95% bootstrap CI. Win − A: paired bootstrap over episodes. "
            "Time vs A: Table 8's two-sided Mann–Whitney U of time-to-defeat with the squad in B's place "
            "(r_rb < 0: the squad's episodes are shorter)."
        ),
        "",
    ]
    return lines


def print_whitebox(whitebox: dict) -> None:
    """Each white-box squad's win % (95% CI) and its paired difference from A."""
    print("  white-box squads: squad win % (95% CI), minus A's in pp (paired 95% CI)")
    for bot, r in whitebox["by_bot"].items():
        parts = [f"A {r['A']['win_pct']:5.1f}%"] if "A" in r else []
        for name, e in r["squads"].items():
            part = f"{name} {e['win_pct']:5.1f}% ({e['ci95'][0]:.0f}-{e['ci95'][1]:.0f})"
            if "vs_A" in e:
                v = e["vs_A"]
                part += f" {v['win_pct_points']:+.1f} ({v['ci95'][0]:+.1f}, {v['ci95'][1]:+.1f})"
            parts.append(part)
        print(f"    {bot:<10} " + "  ".join(parts))


#: Each squad against A on the same paired episodes.
WHITEBOX = ReportSection(
    key="whitebox",
    rank=20,
    applies=lambda config: "W" in config.combinations,
    summarize=lambda r: whitebox_summary(r.by, r.descriptive, r.config),
    render=whitebox_table,
    console=print_whitebox,
)

COMBINATION = Combination(
    name="W",
    about="the white-box baselines of docs/coder.md (rush, kite, surround_strike) on A's paired episodes",
    squads=_squads,
    play=_play,
    fingerprint=_fingerprint,
    episode_sets=lambda cell: [(f"W:{name}", e) for name, e in cell["episodes_by_squad"].items()],
    sections=(WHITEBOX,),
)
