"""The batched rollout that scores coder programs: every candidate of a batch plays in one compiled program.

Speed. The programs of a batch (`ScoreConfig.batch` of them) play in ONE
compiled program: a `jax.lax.while_loop` over fixed `lanes`, each lane
running one episode at a time through the one episode runner
(`jaxarena.runner.make_runner` with one episode, vmapped over lanes,
continued chunk by chunk with `Start`). A lane whose episode ends takes the
next job (candidate, bot, episode) from a queue at the next chunk boundary,
so no lane idles through a finished episode's remaining time until the
queue runs dry. The policy of a lane is `lax.switch` over the lane's
candidate index, which vmap turns into a select: every lane computes every
program of its batch, hence small batches.

Seeds. Episode e against bot b is played from the key
`fold_in(fold_in(key(seed), b), e)`, whichever candidate plays it and
whatever else is in the batch: candidates are compared on paired episodes.
Each episode is the runner's episode on that key played in a vmapped batch
(tested). A score is reproducible from the seed; it is not guaranteed
bit-identical across differently compiled programs (XLA's vectorised and
scalar float code may differ in the last bit, which a long episode can
amplify; the runner itself gives an unbatched and a batched run of one key
that can differ), though in the tests a program scores the same alone and
in a batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

import jaxarena
from jaxarena.names import NUM_ACTIONS, bot_index
from jaxarena.runner import Accumulator, Start, make_runner

from .score_stats import summarize
from .score_types import ScoreConfig


def _final_state_accumulator(template) -> Accumulator:
    """Keeps the episode's last state, so the next chunk continues from it (`Start`)."""
    return Accumulator(
        init=lambda n: jax.tree.map(lambda s: jnp.zeros((n, *s.shape), s.dtype), template),
        update=lambda acc, tick: tick.next_state,
    )


def _action_update(acc, tick):
    alive = (tick.state.npc_hp > 0.0) & tick.running[:, None]
    valid = (tick.actions >= 0) & (tick.actions < NUM_ACTIONS)
    counts = jnp.sum(jax.nn.one_hot(tick.actions, NUM_ACTIONS, dtype=jnp.int32) * alive[..., None], axis=1)
    return {"counts": acc["counts"] + counts, "invalid": acc["invalid"] + jnp.sum(alive & ~valid, axis=1)}


#: Per episode: living-NPC ticks spent on each action, and ticks with an action outside 0..5.
ACTION_USAGE = Accumulator(
    init=lambda n: {"counts": jnp.zeros((n, NUM_ACTIONS), jnp.int32), "invalid": jnp.zeros((n,), jnp.int32)},
    update=_action_update,
)


def episode_key(root: jax.Array, bot, episode) -> jax.Array:
    """Episode `episode` against `bot`'s key under the scorer's root key: one rule for every scoring path."""
    return jax.random.fold_in(jax.random.fold_in(root, bot), episode)


def episode_keys(seed: int, bot: int, episodes: int) -> jax.Array:
    """The key of each episode against `bot`: the same for every candidate (paired episodes)."""
    root = jax.random.key(seed)
    return jax.vmap(lambda e: episode_key(root, bot, e))(jnp.arange(episodes))


def _switch_policy(policies: Sequence):
    """One policy whose params are the candidate index: `lax.switch` over the candidates' policies."""

    def branch(p):
        return lambda obs, key: jnp.asarray(p(None, obs, key)).astype(jnp.int32)

    branches = [branch(p) for p in policies]

    def policy(index, obs, key):
        if len(branches) == 1:
            return branches[0](obs, key)
        return jax.lax.switch(index, branches, obs, key)

    return policy


def make_batch_scorer(policies: Sequence, config: ScoreConfig):
    """A jitted `fn() -> per-job results` that plays every policy `episodes_per_bot` times against each bot.

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
    """A jitted `fn(cand, bot, episode, n) -> per-job results`: plays the first `n` jobs of the given queue.

    The queue's arrays have a fixed length, every policy's full share (`len(policies)` x bots x
    `episodes_per_bot`), so one compiled program serves any subset of those jobs: racing plays
    a few episodes per call and calls again. The results' first `n` rows are the jobs played, the
    rest zero. Every job's key is `episode_keys`' key of its (bot, episode), so a job has the same
    outcome whichever call, lane or batch mate plays it (same compiled program).
    """
    env, params = jaxarena.make("Arena-v0", scenario=config.scenario, decision_period_s=config.chunk_s)
    capacity = len(policies) * len(config.bots) * config.episodes_per_bot
    lanes = min(config.lanes, capacity)
    lane_run, lane_reset, template = _lane_programs(env, params, policies)
    base = jax.random.key(config.seed)

    def run_jobs(job_cand, job_bot, job_episode, n_jobs):
        job_key = jax.vmap(lambda b, e: episode_key(base, b, e))(job_bot, job_episode)
        # Every job's first state, once: cheaper than resetting every lane at every chunk.
        job_start = lane_reset(job_key, params.replace(bot_type=job_bot))
        carry0 = _initial_carry(lanes, capacity, template)
        body = _chunk_step(lane_run, params, (job_cand, job_bot, job_key, job_start), n_jobs, capacity)

        def cond(c):
            return jnp.any(c["job"] >= 0) | (c["next"] < n_jobs)

        return jax.lax.while_loop(cond, body, carry0)["results"]

    jitted = jax.jit(run_jobs)

    def fn(job_cand, job_bot, job_episode, n_jobs: int):
        pad = capacity - len(job_cand)
        if pad < 0 or not 0 <= n_jobs <= len(job_cand):
            raise ValueError(f"{n_jobs} jobs of {len(job_cand)} given; this runner holds at most {capacity}")
        arrays = [jnp.pad(jnp.asarray(a, jnp.int32), (0, pad)) for a in (job_cand, job_bot, job_episode)]
        return jitted(*arrays, jnp.int32(n_jobs))

    return fn


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


def _lane_programs(env, params, policies: Sequence):
    """(lane_run, lane_reset, template): one chunk of each lane's episode, each job's first state, a state's shape."""
    template = jax.eval_shape(lambda key: env.reset(key, params)[1], jax.random.key(0))
    run = make_runner(
        env,
        params,
        _switch_policy(policies),
        0,
        1,
        num_periods=1,
        accumulators={"final": _final_state_accumulator(template), "actions": ACTION_USAGE},
    )
    params_axes = jax.tree.map(lambda _: None, params).replace(bot_type=0)
    lane_run = jax.vmap(
        lambda c, p, key, state, period: run(c, p, key, start=Start(state, period)),
        in_axes=(0, params_axes, 0, 0, 0),
    )
    # The runner's reset of episode 0 of a one-episode batch (make_runner's key derivation).
    lane_reset = jax.vmap(
        lambda key, p: jax.tree.map(
            lambda x: x[None], env.reset(jax.random.fold_in(jax.random.split(key, 1)[0], 0), p)[1]
        ),
        in_axes=(0, params_axes),
    )
    return lane_run, lane_reset, template


