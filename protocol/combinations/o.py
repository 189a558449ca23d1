"""Combination O: B's policy with the counterfactual oracle choosing the tag.

At every decision the oracle plays each tag out `oracle_rollouts` times with
B's policy from the current state and takes the tag with the highest win rate
(`jaxarena.analysis.oracle.oracle_tag_source`): an upper bound on what a tag selector
can gain, not a player. Its section, the headroom (`HEADROOM`), sets O against
A, B and the best fixed tag (F), with B's regret where its decisions are priced.
"""

from __future__ import annotations

import numpy as np

from jaxarena.names import BOT_TYPES, NPC_WIN, NUM_TAGS, TAG_NAMES

from ..combination import Combination, Played, ReportSection, win_entry
from ..playing import arena, compile_rollout, episodes, timed_call
from ..tables import md_row, win_with_ci


def _squads(context, label: str) -> dict[str, str]:
    return {label: context.config.policy_b}


def _oracle_source(context, label: str, env, env_params, policy, params):
    """The oracle's tag source, reporting each decision period to the cell's progress (through
    `hook`, since the compiled program outlives the cell it was built for)."""
    import jax

    from jaxarena.analysis.oracle import oracle_tag_source
    from jaxarena.tag_sources import TagSource

    c = context.config
    oracle = oracle_tag_source(
        env, env_params, policy, params, c.episodes, rollouts=c.oracle_rollouts, horizon_periods=c.num_periods
    ).step
    hook = context.shared(f"{label}.period_hook", lambda: [None])

    def report(time_s, done, tags):
        if hook[0] is not None:
            hook[0](float(time_s), int(np.sum(done)))

    def choose(state, prm, features, prev_tags, done, time_s, key):
        tags, _, _ = oracle(None, features, prev_tags, done, time_s, key, state, prm)
        # `tags` as an argument: the report comes once the period's pricing is done.
        jax.debug.callback(report, time_s, done, tags)
        return tags

    return TagSource.of_state(choose)


def _play(context, label: str, bot: str, key, progress) -> Played:
    from jaxarena.runner import schedule_of

    c = context.config
    policy, params = context.resolve(c.policy_b)[:2]
    env, env_params = arena(context, policy, bot, shaped=True)
    program, compile_s = context.program(
        label,
        lambda: compile_rollout(
            context, env, env_params, policy, params, _oracle_source(context, label, env, env_params, policy, params)
        ),
    )
    _, periods, period_s = schedule_of(env_params)
    periods = c.num_periods or periods
    hook = context.shared(f"{label}.period_hook", lambda: [None])
    hook[0] = lambda time_s, done: progress(done, **{label: f"period {round(time_s / period_s) + 1}/{periods}"})
    try:
        result, wall = timed_call(program, params, env_params, key)
    finally:
        hook[0] = None
    timing = {"oracle": "in the simulation"}
    return Played({"episodes": episodes(result, key, c.episodes)}, compile_s, wall, timing=timing)


# -- the headroom section: summary.json's `oracle`, its report table and its console lines --
def uses_oracle(config) -> bool:
    """Whether a run has anything for the oracle section (F, O or priced B decisions)."""
    return bool({"F", "O"} & set(config.combinations)) or config.options_of("B").price_decisions


