"""Batched evaluation rollouts in which a tag source picks the strategy tag every 5 s.

The rollout is one jitted function: an outer `lax.scan` over decision periods
(5 s each) and an inner `lax.scan` over the period's steps (50 at dt = 0.1 s),
with the environments vmapped over episodes. At the start of each period the
tag source is called *once for the whole batch*; for the LLM that is one
`io_callback` into `TagSelector.select`, which batches, deduplicates and caches
the prompts on the host.

Every way of choosing tags goes through the same code path, so Combination A,
Combination B and any ablation differ only in the tag source:

    tag source                              use
    --------------------------------------  ------------------------------
    an int, or `fixed_tags(0)`              Combination A (tag 0 throughout)
    a `TagSelector`                         Combination B (the LLM)
    `schedule_tags([0, 1, 2, 3])`           ablations: a fixed rotation
    any jittable `fn(features, prev_tags, done, time_s, key) -> tags`
                                            e.g. a learned selector

Because `env.step` auto-resets, an episode that finishes is frozen in the
results at the step it ended (outcome, duration, return) and ignored after,
while its arena keeps stepping in lockstep with the others (vmapped code
cannot stop one lane). Once every episode has finished, the remaining periods
are skipped by a `lax.cond`.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import jaxarena
from jaxarena.observe import with_tag

from .selector import FEATURE_NAMES, TagSelector

#: fn(features (N, 5) f32, prev_tags (N,) i32, done (N,) bool, time_s () f32, key) -> tags (N,) i32
TagFn = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]
#: policy(params, obs (5, obs_size), key) -> actions (5,) int32, for one arena; jittable.
Policy = Callable[[Any, jax.Array, jax.Array], jax.Array]


def fixed_tags(tag: int) -> TagFn:
    """A tag source that always answers `tag` (Combination A uses 0)."""

    def tag_fn(features, prev_tags, done, time_s, key):
        return jnp.full_like(prev_tags, tag)

    return tag_fn


def schedule_tags(schedule: Sequence[int], period_s: float = 5.0) -> TagFn:
    """A tag source that cycles through `schedule`, one entry per decision period."""
    table = jnp.asarray(schedule, jnp.int32)

    def tag_fn(features, prev_tags, done, time_s, key):
        index = jnp.round(time_s / period_s).astype(jnp.int32) % table.shape[0]
        return jnp.full_like(prev_tags, table[index])

    return tag_fn


def as_tag_fn(source: TagSelector | TagFn | int) -> TagFn:
    """Turns any supported tag source into the jittable `TagFn` form."""
    if isinstance(source, TagSelector):
        return source.jax_fn()
    if isinstance(source, (int, np.integer)):
        return fixed_tags(int(source))
    if callable(source):
        return source
    raise TypeError(f"unsupported tag source {source!r}: use an int, a TagSelector or a TagFn")


@struct.dataclass
class RolloutResult:
    """Per-episode results and per-decision records of one batched rollout.

    N episodes, P decision periods. Episode values are frozen at the step the
    episode ended; an episode still running at the end has outcome 0.

    outcome (N,) int32: 1 NPC win, 2 bot win, 3 timeout (0 not finished).
    duration_s (N,) float32: game time at the end (the env's `episode_time`).
    team_return (N,) float32: summed per-step reward, averaged over the 5 NPCs.
    damage_dealt, damage_taken (N,) float32: squad damage to / from the bot.
    tag_steps (N, 4) int32: steps each tag was active.
    decision_tags (P, N) int32: the tag chosen at each period's start (the
      previous tag where the episode had already ended).
    decision_features (P, N, 5) float32: the state the tag source saw.
    decision_active (P, N) bool: whether the episode was still running, i.e.
      whether a decision was really made for it.
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

    def decisions(self) -> list[dict]:
        """The decisions actually made, as dicts (episode, period, time_s, state, tag)."""
        tags = np.asarray(self.decision_tags)
        feats = np.asarray(self.decision_features)
        active = np.asarray(self.decision_active)
        out = []
        for p, n in zip(*np.nonzero(active)):
            out.append({
                "episode": int(n),
                "period": int(p),
                "state": {k: float(v) for k, v in zip(FEATURE_NAMES, feats[p, n])},
                "tag": int(tags[p, n]),
            })
        return out


