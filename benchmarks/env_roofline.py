"""The arena step's roofline: XLA's flops and bytes per env-step against this machine's measured peaks.

    python benchmarks/env_roofline.py [--n 16384] [--steps 100] [--rounds 3] [--baseline-ref GITREF]

1. Cost: the jitted, vmapped `step` over `--n` arenas is compiled once and its
   `cost_analysis()` (flops, bytes accessed) divided by `--n` gives the cost of
   one env-step (one 0.1 s tick of a 5-vs-1 arena, with its auto-reset and both
   observations a learner reads).
2. Peaks, in the same run: a large float32 matmul (flops/s) and a large
   elementwise copy, x + 1 (bytes/s: one read and one write per element).
3. Rate: env-steps/s of the same harness as `smax_ratio.py` (a jitted `lax.scan`
   of the vmapped step, random actions, everything a learner reads consumed).
   `flops_fraction` and `bytes_fraction` are the step's achieved flops/s and
   bytes/s over the peaks.
4. Profile, by ablation: the step with one part swapped for a cheap stand-in of
   the same shapes (bots, collisions, orbs, observation, reward, the auto-reset's
   draw), timed alternately with the full step; a part's share is the time it
   saves.
5. `--batched`: the same for `jaxarena.BatchedArena.step` (the arena's rules over arrays of
   arenas, batch last), without the profile, whose stand-ins replace the vmapped step's parts.
6. `--baseline-ref GITREF`: that commit's arena against this tree's, each in its
   own worker process (the commit exported with `git archive`, first on the
   worker's PYTHONPATH; each worker prints which `jaxarena` it imported), timed
   in alternating rounds by the same harness, so load hits both alike.

One JSON line per measurement, then a summary line with the load average.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if "--keep-xla-flags" not in sys.argv:  # as env_throughput.py: the arena is faster without YNNPACK fusions
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import jax
import jax.numpy as jnp

import jaxarena

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from env_throughput import batched_reset_and_roll, reset_and_roll  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_arena(bot: str = "balanced"):
    return jaxarena.make("Arena-v0", bot=bot)


def rollout_fn(n: int, steps: int, bot: str = "balanced", batched: bool = False):
    """Jitted key -> checksum: `steps` ticks of `n` auto-resetting arenas, as `smax_ratio.py` runs them."""
    return (batched_reset_and_roll if batched else reset_and_roll)(*make_arena(bot), n, steps)


def step_cost(n: int, bot: str = "balanced", batched: bool = False) -> dict:
    """XLA's cost analysis of one vmapped (or batched) step over `n` arenas, per env-step."""
    env, params = make_arena(bot)
    keys = jax.random.split(jax.random.key(0), n)
    _, state = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    actions = jnp.zeros((n, jaxarena.NUM_NPCS), jnp.int32)
    step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    if batched:
        step, state = jaxarena.BatchedArena(env).step, jaxarena.batched.batch_last(state)

    def one(keys, state, actions):
        obs, state, reward, done, info = step(keys, state, actions, params)
        return obs, state, reward, done, info["final_obs"]

    cost = jax.jit(one).lower(keys, state, actions).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, (list, tuple)) else cost
    return {
        "flops_per_step": cost.get("flops", 0.0) / n,
        "bytes_per_step": cost.get("bytes accessed", 0.0) / n,
        "transcendentals_per_step": cost.get("transcendentals", 0.0) / n,
    }


def best_time(fn, *args, repeats: int = 3) -> float:
    jax.block_until_ready(fn(*args))  # compile and warm up
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best


def peak_flops(size: int = 2048) -> float:
    """float32 matmul flops/s: 2 size^3 per product."""
    a = jnp.ones((size, size), jnp.float32)
    return 2.0 * size**3 / best_time(jax.jit(lambda x: x @ x), a)


