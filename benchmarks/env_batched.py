"""`BatchedArena.step` against `jax.vmap(env.step)`: agreement, then env-steps/s measured alternately.

`BatchedArena` plays the arena's rules over arrays of arenas, the batch as every array's last
axis, where the vmapped step runs each fused loop over one arena's short axes (docs/benchmarks.md,
"The step's roofline"). This script

* compares both tick by tick from one reset (`--check-ticks`): the first tick that differs in
  any bit, the largest difference of the state and the outputs over all the ticks, and whether
  every tick's outcomes agree;
* times both in one process, alternating rounds, on the harness of `env_throughput.py` (a jitted
  `lax.scan`, random actions, everything a learner reads consumed);
* with `--outcome-steps T`, plays both T ticks from the same keys and counts the episodes' outcomes.

    python benchmarks/env_batched.py [--n 16384] [--steps 200] [--rounds 4] [--bot balanced] [--outcome-steps 1200]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from env_throughput import random_actions  # noqa: E402

import jaxarena  # noqa: E402
from jaxarena.batched import BatchedArena, batch_first, batch_last  # noqa: E402


def programs(env, params, n: int, steps: int) -> dict:
    """Jitted key -> (final state batch-first, per-tick checksums, outcome counts), for each step."""
    batched = BatchedArena(env)
    vmapped = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def make(step, layout):
        def run(key):
            keys = jax.random.split(key, n)
            _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
            state = layout(state)

            def body(carry, t):
                state, counts = carry
                obs, state, reward, done, info = step(keys, state, random_actions(t, n), params)
                counts = counts + jnp.stack([jnp.sum(info["outcome"] == k) for k in (1, 2, 3)])
                total = jnp.sum(obs) + jnp.sum(info["final_obs"]) + jnp.sum(reward) + jnp.sum(done)
                return (state, counts), total

            (state, counts), sums = jax.lax.scan(body, (state, jnp.zeros(3, jnp.int32)), jnp.arange(steps))
            return state, sums, counts

        return jax.jit(run)

    return {"vmap": make(vmapped, lambda s: s), "batched": make(batched.step, batch_last)}


def compare_ticks(env, params, n: int, ticks: int, key) -> dict:
    """From one reset: the first tick whose state or outputs differ in any bit, and the largest difference over all."""
    keys = jax.random.split(key, n)
    _, ref = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    mine = batch_last(ref)
    ref_step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    my_step = jax.jit(BatchedArena(env).step)
    first_diff, worst, same_outcomes = None, 0.0, True
    for t in range(ticks):
        actions = random_actions(jnp.int32(t), n)
        a, b = ref_step(keys, ref, actions, params), my_step(keys, mine, actions, params)
        ref, mine = a[1], b[1]
        la = [np.asarray(x) for x in jax.tree.leaves((a[0], a[1], a[2], a[3], a[4]))]
        lb = [np.asarray(x) for x in jax.tree.leaves((b[0], batch_first(b[1]), b[2], b[3], b[4]))]
        if first_diff is None and not all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True)):
            first_diff = t
        same_outcomes &= bool(np.array_equal(np.asarray(a[4]["outcome"]), np.asarray(b[4]["outcome"])))
        for x, y in zip(la, lb, strict=True):
            x, y = x.astype(np.float64), y.astype(np.float64)
            both = np.isfinite(x) & np.isfinite(y)
            worst = max(worst, float(np.max(np.abs(x[both] - y[both]), initial=0.0)))
    return {"ticks": ticks, "first_differing_tick": first_diff, "max_abs_diff": worst, "same_outcomes": same_outcomes}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16_384, help="arenas")
    p.add_argument("--steps", type=int, default=200, help="ticks per timed call")
    p.add_argument("--rounds", type=int, default=4, help="timed calls per step (median)")
    p.add_argument("--bot", default="balanced", choices=("aggressive", "evasive", "balanced"))
    p.add_argument("--check-ticks", type=int, default=40, help="ticks compared one by one on 1,024 arenas (0: skip)")
    p.add_argument("--outcome-steps", type=int, default=0, help="ticks played for the outcome counts (0: skip)")
    args = p.parse_args(argv)
    if min(args.n, args.steps, args.rounds) < 1:
        p.error("--n, --steps and --rounds must be at least 1")
    env, params = jaxarena.make("Arena-v0", bot=args.bot)
    key = jax.random.key(0)
    if args.check_ticks:
        print(json.dumps({"check": args.bot, **compare_ticks(env, params, 1024, args.check_ticks, key)}), flush=True)
    progs = programs(env, params, args.n, args.steps)
    for name, fn in progs.items():
        began = time.perf_counter()
        jax.block_until_ready(fn(key))
        print(json.dumps({"step": name, "compile_and_first_s": round(time.perf_counter() - began, 2)}), flush=True)
    times = {name: [] for name in progs}
    for _ in range(args.rounds):  # alternate, so load hits both alike
        for name, fn in progs.items():
            cpu, wall = time.process_time(), time.perf_counter()
            jax.block_until_ready(fn(key))
            times[name].append((time.process_time() - cpu, time.perf_counter() - wall))
    med = {name: [float(np.median([t[i] for t in ts])) for i in (0, 1)] for name, ts in times.items()}
    for name, (cpu, wall) in med.items():
        rate = round(args.n * args.steps / wall)
        print(json.dumps({"step": name, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "env_steps_per_s": rate}))
    summary = {
        "summary": "batched",
        "bot": args.bot,
        "batched_over_vmap": round(med["vmap"][0] / med["batched"][0], 3),  # CPU time of the process
        "batched_over_vmap_wall": round(med["vmap"][1] / med["batched"][1], 3),
        "load_average": round(os.getloadavg()[0], 2),
    }
    if args.outcome_steps:
        runs = programs(env, params, args.n, args.outcome_steps)
        counts = {name: [int(c) for c in fn(jax.random.key(1))[2]] for name, fn in runs.items()}
        summary["outcomes_npc_bot_timeout"] = counts
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
