"""Arena throughput: a jitted lax.scan of the vmapped step, random actions.

Prints one JSON line per batch size N, with env-steps/s (one 0.1 s tick of
the whole 5-vs-1 arena) and agent-steps/s (x5), compile time reported
separately. Random actions come from the same cheap counter hash the arena
uses for spawns, so the figure measures the arena, not threefry.

    python benchmarks/env_throughput.py [--sizes 1 64 1024 4096 16384] [--steps 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

# XLA's YNNPACK fusions can slow many small reductions on CPU; this process
# turns them off unless --keep-xla-flags (compare both), never the library.
if "--keep-xla-flags" not in sys.argv:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax
import jax.numpy as jnp

import jaxarena
from jaxarena.spawn import _mix32


def uniform_actions(counter: jax.Array, n_units: int, num_actions: int) -> jax.Array:
    """(n_units,) actions in 0..num_actions-1 from a counter hash (uniform enough to exercise every rule)."""
    ids = jnp.arange(n_units, dtype=jnp.uint32) + counter.astype(jnp.uint32) * jnp.uint32(2654435761)
    return (_mix32(ids) % jnp.uint32(num_actions)).astype(jnp.int32)


def random_actions(counter: jax.Array, n_envs: int) -> jax.Array:
    """(n_envs, 5) arena actions in 0..5 (`uniform_actions`)."""
    n_npcs = jaxarena.NUM_NPCS
    return uniform_actions(counter, n_envs * n_npcs, jaxarena.NUM_ACTIONS).reshape(n_envs, n_npcs)


def reset_and_roll(env, params, n: int, steps: int):
    """Jitted key -> per-tick checksums: `n` arenas reset from `key`, then `steps` auto-resetting ticks.

    The harness `smax_ratio.py` runs for both envs and `env_roofline.py` costs; the reset is inside
    the program, so it runs any env with gymnax's reset/step signature.
    """
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def run(key):
        keys = jax.random.split(key, n)
        _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)

        def body(state, t):
            obs, state, reward, done, info = step(keys, state, random_actions(t, n), params)
            # Consume what a learner reads, so XLA cannot drop it.
            return state, jnp.sum(obs) + jnp.sum(info["final_obs"]) + jnp.sum(reward) + jnp.sum(done)

        return jax.lax.scan(body, state, jnp.arange(steps))[1]

    return jax.jit(run)


def batched_reset_and_roll(env, params, n: int, steps: int):
    """`reset_and_roll` with `jaxarena.BatchedArena` in place of the vmapped step (the same outputs consumed)."""
    batched = jaxarena.BatchedArena(env)

    def run(key):
        keys = jax.random.split(key, n)
        _, state = batched.reset(keys, params)

        def body(state, t):
            obs, state, reward, done, info = batched.step(keys, state, random_actions(t, n), params)
            return state, jnp.sum(obs) + jnp.sum(info["final_obs"]) + jnp.sum(reward) + jnp.sum(done)

        return jax.lax.scan(body, state, jnp.arange(steps))[1]

    return jax.jit(run)


def make_rollout(env, params, n_envs: int, n_steps: int):
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def rollout(key, state):
        keys = jax.random.split(key, n_envs)

        def body(carry, i):
            state, total = carry
            actions = random_actions(i, n_envs)
            obs, state, reward, done, info = step(keys, state, actions, params)
            # Consume everything a PPO learner reads (obs, reward, done and
            # final_obs for the truncation bootstrap) so XLA can't drop it.
            used = jnp.sum(obs) + jnp.sum(info["final_obs"]) + jnp.sum(reward) + jnp.sum(done)
            return (state, total + used), None

        (state, total), _ = jax.lax.scan(body, (state, jnp.float32(0.0)), jnp.arange(n_steps))
        return state, total

    return jax.jit(rollout)


def measure(n_envs: int, n_steps: int, repeats: int, bot: str) -> dict:
    env, params = jaxarena.make("Arena-v0", bot=bot)
    key = jax.random.key(0)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, n_envs), params)
    rollout = make_rollout(env, params, n_envs, n_steps)
    t0 = time.perf_counter()
    compiled = rollout.lower(key, state).compile()
    compile_s = time.perf_counter() - t0
    hlo_ops = sum(1 for line in compiled.as_text().splitlines() if " = " in line)
    jax.block_until_ready(compiled(key, state))  # warm-up
    best, best_cpu = float("inf"), float("inf")
    for r in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        jax.block_until_ready(compiled(jax.random.key(r + 1), state))
        best = min(best, time.perf_counter() - t0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    env_steps = n_envs * n_steps / best
    return {
        "bench": "env_throughput",
        "bot": bot,
        "n_envs": n_envs,
        "n_steps": n_steps,
        "env_steps_per_s": round(env_steps),
        "agent_steps_per_s": round(env_steps * jaxarena.NUM_NPCS),
        "run_s": round(best, 4),
        # CPU seconds this process used: on a shared, busy machine wall time
        # includes waiting for other processes; this does not.
        "cpu_s": round(best_cpu, 4),
        "env_steps_per_cpu_s": round(n_envs * n_steps / best_cpu),
        "compile_s": round(compile_s, 2),
        "hlo_ops": hlo_ops,
        "backend": jax.default_backend(),
        "devices": jax.device_count(),
        "cpu_count": os.cpu_count(),
        "xla_flags": os.environ.get("XLA_FLAGS", ""),
        "machine": platform.machine(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 64, 1024, 4096, 16384])
    parser.add_argument("--steps", type=int, default=1000, help="ticks per timed rollout")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bot", default="balanced", choices=jaxarena.BOT_TYPES)
    parser.add_argument("--keep-xla-flags", action="store_true", help="don't disable YNNPACK fusions")
    args = parser.parse_args()
    results = []
    for n in args.sizes:
        # Fewer ticks for the big batches keep the run short; the rate is per tick.
        steps = max(100, args.steps * 1024 // n) if n > 1024 else args.steps
        result = measure(n, steps, args.repeats, args.bot)
        results.append(result)
        print(json.dumps(result), flush=True)
    best = max(results, key=lambda r: r["env_steps_per_s"])
    small = results[0]
    print(
        json.dumps(
            {
                "bench": "env_throughput_summary",
                "best_n_envs": best["n_envs"],
                "best_env_steps_per_s": best["env_steps_per_s"],
                "speedup_vs_smallest_n": round(best["env_steps_per_s"] / small["env_steps_per_s"], 1),
                "max_compile_s": max(r["compile_s"] for r in results),
            }
        )
    )


if __name__ == "__main__":
    main()
