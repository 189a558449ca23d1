"""The arena against JaxMARL's SMAX, measured alternately in one window: env-steps/s and their ratio.

    pip install --no-deps jaxmarl==0.2.0 jaxtyping wadler-lindig   # not a jaxarena dependency
    python benchmarks/smax_ratio.py [--n 16384] [--steps 200] [--rounds 3] [--map 5v1]

Both sides run the same harness: a jitted `lax.scan` of the batched, auto-resetting `step` over
`--n` environments, actions uniform over each env's action count from the same counter hash as
`env_throughput.py`, compiled first, then timed with `block_until_ready`. SMAX plays
`HeuristicEnemySMAX` (its scripted enemy, as our bot is scripted) on `--map`: "5v1", five
marines against one (the arena's 5-vs-1), or any SMAX map name ("3m", "5m_vs_6m", ...). Rounds
alternate which env runs first, so a noisy machine slows both alike; the ratios are medians of the
per-round ratios.

The arena runs both ways: `jaxarena.BatchedArena` ("arena", the summary's `env_step_ratio_median`
and `game_s_ratio_median`), its fastest step, and the plain `jax.vmap(env.step)` ("arena_vmap",
`vmap_env_step_ratio_median`).

Two units, because the envs' steps differ: an env-step is what an RL loop counts (the arena's is
one 0.1 s tick; SMAX's is 8 world sub-steps of 1/16 s, 0.5 s of game time), and game-seconds per
second compares the simulation itself. `--keep-xla-flags` leaves XLA's YNNPACK fusions on for both
(off by default, as in `env_throughput.py`; the arena is faster with them off). One JSON line per
round, then a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

if "--keep-xla-flags" not in sys.argv:  # as env_throughput.py: the same flags for both envs
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax
import jax.numpy as jnp

import jaxarena

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from env_throughput import batched_reset_and_roll, reset_and_roll, uniform_actions  # noqa: E402


def arena_rollout(n: int, steps: int, batched: bool):
    env, params = jaxarena.make("Arena-v0", bot="balanced")
    roll = batched_reset_and_roll if batched else reset_and_roll
    return roll(env, params, n, steps), float(params.dt)


def smax_rollout(n: int, steps: int, map_name: str):
    from jaxmarl import make
    from jaxmarl.environments.smax import Scenario, map_name_to_scenario

    if map_name == "5v1":
        scenario = Scenario(jnp.zeros((6,), jnp.uint8), 5, 1, False, False)
    else:
        scenario = map_name_to_scenario(map_name)
    env = make("HeuristicEnemySMAX", scenario=scenario)
    agents = env.agents
    num_actions = env.action_space(agents[0]).n
    step = jax.vmap(env.step)

    def run(key):
        keys = jax.random.split(key, n)
        _, state = jax.vmap(env.reset)(keys)

        def body(state, t):
            acts = uniform_actions(t, len(agents) * n, num_actions).reshape(len(agents), n)
            obs, state, reward, done, _ = step(keys, state, {a: acts[i] for i, a in enumerate(agents)})
            used = sum(jnp.sum(obs[a]) + jnp.sum(reward[a]) + jnp.sum(done[a]) for a in agents)
            return state, used

        return jax.lax.scan(body, state, jnp.arange(steps))[1]

    return jax.jit(run), env.world_steps_per_env_step * env.time_per_step


def timed(fn, key) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn(key))
    return time.perf_counter() - t


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16384, help="environments per batch")
    p.add_argument("--steps", type=int, default=200, help="steps per timed rollout")
    p.add_argument("--rounds", type=int, default=3, help="alternating arena/SMAX rounds")
    p.add_argument("--map", default="5v1", help='SMAX scenario: "5v1" or a SMAX map name')
    p.add_argument("--keep-xla-flags", action="store_true", help="leave XLA's YNNPACK fusions on for both")
    args = p.parse_args(argv)
    try:
        import jaxmarl  # noqa: F401
    except ImportError as exc:
        raise SystemExit(f"needs JaxMARL ({exc}); see this script's docstring for the install line") from None

    key = jax.random.key(0)
    envs = {
        "arena": arena_rollout(args.n, args.steps, batched=True),
        "arena_vmap": arena_rollout(args.n, args.steps, batched=False),
        "smax": smax_rollout(args.n, args.steps, args.map),
    }
    first_s = {name: timed(fn, key) for name, (fn, _) in envs.items()}  # compile + one run
    step_ratios, game_ratios, vmap_ratios = [], [], []
    for r in range(args.rounds):
        order = list(envs) if r % 2 == 0 else list(envs)[::-1]  # alternate which runs first
        rate = {name: args.n * args.steps / timed(envs[name][0], jax.random.fold_in(key, r + 1)) for name in order}
        game = {name: rate[name] * envs[name][1] for name in envs}
        step_ratios.append(rate["arena"] / rate["smax"])
        vmap_ratios.append(rate["arena_vmap"] / rate["smax"])
        game_ratios.append(game["arena"] / game["smax"])
        line = {"bench": "smax_ratio", "round": r, "n": args.n, "map": args.map}
        line |= {f"{k}_env_steps_per_s": round(v) for k, v in rate.items()}
        line |= {f"{k}_game_s_per_s": round(v) for k, v in game.items()}
        line |= {"env_step_ratio": round(step_ratios[-1], 2), "game_s_ratio": round(game_ratios[-1], 2)}
        print(json.dumps(line), flush=True)
    summary = {"bench": "smax_ratio", "n": args.n, "steps": args.steps, "map": args.map}
    summary |= {"step_s": {k: v for k, (_, v) in envs.items()}, "ynnpack": args.keep_xla_flags}
    summary |= {
        "env_step_ratio_median": round(statistics.median(step_ratios), 2),
        "game_s_ratio_median": round(statistics.median(game_ratios), 2),
        "vmap_env_step_ratio_median": round(statistics.median(vmap_ratios), 2),
    }
    summary |= {"first_call_s": {k: round(v, 1) for k, v in first_s.items()}, "devices": str(jax.devices())}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