def oracle_summary(by: dict, descriptive: dict, config) -> dict:
    """Per bot: A, B, the best fixed tag and O (squad win % with its CI), O's headroom over the
    best fixed tag, and the LLM's regret and agreement with the oracle, where the run has them."""
    from .. import stats  # scipy: loaded when a summary is made, not when the registry is read

    seed, n_boot = config.seed, config.n_boot
    by_bot = {}
    for bot in config.bots:
        row: dict = {}
        for comb in ("A", "B", "O"):
            if bot in descriptive.get(comb, {}):
                row[comb] = win_entry(descriptive[comb][bot])
        f_cell = by.get("F", {}).get(bot)
        if f_cell is not None:
            rates = [descriptive[f"F{t}"][bot]["npc_win_pct"] for t in range(NUM_TAGS)]
            best = int(np.argmax(rates))  # ties: the lower tag number
            row["best_fixed"] = {"tag": best, "name": TAG_NAMES[best], **win_entry(descriptive[f"F{best}"][bot])}
            row["fixed_win_pct"] = rates
        o_cell = by.get("O", {}).get(bot)
        if o_cell is not None and f_cell is not None:
            o_won = np.asarray(o_cell["episodes"]["outcome"]) == NPC_WIN
            f_won = np.asarray(f_cell["episodes_by_tag"][row["best_fixed"]["tag"]]["outcome"]) == NPC_WIN
            diff, lo, hi = stats.paired_bootstrap_diff(o_won, f_won, n_boot=n_boot, seed=seed)
            row["headroom"] = {"pct_points": 100 * diff, "ci95": [100 * lo, 100 * hi]}
        b_cell = by.get("B", {}).get(bot)
        priced = [d for d in b_cell["decisions"] if "regret" in d] if b_cell is not None else []
        if priced:
            episodes = [d["episode"] for d in priced]
            regret = stats.cluster_bootstrap_mean([d["regret"] for d in priced], episodes, n_boot=n_boot, seed=seed)
            agrees = stats.cluster_bootstrap_mean(
                [float(d["agrees"]) for d in priced], episodes, n_boot=n_boot, seed=seed + 1
            )
            row["llm"] = {
                "decisions": len(priced),
                "mean_regret": regret[0],
                "regret_ci95": list(regret[1:]),
                "agreement_pct": 100 * agrees[0],
                "agreement_ci95": [100 * x for x in agrees[1:]],
            }
        by_bot[bot] = row
    return {
        "scenario": config.scenario,
        "rollouts": config.oracle_rollouts,
        "win": "squad (NPC) win %, with its percentile-bootstrap 95% CI (as in Tables 6-7)",
        "best_fixed": "the F tag with the highest win % on these episodes (ties: the lower tag number)",
        "headroom": "O minus the best fixed tag, in percentage points; 95% CI from a paired bootstrap over episodes",
        "regret": "Q(best) - Q(chosen) in win probability, K playouts per tag; mean over B's decisions, 95% CI "
        "from a bootstrap over episodes (agreement likewise)",
        "by_bot": by_bot,
    }