def peak_bytes(mib: int = 256) -> float:
    """Streaming bytes/s of x + 1 over a `mib` MiB float32 array: one read and one write per element."""
    x = jnp.ones((mib * (1 << 20) // 4,), jnp.float32)
    return 2.0 * x.nbytes / best_time(jax.jit(lambda v: v + 1.0), x)


def peak_cache_bytes(kib: int = 512, passes: int = 400) -> float:
    """Bytes/s of x + 1 over a `kib` KiB array that stays in cache, `passes` times in a loop.

    The step's intermediates are per-fusion arrays of (N, a few) elements, which at the sizes
    timed here live mostly in cache, so DRAM bandwidth is not their only ceiling.
    """
    x = jnp.ones((kib * 1024 // 4,), jnp.float32)
    loop = jax.jit(lambda v: jax.lax.fori_loop(0, passes, lambda i, a: a + 1.0, v))
    return 2.0 * x.nbytes * passes / best_time(loop, x)


def rates(fn, n: int, steps: int, seed: int) -> tuple[float, float]:
    """(env-steps per wall second, per CPU second of this process) of one rollout.

    On a shared machine wall time includes waiting for the cores; CPU time does not.
    """
    t, c = time.perf_counter(), time.process_time()
    jax.block_until_ready(fn(jax.random.key(seed)))
    return n * steps / (time.perf_counter() - t), n * steps / max(time.process_time() - c, 1e-9)


def rate(fn, n: int, steps: int, seed: int) -> float:
    return rates(fn, n, steps, seed)[0]


def load() -> float:
    return round(os.getloadavg()[0], 2)


# --- the profile: each part's stand-in keeps its shapes and dtypes, so the rest of the step is unchanged.


def _bot_standin(key, bot, world, params):
    return jnp.zeros((2,), jnp.float32), jnp.asarray(False), jnp.int32(0), bot


def _collisions_standin(pos, previous, radius, boxes, arena_size):
    return jnp.clip(pos, radius, arena_size - radius)


def _fire_standin(fire, npc_pos, target, orbs, boxes, orb_range):
    return orbs


def _advance_standin(orbs, bot_pos, params):
    return orbs, jnp.zeros(orbs[4].shape, bool)


def _observe_standin(state, params):
    return jnp.zeros((jaxarena.NUM_NPCS, 23), jnp.float32) + state.t.astype(jnp.float32)


def _shaping_standin(tag, npc_pos, bot_pos, bot_facing, alive, params, sides=False):
    return jnp.zeros((jaxarena.NUM_NPCS,), jnp.float32)


def _reward_standin(damage, killed, wiped, params):
    return damage


def _reset_standin(key, params, salt=0):
    # A fixed start needs no draw; XLA folds it to constants.
    return _FIXED_START


_FIXED_START = None

# part -> [(module, attribute, stand-in)]
PARTS = {
    "bots": [("jaxarena.env", "scripted_bot", _bot_standin)],
    "collisions": [("jaxarena.physics", "resolve_collisions", _collisions_standin)],
    "orbs": [("jaxarena.physics", "fire_orbs", _fire_standin), ("jaxarena.physics", "advance_orbs", _advance_standin)],
    "observation": [("jaxarena.env", "observe", _observe_standin)],
    "reward": [("jaxarena.env", "tag_shaping", _shaping_standin), ("jaxarena.env", "team_reward", _reward_standin)],
    "auto_reset": [("jaxarena.env", "initial_state", _reset_standin)],
}


@contextlib.contextmanager
def swapped(part: str):
    """Swap `part`'s functions for their stand-ins while a rollout is traced."""
    global _FIXED_START
    import importlib

    from jaxarena.spawn import initial_state

    _FIXED_START = initial_state(jax.random.key(0), make_arena()[1])
    saved = []
    for module, name, standin in PARTS[part]:
        mod = importlib.import_module(module)
        saved.append((mod, name, getattr(mod, name)))
        setattr(mod, name, standin)
    try:
        yield
    finally:
        for mod, name, original in saved:
            setattr(mod, name, original)


def profile(n: int, steps: int, rounds: int, bot: str = "balanced") -> list[dict]:
    """One line per part: the full step's time minus the step's time with the part swapped out."""
    full = rollout_fn(n, steps, bot)
    variants = {}
    for part in PARTS:
        with swapped(part):
            fn = rollout_fn(n, steps, bot)
            jax.block_until_ready(fn(jax.random.key(0)))  # traced now, while the stand-in is in place
        variants[part] = fn
    jax.block_until_ready(full(jax.random.key(0)))
    lines = []
    for part, fn in variants.items():
        wall, cpu = {"full": [], "cut": []}, {"full": [], "cut": []}
        load_before = load()
        for r in range(rounds):
            pair = [("full", full), ("cut", fn)]
            for name, f in pair if r % 2 == 0 else pair[::-1]:
                w, c = rates(f, n, steps, r + 1)
                wall[name].append(1e9 / w)
                cpu[name].append(1e9 / c)
        ns = {k: statistics.median(v) for k, v in wall.items()}
        cpu_ns = {k: statistics.median(v) for k, v in cpu.items()}
        lines.append(
            {
                "bench": "env_roofline_part",
                "part": part,
                "ns_per_step_full": round(ns["full"], 1),
                "ns_per_step_without": round(ns["cut"], 1),
                "share": round(1.0 - ns["cut"] / ns["full"], 3),
                "cpu_ns_per_step_full": round(cpu_ns["full"], 1),
                "cpu_ns_per_step_without": round(cpu_ns["cut"], 1),
                "cpu_share": round(1.0 - cpu_ns["cut"] / cpu_ns["full"], 3),
                "swapped": [f"{m}.{a}" for m, a, _ in PARTS[part]],
                "load": [load_before, load()],
            }
        )
        print(json.dumps(lines[-1]), flush=True)
    return lines


# --- old against new: one worker process per tree, the same harness, alternating rounds.


def worker(n: int, steps: int, bot: str) -> None:
    """Compile the rollout of whichever `jaxarena` this process imports; time one rollout per stdin line."""
    t = time.perf_counter()
    fn = rollout_fn(n, steps, bot)
    jax.block_until_ready(fn(jax.random.key(0)))
    print(json.dumps({"ready": True, "jaxarena": jaxarena.__file__, "first_call_s": time.perf_counter() - t}))
    sys.stdout.flush()
    for line in sys.stdin:
        wall, cpu = rates(fn, n, steps, int(line))
        print(json.dumps({"env_steps_per_s": wall, "env_steps_per_cpu_s": cpu}), flush=True)


def start_worker(tree: str, n: int, steps: int, bot: str) -> tuple[subprocess.Popen, dict]:
    env = dict(os.environ, PYTHONPATH=tree)
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--n", str(n), "--steps", str(steps), "--bot", bot]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tree)
    ready = json.loads(proc.stdout.readline())
    if not ready.get("jaxarena", "").startswith(os.path.realpath(tree)):
        raise SystemExit(f"worker for {tree} imported {ready.get('jaxarena')}")
    return proc, ready


def compare(ref: str, n: int, steps: int, rounds: int, bot: str) -> dict:
    """This tree's step against `ref`'s, in alternating rounds: the median of per-round rate ratios."""
    with tempfile.TemporaryDirectory(prefix="roofline-") as old_tree:
        archive = subprocess.run(["git", "-C", ROOT, "archive", ref], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", old_tree], input=archive, check=True)
        workers = {}
        # One worker compiles at a time: two compiles at once on a small machine distort both.
        for name, tree in (("old", old_tree), ("new", ROOT)):
            workers[name] = start_worker(tree, n, steps, bot)
        ratios, cpu_ratios = [], []
        for r in range(rounds):
            order = ["old", "new"] if r % 2 == 0 else ["new", "old"]
            got, load_before = {}, load()
            for name in order:
                proc = workers[name][0]
                proc.stdin.write(f"{r + 1}\n")
                proc.stdin.flush()
                got[name] = json.loads(proc.stdout.readline())
            ratios.append(got["new"]["env_steps_per_s"] / got["old"]["env_steps_per_s"])
            cpu_ratios.append(got["new"]["env_steps_per_cpu_s"] / got["old"]["env_steps_per_cpu_s"])
            line = {"bench": "env_roofline_vs_ref", "round": r, "ref": ref, "n": n, "bot": bot}
            line |= {f"{k}_env_steps_per_s": round(v["env_steps_per_s"]) for k, v in got.items()}
            line |= {f"{k}_env_steps_per_cpu_s": round(v["env_steps_per_cpu_s"]) for k, v in got.items()}
            line |= {"new_over_old": round(ratios[-1], 3), "new_over_old_cpu": round(cpu_ratios[-1], 3)}
            line |= {"load": [load_before, load()]}
            print(json.dumps(line), flush=True)
        for proc, _ in workers.values():
            proc.stdin.close()
            proc.wait()
        return {
            "ref": ref,
            "new_over_old_median": round(statistics.median(ratios), 3),
            "new_over_old_cpu_median": round(statistics.median(cpu_ratios), 3),
        }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=16384, help="arenas per batch")
    p.add_argument("--steps", type=int, default=100, help="ticks per timed rollout")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds per comparison")
    p.add_argument("--bot", default="balanced", choices=jaxarena.BOT_TYPES, help="the scripted bot")
    p.add_argument("--matmul", type=int, default=2048, help="side of the peak-flops matmul")
    p.add_argument("--copy-mib", type=int, default=256, help="MiB of the peak-bytes copy")
    p.add_argument("--no-profile", action="store_true", help="skip the per-part ablation")
    p.add_argument("--batched", action="store_true", help="measure jaxarena.BatchedArena's step (no profile)")
    p.add_argument("--baseline-ref", help="git ref whose arena to time against this tree's")
    p.add_argument("--keep-xla-flags", action="store_true", help="leave XLA's YNNPACK fusions on")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.n, args.steps, args.bot)
        return 0
    load_start = load()
    flops_peak, bytes_peak, cache_peak = peak_flops(args.matmul), peak_bytes(args.copy_mib), peak_cache_bytes()
    peaks = {"flops_per_s": flops_peak, "bytes_per_s": bytes_peak, "cache_bytes_per_s": cache_peak}
    print(json.dumps({"bench": "env_roofline_peak", "matmul": args.matmul, "copy_mib": args.copy_mib} | peaks))
    cost = step_cost(args.n, args.bot, args.batched)
    print(json.dumps({"bench": "env_roofline_cost", "n": args.n} | cost), flush=True)
    fn = rollout_fn(args.n, args.steps, args.bot, args.batched)
    jax.block_until_ready(fn(jax.random.key(0)))
    steps_per_s = statistics.median(rate(fn, args.n, args.steps, r + 1) for r in range(args.rounds))
    summary = {"bench": "env_roofline", "n": args.n, "steps": args.steps, "bot": args.bot, "batched": args.batched}
    summary["env_steps_per_s"] = round(steps_per_s)
    summary |= {
        "flops_fraction": round(cost["flops_per_step"] * steps_per_s / flops_peak, 5),
        "bytes_fraction": round(cost["bytes_per_step"] * steps_per_s / bytes_peak, 5),
        "bytes_fraction_of_cache_copy": round(cost["bytes_per_step"] * steps_per_s / cache_peak, 5),
        "achieved_flops_per_s": round(cost["flops_per_step"] * steps_per_s),
        "achieved_bytes_per_s": round(cost["bytes_per_step"] * steps_per_s),
        "peak_flops_per_s": round(flops_peak),
        "peak_bytes_per_s": round(bytes_peak),
        "peak_cache_bytes_per_s": round(cache_peak),
        "flops_per_step": round(cost["flops_per_step"], 1),
        "bytes_per_step": round(cost["bytes_per_step"], 1),
    }
    if not (args.no_profile or args.batched):
        parts = profile(args.n, args.steps, args.rounds, args.bot)
        summary["profile_share"] = {line["part"]: line["share"] for line in parts}
    if args.baseline_ref:
        summary |= compare(args.baseline_ref, args.n, args.steps, args.rounds, args.bot)
    summary |= {"load": [load_start, load()], "cpu_count": os.cpu_count(), "backend": jax.default_backend()}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
