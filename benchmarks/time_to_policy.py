"""Time-to-policy: wall-clock from scratch until Combination A beats the balanced and evasive bots.

A run trains Combination A with one PPOConfig preset and, every `--eval-every`
env steps, plays a cheap check (`--cheap-episodes` per bot, the policy
sampled as trained). When the cheap check clears both bars (default >= 95%
NPC wins against the balanced bot and >= 90% against the evasive one) the
full check confirms it on `--full-episodes` per bot (default 1,000); the
first point the full check passes is the run's time-to-policy. Evaluation
episodes come from their own root keys (`--eval-seed`, + 1 for the full
check), disjoint from the training stream, which starts where `jaxarena-train`'s
does: `key_streams.training_key(seed)`, the seed's key with PPO's stream
constant folded in (none of the protocol's keys).

Time-to-policy counts training only: compiling the preset's update program
(once per preset, charged to each of its runs) plus the jitted update
chunks. The checks' time is reported beside it (`eval_s`), not counted.

Every (preset, seed) run steps in turn, one chunk each, so load on a shared
machine hits all alike. Prints one JSON line per eval point (the learning
curve; also `curve.jsonl` and, where matplotlib is installed, `curve.png`
under `--out`) and a summary line: `time_to_policy_s` per preset (mean over
seeds that passed), `speedup` (the first preset's over the second's, old over new; null unless both
passed the same seeds), `speedup_at_least` (a lower bound where the old one passed fewer seeds: a run
that trained T seconds without passing has a time-to-policy above T), seeds, load. The checks report
the aggressive bot's win rate too, outside the bars.

    python benchmarks/time_to_policy.py --seeds 0 1 2 3 4 --out runs/time_to_policy
    python benchmarks/time_to_policy.py --presets default --seeds 0 1 2 3 4 5 6 7 8 9   # the 9-of-10 measure
    python benchmarks/time_to_policy.py --presets classic fast --max-minutes 20
    python benchmarks/time_to_policy.py --presets fast --seeds 0 1 2 --total-steps 5e7 --set ent_coef=0.03
    python benchmarks/time_to_policy.py --smoke        # tiny sizes, a few seconds
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type="
BARS = {"balanced": "win_balanced", "evasive": "win_evasive"}
CHECKED = {"aggressive": "win_aggressive", **BARS}  # every bot is played; the bars are on two


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--presets", nargs="+", default=["classic", "default"], help="PPOConfig presets to race, old first")
    p.add_argument("--seeds", nargs="+", type=int, default=[0], help="training seeds, each run per preset")
    p.add_argument("--total-steps", type=float, default=None, help="the schedule's length (default: the preset's)")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="PPOConfig fields for every preset")
    p.add_argument("--eval-every", type=float, default=1e6, help="env steps between cheap checks")
    p.add_argument("--cheap-episodes", type=int, default=200, help="episodes per bot of a cheap check")
    p.add_argument("--full-episodes", type=int, default=1000, help="episodes per bot of the confirming check")
    p.add_argument("--win-balanced", type=float, default=0.95)
    p.add_argument("--win-evasive", type=float, default=0.90)
    p.add_argument("--max-minutes", type=float, default=30.0, help="training time cap per run")
    p.add_argument("--eval-seed", type=int, default=1_000_003, help="root key of the held-out episodes")
    p.add_argument("--out", default=None, help="folder for curve.jsonl and curve.png")
    p.add_argument("--smoke", action="store_true", help="tiny sizes and short episodes: checks the plumbing")
    args = p.parse_args(argv)
    args.changes = config_changes(p, args.set)
    return args


def config_changes(parser, items) -> dict:
    """`--set KEY=VALUE` items as PPOConfig changes (`field_changes`); a bare or unknown KEY is a usage error."""
    import dataclasses

    from jaxarena.algorithms import PPOConfig
    from jaxarena.algorithms.config import field_changes

    # The benchmark sets these itself: Combination A, and the schedule from --total-steps.
    fields = {f.name for f in dataclasses.fields(PPOConfig)} - {"combination", "total_timesteps"}
    try:
        return field_changes(items, fields)
    except KeyError as error:
        parser.error(f"--set {error.args[0]!r}: not KEY=VALUE with KEY one of {', '.join(sorted(fields))}")


def smoke_args(args):
    """Tiny sizes: a few updates of 8 envs x 8 steps and 4-episode checks of 2 decision periods."""
    args.total_steps, args.eval_every = 256, 128
    args.cheap_episodes = args.full_episodes = 4  # one evaluation program to compile
    args.win_balanced = args.win_evasive = 0.0  # every check passes, so the full check runs too
    return args


_RUNNERS: dict = {}  # (arena, network, episodes) -> jitted episode runner, shared by presets


class Checker:
    """The cheap and full checks of one preset's policy: held-out episodes against each bot."""

    def __init__(self, config, args):
        import jax

        import jaxarena
        from jaxarena.algorithms.checkpoint import make_policy
        from jaxarena.runner import make_runner
        from jaxarena.tag_sources import hold_tags

        env, self.params = jaxarena.make(config.env_id, scenario=config.scenario)
        periods = 2 if args.smoke else None  # short episodes in the smoke run

        def runner(n):
            key = (config.env_id, config.scenario, json.dumps(config.network_kwargs(), sort_keys=True), n)
            if key not in _RUNNERS:
                _RUNNERS[key] = make_runner(env, self.params, make_policy(config), hold_tags, n, num_periods=periods)
            return _RUNNERS[key]

        self.runs = {"cheap": runner(args.cheap_episodes), "full": runner(args.full_episodes)}
        self.keys = {"cheap": jax.random.PRNGKey(args.eval_seed), "full": jax.random.PRNGKey(args.eval_seed + 1)}

    def __call__(self, policy_params, kind: str) -> dict[str, float]:
        import numpy as np

        import jaxarena
        from jaxarena.names import NPC_WIN

        rates = {}
        for bot, name in CHECKED.items():
            params = self.params.replace(bot_type=jaxarena.bot_index(bot))
            outcome = np.asarray(self.runs[kind](policy_params, params, self.keys[kind]).outcome)
            rates[name] = float(np.mean(outcome == NPC_WIN))
        return rates


