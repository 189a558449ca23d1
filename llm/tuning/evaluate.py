"""Does the tuned tag model win more? The squad under the stock LLM against the same squad under the tuned one.

For each bot, on the protocol's paired keys (`protocol.config.cell_key_data`,
so episode i meets the same spawns as in `jaxarena-evaluate`'s cells), the
squad plays:

- B: its tags from the stock model (the in-graph LLM, Table 10's sampling);
- L: its tags from the same model with the LoRA adapter;
- each fixed tag held for the whole episode (the best of them is the
  "best fixed tag" a constant chooser could reach).

Reported per bot: win rates with bootstrap CIs, the paired difference of L
against B and against the best fixed tag (paired bootstrap CIs), a
Mann-Whitney U test of the episode durations (as the paper's Table 8), and
the tag distribution of each chooser's decisions. With `price`, a sample of
L's and B's decisions is priced by the oracle (K playouts per tag): mean
regret and agreement with the oracle.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import jax
import numpy as np

from jaxarena.names import BOT_TYPES, NPC_WIN, NUM_TAGS, TAG_NAMES


def _tag_shares(result) -> list[float]:
    tags = np.asarray(result.decision_tags)[np.asarray(result.decision_active)]
    counts = np.bincount(tags, minlength=NUM_TAGS)
    return (counts / max(counts.sum(), 1)).tolist()


def _decision_states(result, count: int):
    """Up to `count` of a rollout's decision states (evenly spread) and their tags."""
    from .data import spread_decisions

    p, n = spread_decisions(result, count)
    return jax.tree.map(lambda x: x[p, n], result.decision_states), np.asarray(result.decision_tags)[p, n]


def compare(
    model,
    adapter,
    *,
    scenario: str,
    policy_spec: str,
    bots=BOT_TYPES,
    episodes: int = 100,
    seed: int = 0,
    price_states: int = 0,
    rollouts: int = 8,
    n_boot: int = 10_000,
    extra_choosers: dict | None = None,
    progress=print,
) -> dict:
    """The study's numbers per bot (see the module docstring); `model` is a `TagModel`.

    `extra_choosers` maps a name to a plain tag source (e.g. `bound.fit_tag_source`), each played on
    the same episodes and reported with its paired difference from B.
    """
    import jaxarena
    from jaxarena.algorithms.checkpoint import load_policy
    from jaxarena.analysis.oracle import make_pricer
    from jaxarena.protocol.config import cell_key_data
    from jaxarena.protocol.policies import policy_env_id
    from jaxarena.protocol.stats import mann_whitney, outcome_cis, paired_bootstrap_diff
    from jaxarena.runner import make_runner
    from jaxarena.tag_sources import hold_tags

    policy, policy_params = load_policy(policy_spec)
    env_id = policy_env_id(policy)
    env, params0 = jaxarena.make(env_id, bot=bots[0], scenario=scenario)
    record = price_states > 0
    play = make_runner(env, params0, policy, model.source.tag_fn(), episodes, record_states=record)
    hold = make_runner(env, params0, policy, hold_tags, episodes)
    choosers = {"B": model.arrays(model.zero_adapter()), "L": model.arrays(adapter)}
    pricer = make_pricer(env, params0, policy, price_states, rollouts=rollouts) if record else None
    extra_programs = {
        name: make_runner(env, params0, policy, source, episodes) for name, source in (extra_choosers or {}).items()
    }
    report = {"scenario": scenario, "policy": policy_spec, "episodes": episodes, "seed": seed, "bots": {}}
    for bot in bots:
        _, params = jaxarena.make(env_id, bot=bot, scenario=scenario)
        key = jax.numpy.asarray(cell_key_data(seed, bot))
        results = {}
        for name, arrays in choosers.items():
            state = {"arrays": arrays, "cache": model.source.init_cache()}
            results[name] = jax.block_until_ready(play(policy_params, params, key, tag_state=state))
        for name, program in extra_programs.items():
            results[name] = program(policy_params, params, key)
        fixed = [hold(policy_params, params, key, np.int32(t)) for t in range(NUM_TAGS)]
        wins = {name: np.asarray(r.outcome == NPC_WIN, np.float64) for name, r in results.items()}
        fixed_wins = [np.asarray(r.outcome == NPC_WIN, np.float64) for r in fixed]
        best = int(np.argmax([w.mean() for w in fixed_wins]))
        row = {
            name: {
                "win_pct": 100 * float(w.mean()),
                "win_ci": outcome_cis(np.asarray(results[name].outcome), n_boot=n_boot, seed=seed)["npc_win"],
                "tag_shares": _tag_shares(results[name]),
            }
            for name, w in wins.items()
        }
        row["fixed_win_pct"] = [100 * float(w.mean()) for w in fixed_wins]
        row["best_fixed_tag"] = TAG_NAMES[best]
        row["L_minus_B"] = [100 * x for x in paired_bootstrap_diff(wins["L"], wins["B"], n_boot=n_boot, seed=seed)]
        for name in extra_programs:
            row[name]["minus_B"] = [
                100 * x for x in paired_bootstrap_diff(wins[name], wins["B"], n_boot=n_boot, seed=seed)
            ]
        row["L_minus_best_fixed"] = [
            100 * x for x in paired_bootstrap_diff(wins["L"], fixed_wins[best], n_boot=n_boot, seed=seed)
        ]
        row["mann_whitney_durations"] = mann_whitney(
            np.asarray(results["B"].duration_s), np.asarray(results["L"].duration_s)
        )
        if record:
            for name, r in ((k, results[k]) for k in choosers):
                states, tags = _decision_states(r, price_states)
                n = len(tags)
                padded = jax.tree.map(lambda x, n=n: np.concatenate([x, np.repeat(x[:1], price_states - n, 0)]), states)
                values = pricer(policy_params, params, padded, jax.random.fold_in(key, 99))
                win = np.asarray(values.win)[:n]
                regret = win.max(-1) - win[np.arange(n), tags]
                row[name] |= {"priced": n, "regret": float(regret.mean()), "agreement": float(np.mean(regret <= 0))}
        report["bots"][bot] = row
        progress(
            f"{bot}: B {row['B']['win_pct']:.0f}%  L {row['L']['win_pct']:.0f}%  "
            f"L-B {row['L_minus_B'][0]:+.1f} [{row['L_minus_B'][1]:+.1f}, {row['L_minus_B'][2]:+.1f}] pp  "
            f"best fixed {row['best_fixed_tag']} {max(row['fixed_win_pct']):.0f}%  L tags "
            + " ".join(f"{s:.2f}" for s in row["L"]["tag_shares"])
        )
    return report


