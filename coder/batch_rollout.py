"""The rollout that scores coder programs: a batch of candidates shares a fixed set of lanes.

Speed. The arena is compiled once per scenario and lane count (`lanes.arena_programs`), and a
batch's candidates add only their policy program (`lanes.policy_program`), so a new batch costs
well under a second of compiling instead of the arena's seconds. A host loop steps the lanes one
tick at a time, each lane playing one episode at a time. A lane whose episode ends takes the
next job (candidate, bot, episode) from a queue at the next chunk boundary, so no lane idles
through a finished episode's remaining time until the queue runs dry. The lanes and the ended
jobs persist between calls (`LanePool`), so racing's next look continues the episodes that idle
lanes started ahead. Every lane computes every program of its batch (a select), hence small
batches.

Seeds. Episode e against bot b is played from the key
`fold_in(fold_in(key(seed), b), e)`, whichever candidate plays it and
whatever else is in the batch: candidates are compared on paired episodes.
A job starts from the one episode runner's spawn on that key and draws the
runner's policy keys; the arena's float order is `BatchedArena`'s, so a
long episode can drift from the runner's vmapped one by rounding (tested: 20
ticks agree to rounding, and most whole episodes end alike). A score is
reproducible from the seed, and chunks, lane refills, playing ahead and batch
mates change no episode (tested).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import BOT_TYPES, NUM_ACTIONS, NUM_NPCS, bot_index
from jaxarena.types import OBS_SIZE

from . import lanes as lanes_module
from .score_stats import summarize
from .score_types import Score, ScoreConfig, error_score

NUM_BOTS = len(BOT_TYPES)  # job numbers leave room for every bot, scored or not


def episode_key(root: jax.Array, bot, episode) -> jax.Array:
    """Episode `episode` against `bot`'s key under the scorer's root key: one rule for every scoring path."""
    return jax.random.fold_in(jax.random.fold_in(root, bot), episode)


def episode_keys(seed: int, bot: int, episodes: int) -> jax.Array:
    """The key of each episode against `bot`: the same for every candidate (paired episodes)."""
    root = jax.random.key(seed)
    return jax.vmap(lambda e: episode_key(root, bot, e))(jnp.arange(episodes))


def make_batch_scorer(policies: Sequence, config: ScoreConfig):
    """`fn() -> per-job results` (numpy) of every policy's `episodes_per_bot` episodes against each bot.

    Jobs are (candidate, bot, episode), candidate-minor so that every candidate
    progresses at the same pace. Returns (fn, jobs) where jobs holds the
    numpy arrays `cand` and `bot` (J,) in job order.
    """
    bots = [bot_index(b) for b in config.bots]
    cand, bot_of_job, episode = _job_queue(len(policies), bots, config.episodes_per_bot)
    pool = LanePool(policies, config)
    ids = pool.job_ids(cand, bot_of_job, episode)

    def fn():  # plays on the first call; the pool keeps the results, so later calls only read them
        pool.play(ids)
        return {name: column[ids] for name, column in pool.results.items()}

    return fn, {"cand": cand, "bot": bot_of_job}


#: Lane counts that are multiples of this run the same vector code, so a job's floats do not depend
#: on which set of lanes plays it (XLA:CPU vectorises the lane axis by 16 at most).
LANE_MULTIPLE = 16


def lane_sets(lanes: int, jobs: int) -> list[int]:
    """A pool's lane counts, largest first: at most `lanes` (fewer if `jobs` need fewer), then a quarter.

    The quarter plays the last episodes once nothing is left to hand out, and exists only if it has
    at least `lanes.MIN_TAIL_LANES`. Both are multiples of `LANE_MULTIPLE` where `lanes` is.
    """
    full = min(lanes, -(-jobs // LANE_MULTIPLE) * LANE_MULTIPLE)
    tail = full // 4 // LANE_MULTIPLE * LANE_MULTIPLE
    return [full] + ([tail] if tail >= lanes_module.MIN_TAIL_LANES else [])


@jax.jit
def _runner_keys(root: jax.Array, bot, episode) -> jax.Array:
    """The one episode runner's key of each job: `split(episode_key, 1)[0]`; compiled once per size."""
    return jax.vmap(lambda b, e: jax.random.split(episode_key(root, b, e), 1)[0])(bot, episode)


