"""How fast the RL selector trains: decisions/s and env-steps/s of its PPO on the decision MDP.

    python benchmarks/selector_training.py                  # B-experts, 128 lanes, 20 updates
    python benchmarks/selector_training.py --num-envs 256 --updates 40

Times jitted PPO updates of `jaxarena.selector` (the decision env playing
each 5 s period with the frozen squad, the LLM table lookups, the attention
network's updates), and, in the same run, the one episode runner playing the
same squad with a fixed tag on as many lanes for as many ticks: the ratio is
what the decision-level wrapper and the learning cost over plain play.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax

from jaxarena.algorithms.ppo_core import make_core_trainer
from jaxarena.key_streams import selector_key
from jaxarena.runner import make_runner
from jaxarena.selector.train import SelectorConfig, build
from jaxarena.tag_sources import fixed_tags


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--squad", default="B-experts")
    p.add_argument("--num-envs", type=int, default=128)
    p.add_argument("--num-steps", type=int, default=8)
    p.add_argument("--updates", type=int, default=20)
    p.add_argument("--style", default="iterative")
    args = p.parse_args()

    config = SelectorConfig(
        squad=args.squad, num_envs=args.num_envs, num_steps=args.num_steps, learned_slots=0, style=args.style
    )
    env, network, (policy, squad_params), population = build(config)
    trainer = make_core_trainer(env, network, config.core())
    run_updates = jax.jit(trainer.run_updates, static_argnums=1)
    state = trainer.init(selector_key(0))  # where jaxarena-train-selector's seed 0 starts
    t0 = time.perf_counter()
    state, _ = jax.block_until_ready(run_updates(state, args.updates))  # compile + warm
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    state, _ = jax.block_until_ready(run_updates(state, args.updates))
    train_s = time.perf_counter() - t0
    decisions = args.updates * args.num_envs * args.num_steps
    ticks = decisions * env.steps_per_period

    # The same number of ticks, played by the runner from reset with a fixed tag.
    params = jax.tree.map(lambda x: x[0], population.params)
    periods = decisions // args.num_envs
    play = make_runner(env.arena, params, policy, fixed_tags(1), args.num_envs, num_periods=min(periods, 24))
    repeats = max(1, periods // 24)
    jax.block_until_ready(play(squad_params, params, jax.random.PRNGKey(1)))
    t0 = time.perf_counter()
    for i in range(repeats):
        jax.block_until_ready(play(squad_params, params, jax.random.PRNGKey(2 + i)))
    play_s = (time.perf_counter() - t0) * periods / (repeats * min(periods, 24))
    print(
        json.dumps(
            {
                "bench": "selector_training",
                "squad": args.squad,
                "num_envs": args.num_envs,
                "decisions": decisions,
                "compile_s": round(compile_s, 1),
                "decisions_per_s": round(decisions / train_s, 1),
                "env_steps_per_s": round(ticks / train_s),
                "runner_env_steps_per_s": round(ticks / play_s),
                "training_over_play": round(train_s / play_s, 2),
                "load_avg_1m": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