def passes(rates: dict, args) -> bool:
    return rates["win_balanced"] >= args.win_balanced and rates["win_evasive"] >= args.win_evasive


def train_rates(metrics) -> dict[str, float | None]:
    """NPC win rate per bot over a chunk's training episodes (None where none ended), and the entropy."""
    import numpy as np

    from jaxarena.names import BOT_TYPES

    eps = np.asarray(metrics["episodes_per_bot"]).sum(axis=0)
    wins = np.asarray(metrics["npc_wins_per_bot"]).sum(axis=0)
    out = {f"train_win_{b}": (round(float(wins[i] / eps[i]), 4) if eps[i] else None) for i, b in enumerate(BOT_TYPES)}
    out["entropy"] = round(float(np.mean(metrics["entropy"])), 3)  # policy entropy over the chunk's minibatches
    return out


class Run:
    """One (preset, seed) training run, stepped a chunk at a time."""

    def __init__(self, preset: str, seed: int, program: dict, args):
        import jax

        from jaxarena.key_streams import training_key

        self.preset, self.seed, self.program, self.args = preset, seed, program, args
        self.config = program["config"]
        self.runner = jax.jit(program["trainer"].init)(training_key(seed))
        self.train_s = program["compile_s"]  # a user starting from scratch pays the compile
        self.eval_s = 0.0
        self.done = False
        self.result = {"preset": preset, "seed": seed, "passed": False, "time_to_policy_s": None}
        self.best = {"win_balanced": 0.0, "win_evasive": 0.0}

    def step(self, log) -> None:
        """One chunk of updates, its cheap check and, if that passes, the full check."""
        import jax

        cfg, prog = self.config, self.program
        n = min(prog["chunk"], cfg.num_updates - int(self.runner.update))
        t = time.perf_counter()
        self.runner, metrics = prog["compiled"](n)(self.runner)
        metrics = jax.device_get(metrics)
        self.train_s += time.perf_counter() - t
        update = int(self.runner.update)
        params = self.runner.train_state.params
        t = time.perf_counter()
        rates = prog["checker"](params, "cheap")
        point = {"kind": "cheap", **rates}
        if passes(rates, self.args):
            full = prog["checker"](params, "full")
            point = {"kind": "full", **full, "cheap_win_balanced": rates["win_balanced"]}
            point["cheap_win_evasive"] = rates["win_evasive"]
            rates = full
        self.eval_s += time.perf_counter() - t
        for k in self.best:
            self.best[k] = max(self.best[k], rates[k])
        row = {
            "preset": self.preset,
            "seed": self.seed,
            "update": update,
            "env_steps": update * cfg.steps_per_update,
            "train_s": round(self.train_s, 2),
            "eval_s": round(self.eval_s, 2),
            **point,
            **train_rates(metrics),
            "load1": os.getloadavg()[0],
        }
        log(row)
        if point["kind"] == "full" and passes(rates, self.args):
            self.result.update(passed=True, time_to_policy_s=row["train_s"], env_steps=row["env_steps"])
            self.done = True
        elif update >= cfg.num_updates or self.train_s >= 60 * self.args.max_minutes:
            self.done = True
        if self.done:
            self.result.update(best=self.best, train_s=row["train_s"], eval_s=row["eval_s"], updates=update)


