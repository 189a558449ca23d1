"""Does the arena step run faster with the batch as the minor axis, or under other XLA:CPU flags?

The step's roofline (`env_roofline.py`) found it bound by short per-arena loops: under `vmap` the
batch is every array's major axis. This script tries the two cheapest ways to change that without
touching a rule, each checked bit for bit (the final state and every tick's checksum) against the plain step:

* **layout**: the same `vmap`, with the state, the actions and the observations batch-last
  (`in_axes=-1`), timed alternately with the batch-first program in one process;
* **flags** (`--flag-sets`): XLA:CPU options that keep float semantics, each compiled in a fresh
  worker process (flags are read once per process), beside a worker with none.

Prints one JSON line per measurement and a summary line with `minor_over_major` (< 1: slower).

    python benchmarks/env_layout.py [--n 16384] [--steps 200] [--rounds 4] [--flag-sets]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

FLAG_SETS = (
    "",
    "--xla_cpu_use_thunk_runtime=false",
    "--xla_cpu_prefer_vector_width=128",
    "--xla_cpu_prefer_vector_width=512",
    "--xla_cpu_enable_concurrency_optimized_scheduler=true",
    "--xla_cpu_use_fusion_emitters=false",
)


def _set_flags(extra: str) -> None:
    # As the other env scripts: YNNPACK's fusions off for this process (docs/benchmarks.md), after the user's flags.
    given = os.environ.get("XLA_FLAGS", "")
    os.environ["XLA_FLAGS"] = f"{given} --xla_cpu_experimental_ynn_fusion_type= {extra}".strip()


def make_roll(n: int, steps: int, minor: bool):
    """Jitted key -> (final state, per-tick checksums): `n` balanced-bot arenas, random actions."""
    import jax
    import jax.numpy as jnp
    from env_throughput import random_actions

    import jaxarena

    env, params = jaxarena.make("Arena-v0", bot="balanced")
    ax = -1 if minor else 0
    step = jax.vmap(env.step, in_axes=(0, ax, ax, None), out_axes=(ax, ax, 0, 0, ax))

    def run(key):
        keys = jax.random.split(key, n)
        _, state = jax.vmap(env.reset, in_axes=(0, None), out_axes=(0, ax))(keys, params)

        def body(state, t):
            actions = random_actions(t, n)
            obs, state, reward, done, info = step(keys, state, actions.T if minor else actions, params)
            return state, jnp.sum(obs) + jnp.sum(info["final_obs"]) + jnp.sum(reward) + jnp.sum(done)

        return jax.lax.scan(body, state, jnp.arange(steps))

    return jax.jit(run)


def run_digest(out, minor: bool) -> dict:
    """sha256 of a run's final state (batch-first whatever the layout) and, apart, of its per-tick checksums.

    Apart because the checksums are the harness's sums over the whole batch, whose float order a flag
    may change where the step's own arithmetic is untouched.
    """
    import jax
    import numpy as np

    state, sums = out
    leaves = [np.moveaxis(np.asarray(x), -1, 0) if minor else np.asarray(x) for x in jax.tree.leaves(state)]

    def sha(arrays) -> str:
        return hashlib.sha256(b"".join(x.tobytes() for x in arrays)).hexdigest()[:16]

    return {"state": sha(leaves), "checksums": sha([np.asarray(sums)])}


def timed(fn, key) -> tuple[float, float]:
    """(CPU seconds of this process, wall seconds) of one call."""
    import jax

    cpu, wall = time.process_time(), time.perf_counter()
    jax.block_until_ready(fn(key))
    return time.process_time() - cpu, time.perf_counter() - wall


def compare_layouts(args) -> None:
    import jax
    import numpy as np

    key = jax.random.key(0)
    programs = {"major": make_roll(args.n, args.steps, False), "minor": make_roll(args.n, args.steps, True)}
    digests = {}
    for name, fn in programs.items():
        began = time.perf_counter()
        digests[name] = run_digest(jax.block_until_ready(fn(key)), name == "minor")
        print(json.dumps({"layout": name, "compile_and_first_s": round(time.perf_counter() - began, 2)}), flush=True)
    times = {name: [] for name in programs}
    for _ in range(args.rounds):  # alternate, so load hits both alike
        for name, fn in programs.items():
            times[name].append(timed(fn, key))
    medians = {}
    for name, ts in times.items():
        cpu, wall = (float(np.median([t[i] for t in ts])) for i in (0, 1))
        medians[name] = (cpu, wall)
        rate = args.n * args.steps / wall
        row = {"layout": name, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3), "env_steps_per_s": round(rate)}
        print(json.dumps(row))
    print(
        json.dumps(
            {
                "summary": "layout",
                "minor_over_major": round(medians["major"][0] / medians["minor"][0], 3),
                "minor_over_major_wall": round(medians["major"][1] / medians["minor"][1], 3),
                "bit_identical": digests["major"] == digests["minor"],  # the state and every tick's checksum
                "load_average": os.getloadavg()[0],
            }
        ),
        flush=True,
    )


def flag_worker(args) -> None:
    """One flag set in this process: its final state's digest and median CPU and wall time."""
    import jax
    import numpy as np

    fn, key = make_roll(args.n, args.steps, False), jax.random.key(0)
    digest = run_digest(jax.block_until_ready(fn(key)), False)
    ts = [timed(fn, key) for _ in range(args.rounds)]
    cpu, wall = (float(np.median([t[i] for t in ts])) for i in (0, 1))
    print(json.dumps({"flags": args.worker_flags, "digest": digest, "cpu_s": cpu, "wall_s": wall}))


def compare_flags(args) -> None:
    rows = []
    for flags in (*FLAG_SETS, ""):  # no flags first and last: the spread of two identical workers
        # "--worker-flags=VALUE": a value that starts with "--" would read as an option.
        cmd = [sys.executable, __file__, "--worker", f"--worker-flags={flags}", "--n", str(args.n)]
        cmd += ["--steps", str(args.steps), "--rounds", str(args.rounds)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
        row = json.loads(lines[-1]) if lines else {"flags": flags, "error": out.stderr.strip().splitlines()[-1:]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    base = [r for r in rows if r.get("flags") == "" and "cpu_s" in r]
    if not base:
        raise SystemExit("env_layout.py: the workers without flags failed; see their error lines above")
    base_cpu = sum(r["cpu_s"] for r in base) / len(base)
    timed_rows = [r for r in rows if r["flags"] and "cpu_s" in r]
    print(
        json.dumps(
            {
                "summary": "flags",
                "cpu_speedup": {r["flags"]: round(base_cpu / r["cpu_s"], 3) for r in timed_rows},
                "same_state": {r["flags"]: r["digest"]["state"] == base[0]["digest"]["state"] for r in timed_rows},
                "same_checksums": {
                    r["flags"]: r["digest"]["checksums"] == base[0]["digest"]["checksums"] for r in timed_rows
                },
                "no_flag_spread": round(max(r["cpu_s"] for r in base) / min(r["cpu_s"] for r in base), 3),
            }
        )
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16_384, help="arenas")
    p.add_argument("--steps", type=int, default=200, help="ticks per timed call")
    p.add_argument("--rounds", type=int, default=4, help="timed calls per program (median)")
    p.add_argument("--flag-sets", action="store_true", help="also time each XLA flag set in its own worker")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--worker-flags", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if min(args.n, args.steps, args.rounds) < 1:
        p.error("--n, --steps and --rounds must be at least 1")
    _set_flags(args.worker_flags if args.worker else "")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    if args.worker:
        flag_worker(args)
        return 0
    compare_layouts(args)
    if args.flag_sets:
        compare_flags(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
