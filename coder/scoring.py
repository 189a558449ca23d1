"""The coder's reward (SMAC-R1): -1 no code, -0.5 a program that fails, else its win rate.

    from jaxarena.coder.scoring import ScoreConfig, score_replies
    scores = score_replies([reply_text, ...], ScoreConfig(episodes_per_bot=1000))
    scores[0].reward, scores[0].win_rate["balanced"], scores[0].stats

A reply is scored in three steps:

1. `extract_code` finds the program (a fenced python block or a bare
   `def policy`). None: reward `NO_CODE` (-1).
2. `compile_program` checks, translates and traces it in a sandbox. A
   `ProgramError` (syntax, forbidden construct, wrong shape or dtype, ...),
   a failure while tracing it inside the batch, or an action outside 0..5
   during play: reward `PROGRAM_ERROR` (-0.5), with the message the critic
   reads.
3. Otherwise the program plays `episodes_per_bot` episodes against each
   bot, and the reward is the NPC win rate averaged over the bots. The
   critic also gets per-bot loss and timeout rates, damage dealt and taken,
   episode length and how often each action was used.

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

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jaxarena
from jaxarena.names import ACTIONS, BOT_TYPES, BOT_WIN, NPC_WIN, NUM_ACTIONS, TIMEOUT, bot_index
from jaxarena.runner import Accumulator, Start, make_runner
from jaxarena.scenarios import DEFAULT_SCENARIO, scenario_overrides

#: The reward of a reply with no program in it.
NO_CODE = -1.0
#: The reward of a program that does not compile, raises, returns the wrong shape/dtype or an invalid action.
PROGRAM_ERROR = -0.5


@dataclasses.dataclass(frozen=True)
class ScoreConfig:
    """How programs are scored. The defaults are the issue's: >= 1,000 episodes per bot, all three bots.

    lanes: episodes played side by side (the compiled program's batch).
    batch: candidates per compiled program. Compiling costs seconds, so candidates share one; but every lane
      computes every candidate's program (`lax.switch` over a per-lane index is a select under vmap), so the
      policy's cost grows with the batch (benchmarks/coder_throughput.py measures the trade-off).
    chunk_s: game time between refills of lanes whose episode has ended; a
      whole number of ticks (dt = 0.1 s).
    """

    episodes_per_bot: int = 1000
    scenario: str = DEFAULT_SCENARIO
    seed: int = 0
    bots: tuple[str, ...] = BOT_TYPES
    lanes: int = 2048
    batch: int = 4
    chunk_s: float = 1.0

    def __post_init__(self):
        if not isinstance(self.episodes_per_bot, int) or self.episodes_per_bot < 1:
            raise ValueError(f"episodes_per_bot must be a positive int, got {self.episodes_per_bot!r}")
        if not isinstance(self.lanes, int) or self.lanes < 1:
            raise ValueError(f"lanes must be a positive int, got {self.lanes!r}")
        if not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"batch must be a positive int, got {self.batch!r}")
        scenario_overrides(self.scenario)  # ValueError naming the presets
        if not self.bots:
            raise ValueError(f"bots must name at least one of {', '.join(BOT_TYPES)}")
        for bot in self.bots:
            bot_index(bot)
        if len(set(self.bots)) != len(self.bots):
            raise ValueError(f"bots repeat: {self.bots}")
        ticks = self.chunk_s / 0.1
        if self.chunk_s <= 0 or abs(ticks - round(ticks)) > 1e-6:
            raise ValueError(f"chunk_s must be a positive whole number of 0.1 s ticks, got {self.chunk_s!r}")


@dataclasses.dataclass(frozen=True)
class Score:
    """One candidate's reward and what the critic reads about it.

    status: "no_code" (reward -1), "error" (-0.5) or "ok" (the mean win rate).
    error: the critic-readable reason for "error" ("line N: kind: message" where known).
    win_rate: NPC win rate per bot (empty unless "ok").
    stats: per bot: loss and timeout rates, mean damage dealt/taken, mean
      episode length (s), and the share of living-NPC ticks spent on each action.
    """

    reward: float
    status: str
    error: str | None = None
    error_kind: str | None = None
    error_line: int | None = None
    win_rate: dict[str, float] = dataclasses.field(default_factory=dict)
    stats: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    episodes_per_bot: int = 0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Score:
        return cls(**data)


def no_code_score() -> Score:
    return Score(reward=NO_CODE, status="no_code", error="no program found in the reply")


def error_score(message: str, kind: str | None = None, line: int | None = None) -> Score:
    return Score(reward=PROGRAM_ERROR, status="error", error=message, error_kind=kind, error_line=line)


# --- the batched rollout -------------------------------------------------------------------------


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


def episode_keys(seed: int, bot: int, episodes: int) -> jax.Array:
    """The key of each episode against `bot`: the same for every candidate (paired episodes)."""
    base = jax.random.fold_in(jax.random.key(seed), bot)
    return jax.vmap(lambda e: jax.random.fold_in(base, e))(jnp.arange(episodes))


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
    env, params = jaxarena.make("Arena-v0", scenario=config.scenario, decision_period_s=config.chunk_s)
    k = len(policies)
    e = config.episodes_per_bot
    bots = [bot_index(b) for b in config.bots]
    # Longest opponents first (evasive, balanced, aggressive by default) so the queue's tail is short.
    order = sorted(range(len(bots)), key=lambda i: _LONG_FIRST.index(bots[i]))
    cand = np.tile(np.arange(k, dtype=np.int32), len(bots) * e)
    bot_of_job = np.repeat(np.asarray([bots[i] for i in order], np.int32), e * k)
    episode = np.tile(np.repeat(np.arange(e, dtype=np.int32), k), len(bots))
    n_jobs = cand.shape[0]
    lanes = min(config.lanes, n_jobs)

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

    def lane_params(bot_types):
        return params.replace(bot_type=bot_types)

    def score():
        job_cand = jnp.asarray(cand)
        job_bot = jnp.asarray(bot_of_job)
        all_keys = jnp.stack([episode_keys(config.seed, b, e) for b in bots])  # (bots, E)
        bot_pos = {b: i for i, b in enumerate(bots)}
        job_key_row = jnp.asarray(np.asarray([bot_pos[int(b)] for b in bot_of_job], np.int32))
        job_key = all_keys[job_key_row, jnp.asarray(episode)]
        # Every job's first state, once: cheaper than resetting every lane at every chunk.
        job_start = lane_reset(job_key, lane_params(job_bot))

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
        carry0 = {
            "job": none,
            "state": state0,
            "period": jnp.zeros((lanes,), jnp.int32),
            "counts": jnp.zeros((lanes, NUM_ACTIONS), jnp.int32),
            "invalid": jnp.zeros((lanes,), jnp.int32),
            "next": jnp.int32(0),
            "results": results0,
        }

        def body(c):
            free = c["job"] < 0
            new_job = c["next"] + jnp.cumsum(free.astype(jnp.int32)) - 1
            take = free & (new_job < n_jobs)
            job = jnp.where(take, new_job, c["job"])
            safe = jnp.clip(job, 0, n_jobs - 1)
            p = lane_params(job_bot[safe])
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
            where = jnp.where(ended, job, n_jobs)  # out of bounds: dropped
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

        def cond(c):
            return jnp.any(c["job"] >= 0) | (c["next"] < n_jobs)

        return jax.lax.while_loop(cond, body, carry0)["results"]

    return jax.jit(score), {"cand": cand, "bot": bot_of_job}


# Evasive first: its episodes run longest (often to the 120 s timeout).
_LONG_FIRST = (1, 2, 0)


def summarize(results: dict, jobs: dict, k: int, config: ScoreConfig, dt: float = 0.1) -> list[dict]:
    """Per candidate: win rate per bot and the critic's statistics, from per-job results."""
    res = {name: np.asarray(v) for name, v in results.items()}
    out = []
    for c in range(k):
        win_rate, stats = {}, {}
        invalid = 0
        for name in config.bots:
            sel = (jobs["cand"] == c) & (jobs["bot"] == bot_index(name))
            outcome = res["outcome"][sel]
            counts = res["counts"][sel].sum(axis=0)
            invalid += int(res["invalid"][sel].sum())
            win_rate[name] = float(np.mean(outcome == NPC_WIN))
            stats[name] = {
                "win": win_rate[name],
                "loss": float(np.mean(outcome == BOT_WIN)),
                "timeout": float(np.mean(outcome == TIMEOUT)),
                "damage_dealt": float(np.mean(res["damage_dealt"][sel])),
                "damage_taken": float(np.mean(res["damage_taken"][sel])),
                "episode_s": float(np.mean(res["t"][sel]) * dt),
                "action_share": {a: float(x) for a, x in zip(ACTIONS, counts / max(counts.sum(), 1), strict=True)},
            }
        out.append({"win_rate": win_rate, "stats": stats, "invalid_actions": invalid})
    return out


def rollout_policies(policies: Sequence, config: ScoreConfig) -> list[dict]:
    """Plays every policy `config.episodes_per_bot` episodes per bot in one compiled program; one summary each."""
    if not policies:
        return []
    fn, jobs = make_batch_scorer(policies, config)
    results = jax.device_get(fn())
    return summarize(results, jobs, len(policies), config)


def mean_win_rate(win_rate: dict[str, float]) -> float:
    return float(math.fsum(win_rate.values()) / len(win_rate))


# --- replies and sources to scores ---------------------------------------------------------------


_UNSTABLE_KINDS = ("timeout", "memory")


def _compile(source: str):
    """(CompiledProgram, None) or (None, error Score)."""
    from .compile import compile_program
    from .sandbox import ProgramError

    try:
        return compile_program(source), None
    except ProgramError as err:
        return None, error_score(str(err), err.kind, err.line)


def _trace_error(policy) -> Score | None:
    """A program can pass the one-arena trace and still fail batched (vmapped, as the rollout runs it)."""
    from jaxarena.names import NUM_NPCS
    from jaxarena.types import OBS_SIZE

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


def _ok_score(summary: dict, config: ScoreConfig) -> Score:
    if summary["invalid_actions"]:
        return error_score(
            f"runtime: the policy returned an action outside 0..{NUM_ACTIONS - 1} on {summary['invalid_actions']} "
            "NPC-ticks (a computed value, not one of the six action names?); such a tick does nothing",
            "runtime",
        )
    return Score(
        reward=mean_win_rate(summary["win_rate"]),
        status="ok",
        win_rate=summary["win_rate"],
        stats=summary["stats"],
        episodes_per_bot=config.episodes_per_bot,
    )


def _score_group(policies: Sequence, config: ScoreConfig) -> list[Score]:
    """One compiled program for `policies`; if it fails, each alone, so one bad program sinks only itself."""
    try:
        summaries = rollout_policies(policies, config)
    except Exception as exc:  # noqa: BLE001 - whatever a program raises is the critic's to read
        if len(policies) == 1:
            return [error_score(f"runtime: the program failed in the rollout: {type(exc).__name__}: {exc}", "runtime")]
        return [_score_group([p], config)[0] for p in policies]
    return [_ok_score(summary, config) for summary in summaries]


def score_policies(policies: Sequence, config: ScoreConfig | None = None) -> list[Score]:
    """Scores jittable policies, `config.batch` per compiled program: -0.5 for a trace failure or an invalid action."""
    config = config or ScoreConfig()
    scores: list[Score | None] = [_trace_error(p) for p in policies]
    runnable = [i for i, s in enumerate(scores) if s is None]
    for start in range(0, len(runnable), config.batch):
        group = runnable[start : start + config.batch]
        for i, score in zip(group, _score_group([policies[i] for i in group], config), strict=True):
            scores[i] = score
    return scores


def score_sources(
    sources: Sequence[str | None], config: ScoreConfig | None = None, cache: dict[str, Score] | None = None
) -> list[Score]:
    """Scores program sources (None: no code, -1), compiling each in the sandbox, then playing them in one batch.

    `cache` (source -> Score, for this `config`) is read and filled: a program met again, in this batch or
    an earlier one, is not played again; its first score stands.
    """
    config = config or ScoreConfig()
    cache = {} if cache is None else cache
    scores: list[Score | None] = [None] * len(sources)
    compiled = {}
    first = {}  # source -> index of its first occurrence in this batch
    for i, source in enumerate(sources):
        if source is None:
            scores[i] = no_code_score()
            continue
        if source in cache:
            scores[i] = cache[source]
            continue
        if source in first:
            continue
        first[source] = i
        program, failed = _compile(source)
        if failed is not None:
            scores[i] = failed
        else:
            compiled[i] = program.policy
    for i, score in zip(compiled, score_policies(list(compiled.values()), config), strict=True):
        scores[i] = score
    for source, i in first.items():
        # A compile that ran out of time or memory may pass on a less loaded machine: not remembered.
        if scores[i].error_kind not in _UNSTABLE_KINDS:
            cache[source] = scores[i]
    return [scores[first[s]] if score is None else score for s, score in zip(sources, scores, strict=True)]


def score_replies(replies: Sequence[str | None], config: ScoreConfig | None = None) -> list[Score]:
    """Scores LLM replies: extract the program (none: -1), compile (fails: -0.5), play (the mean win rate)."""
    from .extract import extract_code

    return score_sources([extract_code(r) for r in replies], config)