def build_program(preset: str, args) -> dict:
    """The preset's config, trainer, compiled chunk programs (cached by length) and checker."""
    import jax

    from jaxarena.algorithms import PPOConfig, make_trainer
    from jaxarena.key_streams import training_key

    sizes = {"num_envs": 8, "num_steps": 8} if args.smoke else {}
    schedule = {} if args.total_steps is None else {"total_timesteps": int(args.total_steps)}
    cfg = PPOConfig.preset(preset, combination="A", **schedule, **sizes, **args.changes)
    trainer = make_trainer(cfg)
    run = jax.jit(trainer.run_updates, static_argnums=1, donate_argnums=0)
    chunk = max(1, round(args.eval_every / cfg.steps_per_update))
    template = jax.jit(trainer.init)(training_key(0))  # shapes only
    cache = {}

    def compiled(n):
        if n not in cache:
            cache[n] = run.lower(template, n).compile()
        return cache[n]

    t = time.perf_counter()
    compiled(min(chunk, cfg.num_updates))
    compile_s = time.perf_counter() - t
    checker = Checker(cfg, args)
    return dict(config=cfg, trainer=trainer, compiled=compiled, chunk=chunk, compile_s=compile_s, checker=checker)


def plot(rows: list[dict], path: Path, bars: dict[str, float]) -> Path | None:
    """Evaluated win rates against training seconds, one line per run and bot; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, (bot, key) in zip(axes, BARS.items(), strict=True):
        for run in sorted({(r["preset"], r["seed"]) for r in rows}):
            pts = [r for r in rows if (r["preset"], r["seed"]) == run]
            ax.plot([r["train_s"] for r in pts], [r[key] for r in pts], marker=".", label=f"{run[0]} (seed {run[1]})")
        ax.axhline(bars[bot], color="grey", linestyle="--", linewidth=1)
        ax.set(title=f"vs the {bot} bot", xlabel="training wall-clock (s)", ylabel="NPC win rate (held out)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def summarise(runs: list[Run], presets: list[str], args) -> dict:
    out = {"seeds": args.seeds, "bars": {"balanced": args.win_balanced, "evasive": args.win_evasive}}
    for preset in presets:
        results = [r.result for r in runs if r.preset == preset]
        times = [r["time_to_policy_s"] for r in results if r["passed"]]
        out[preset] = {
            "time_to_policy_s": round(sum(times) / len(times), 1) if times else None,
            "passed": f"{len(times)}/{len(results)}",
            "seeds_passed": len(times),
            "compile_s": round(runs[[r.preset for r in runs].index(preset)].program["compile_s"], 2),
            "runs": results,
        }
    out["seeds_passed"] = {preset: out[preset]["seeds_passed"] for preset in presets}
    out["speedup"], out["speedup_at_least"] = (
        speedups(runs, presets[0], presets[1]) if len(presets) > 1 else (None, None)
    )
    return out


def speedups(runs: list[Run], old: str, new: str) -> tuple[float | None, float | None]:
    """Old over new: the ratio of total times on the seeds both passed (None unless they passed the same
    seeds), and a lower bound where old passed only some of new's seeds, charging old the time it trained
    without passing (None where old passed a seed new did not)."""
    by_seed = {(r.preset, r.seed): r.result for r in runs}
    passed = {p: {r.seed for r in runs if r.preset == p and r.result["passed"]} for p in (old, new)}
    if not passed[new] or not passed[old] <= passed[new]:
        return None, None

    def total(preset, field):
        return sum(by_seed[(preset, s)][field] for s in passed[new])

    bound = round(total(old, "train_s") / total(new, "time_to_policy_s"), 2)
    return (bound if passed[old] == passed[new] else None), bound


def main(argv=None) -> dict:
    args = parse(argv)
    if args.smoke:
        args = smoke_args(args)
    # Set before JAX starts its CPU backend, as jaxarena-train does: YNNPACK fusions slow this workload.
    if YNN_FLAG not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + YNN_FLAG).strip()
    load_before = os.getloadavg()
    out = Path(args.out) if args.out else None
    rows: list[dict] = []
    if out:
        out.mkdir(parents=True, exist_ok=True)
        (out / "curve.jsonl").write_text("")

    def log(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if out:
            with open(out / "curve.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")

    programs = {p: build_program(p, args) for p in args.presets}
    runs = [Run(p, s, programs[p], args) for s in args.seeds for p in args.presets]
    while any(not r.done for r in runs):
        for r in runs:  # round-robin, one chunk each
            if not r.done:
                r.step(log)
    summary = summarise(runs, args.presets, args)
    summary["load_before"] = [round(x, 2) for x in load_before]
    summary["load_after"] = [round(x, 2) for x in os.getloadavg()]
    if out:
        png = plot(rows, out / "curve.png", {"balanced": args.win_balanced, "evasive": args.win_evasive})
        summary["curve"] = str(png or out / "curve.jsonl")
    print(json.dumps({"summary": summary}), flush=True)
    return summary


if __name__ == "__main__":
    main()
