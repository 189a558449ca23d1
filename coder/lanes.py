"""The arena side of coder scoring: a fixed set of lanes, each playing one episode at a time.

Why a separate program. Compiling the arena takes seconds (about 4 s on a 2-core CPU), and a
compiled program that holds both the arena and a batch's candidate programs must be compiled
again for every batch: that compile used to be most of the time a batch took to score. Here the
arena's programs are compiled once per scenario and lane count and kept for the process, and
only the candidates' policy is compiled per batch (`policy_program`, well under a second). The
scorer's host loop calls the two in turn, one tick at a time (`batch_rollout`), and moves the
last episodes to a quarter of the lanes (`take_lanes`) so idle lanes stop stepping.

The lanes are a `jaxarena.BatchedArena` batch: every state leaf's last axis is the lane, so the
arena's loops run over the lanes and vectorise (docs/arena.md, "Many arenas at once"). A lane's
keys follow the one episode runner's derivation for a one-episode batch on the job's key: with
`runner_key = split(job_key, 1)[0]`, the spawn comes from `fold_in(runner_key, 0)` and tick t's
policy key is `split(fold_in(runner_key, t + 1))[0]`. So a job meets the runner's spawn and the
runner's policy draws; the arena's float order is `BatchedArena`'s, equal to the runner's to
rounding (tests/coder/test_scoring.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

import jaxarena
from jaxarena import batched
from jaxarena.checks import checked_actions
from jaxarena.names import NUM_ACTIONS

#: The smallest set of lanes the last episodes move to: below it a tick costs about the same (its
#: fixed per-call cost dominates), and every size is one more arena to compile.
MIN_TAIL_LANES = 64


class LaneArena(NamedTuple):
    """The jitted arena side of `lanes` lanes (see `arena_programs`)."""

    lanes: int
    restart: Callable
    tick: Callable
    report: Callable
    empty: Callable


@functools.cache
def arena_programs(scenario: str, lanes: int) -> LaneArena:
    """The jitted arena side of `lanes` lanes, compiled once per process:

    - `restart(lanes_state, take, bot_type, runner_keys)`: the lanes where `take` start a fresh
      episode against `bot_type` (per lane) from `runner_keys`, raw key data
      (`jax.random.key_data`, which the host indexes in numpy); the others are kept.
    - `tick(lanes_state, actions)`: one tick of every lane still playing; an ended episode stays
      as it ended. It counts each living NPC's actions and those outside 0..5.
    - `report(lanes_state)`: per lane (finished, outcome, t, damage dealt, damage taken, action
      counts, invalid actions), what the host loop reads once per chunk.
    - `empty()`: lanes with no episode (every lane finished), fresh buffers for a run to donate.
    """
    env, params = jaxarena.make("Arena-v0", scenario=scenario)
    # Scoring reads outcomes, never rewards: the reward's shaping recipe plays no part.
    params = jaxarena.BatchedArena(env).checked_params(params.replace(shaping_recipe=0))

    def fresh(bot_type, runner_keys):
        p = params.replace(bot_type=bot_type)
        reset_keys = jax.vmap(lambda k: jax.random.fold_in(k, 0))(runner_keys)
        state = batched.initial_state(reset_keys, p, jnp.zeros(runner_keys.shape, jnp.int32))
        return {
            "state": state,
            "obs": batched.observe(state, p),
            "bot_type": jnp.asarray(bot_type, jnp.int32),
            "finished": jnp.zeros(runner_keys.shape, bool),
            "counts": jnp.zeros((runner_keys.shape[0], NUM_ACTIONS), jnp.int32),
            "invalid": jnp.zeros(runner_keys.shape, jnp.int32),
        }

    def restart(lanes_state, take, bot_type, runner_keys):
        new = fresh(bot_type, jax.random.wrap_key_data(runner_keys))
        # Leaves carry the lane first (obs, counts) or last (the arena state).
        pick = lambda a, b: jnp.where(take.reshape(take.shape + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
        out = {k: jax.tree.map(pick, new[k], lanes_state[k]) for k in new if k != "state"}
        out["state"] = jax.tree.map(lambda a, b: jnp.where(take, a, b), new["state"], lanes_state["state"])
        return out

    def tick(lanes_state, actions):
        state, running = lanes_state["state"], ~lanes_state["finished"]
        p = params.replace(bot_type=lanes_state["bot_type"])
        alive = (state.npc_hp > 0.0).T & running[:, None]  # (lanes, NPCs)
        valid = (actions >= 0) & (actions < NUM_ACTIONS)
        used = jnp.sum(jax.nn.one_hot(actions, NUM_ACTIONS, dtype=jnp.int32) * alive[..., None], axis=1)
        stepped, _, terminated, truncated, _ = batched.step_env(state, actions.T, p)
        state = jax.tree.map(lambda new, old: jnp.where(running, new, old), stepped, state)
        return {
            "state": state,
            "obs": batched.observe(state, p),
            "bot_type": lanes_state["bot_type"],
            "finished": lanes_state["finished"] | terminated | truncated,
            "counts": lanes_state["counts"] + used,
            "invalid": lanes_state["invalid"] + jnp.sum(alive & ~valid, axis=1),
        }

    def report(lanes_state):
        s = lanes_state["state"]
        return {
            "finished": lanes_state["finished"],
            "outcome": batched.outcome_of(s),
            "t": s.t,
            "damage_dealt": s.damage_dealt,
            "damage_taken": s.damage_taken,
            "counts": lanes_state["counts"],
            "invalid": lanes_state["invalid"],
        }

    def empty():
        state = fresh(jnp.zeros((lanes,), jnp.int32), jax.random.split(jax.random.key(0), lanes))
        return state | {"finished": jnp.ones((lanes,), bool)}

    return LaneArena(
        lanes, jax.jit(restart, donate_argnums=0), jax.jit(tick, donate_argnums=0), jax.jit(report), jax.jit(empty)
    )


@jax.jit
def take_lanes(lanes_state: dict, index: jax.Array) -> dict:
    """The lanes `index` of a lanes state, in that order: e.g. the busy ones, moved to a smaller set."""
    out = {k: jax.tree.map(lambda x: x[index], v) for k, v in lanes_state.items() if k != "state"}
    out["state"] = jax.tree.map(lambda x: x[..., index], lanes_state["state"])
    return out


def policy_program(policies: Sequence):
    """The jitted `fn(cand, obs, runner_keys, t) -> actions (lanes, 5)`: lane i plays `policies[cand[i]]`.

    `runner_keys` are raw key data, as for `restart`.

    `lax.switch` over the lane's candidate index is a select under vmap, so every lane computes
    every program of the batch (hence small batches, `ScoreConfig.batch`).
    """
    branches = [_int_actions(p) for p in policies]

    def one_lane(index, obs, runner_key, t):
        key = jax.random.split(jax.random.fold_in(runner_key, t + 1))[0]
        if len(branches) == 1:
            return checked_actions(branches[0](obs, key))
        return checked_actions(jax.lax.switch(index, branches, obs, key))

    # Raw key data in: the host picks each lane's key from a numpy table, where indexing a device
    # array of typed keys cost about a millisecond per chunk.
    return jax.jit(lambda cand, obs, raw_keys, t: jax.vmap(one_lane)(cand, obs, jax.random.wrap_key_data(raw_keys), t))


def _int_actions(policy):
    return lambda obs, key: jnp.asarray(policy(None, obs, key)).astype(jnp.int32)
