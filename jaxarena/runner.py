"""The one episode runner: a batch of arenas, each played to the end of its first episode.

Everything that plays the arena for a result (the protocol's A and B cells,
policy evaluation, the tag-response matrix, the demo, a rendered episode) is
this runner with a *policy* and a *tag source* plugged in:

- policy: `policy(params, obs (5, obs_size), key) -> actions (5,)` for one
  arena (see `jaxarena.policies`); the runner vmaps it over episodes. A squad
  with memory is `policy(params, obs, key, memory) -> (actions, memory)`, each
  episode's memory starting from `policy.initial_memory` (`with_memory`).
- tag source: a `jaxarena.tag_sources.TagSource`, asked once per decision
  period (5 s) for the whole batch: `step(carry, features, prev_tags, done,
  time_s, key[, state, params]) -> (tags, aux, carry)`. An int is the fixed
  tag, and a plain jittable `fn(features (N, 5), prev_tags (N,), done (N,),
  time_s (), key) -> tags` (or `(tags, aux)`) is a source without a carry.
  `features` are `llm_features`, the Table 10 state; aux (e.g. the LLM's
  per-tag probabilities) is stacked per period into `RolloutResult.decision_aux`.

Shape: an outer `lax.scan` over decision periods, an inner one over the
period's ticks (50 at dt = 0.1 s), arenas vmapped. A tag is set in one place
(`Arena.retag`, state and observation together), just before the tick it
acts on. Arenas step without auto-reset: an episode that ends keeps its
final state (and its results) while its lane idles until the batch is
done; once every episode has ended, the remaining periods are skipped by a
`lax.cond`. The policy's actions are checked as `env.step` checks them.

Keys: `key` is split into one key per episode, and episode i's reset, action
and step keys depend only on (key, i), so two policies or tag sources run
with the same key meet the same spawns (the protocol's paired design). The
tag source gets keys from a stream of its own.

Hooks: `accumulators` add per-episode sums over ticks (see `Accumulator`),
and `trace` records one pytree per tick (e.g. every state, to render).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .checks import checked_actions
from .env import Arena, outcome_of
from .names import LLM_FEATURES, NUM_NPCS, NUM_TAGS
from .observe import llm_features
from .policies import with_memory
from .tag_sources import TagFn, TagSource, as_tag_source
from .types import EnvParams, EnvState, ticks


class Start(NamedTuple):
    """Where `run` starts instead of a reset: N states at the start of decision period `period`.

    A squad with memory starts from `memory` (leaves (N, 5, ...)), or afresh where it is None.
    """

    state: EnvState
    period: jax.Array
    memory: Any = None


class Tick(NamedTuple):
    """What one tick of the batch did; leaves are batched over the N episodes.

    state: before the step, with the tick's tag applied; obs: what the policy
    saw; next_state: after the step (not reset); running: the episode had
    not ended before this tick (results of ended episodes must not change).
    """

    obs: jax.Array
    state: EnvState
    actions: jax.Array
    next_state: EnvState
    reward: jax.Array
    done: jax.Array
    info: dict
    running: jax.Array


@dataclasses.dataclass(frozen=True)
class Accumulator:
    """A per-episode quantity folded over ticks: `init(num_episodes) -> acc`, `update(acc, tick) -> acc`."""

    init: Callable[[int], Any]
    update: Callable[[Any, Tick], Any]


@struct.dataclass
class RolloutResult:
    """Per-episode results and per-decision records of one batch.

    N episodes, P decision periods. Episode values are frozen at the tick the
    episode ended; an episode still running at the end has outcome 0.

    outcome (N,) int32: 1 NPC win, 2 bot win, 3 timeout (0 not finished).
    duration_s (N,) float32: game time at the end of the episode.
    team_return (N,) float32: summed per-step reward, averaged over the 5 NPCs.
    damage_dealt, damage_taken (N,) float32: squad damage to / from the bot.
    tag_steps (N, 4) int32: ticks each tag was active.
    decision_tags (P, N) int32: the tag chosen at each period's start (the
      previous tag where the episode had already ended).
    decision_features (P, N, 5) float32: the state the tag source saw (an
      ended episode's final state where it had already ended).
    decision_active (P, N) bool: whether the episode was still running, i.e.
      whether a decision was really made for it.
    extras: each accumulator's final value, by name.
    trace: the `trace` hook's per-tick outputs, stacked on a leading (P x
      ticks per period) axis, or None. Ticks after an episode ended hold its
      final state (or zeros, in periods skipped once every episode had ended).
    decision_states: with `record_states`, the `EnvState` (leaves (P, N, ...))
      each decision was made in, before the chosen tag was applied; else None.
    decision_aux: what the tag source returned beside the tags, stacked on a
      leading (P,) axis (every lane, ended ones included: mask with
      `decision_active`), or None for a source that returns tags only.
    final_state: the `EnvState` (leaves (N, ...)) each episode stopped in,
      e.g. for a caller that plays one period at a time and continues from it
      with `Start` (the RL selector's decision-level environment).
    """

    outcome: jax.Array
    duration_s: jax.Array
    team_return: jax.Array
    damage_dealt: jax.Array
    damage_taken: jax.Array
    tag_steps: jax.Array
    decision_tags: jax.Array
    decision_features: jax.Array
    decision_active: jax.Array
    extras: dict
    trace: Any = None
    decision_states: Any = None
    decision_aux: Any = None
    final_state: Any = None

    def decisions(self) -> list[dict]:
        """The decisions actually made, as dicts (episode, period, state, tag)."""
        tags = np.asarray(self.decision_tags)
        feats = np.asarray(self.decision_features)
        active = np.asarray(self.decision_active)
        return [
            {
                "episode": int(n),
                "period": int(p),
                "state": {k: float(v) for k, v in zip(LLM_FEATURES, feats[p, n], strict=True)},
                "tag": int(tags[p, n]),
            }
            for p, n in zip(*np.nonzero(active), strict=True)
        ]


def has_ended(state: EnvState, params: EnvParams) -> jax.Array:
    """Whether an episode is over in `state`: bot down, squad down, or out of time."""
    return (state.bot_hp <= 0.0) | jnp.all(state.npc_hp <= 0.0) | (state.t >= ticks(params.episode_s, params.dt))


def schedule_of(env_params: EnvParams) -> tuple[int, int, float]:
    """(ticks per decision period, periods in a full episode, period in s), from concrete params."""
    dt = float(np.asarray(env_params.dt))
    period_s = float(np.asarray(env_params.decision_period_s))
    episode_s = float(np.asarray(env_params.episode_s))
    steps = int(round(period_s / dt))
    if steps < 1 or abs(steps * dt - period_s) > 1e-6:
        raise ValueError(f"decision_period_s={period_s} must be a whole number of steps of dt={dt}")
    return steps, int(math.ceil(episode_s / period_s - 1e-9)), period_s


def make_runner(
    env: Arena,
    env_params: EnvParams,
    policy: Callable,
    tag_source: TagSource | TagFn | int = 0,
    num_episodes: int = 100,
    *,
    latency_steps: int = 0,
    num_periods: int | None = None,
    accumulators: Mapping[str, Accumulator] | None = None,
    trace: Callable[[Tick], Any] | None = None,
    record_states: bool = False,
) -> Callable[..., RolloutResult]:
    """Builds a jitted `run(policy_params, env_params, key, initial_tag=0) -> RolloutResult`.

    The schedule (ticks per period, number of periods) is read from the
    `env_params` given here; `run` may then be called with other params of
    the same shapes (another bot type) without recompiling. `initial_tag`
    (scalar or (N,), may be traced) is every episode's tag before the first
    decision; with `hold_tags` as the source it is the tag of the whole episode.

    Args:
      tag_source: a `TagSource`, an int or a plain tag function (`as_tag_source`).
      latency_steps: a tag chosen at a period's start takes effect only after
        this many ticks (it models an LLM reply arriving while the game goes
        on); must be smaller than the ticks in a period.
      num_periods: decision periods to run; default a full episode (24 for
        120 s). Fewer gives short test rollouts.
      record_states: also return the `EnvState` each decision was made in
        (`RolloutResult.decision_states`), e.g. for the oracle to price.

    `run(..., tag_state=...)` gives the tag source its initial carry (else
    its `init`), e.g. the in-graph LLM's weights as a program argument.
    `run(..., episode_keys=keys)` gives each lane its own key (default: N split from `key`);
    lanes with the same key and start play the same game until their tags differ.
    `run(..., start=Start(state, period))` continues N given states (each at
    the start of decision period `period`) instead of resetting; the oracle
    branches decision states this way. A tag source that declares
    `reads_state` sees the full state, which is how a planner such as the
    oracle's Combination O plugs in.
    """
    steps_per_period, full_periods, period_s = schedule_of(env_params)
    periods = full_periods if num_periods is None else int(num_periods)
    if not 0 <= latency_steps < steps_per_period:
        raise ValueError(f"latency_steps must be in [0, {steps_per_period}), got {latency_steps}")
    rollout = _Rollout(
        env,
        policy,
        as_tag_source(tag_source),
        num_episodes,
        (steps_per_period, periods, period_s),
        latency_steps,
        dict(accumulators or {}),
        trace,
        record_states,
    )
    return jax.jit(rollout.run)


class _Rollout:
    """The pieces of one `make_runner` program, fixed when it is built; `run` is what gets jitted."""

    def __init__(self, env, policy, source, n, schedule, latency_steps, accumulators, trace, record_states):
        self.env, self.source, self.n = env, source, n
        self.steps_per_period, self.periods, self.period_s = schedule
        self.latency_steps, self.accumulators, self.trace = latency_steps, accumulators, trace
        self.record_states = record_states
        # A squad with memory carries it per episode (leaves (N, 5, ...)); any other carries ().
        self.initial_memory, step = with_memory(policy)

        def act(params, obs, key, memory):
            # Actions are checked as `env.step` checks them (shape (5,), integers), with its error messages.
            actions, memory = step(params, obs, key, memory)
            return checked_actions(actions), memory

        self.batched_policy = jax.vmap(act, in_axes=(None, 0, 0, 0))
        self.batched_step = jax.vmap(env.step_env, in_axes=(0, 0, 0, None))
        self.batched_retag = jax.vmap(env.retag, in_axes=(0, 0, 0, None))
        self.batched_observe = jax.vmap(env.observe, in_axes=(0, None))

    def run(
        self, policy_params, params, key, initial_tag=0, start: Start | None = None, tag_state=None, episode_keys=None
    ):
        n, env = self.n, self.env
        if episode_keys is None:
            episode_keys = jax.random.split(key, n)
        # Its own stream: fold_in(key, p) would equal episode p's key.
        tag_key = jax.random.fold_in(key, 0x7FFFFFFF)
        if start is None:
            reset_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(episode_keys)
            obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
            first_period = jnp.int32(0)
        else:
            state = start.state
            obs = self.batched_observe(state, params)
            first_period = jnp.asarray(start.period, jnp.int32)
        initial = jnp.broadcast_to(jnp.asarray(initial_tag, jnp.int32), (n,))
        obs, state = self.batched_retag(obs, state, initial, params)
        zeros = jnp.zeros((n,), jnp.float32)
        # A started state may already be over (an ended lane of a recorded batch): it stays as it is.
        ended = jax.vmap(has_ended, in_axes=(0, None))(state, params)
        carry0 = {
            "obs": obs,
            "state": state,
            "finished": ended,
            "outcome": jnp.where(ended, jax.vmap(outcome_of)(state), 0),
            "duration_s": jnp.where(ended, state.t.astype(jnp.float32) * params.dt, 0.0),
            "team_return": zeros,
            "damage_dealt": zeros,
            "damage_taken": zeros,
            "tag_steps": jnp.zeros((n, NUM_TAGS), jnp.int32),
            "extras": {name: acc.init(n) for name, acc in self.accumulators.items()},
            "memory": self.initial_memory((n, NUM_NPCS)) if start is None or start.memory is None else start.memory,
        }
        if tag_state is None:
            tag_state = self.source.init(n)
        period_fn = partial(self._decision_period, (policy_params, params, episode_keys, tag_key))
        (final, _), ((tags, feats, active, states, aux), traced) = jax.lax.scan(
            period_fn, (carry0, tag_state), first_period + jnp.arange(self.periods)
        )
        if self.trace is not None:  # (P, ticks per period, ...) -> one time axis
            traced = jax.tree.map(lambda y: y.reshape((-1,) + y.shape[2:]), traced)
        return RolloutResult(
            outcome=final["outcome"],
            duration_s=final["duration_s"],
            team_return=final["team_return"],
            damage_dealt=final["damage_dealt"],
            damage_taken=final["damage_taken"],
            tag_steps=final["tag_steps"],
            decision_tags=tags,
            decision_features=feats,
            decision_active=active,
            extras=final["extras"],
            trace=traced,
            decision_states=states,
            decision_aux=aux,
            final_state=final["state"],
        )

    def _env_step(self, inputs, carry, step_index):
        """One tick for every episode; folds the results of episodes still running."""
        policy_params, params, episode_keys, _ = inputs
        obs, state = carry["obs"], carry["state"]
        keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, step_index + 1)))(episode_keys)
        actions, memory = self.batched_policy(policy_params, obs, keys[:, 0], carry["memory"])
        stepped, reward, terminated, truncated, info = self.batched_step(keys[:, 1], state, actions, params)
        done = terminated | truncated
        running = ~carry["finished"]
        ended_now = running & done
        # An ended episode stays as it ended (its lane idles until the batch is done).
        next_state = jax.tree.map(
            lambda new, old: jnp.where(running.reshape((-1,) + (1,) * (new.ndim - 1)), new, old), stepped, state
        )
        episode_time = next_state.t.astype(jnp.float32) * params.dt
        tick = Tick(obs, state, actions, next_state, reward, done, info, running)
        out = {
            "obs": self.batched_observe(next_state, params),
            "state": next_state,
            "finished": carry["finished"] | done,
            "outcome": jnp.where(ended_now, jax.vmap(outcome_of)(next_state), carry["outcome"]),
            "duration_s": jnp.where(ended_now, episode_time, jnp.where(running, episode_time, carry["duration_s"])),
            "team_return": carry["team_return"] + jnp.where(running, reward.mean(axis=-1), 0.0),
            "damage_dealt": carry["damage_dealt"] + jnp.where(running, info["damage_dealt"].sum(-1), 0.0),
            "damage_taken": carry["damage_taken"] + jnp.where(running, info["damage_taken"].sum(-1), 0.0),
            "tag_steps": carry["tag_steps"] + jax.nn.one_hot(state.tag, NUM_TAGS, dtype=jnp.int32) * running[:, None],
            "extras": {name: acc.update(carry["extras"][name], tick) for name, acc in self.accumulators.items()},
            "memory": memory,
        }
        return out, (self.trace(tick) if self.trace is not None else None)

    def _decision_period(self, inputs, carry_and_tag_state, period):
        """Asks the tag source once for the batch, then runs the period's ticks."""
        _, params, _, tag_key = inputs
        carry, tag_state = carry_and_tag_state
        features = jax.vmap(llm_features, in_axes=(0, None))(carry["state"], params)
        prev_tags = carry["state"].tag
        time_s = period.astype(jnp.float32) * self.period_s
        tag_key_p = jax.random.fold_in(tag_key, period)
        # Only a source that declares it reads the env state.
        seen = (carry["state"], params) if self.source.reads_state else ()
        chosen, aux, tag_state = self.source.step(
            tag_state, features, prev_tags, carry["finished"], time_s, tag_key_p, *seen
        )
        # Recorded as the arena will run it: clipped into 0..3, and kept where the episode has ended.
        chosen = jnp.clip(jnp.asarray(chosen, jnp.int32), 0, NUM_TAGS - 1)
        chosen = jnp.where(carry["finished"], prev_tags, chosen)
        record = (chosen, features, ~carry["finished"], carry["state"] if self.record_states else None, aux)
        first = period * self.steps_per_period
        env_step = partial(self._env_step, inputs)

        def _run(c):
            # The chosen tag takes effect after `latency_steps` ticks: the one place a tag is set.
            ticks = first + jnp.arange(self.steps_per_period)
            c, before = jax.lax.scan(env_step, c, ticks[: self.latency_steps])
            c = dict(c)
            c["obs"], c["state"] = self.batched_retag(c["obs"], c["state"], chosen, params)
            c, after = jax.lax.scan(env_step, c, ticks[self.latency_steps :])
            if self.trace is None:
                return c, None
            return c, jax.tree.map(lambda a, b: jnp.concatenate([a, b]), before, after)

        def _skip(c):
            # Every episode has ended: keep the carry, and give the trace its shape.
            if self.trace is None:
                return c, None
            shapes = jax.eval_shape(_run, c)[1]
            return c, jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        carry, traced = jax.lax.cond(jnp.all(carry["finished"]), _skip, _run, carry)
        return (carry, tag_state), (record, traced)
