"""How fast the coder's reward scores candidate programs: candidates/min, compile included (target: 100).

    python benchmarks/coder_throughput.py                                  # 32 candidates, batches of 4
    python benchmarks/coder_throughput.py --candidates 16 --batch 8 --one-at-a-time 2
    python benchmarks/coder_throughput.py --one-at-a-time 0 --race-alpha 0.05 --race-first 30

The candidates are the white-box baselines (coder/baselines: rush, kite,
surround-then-strike) and variants of them with other numbers (kite bands,
fire rates, approach distances, a retreat-when-hurt rule): the mix of melee
squads (short wins against the aggressive bot, 120 s timeouts against the
evasive one) and kiting squads that an LLM loop produces. Each is scored as
the loop scores it (`score_sources`): sandboxed compile, then
`--episodes-per-bot` episodes against each bot.

Modes, timed in the same run (so load on the machine affects both alike):
- batched: `--batch` candidates per compiled program (the loop's K);
- one at a time: a compiled program per candidate, for `--one-at-a-time`
  of them (the baseline the batching is compared with);
- raced: the same candidates and batches, raced (`jaxarena.coder.racing`):
  a candidate stops once its interval is below the best one's. Its line
  gives the episodes and env ticks played as a share of full scoring's, and
  the Kendall tau (tau-b, which counts ties in either ranking as neither
  concordant nor discordant) between the two rankings by reward, a dropped
  candidate ranked by its estimate on the episodes it played. Idle lanes
  play ahead into the next look (`RaceConfig.speculate`);
- raced look by look: the same race with every look waiting for its last
  episode, for the gain of playing ahead (its scores must equal raced's:
  the run stops with an error otherwise).
The arena's programs are compiled before the timings, for every lane count
used: a loop compiles them once per process. Each mode prints a JSON line:
candidates/min, the sandbox's share of the time, env-steps/s (ticks of the
episodes scored, one 0.1 s tick of the whole arena each; not the episodes
played ahead for a candidate then dropped) and the mean episode length.
Then the arena's own bound, also timed in this run: the env-steps/s of the
scorer's own arena program on `--lanes` lanes with no policy program,
turned into the candidates/min that scoring would reach if it cost nothing
but those env steps (no compile, no policy). A last line gives the batched
/ one-at-a-time ratio, the raced `candidates_per_min` and `kendall_tau`,
the gain of playing ahead, and whether the targets (100 candidates/min
raced, tau >= 0.9) were met. Every line carries the load average before
and after its mode.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import sys
import time

# XLA's YNNPACK fusions halve the arena's speed on CPU (README, "Speed"); off for this process unless
# --keep-xla-flags (e.g. on a GPU machine, whose XLA may not know the CPU flag).
if "--keep-xla-flags" not in sys.argv:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_experimental_ynn_fusion_type=").strip()

import numpy as np

from jaxarena.coder.compile import compile_program
from jaxarena.coder.language import BASELINES
from jaxarena.coder.racing import RaceConfig, race_policies
from jaxarena.coder.score_types import ScoreConfig
from jaxarena.coder.scoring import score_policies

HURT_RUSH = '''
def policy(obs):
    """Rush, but an NPC below HURT HP backs off while the bot is close."""
    if obs.bot.can_attack:
        return MELEE
    if obs.me.hp < {hurt} and obs.bot.distance < {near}:
        return RETREAT
    return MOVE_TO_BOT
'''


def _set_constant(source: str, name: str, value: float) -> str:
    return re.sub(rf"^{name} = .*$", f"{name} = {value!r}", source, count=1, flags=re.MULTILINE)


def candidates(n: int, seed: int = 0) -> list[str]:
    """`n` distinct programs: the baselines first, then variants with drawn numbers."""
    rng = np.random.default_rng(seed)
    out = [BASELINES[name] for name in sorted(BASELINES)]
    draws = 0
    while len(out) < n:
        draws += 1
        if draws > 100 * n:
            raise ValueError(f"cannot draw {n} distinct candidates; ask for fewer")
        kind = draws % 3
        if kind == 0 and "kite" in BASELINES:
            near = float(rng.choice([4.0, 5.0, 6.0, 7.0]))
            src = _set_constant(BASELINES["kite"], "NEAR", near)
            src = _set_constant(src, "FAR", near + float(rng.choice([3.0, 4.0, 5.0, 6.0])))
            src = _set_constant(src, "FIRE", float(rng.choice([0.5, 0.6, 0.7, 0.9])))
        elif kind == 1 and "surround_strike" in BASELINES:
            src = _set_constant(BASELINES["surround_strike"], "APPROACH", float(rng.choice([5.0, 6.0, 7.0, 9.0])))
            src = _set_constant(src, "TOLERANCE", float(rng.choice([0.2, 0.3, 0.5])))
        else:
            hurt = int(rng.choice([10, 15, 20, 25, 30, 35, 40]))
            src = HURT_RUSH.format(hurt=hurt, near=float(rng.choice([3.0, 3.5, 4.0, 5.0])))
        if src not in out:
            out.append(src)
    return out[:n]


def measure(sources: list[str], batch: int, config: ScoreConfig, race: RaceConfig | None = None) -> dict:
    """Scores `sources` in batches of `batch`, as the loop does (raced if `race`); returns timings and rates."""
    config = dataclasses.replace(config, batch=batch)
    load_before = os.getloadavg()[0]
    sandbox_s = 0.0
    scores = []
    start = time.perf_counter()
    if race is None:
        for i in range(0, len(sources), batch):
            chunk = sources[i : i + batch]
            t = time.perf_counter()
            policies = [compile_program(s).policy for s in chunk]
            sandbox_s += time.perf_counter() - t
            scores += score_policies(policies, config)
    else:  # one race over all candidates (the incumbent is the best of them all), the same batches
        policies = [compile_program(s).policy for s in sources]
        sandbox_s = time.perf_counter() - start
        scores = race_policies(policies, config, race)
    seconds = time.perf_counter() - start
    bad = [s.error for s in scores if s.status != "ok"]
    if bad:
        raise RuntimeError(f"a benchmark program failed: {bad[0]}")
    episode_s = [s.stats[b]["episode_s"] for s in scores for b in config.bots]
    played = [s.episodes_per_bot for s in scores for _ in config.bots]
    ticks = sum(e * 10.0 * n for e, n in zip(episode_s, played, strict=True))
    return {
        "candidates": len(sources),
        "batch": batch,
        "seconds": round(seconds, 2),
        "candidates_per_min": round(60.0 * len(sources) / seconds, 2),
        "sandbox_share": round(sandbox_s / seconds, 3),
        "env_steps_per_s": round(ticks / seconds),
        "env_steps": round(ticks),
        "episodes": int(sum(played)),
        "mean_episode_s": round(float(np.mean(episode_s)), 2),
        "mean_reward": round(float(np.mean([s.reward for s in scores])), 3),
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "rewards": [round(s.reward, 4) for s in scores],
        "_scores": scores,
    }


def kendall_tau_b(x, y) -> float:
    """Kendall's tau-b between two scorings of the same items: pairs tied in one count in neither sum."""
    concordant = discordant = tied_x = tied_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tied_x += 1
            elif dy == 0:
                tied_y += 1
            elif dx == dy:
                concordant += 1
            else:
                discordant += 1
    denominator = np.sqrt((concordant + discordant + tied_x) * (concordant + discordant + tied_y))
    return float((concordant - discordant) / denominator) if denominator else 1.0


