"""Does training against a population pay off against opponents a selector never met?

    python benchmarks/selector_population.py                        # C vs C-scripted, 200 episodes a cell
    python benchmarks/selector_population.py --selectors C C-scripted C-nodeduction --episodes 500

The Werewolf paper's ablation compares an agent trained against a population of varied
opponents with one trained by self-play. Here: the shipped `C` (population:
scripted bots, their variants and RL-trained bots) against `C-scripted`
(the three scripted bots only), both choosing among the same LLM candidates
for the same squad, played against

- the three scripted bots (both trained on these);
- the population's scripted variants (only C trained on these);
- a **held-out RL-trained bot**: `train_bot` run here with another seed than
  any selector's population, so neither selector has met it;

and, for reference, the LLM's own first candidate (`top1`, what B plays).
Every opponent is played on the same episode keys by every selector.
Prints one JSON line per (selector, opponent) and a markdown table of win
rates with Wilson 95% intervals.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax
import jax.numpy as jnp
import numpy as np

import jaxarena
from jaxarena.algorithms.bot_training import train_bot
from jaxarena.algorithms.checkpoint import load_policy
from jaxarena.analysis.oracle import wilson
from jaxarena.key_streams import learned_bot_key
from jaxarena.llm.strategy_table import load_table
from jaxarena.names import BOT_LEARNED
from jaxarena.runner import make_runner
from jaxarena.selector.population import scripted_members, variant_members
from jaxarena.selector.source import selector_tag_source
from jaxarena.selector.train import load_selector


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--selectors", nargs="+", default=["C", "C-scripted"])
    p.add_argument("--episodes", type=int, default=200)
    p.add_argument("--bot-steps", type=float, default=2e6, help="training steps of the held-out learned bot")
    p.add_argument("--bot-seed", type=int, default=12345)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    t_start = time.perf_counter()

    loaded = {name: load_selector(name) for name in args.selectors}
    first = next(iter(loaded.values()))[0]
    if any(c.squad != first.squad or c.table != first.table for c, _, _ in loaded.values()):
        raise SystemExit("the selectors must share their squad and table to be compared")
    policy, squad_params = load_policy(first.squad)
    env_id = getattr(policy, "env_id", "Arena-v0")
    env, base = jaxarena.make(env_id, scenario=first.scenario)
    table = load_table(first.table)

    t0 = time.perf_counter()
    bots, _ = train_bot(
        policy, squad_params, base, learned_bot_key(args.bot_seed), total_steps=int(args.bot_steps), env_id=env_id
    )
    bot_train_s = time.perf_counter() - t0
    weights = jax.tree.map(jnp.asarray, bots[-1])
    opponents = [(name, prm.replace(bot_weights=weights)) for name, prm in scripted_members(base)]
    opponents += [(name, prm.replace(bot_weights=weights)) for name, prm in variant_members(base)]
    opponents.append(("learned (held out)", base.replace(bot_type=jnp.int32(BOT_LEARNED), bot_weights=weights)))

    players = {
        name: selector_tag_source(table, config.inputs, "selector", net, prm)
        for name, (config, net, prm) in loaded.items()
    }
    players["LLM top-1"] = selector_tag_source(table, first.inputs, "top1")
    rows = []
    for player, source in players.items():
        run = make_runner(env, opponents[-1][1], policy, source, args.episodes)
        for opponent, params in opponents:
            result = run(squad_params, params, jax.random.PRNGKey(args.seed))
            win = float(np.mean(np.asarray(result.outcome) == 1))
            lo, hi = wilson(np.asarray(win), args.episodes)
            row = {
                "bench": "selector_population",
                "player": player,
                "opponent": opponent,
                "episodes": args.episodes,
                "npc_win": round(win, 4),
                "npc_win_ci": [round(float(lo), 4), round(float(hi), 4)],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)

    names = list(players)
    print(f"\n| opponent | {' | '.join(names)} |")
    print("|---|" + "---|" * len(names))
    for opponent, _ in opponents:
        cells = []
        for player in names:
            r = next(r for r in rows if r["player"] == player and r["opponent"] == opponent)
            cells.append(f"{100 * r['npc_win']:.0f} [{100 * r['npc_win_ci'][0]:.0f}, {100 * r['npc_win_ci'][1]:.0f}]")
        print(f"| {opponent} | {' | '.join(cells)} |")
    summary = {"bench": "selector_population", "held_out_bot_train_s": round(bot_train_s, 1)}
    summary["seconds"] = round(time.perf_counter() - t_start, 1)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