def _initial_carry(lanes: int, n_jobs: int, template) -> dict:
    """The while loop's carry before any job: every lane free, every job's results zero."""
    none = jnp.full((lanes,), -1, jnp.int32)
    state0 = jax.tree.map(lambda s: jnp.zeros((lanes, 1, *s.shape), s.dtype), template)
    results0 = {
        "outcome": jnp.zeros((n_jobs,), jnp.int32),
        "t": jnp.zeros((n_jobs,), jnp.int32),
        "damage_dealt": jnp.zeros((n_jobs,), jnp.float32),
        "damage_taken": jnp.zeros((n_jobs,), jnp.float32),
        "counts": jnp.zeros((n_jobs, NUM_ACTIONS), jnp.int32),
        "invalid": jnp.zeros((n_jobs,), jnp.int32),
    }
    return {
        "job": none,
        "state": state0,
        "period": jnp.zeros((lanes,), jnp.int32),
        "counts": jnp.zeros((lanes, NUM_ACTIONS), jnp.int32),
        "invalid": jnp.zeros((lanes,), jnp.int32),
        "next": jnp.int32(0),
        "results": results0,
    }


def _chunk_step(lane_run, params, queue, n_jobs, capacity: int):
    """The while loop's body: free lanes take the next jobs, every lane plays one chunk, ended jobs are recorded.

    `queue` holds each job's candidate, bot, key and first state (`capacity` rows); only the first
    `n_jobs` (traced) are taken.
    """
    job_cand, job_bot, job_key, job_start = queue

    def body(c):
        free = c["job"] < 0
        new_job = c["next"] + jnp.cumsum(free.astype(jnp.int32)) - 1
        take = free & (new_job < n_jobs)
        job = jnp.where(take, new_job, c["job"])
        safe = jnp.clip(job, 0, capacity - 1)
        p = params.replace(bot_type=job_bot[safe])
        keys = job_key[safe]
        state = jax.tree.map(
            lambda f, s: jnp.where(take.reshape((-1,) + (1,) * (s.ndim - 1)), f[safe], s), job_start, c["state"]
        )
        period = jnp.where(take, 0, c["period"])
        counts = jnp.where(take[:, None], 0, c["counts"])
        invalid = jnp.where(take, 0, c["invalid"])
        res = lane_run(job_cand[safe], p, keys, state, period)
        state = res.extras["final"]
        counts = counts + res.extras["actions"]["counts"][:, 0]
        invalid = invalid + res.extras["actions"]["invalid"][:, 0]
        ended = (job >= 0) & (res.outcome[:, 0] != 0)
        where = jnp.where(ended, job, capacity)  # out of bounds: dropped
        r = c["results"]
        results = {
            "outcome": r["outcome"].at[where].set(res.outcome[:, 0], mode="drop"),
            "t": r["t"].at[where].set(state.t[:, 0], mode="drop"),
            "damage_dealt": r["damage_dealt"].at[where].set(state.damage_dealt[:, 0], mode="drop"),
            "damage_taken": r["damage_taken"].at[where].set(state.damage_taken[:, 0], mode="drop"),
            "counts": r["counts"].at[where].set(counts, mode="drop"),
            "invalid": r["invalid"].at[where].set(invalid, mode="drop"),
        }
        return {
            "job": jnp.where(ended, -1, job),
            "state": state,
            "period": period + 1,
            "counts": counts,
            "invalid": invalid,
            "next": c["next"] + jnp.sum(take),
            "results": results,
        }

    return body


def rollout_policies(policies: Sequence, config: ScoreConfig) -> list[dict]:
    """Plays every policy `config.episodes_per_bot` episodes per bot in one compiled program; one summary each."""
    if not policies:
        return []
    fn, jobs = make_batch_scorer(policies, config)
    results = jax.device_get(fn())
    return summarize(results, jobs, len(policies), config)