class LanePool:
    """A batch's candidates on a fixed set of lanes, kept between calls with every job that ended.

    A job is (candidate, bot, episode), numbered by `job_ids`. `play(ids, required)` plays until
    the first `required` of `ids` have ended; a lane left idle meanwhile takes the next of the other
    ids, in order (work a later call is likely to ask for: racing's next look), and the episodes
    still running when the call returns carry over to the next call. A job that ended is not played
    again; its row of `results` holds its outcome, length, damage, action counts and invalid
    actions. Every job has its own keys, and the lane counts are multiples of 16 (`lane_sets`), so
    when and on which lane a job is played changes nothing, to the bit (tested).

    The arena is compiled once per process and lane count, the policy once per pool and lane count.
    """

    def __init__(self, policies: Sequence, config: ScoreConfig):
        self.episodes = config.episodes_per_bot
        self._per_candidate = NUM_BOTS * self.episodes
        sizes = lane_sets(config.lanes, len(policies) * len(config.bots) * self.episodes)
        self._arenas = [lanes_module.arena_programs(config.scenario, size) for size in sizes]
        self._policy = lanes_module.policy_program(policies)
        self._chunk_ticks = round(config.chunk_s / 0.1)
        bot, episode = np.divmod(np.arange(self._per_candidate), self.episodes)
        # The one episode runner's key of each (bot, episode), in job-id order within a candidate: raw
        # key data, so the host picks the lanes' keys in numpy (what `lanes`' programs take).
        self._keys = np.asarray(jax.random.key_data(_runner_keys(jax.random.key(config.seed), bot, episode)))
        size = len(policies) * self._per_candidate
        self.results = {
            "outcome": np.zeros(size, np.int32),
            "t": np.zeros(size, np.int32),
            "damage_dealt": np.zeros(size, np.float32),
            "damage_taken": np.zeros(size, np.float32),
            "counts": np.zeros((size, NUM_ACTIONS), np.int32),
            "invalid": np.zeros(size, np.int32),
        }
        self.done = np.zeros(size, bool)
        self._lanes = self._job = None  # the full set of lanes and each one's job (-1: none), between calls

    def job_ids(self, cand, bot, episode) -> np.ndarray:
        """The number of each job (candidate, bot index, episode): an index into `results`."""
        cand, bot, episode = (np.asarray(a, np.int64) for a in (cand, bot, episode))
        if cand.size and not (
            0 <= cand.min()
            and cand.max() * self._per_candidate < len(self.done)
            and 0 <= bot.min()
            and bot.max() < NUM_BOTS
            and 0 <= episode.min()
            and episode.max() < self.episodes
        ):
            raise ValueError(
                f"jobs outside this pool's {len(self.done) // self._per_candidate} candidates, "
                f"{NUM_BOTS} bots and {self.episodes} episodes per bot"
            )
        return (cand * NUM_BOTS + bot) * self.episodes + episode

    def play(self, ids, required: int | None = None) -> None:
        """Plays until the first `required` (default: all) of job `ids` have ended; idle lanes take the rest."""
        ids = np.asarray(ids, np.int64)
        required = len(ids) if required is None else required
        if not 0 <= required <= len(ids):
            raise ValueError(f"{required} required of {len(ids)} jobs")
        if len(ids) and (ids.min() < 0 or ids.max() >= len(self.done) or len(np.unique(ids)) < len(ids)):
            raise ValueError(f"job ids must be distinct numbers from job_ids, below {len(self.done)}")
        need = ids[:required]
        arena, *smaller = self._arenas
        lanes_state, job = (
            (arena.empty(), np.full(arena.lanes, -1)) if self._lanes is None else (self._lanes, self._job)
        )
        self._lanes = self._job = None  # the buffers are donated below; kept again only if the call ends well
        wanted = ids[~self.done[ids]]
        job[~np.isin(job, wanted)] = -1  # a lane whose job is no longer asked for (a dropped candidate's) is free
        queue = wanted[~np.isin(wanted, job)]
        taken = 0
        while not self.done[need].all():
            free = np.nonzero(job < 0)[0][: len(queue) - taken]
            job[free] = queue[taken : taken + len(free)]
            taken += len(free)
            take = np.zeros(len(job), bool)
            take[free] = True
            busy = np.nonzero(job >= 0)[0]
            if len(busy) == 0:  # cannot happen: a job asked for is ended, running or queued
                raise RuntimeError("the lanes are idle with jobs still to play")
            if taken == len(queue) and smaller and len(busy) <= smaller[0].lanes:
                arena, *smaller = smaller
                # The busy lanes first, then idle ones to fill the smaller set.
                keep = np.concatenate([busy, np.nonzero(job < 0)[0]])[: arena.lanes]
                lanes_state, job, take = lanes_module.take_lanes(lanes_state, keep), job[keep], take[keep]
            lane_job = np.maximum(job, 0)
            cand, within = np.divmod(lane_job, self._per_candidate)
            # On the device once per chunk, not per tick (device_put: no conversion dispatched).
            lane_keys, lane_cand = jax.device_put((self._keys[within], cand.astype(np.int32)))
            if take.any():
                lanes_state = arena.restart(lanes_state, take, (within // self.episodes).astype(np.int32), lane_keys)
            for _ in range(self._chunk_ticks):
                actions = self._policy(lane_cand, lanes_state["obs"], lane_keys, lanes_state["state"].t)
                lanes_state = arena.tick(lanes_state, actions)
            seen = jax.device_get(arena.report(lanes_state))
            ended = (job >= 0) & seen["finished"]
            for name, column in self.results.items():
                column[job[ended]] = seen[name][ended]
            self.done[job[ended]] = True
            job[ended] = -1
        if arena is self._arenas[0]:  # episodes still running on a smaller set are played again if asked for
            self._lanes, self._job = lanes_state, job


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


def trace_error(policy) -> Score | None:
    """None, or the error Score of a program that passes the one-arena trace and still fails batched
    (vmapped, as the rollout runs it)."""
    obs = jax.ShapeDtypeStruct((2, NUM_NPCS, OBS_SIZE), jnp.float32)
    keys = jax.eval_shape(lambda: jax.random.split(jax.random.key(0), 2))
    try:
        out = jax.eval_shape(jax.vmap(lambda o, k: policy(None, o, k)), obs, keys)
    except Exception as exc:  # noqa: BLE001 - whatever a program raises is the critic's to read
        return error_score(f"runtime: the program failed when run on a batch of arenas: {type(exc).__name__}: {exc}")
    if out.shape != (2, NUM_NPCS) or not jnp.issubdtype(out.dtype, jnp.integer):
        return error_score(
            f"shape: on a batch of arenas the policy gives {out.dtype}{list(out.shape)}, not int32[..., {NUM_NPCS}]",
            "shape",
        )
    return None
