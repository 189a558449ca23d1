"""Many seeds in one program: PPO env steps/s for N seeds vmapped, as a ratio to one seed.

For each N in `--seeds` (default 1, 4, 16) this compiles the N-run program of
`jaxarena.algorithms.multi_run` (the one `jaxarena-train --seeds N` runs), then
times `--updates` updates of every run, `--repeats` times, the Ns in
alternation so load hits each alike. Throughput counts env steps of all runs
(one 0.1 s tick of one 5-vs-1 arena). Prints one JSON line per timing and a
summary line:

  speedup_vs_1[N]     env steps/s with N seeds over env steps/s with 1 (same run)
  sequential_ratio[N] N runs one after another over one N-seed program, end to end:
                      (compile_1 + N x time of one run) / (compile_N + time of the N runs);
                      above 1 means the batch is faster per seed than the runs in turn

    python benchmarks/train_seeds.py                        # the default recipe, N = 1, 4, 16
    python benchmarks/train_seeds.py --seeds 1 8 --updates 20
    python benchmarks/train_seeds.py --smoke                # tiny sizes: checks the plumbing
"""

from __future__ import annotations

import argparse
import json
import os
import time

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type="


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", nargs="+", type=int, default=[1, 4, 16], help="seed counts to time (1 is always added)")
    p.add_argument("--preset", default="default", help="PPOConfig preset")
    p.add_argument("--updates", type=int, default=4, help="updates per timed call")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat")
    return p.parse_args(argv)


def main(argv=None) -> dict:
    args = parse(argv)
    if YNN_FLAG not in os.environ.get("XLA_FLAGS", ""):  # as jaxarena-train sets it
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_FLAG).strip()
    import jax

    from jaxarena.algorithms import PPOConfig
    from jaxarena.algorithms.multi_run import make_batch_trainer, plan_runs

    sizes = dict(num_envs=8, num_steps=8, hidden=8) if args.smoke else {}
    if args.smoke:
        args.repeats, args.updates = 1, 2
    config = PPOConfig.preset(args.preset, **sizes)
    counts = sorted(set([1, *args.seeds]))
    programs = {}
    for n in counts:
        batch = make_batch_trainer(plan_runs(config, seeds=range(n)))
        state = jax.jit(batch.init)()
        t = time.perf_counter()
        compiled = jax.jit(batch.run_updates, static_argnums=1, donate_argnums=0).lower(state, args.updates).compile()
        programs[n] = {"run": compiled, "state": state, "compile_s": time.perf_counter() - t, "times": []}
        print(json.dumps({"seeds": n, "compile_s": round(programs[n]["compile_s"], 2)}), flush=True)
    for n in counts:  # one untimed call each: first-call allocations
        p = programs[n]
        p["state"], m = p["run"](p["state"])
        jax.block_until_ready(m)
    steps_per_call = args.updates * config.steps_per_update
    for rep in range(args.repeats):
        for n in counts:
            p = programs[n]
            t = time.perf_counter()
            p["state"], m = p["run"](p["state"])
            jax.block_until_ready(m)
            elapsed = time.perf_counter() - t
            p["times"].append(elapsed)
            sps = n * steps_per_call / elapsed
            print(
                json.dumps({"seeds": n, "repeat": rep, "s": round(elapsed, 3), "env_steps_per_s": round(sps)}),
                flush=True,
            )
    best = {n: min(programs[n]["times"]) for n in counts}
    sps = {n: n * steps_per_call / best[n] for n in counts}
    summary = {
        "preset": args.preset,
        "env_steps_per_update_per_seed": config.steps_per_update,
        "updates_per_call": args.updates,
        "env_steps_per_s": {n: round(v) for n, v in sps.items()},
        "speedup_vs_1": {n: round(sps[n] / sps[1], 2) for n in counts},
        # A whole run's worth of updates: compile once plus the timed call scaled to config.num_updates.
        "sequential_ratio": {
            n: round(
                (programs[1]["compile_s"] + n * best[1] * config.num_updates / args.updates)
                / (programs[n]["compile_s"] + best[n] * config.num_updates / args.updates),
                2,
            )
            for n in counts
        },
        "devices": f"{jax.device_count()} {jax.devices()[0].platform}",
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps({"summary": summary}), flush=True)
    return summary


if __name__ == "__main__":
    main()
