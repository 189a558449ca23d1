"""How fast the counterfactual oracle prices decision states (`jaxarena.analysis.oracle`).

    python benchmarks/oracle_throughput.py                       # B-paper, 256 states, K = 16
    python benchmarks/oracle_throughput.py --states 512 --rollouts 8 --horizon 2

The states are real B decision states: B plays `--episodes` episodes against
each bot with the tag held at Aggressive (what the embedded LLM picks) and
the runner records the state of every decision; `--states` of them, drawn
evenly over bots and periods, are priced (4 tags x K playouts each, to the
episode's end or `--horizon` periods). Prints one JSON line per bot with
states/s and playouts/s, and the same-run ratio to plain rollouts of B from
reset on the same number of lanes (the oracle's cost relative to evaluation),
then an estimate for pricing every B decision of a default protocol run
(~3,500 states).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax
import numpy as np

import jaxarena
from jaxarena.algorithms.checkpoint import load_policy
from jaxarena.analysis.oracle import make_pricer
from jaxarena.names import BOT_TYPES
from jaxarena.protocol.policies import policy_env_id
from jaxarena.runner import make_runner
from jaxarena.tag_sources import fixed_tags


def recorded_states(env, params, policy, policy_params, episodes, count, seed):
    run = make_runner(env, params, policy, fixed_tags(1), episodes, record_states=True)
    result = run(policy_params, params, jax.random.key(seed))
    periods, lanes = np.nonzero(np.asarray(result.decision_active))
    pick = np.linspace(0, len(periods) - 1, count).round().astype(int)
    return jax.tree.map(lambda x: x[periods[pick], lanes[pick]], result.decision_states)


def timed(fn, *args):
    jax.block_until_ready(fn(*args))  # compile and warm
    t = time.perf_counter()
    jax.block_until_ready(fn(*args))
    return time.perf_counter() - t


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--policy", default="B-paper", help="the squad policy priced (docs/oracle.md measured B-paper)")
    p.add_argument("--states", type=int, default=256)
    p.add_argument("--rollouts", type=int, default=16)
    p.add_argument("--horizon", type=int, default=None, help="decision periods per playout (default: to the end)")
    p.add_argument("--episodes", type=int, default=64)
    p.add_argument("--bots", nargs="+", default=list(BOT_TYPES), choices=BOT_TYPES)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    policy, policy_params = load_policy(args.policy)
    rates = []
    for bot in args.bots:
        env, params = jaxarena.make(policy_env_id(policy), bot=bot)
        states = recorded_states(env, params, policy, policy_params, args.episodes, args.states, args.seed)
        price = make_pricer(env, params, policy, args.states, rollouts=args.rollouts, horizon_periods=args.horizon)
        key = jax.random.key(args.seed + 1)
        seconds = timed(price, policy_params, params, states, key)
        lanes = args.states * 4 * args.rollouts
        plain = make_runner(env, params, policy, fixed_tags(1), lanes, num_periods=args.horizon)
        plain_s = timed(plain, policy_params, params, key)
        values = price(policy_params, params, states, key)
        row = {
            "bench": "oracle_throughput",
            "bot": bot,
            "states": args.states,
            "rollouts": args.rollouts,
            "horizon_periods": args.horizon,
            "seconds": round(seconds, 3),
            "states_per_s": round(args.states / seconds, 1),
            "playouts_per_s": round(lanes / seconds, 1),
            "plain_rollouts_from_reset_s": round(plain_s, 3),
            "oracle_over_plain": round(seconds / plain_s, 2),
            "mean_best_win": round(float(np.mean(np.max(np.asarray(values.win), axis=1))), 3),
        }
        rates.append(row["states_per_s"])
        print(json.dumps(row), flush=True)
    protocol_states = 3500
    print(
        json.dumps(
            {
                "bench": "oracle_throughput",
                "summary": "protocol_estimate",
                "states": protocol_states,
                "rollouts": args.rollouts,
                "estimated_minutes": round(protocol_states / float(np.mean(rates)) / 60, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