def _schedule(env_params: Any) -> tuple[int, int, float]:
    """(steps per period, periods per episode, decision period in s), from concrete params."""
    dt = float(np.asarray(env_params.dt))
    period_s = float(np.asarray(env_params.decision_period_s))
    episode_s = float(np.asarray(env_params.episode_s))
    steps = int(round(period_s / dt))
    if steps < 1 or abs(steps * dt - period_s) > 1e-6:
        raise ValueError(f"decision_period_s={period_s} must be a whole number of steps of dt={dt}")
    return steps, int(math.ceil(episode_s / period_s - 1e-9)), period_s


def make_rollout(
    env: Any,
    env_params: Any,
    policy: Policy,
    tag_source: TagSelector | TagFn | int = 0,
    num_episodes: int = 100,
    *,
    latency_steps: int = 0,
    initial_tag: int = 0,
    num_periods: int | None = None,
) -> Callable[[Any, Any, jax.Array], RolloutResult]:
    """Builds a jitted `rollout(policy_params, env_params, key) -> RolloutResult`.

    The schedule (steps per period, number of periods) is read from the
    `env_params` given here; the returned function may then be called with
    other params of the same shapes (e.g. another bot type) without recompiling.

    Args:
      env: a `jaxarena.Arena` (reset/step/set_tag, as `jaxarena.make` returns).
      policy: jittable `policy(params, obs (5, env.obs_size), key) -> actions (5,)` for
        one arena; it is vmapped over episodes here.
      tag_source: see the module docstring.
      num_episodes: episodes run at once (one vmapped batch).
      latency_steps: a tag chosen at a period's start takes effect only after
        this many steps (0, the default, applies it at once). It models the
        LLM's reply arriving while the game goes on: with the paper's sidecar
        the game kept running for the request's latency. Must be smaller than
        the steps in a period.
      initial_tag: the tag every episode starts with (the "previous tag" of the
        first decision).
      num_periods: decision periods to run; default enough for a full episode
        (24 for 120 s). Fewer gives short test rollouts.

    Keys: `key` is split into one key per episode; episode i's reset and
    action keys depend only on (key, i), so two tag sources run with the same
    key meet the same spawns (the paired design of the protocol).
    """
    steps_per_period, full_periods, period_s = _schedule(env_params)
    periods = full_periods if num_periods is None else int(num_periods)
    if not 0 <= latency_steps < steps_per_period:
        raise ValueError(f"latency_steps must be in [0, {steps_per_period}), got {latency_steps}")
    tag_fn = as_tag_fn(tag_source)
    dt = float(np.asarray(env_params.dt))
    batched_policy = jax.vmap(policy, in_axes=(None, 0, 0))
    batched_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))
    batched_set_tag = jax.vmap(env.set_tag)

    def rollout(policy_params, params, key) -> RolloutResult:
        episode_keys = jax.random.split(key, num_episodes)
        reset_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(episode_keys)
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
        state = batched_set_tag(state, jnp.full((num_episodes,), initial_tag, jnp.int32))
        n = num_episodes
        zeros = jnp.zeros((n,), jnp.float32)
        carry0 = {
            "obs": obs,
            "state": state,
            "finished": jnp.zeros((n,), bool),
            "outcome": jnp.zeros((n,), jnp.int32),
            "duration_s": zeros,
            "team_return": zeros,
            "damage_dealt": zeros,
            "damage_taken": zeros,
            "tag_steps": jnp.zeros((n, 4), jnp.int32),
        }

        def _env_step(carry, step_index, pending_tags):
            """One tick for every episode; folds finished episodes' results."""
            state = carry["state"]
            # A newly chosen tag takes effect once `latency_steps` ticks have passed.
            apply_now = (step_index % steps_per_period) >= latency_steps
            state = batched_set_tag(state, jnp.where(apply_now, pending_tags, state.tag))
            # The observation was made before this tick's tag change; the policy must see the tag it acts under.
            obs = with_tag(carry["obs"], state.tag)
            keys = jax.vmap(lambda k: jax.random.split(jax.random.fold_in(k, step_index + 1)))(episode_keys)
            actions = batched_policy(policy_params, obs, keys[:, 0])
            obs, next_state, reward, done, info = batched_step(keys[:, 1], state, actions, params)
            running = ~carry["finished"]
            ended_now = running & done
            out = dict(carry)
            out["obs"], out["state"] = obs, next_state
            out["outcome"] = jnp.where(ended_now, info["outcome"], carry["outcome"])
            out["duration_s"] = jnp.where(
                ended_now, info["episode_time"], jnp.where(running, (step_index + 1) * dt, carry["duration_s"])
            )
            out["team_return"] = carry["team_return"] + jnp.where(running, reward.mean(axis=-1), 0.0)
            out["damage_dealt"] = carry["damage_dealt"] + jnp.where(running, info["damage_dealt"].sum(-1), 0.0)
            out["damage_taken"] = carry["damage_taken"] + jnp.where(running, info["damage_taken"].sum(-1), 0.0)
            out["tag_steps"] = carry["tag_steps"] + (jax.nn.one_hot(state.tag, 4, dtype=jnp.int32) * running[:, None])
            out["finished"] = carry["finished"] | done
            return out

        def _decision_period(carry, period):
            """Asks the tag source once for the batch, then runs the period's steps."""
            features = jax.vmap(jaxarena.llm_features, in_axes=(0, None))(carry["state"], params)
            prev_tags = carry["state"].tag
            time_s = period.astype(jnp.float32) * period_s
            chosen = tag_fn(features, prev_tags, carry["finished"], time_s, jax.random.fold_in(key, period))
            chosen = jnp.where(carry["finished"], prev_tags, jnp.asarray(chosen, jnp.int32))
            record = (chosen, features, ~carry["finished"])

            def _run(c):
                first = period * steps_per_period
                return jax.lax.scan(
                    lambda c2, i: (_env_step(c2, i, chosen), None), c, first + jnp.arange(steps_per_period)
                )[0]

            carry = jax.lax.cond(jnp.all(carry["finished"]), lambda c: c, _run, carry)
            return carry, record

        final, (tags, feats, active) = jax.lax.scan(_decision_period, carry0, jnp.arange(periods))
        return RolloutResult(
            outcome=final["outcome"],
            duration_s=final["duration_s"],
            team_return=final["team_return"],
            # The env reports damage before the bot's HP floor at 0; clip the killing blow's overshoot.
            damage_dealt=jnp.minimum(final["damage_dealt"], params.bot_hp),
            damage_taken=final["damage_taken"],
            tag_steps=final["tag_steps"],
            decision_tags=tags,
            decision_features=feats,
            decision_active=active,
        )

    return jax.jit(rollout)


def rollout_with_llm(
    env: Any,
    env_params: Any,
    policy: Policy,
    policy_params: Any,
    key: jax.Array,
    tag_source: TagSelector | TagFn | int,
    num_episodes: int = 100,
    **kwargs: Any,
) -> RolloutResult:
    """Runs `num_episodes` episodes at once with tags from `tag_source`; see `make_rollout`.

    For repeated runs (several bots, A and B) build the function once with
    `make_rollout` to compile once.
    """
    rollout = make_rollout(env, env_params, policy, tag_source, num_episodes, **kwargs)
    return rollout(policy_params, env_params, key)