def oracle_table(oracle: dict) -> list[str]:
    """Per bot: A, B, the best fixed tag and O (squad win % with 95% CI), O's headroom over the best
    fixed tag, and the LLM's regret and agreement with the oracle; then each fixed tag's win %."""
    k = oracle["rollouts"]
    lines = [
        f"### Headroom. Oracle (O) vs fixed tags (F) and the LLM (B) — scenario `{oracle['scenario']}`, K = {k}",
        "",
        "| Bot | A | B (LLM) | Best fixed tag | Best fixed | O (oracle) | Headroom O − best F (pp) "
        "| LLM mean regret | LLM agrees with O |",
        "|---|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for bot in BOT_TYPES:
        if bot not in oracle["by_bot"]:
            continue
        r = oracle["by_bot"][bot]
        best = r.get("best_fixed")
        head = r.get("headroom")
        llm = r.get("llm")
        lines.append(
            md_row(
                bot.capitalize(),
                win_with_ci(r.get("A")),
                win_with_ci(r.get("B")),
                f"{best['tag']} {best['name']}" if best else "—",
                win_with_ci(best),
                win_with_ci(r.get("O")),
                f"{head['pct_points']:+.1f} ({head['ci95'][0]:+.1f}–{head['ci95'][1]:+.1f})" if head else "—",
                f"{llm['mean_regret']:.3f} ({llm['regret_ci95'][0]:.3f}–{llm['regret_ci95'][1]:.3f})" if llm else "—",
                f"{llm['agreement_pct']:.1f}% ({llm['agreement_ci95'][0]:.1f}–{llm['agreement_ci95'][1]:.1f}), "
                f"n={llm['decisions']}"
                if llm
                else "—",
            )
        )
    lines += [
        "",
        (
            "Win % is the squad's (NPC) win rate with its 95% bootstrap CI. F: B's policy with one tag held "
            "all episode, on the same paired episodes; the best fixed tag is picked on these episodes, which "
            "flatters it, so the headroom is conservative. O picks, at every 5 s boundary, the tag with the "
            f"highest win rate over K = {k} playouts per tag with B's policy (ties: the higher mean return): it "
            "sees the full state and simulates the future: an upper bound on what a tag selector can gain, not "
            "a player (one-step planning on noisy estimates, so by chance it can score below the best fixed "
            "tag). Headroom CI: paired bootstrap over episodes. Regret: Q(best) − Q(chosen) in win "
            "probability for each of B's decisions (K playouts per tag; estimation noise makes it ≥ 0 even "
            "where every tag is equal, so small values mean little); agreement: the LLM's tag is one of the "
            "oracle's best. Both CIs: bootstrap over episodes."
        ),
        "",
    ]
    fixed = [(bot, oracle["by_bot"][bot].get("fixed_win_pct")) for bot in BOT_TYPES if bot in oracle["by_bot"]]
    fixed = [(bot, rates) for bot, rates in fixed if rates]
    if fixed:
        lines += [
            "Win % of each fixed tag (F):",
            "",
            md_row("Bot", *(f"{t} {name}" for t, name in enumerate(TAG_NAMES))),
            "|---|" + "---:|" * NUM_TAGS,
        ]
        lines += [md_row(bot.capitalize(), *(f"{x:.1f}%" for x in rates)) for bot, rates in fixed]
        lines.append("")
    return lines


def print_oracle(oracle: dict) -> None:
    """The headroom table in a few lines: squad win % (95% CI) of A, B, the best fixed tag and O."""

    def rate(entry):
        return f"{entry['win_pct']:5.1f}% ({entry['ci95'][0]:.0f}-{entry['ci95'][1]:.0f})" if entry else "    —"

    print(f"  oracle (scenario {oracle['scenario']}, K={oracle['rollouts']}): squad win % (95% CI)")
    for bot, r in oracle["by_bot"].items():
        best = r.get("best_fixed")
        parts = [f"A {rate(r.get('A'))}", f"B {rate(r.get('B'))}"]
        if best:
            parts.append(f"best F ({best['name']}) {rate(best)}")
        parts.append(f"O {rate(r.get('O'))}")
        if r.get("headroom"):
            h = r["headroom"]
            parts.append(f"headroom {h['pct_points']:+.1f} pp ({h['ci95'][0]:+.1f}, {h['ci95'][1]:+.1f})")
        if r.get("llm"):
            m = r["llm"]
            parts.append(
                f"LLM regret {m['mean_regret']:.3f} ({m['regret_ci95'][0]:.3f}-{m['regret_ci95'][1]:.3f}), "
                f"agrees {m['agreement_pct']:.0f}% of {m['decisions']}"
            )
        print(f"    {bot:<10} " + "  ".join(parts))


#: The headroom: A, B, the best fixed tag (F) and O, and the LLM's regret (priced B decisions).
HEADROOM = ReportSection(
    key="oracle",
    rank=10,
    applies=uses_oracle,
    summarize=lambda r: oracle_summary(r.by, r.descriptive, r.config),
    render=oracle_table,
    console=print_oracle,
)

COMBINATION = Combination(
    name="O",
    about="the oracle picks each tag (slow: minutes per bot)",
    squads=_squads,
    play=_play,
    fingerprint=lambda context, label: {"oracle": {"rollouts": context.config.oracle_rollouts}},
    sections=(HEADROOM,),
)