def markdown(report: dict) -> str:
    """The report as a markdown table, one row per bot."""
    lines = [
        f"Scenario `{report['scenario']}`, squad `{report['policy']}`, {report['episodes']} paired episodes per bot "
        f"(seed {report['seed']}).",
        "",
        "| bot | B (stock LLM) | L (tuned LLM) | L − B, pp [95% CI] | best fixed tag | L − best fixed, pp | "
        "L's tags (S/A/F/R) | MWU p (durations) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for bot, r in report["bots"].items():

        def pct(c):
            return f"{c['win_pct']:.0f}% [{c['win_ci'][0]:.0f}, {c['win_ci'][1]:.0f}]"

        d, f = r["L_minus_B"], r["L_minus_best_fixed"]
        lines.append(
            f"| {bot} | {pct(r['B'])} | {pct(r['L'])} | {d[0]:+.1f} [{d[1]:+.1f}, {d[2]:+.1f}] | "
            f"{r['best_fixed_tag']} {max(r['fixed_win_pct']):.0f}% | {f[0]:+.1f} [{f[1]:+.1f}, {f[2]:+.1f}] | "
            f"{' / '.join(f'{s:.2f}' for s in r['L']['tag_shares'])} | {r['mann_whitney_durations']['p']:.3g} |"
        )
    extras = [k for k in next(iter(report["bots"].values())) if isinstance(k, str) and k.startswith("prompt-")]
    if extras:
        lines += ["", "| bot | " + " | ".join(f"{k} (− B, pp)" for k in extras) + " |", "|---|" + "---|" * len(extras)]
        for bot, r in report["bots"].items():
            cells = [
                f"{r[k]['win_pct']:.0f}% ({r[k]['minus_B'][0]:+.1f} [{r[k]['minus_B'][1]:+.1f}, "
                f"{r[k]['minus_B'][2]:+.1f}])"
                for k in extras
            ]
            lines.append(f"| {bot} | " + " | ".join(cells) + " |")
    if any("regret" in r["L"] for r in report["bots"].values()):
        lines += [
            "",
            "| bot | B regret | B agreement | L regret | L agreement | priced decisions (B / L) |",
            "|---|---|---|---|---|---|",
        ]
        for bot, r in report["bots"].items():
            b, l_ = r["B"], r["L"]
            lines.append(
                f"| {bot} | {b['regret']:.3f} | {b['agreement']:.2f} | {l_['regret']:.3f} | {l_['agreement']:.2f} | "
                f"{b['priced']} / {l_['priced']} |"
            )
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: str | os.PathLike) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(report, indent=2))
    (out / "study.md").write_text(markdown(report))
    return out
