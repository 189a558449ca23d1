"""The rollout that scores coder programs: a batch of candidates shares a fixed set of lanes.

Speed. The arena is compiled once per scenario and lane count (`lanes.arena_programs`), and a
batch's candidates add only their policy program (`lanes.policy_program`), so a new batch costs
well under a second of compiling instead of the arena's seconds. A host loop steps the lanes one
tick at a time, each lane playing one episode at a time. A lane whose episode ends takes the
next job (candidate, bot, episode) from a queue at the next chunk boundary, so no lane idles
through a finished episode's remaining time until the queue runs dry. Every lane computes every
program of its batch (a select), hence small batches.

Seeds. Episode e against bot b is played from the key
`fold_in(fold_in(key(seed), b), e)`, whichever candidate plays it and
whatever else is in the batch: candidates are compared on paired episodes.
A job starts from the one episode runner's spawn on that key and draws the
runner's policy keys; the arena's float order is `BatchedArena`'s, so a
long episode can drift from the runner's vmapped one by rounding (tested: 20
ticks agree to rounding, and most whole episodes end alike). A score is
reproducible from the seed, and chunks, lane refills and batch mates change
no episode (tested).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import NUM_ACTIONS, bot_index

from . import lanes as lanes_module
from .score_stats import summarize
from .score_types import ScoreConfig


def episode_key(root: jax.Array, bot, episode) -> jax.Array:
    """Episode `episode` against `bot`'s key under the scorer's root key: one rule for every scoring path."""
    return jax.random.fold_in(jax.random.fold_in(root, bot), episode)


def episode_keys(seed: int, bot: int, episodes: int) -> jax.Array:
    """The key of each episode against `bot`: the same for every candidate (paired episodes)."""
    root = jax.random.key(seed)
    return jax.vmap(lambda e: episode_key(root, bot, e))(jnp.arange(episodes))


def make_batch_scorer(policies: Sequence, config: ScoreConfig):
    """`fn() -> per-job results` (numpy) that plays every policy `episodes_per_bot` times against each bot.

    Jobs are (candidate, bot, episode), candidate-minor so that every candidate
    progresses at the same pace. Returns (fn, jobs) where jobs holds the
    numpy arrays `cand` and `bot` (J,) in job order.
    """
    bots = [bot_index(b) for b in config.bots]
    cand, bot_of_job, episode = _job_queue(len(policies), bots, config.episodes_per_bot)
    run_jobs = make_job_runner(policies, config)
    queue = (jnp.asarray(cand), jnp.asarray(bot_of_job), jnp.asarray(episode))
    return (lambda: run_jobs(*queue, cand.shape[0])), {"cand": cand, "bot": bot_of_job}


def make_job_runner(policies: Sequence, config: ScoreConfig):
    """`fn(cand, bot, episode, n) -> per-job results`: plays the first `n` jobs of the given queue.

    The results hold one row per job of the queue (`len(policies)` x bots x `episodes_per_bot` at
    most); the first `n` rows are the jobs played, the rest zero. Racing plays a few episodes per
    call and calls again. The arena is compiled once per process and lane count, the policy once
    per runner and lane count. Every job's key is `episode_keys`' key of its (bot, episode), so a
    job has the same outcome whichever call, lane or batch mate plays it.
    """
    capacity = len(policies) * len(config.bots) * config.episodes_per_bot
    lanes = min(config.lanes, capacity)
    # A quarter of the lanes plays the last episodes once the queue is empty (`_play`).
    sizes = [lanes] + ([lanes // 4] if lanes // 4 >= lanes_module.MIN_TAIL_LANES else [])
    arenas = [lanes_module.arena_programs(config.scenario, size) for size in sizes]
    policy = lanes_module.policy_program(policies)
    chunk_ticks = round(config.chunk_s / 0.1)
    base = jax.random.key(config.seed)
    runner_keys = jax.jit(
        jax.vmap(lambda b, e: jax.random.split(episode_key(base, b, e), 1)[0])  # the runner's key of its episode
    )

    def fn(job_cand, job_bot, job_episode, n_jobs: int):
        job_cand, job_bot, job_episode = (np.asarray(a, np.int32) for a in (job_cand, job_bot, job_episode))
        if len(job_cand) > capacity or not 0 <= n_jobs <= len(job_cand):
            raise ValueError(f"{n_jobs} jobs of {len(job_cand)} given; this runner holds at most {capacity}")
        # Padded to the runner's capacity: one compile of the keys whatever the queue's length.
        pad = capacity - len(job_cand)
        keys = runner_keys(np.pad(job_bot, (0, pad)), np.pad(job_episode, (0, pad)))[: len(job_cand)]
        return _play(arenas, policy, chunk_ticks, (job_cand, job_bot, keys), n_jobs)

    return fn


def _play(arenas, policy, chunk_ticks: int, queue, n_jobs: int) -> dict:
    """The host loop: free lanes take the next jobs, every lane plays a chunk, ended jobs are recorded.

    Between chunks the host reads each lane's small report (a few numbers per lane), so it is
    the host that hands out jobs: the device programs never see the queue's length, and one
    compiled arena serves every batch. Once the queue is empty, the last episodes (often the
    evasive bot's 120 s timeouts) would keep every lane stepping, busy or not: as soon as they
    fit, they move to the next, smaller set of lanes (`arenas`, largest first).
    """
    arena, *smaller = arenas
    lanes_state = arena.empty()
    job_cand, job_bot, job_keys = queue
    results = {
        "outcome": np.zeros(len(job_cand), np.int32),
        "t": np.zeros(len(job_cand), np.int32),
        "damage_dealt": np.zeros(len(job_cand), np.float32),
        "damage_taken": np.zeros(len(job_cand), np.float32),
        "counts": np.zeros((len(job_cand), NUM_ACTIONS), np.int32),
        "invalid": np.zeros(len(job_cand), np.int32),
    }
    job = np.full(arena.lanes, -1)
    taken = 0
    while True:
        free = np.nonzero(job < 0)[0][: n_jobs - taken]
        job[free] = np.arange(taken, taken + len(free))
        taken += len(free)
        take = np.zeros(len(job), bool)
        take[free] = True
        busy = np.nonzero(job >= 0)[0]
        if len(busy) == 0:
            return results
        if taken == n_jobs and smaller and len(busy) <= smaller[0].lanes:
            arena, *smaller = smaller
            # The busy lanes first, then idle ones (ended, no job) to fill the smaller set.
            keep = np.concatenate([busy, np.nonzero(job < 0)[0]])[: arena.lanes]
            lanes_state, job, take = lanes_module.take_lanes(lanes_state, keep), job[keep], take[keep]
        lane_job = np.maximum(job, 0)
        lane_keys = job_keys[lane_job]
        if take.any():
            lanes_state = arena.restart(lanes_state, take, job_bot[lane_job], lane_keys)
        lane_cand = jnp.asarray(job_cand[lane_job])
        for _ in range(chunk_ticks):
            actions = policy(lane_cand, lanes_state["obs"], lane_keys, lanes_state["state"].t)
            lanes_state = arena.tick(lanes_state, actions)
        seen = jax.device_get(arena.report(lanes_state))
        ended = (job >= 0) & seen["finished"]
        for name, column in results.items():
            column[job[ended]] = seen[name][ended]
        job[ended] = -1


# Evasive first: its episodes run longest (often to the 120 s timeout).
LONGEST_FIRST = (1, 2, 0)


def _job_queue(k: int, bots: list[int], e: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each job's (J,) candidate, bot and episode, candidate-minor; the longest opponents first."""
    # Longest opponents first (evasive, balanced, aggressive by default) so the queue's tail is short.
    order = sorted(range(len(bots)), key=lambda i: LONGEST_FIRST.index(bots[i]))
    cand = np.tile(np.arange(k, dtype=np.int32), len(bots) * e)
    bot_of_job = np.repeat(np.asarray([bots[i] for i in order], np.int32), e * k)
    episode = np.tile(np.repeat(np.arange(e, dtype=np.int32), k), len(bots))
    return cand, bot_of_job, episode


def rollout_policies(policies: Sequence, config: ScoreConfig) -> list[dict]:
    """Plays every policy `config.episodes_per_bot` episodes per bot on shared lanes; one summary each."""
    if not policies:
        return []
    fn, jobs = make_batch_scorer(policies, config)
    results = jax.device_get(fn())
    return summarize(results, jobs, len(policies), config)
