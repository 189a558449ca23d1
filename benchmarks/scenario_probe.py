"""Scripted-squad probe of a scenario: does the best tactic depend on the bot?

For each bot, plays `--episodes` seeded episodes (the first episode of each
arena, the runner's paired starts) with each intent squad of
`jaxarena.policies` and with squads that switch tactic by the bot's *true*
mode (read from the state every decision period by `true_mode_tags`; an
oracle, not a player). Prints one JSON line per cell: NPC win rate with its
95% Wilson interval, and the mean intent measures of `jaxarena.analysis.intents`
(coverage, damage rate, flank share, far share; distance and lateral share) for what a scripted squad
reaches on the tag-response matrix's columns.

    python benchmarks/scenario_probe.py --scenario headroom --episodes 512 [--seeds 0 1]
    python benchmarks/scenario_probe.py --scenario paper --episodes 256 --squads FLANK "SIDES 5-7.5u" "SIDES 6-11u"
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

if "--keep-xla-flags" not in sys.argv:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax
import numpy as np

import jaxarena
from jaxarena.algorithms.evaluation import wilson_interval
from jaxarena.analysis.intents import EXTRA_MEASURES, INTENTS, MEASURES, episode_measures
from jaxarena.names import NPC_WIN
from jaxarena.policies import (
    flank_policy,
    hybrid_policy,
    kite_policy,
    make_side_keeper,
    rush_policy,
    surround_policy,
    tag_switch_policy,
    true_mode_tags,
)
from jaxarena.runner import make_runner

SQUADS = {
    "RUSH": (rush_policy, 0),
    "KITE": (kite_policy, 0),
    "SURROUND": (surround_policy, 0),
    "FLANK": (flank_policy, 0),
    # Flank by the bot's facing, in two distance bands (docs/history/obeying-tags.md).
    "SIDES 5-7.5u": (make_side_keeper(5.0, 7.5), 0),
    "SIDES 6-11u": (make_side_keeper(6.0, 11.0), 0),
    "HYBRID": (hybrid_policy, 0),
    "RUSH>KITE by mode": (tag_switch_policy(rush_policy, kite_policy), "mode"),
    "HYBRID>KITE by mode": (tag_switch_policy(hybrid_policy, kite_policy), "mode"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="headroom")
    parser.add_argument("--episodes", type=int, default=512)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--bots", nargs="+", default=list(jaxarena.BOT_TYPES))
    parser.add_argument("--squads", nargs="+", default=list(SQUADS))
    parser.add_argument("--decision-period-s", type=float, default=None, help="default: the scenario's (5 s)")
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="EnvParams overrides on top")
    parser.add_argument("--keep-xla-flags", action="store_true")
    args = parser.parse_args()
    overrides = {} if args.decision_period_s is None else {"decision_period_s": args.decision_period_s}
    overrides.update({k: float(v) for k, v in (item.split("=", 1) for item in args.set)})
    # The facing is appended to the paper's observation, which the side keepers read; the others ignore it.
    env, params = jaxarena.make("ArenaFacing-v0", scenario=args.scenario, **overrides)
    for name in args.squads:
        policy, source = SQUADS[name]
        tags = true_mode_tags() if source == "mode" else source
        t0 = time.perf_counter()
        # Bot type is traced: one compile per squad.
        run = make_runner(env, params, policy, tags, args.episodes, accumulators={"intents": INTENTS})
        for bot in args.bots:
            for seed in args.seeds:
                result = run(None, params.replace(bot_type=jaxarena.bot_index(bot)), jax.random.key(seed))
                wins = int(np.sum(np.asarray(result.outcome) == NPC_WIN))
                lo, hi = wilson_interval(wins, args.episodes)
                measures = episode_measures(result.extras["intents"], params.dt)
                row = {
                    "scenario": args.scenario,
                    "overrides": overrides,
                    "squad": name,
                    "bot": bot,
                    "seed": seed,
                    "episodes": args.episodes,
                    "npc_win": round(wins / args.episodes, 4),
                    "wilson95": [round(lo, 4), round(hi, 4)],
                    "mean_duration_s": round(float(np.mean(result.duration_s)), 2),
                    **{m: round(float(np.mean(measures[m])), 3) for m in (*MEASURES, *EXTRA_MEASURES)},
                    "wall_s": round(time.perf_counter() - t0, 1),
                }
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