def _line(result: dict) -> dict:
    return {k: v for k, v in result.items() if not k.startswith("_")}


def warm_arenas(scenario: str, lane_counts, jobs: int) -> None:
    """Compiles the scorer's arena programs for each lane count and its tail, as a long run would have.

    `jobs`: a batch's episodes, which can cap its lanes. The same argument types as the scorer's
    (`LanePool`): int32 bots and raw key data, so the same compiles.
    """
    import jax

    from jaxarena.coder.batch_rollout import lane_sets
    from jaxarena.coder.lanes import arena_programs, take_lanes
    from jaxarena.names import NUM_NPCS

    for lanes in lane_counts:
        sizes = lane_sets(lanes, jobs)
        for size in sizes:
            arena = arena_programs(scenario, size)
            keys = jax.random.key_data(jax.random.split(jax.random.key(0), size))
            state = arena.restart(arena.empty(), np.ones(size, bool), np.zeros(size, np.int32), keys)
            state = arena.tick(state, np.zeros((size, NUM_NPCS), np.int32))
            jax.block_until_ready(arena.report(state))
        if len(sizes) > 1:  # the move of the last episodes to the tail's lanes
            jax.block_until_ready(take_lanes(arena_programs(scenario, sizes[0]).empty(), np.arange(sizes[1])))


def ceiling(config: ScoreConfig, mean_episode_s: float) -> dict:
    """The scorer's arena alone: env-steps/s of its tick program on `lanes` lanes, with no policy program.

    Every lane walks at the evasive bot, which is never caught, so all of its 1,200 ticks are
    useful work; compile time is left out. candidates/min if scoring cost nothing but these steps.
    """
    import jax
    import jax.numpy as jnp

    from jaxarena.coder.lanes import arena_programs
    from jaxarena.names import MOVE_TO_BOT, NUM_NPCS, bot_index

    arena = arena_programs(config.scenario, config.lanes)
    keys = jax.random.key_data(jax.random.split(jax.random.key(1), config.lanes))
    evasive = np.full(config.lanes, bot_index("evasive"), np.int32)
    walk = jnp.full((config.lanes, NUM_NPCS), MOVE_TO_BOT, jnp.int32)
    lanes = jax.block_until_ready(arena.restart(arena.empty(), np.ones(config.lanes, bool), evasive, keys))
    start = time.perf_counter()
    while not np.all(np.asarray(lanes["finished"])):
        for _ in range(round(config.chunk_s / 0.1)):
            lanes = arena.tick(lanes, walk)
    seconds = time.perf_counter() - start
    rate = float(np.sum(np.asarray(arena.report(lanes)["t"]))) / seconds
    per_candidate = len(config.bots) * config.episodes_per_bot * mean_episode_s * 10.0
    return {"env_steps_per_s": round(rate), "candidates_per_min": round(60.0 * rate / per_candidate, 2)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidates", type=int, default=32)
    p.add_argument("--batch", type=int, default=4, help="candidates per compiled program")
    p.add_argument("--one-at-a-time", type=int, default=4, help="candidates scored alone, for the ratio (0: skip)")
    p.add_argument("--episodes-per-bot", type=int, default=1000)
    p.add_argument("--lanes", type=int, default=2048)
    p.add_argument("--chunk-s", type=float, default=1.0)
    p.add_argument("--scenario", default="paper")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--race-alpha", type=float, default=RaceConfig.alpha, help="racing: chance of a wrong drop")
    p.add_argument("--race-first", type=int, default=RaceConfig.first, help="racing: episodes per bot of look 1")
    p.add_argument("--race-lanes", type=int, default=RaceConfig.lanes, help="racing: at most this many lanes")
    p.add_argument("--keep-xla-flags", action="store_true", help="leave XLA_FLAGS as they are")
    args = p.parse_args()
    config = ScoreConfig(
        episodes_per_bot=args.episodes_per_bot,
        scenario=args.scenario,
        seed=args.seed,
        lanes=args.lanes,
        chunk_s=args.chunk_s,
    )
    race = RaceConfig(first=args.race_first, alpha=args.race_alpha, lanes=args.race_lanes)
    sources = candidates(args.candidates, args.seed)
    compile_program(sources[0])  # start the sandbox's worker process outside the timings
    import jax

    common = {
        "bench": "coder_throughput",
        "device": str(jax.devices()[0].device_kind),
        "episodes_per_bot": args.episodes_per_bot,
        "lanes": args.lanes,
    }
    # Warm-up, untimed: the first scoring in a process also pays one-off tracing and setup costs, and
    # the arena's programs are compiled once per process and lane count (a loop pays that once).
    tiny = dataclasses.replace(config, episodes_per_bot=2, lanes=8)
    measure(sources[:2], args.batch, tiny)
    measure(sources[:2], args.batch, tiny, RaceConfig(first=1))
    batch_jobs = args.batch * len(config.bots) * args.episodes_per_bot
    warm_arenas(config.scenario, {args.lanes, min(race.lanes or args.lanes, args.lanes)}, batch_jobs)
    # Raced first: any cost still left to the first timed mode then falls on racing, not on full scoring.
    raced = {**common, "mode": "raced", **measure(sources, args.batch, config, race)}
    batched = {**common, "mode": "batched", **measure(sources, args.batch, config)}
    print(json.dumps(_line(batched)), flush=True)
    # The same race with every look waiting for its last episode (no lanes playing ahead).
    no_ahead = dataclasses.replace(race, speculate=False)
    look_by_look = {**common, "mode": "raced_look_by_look", **measure(sources, args.batch, config, no_ahead)}
    look_by_look["same_scores_as_raced"] = look_by_look["_scores"] == raced["_scores"]
    print(json.dumps(_line(look_by_look)), flush=True)
    if not look_by_look["same_scores_as_raced"]:
        raise RuntimeError("playing ahead changed a score: it must only change the time")
    race_lanes = min(race.lanes or args.lanes, args.lanes)
    raced["race"] = {"first": race.first, "growth": race.growth, "alpha": race.alpha, "lanes": race_lanes}
    raced["looks"] = list(race.looks(args.episodes_per_bot))
    raced["episodes_per_bot_each"] = [s.episodes_per_bot for s in raced["_scores"]]
    raced["episodes_share"] = round(raced["episodes"] / batched["episodes"], 3)
    raced["env_steps_share"] = round(raced["env_steps"] / batched["env_steps"], 3)
    full_budget = [i for i, s in enumerate(raced["_scores"]) if s.episodes_per_bot == args.episodes_per_bot]
    # Same batches, so the same compiled programs: a candidate raced to the full budget scores exactly as in full.
    raced["full_budget_equal_to_full_scoring"] = sum(raced["_scores"][i] == batched["_scores"][i] for i in full_budget)
    raced["full_budget"] = len(full_budget)
    raced["kendall_tau"] = round(kendall_tau_b(batched["rewards"], raced["rewards"]), 4)
    print(json.dumps(_line(raced)), flush=True)
    summary = {**common, "mode": "summary", "target_candidates_per_min": 100, "target_kendall_tau": 0.9}
    summary["candidates_per_min"] = raced["candidates_per_min"]
    summary["kendall_tau"] = raced["kendall_tau"]
    summary["full_candidates_per_min"] = batched["candidates_per_min"]
    summary["batched_candidates_per_min"] = batched["candidates_per_min"]
    summary["raced_vs_full"] = round(raced["candidates_per_min"] / batched["candidates_per_min"], 2)
    summary["raced_look_by_look_candidates_per_min"] = look_by_look["candidates_per_min"]
    summary["playing_ahead_gain"] = round(raced["candidates_per_min"] / look_by_look["candidates_per_min"], 2)
    summary["episodes_saved"] = round(1 - raced["episodes_share"], 3)
    summary["env_steps_saved"] = round(1 - raced["env_steps_share"], 3)
    if args.one_at_a_time > 0:
        single = {**common, "mode": "one_at_a_time", **measure(sources[: args.one_at_a_time], 1, config)}
        print(json.dumps(_line(single)), flush=True)
        summary["one_at_a_time_candidates_per_min"] = single["candidates_per_min"]
        summary["batched_vs_one_at_a_time"] = round(batched["candidates_per_min"] / single["candidates_per_min"], 2)
    bound = ceiling(config, batched["mean_episode_s"])
    print(json.dumps({**common, "mode": "env_ceiling", **bound}), flush=True)
    summary["env_ceiling_candidates_per_min"] = bound["candidates_per_min"]
    summary["target_met"] = raced["candidates_per_min"] >= 100 and raced["kendall_tau"] >= 0.9
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
