"""Scripted squads, written as policies: `policy(params, obs, key) -> actions`.

Every actor in the arena has this one signature (a trained PPO network, a
scripted squad, a program written by the LLM coder), so the episode runner
(`jaxarena.runner`) plays any of them. `params` is whatever the policy needs
(network weights; `None` for the scripted squads here). `obs` is one arena's
(5, obs_size) observation or any batch of them, and the actions come back
with shape `obs.shape[:-1]`, one of the six codes of `jaxarena.names.ACTIONS`
per NPC.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .names import MELEE, MOVE_TO_BOT, NUM_ACTIONS, RANGED
from .observe import BOT_CAN_ATTACK, BOT_DISTANCE
from .types import EnvParams, arena_diagonal

#: policy(params, obs (..., 5, obs_size) float32, key) -> actions (..., 5) int32; jittable.
Policy = Callable[[Any, jax.Array, jax.Array], jax.Array]


def random_policy(params: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
    """Uniformly random actions (a floor for comparisons)."""
    del params
    return jax.random.randint(key, obs.shape[:-1], 0, NUM_ACTIONS, dtype=jnp.int32)


def focus_fire_policy(params: Any, obs: jax.Array, key: jax.Array | None = None) -> jax.Array:
    """Every NPC walks at the bot and melees when its strike would land."""
    del params, key
    return jnp.where(obs[..., BOT_CAN_ATTACK] > 0.5, MELEE, MOVE_TO_BOT).astype(jnp.int32)


def chase_and_orb_policy(
    params: Any, obs: jax.Array, key: jax.Array, fire_prob: float = 0.8, orb_reach: float = 11.0
) -> jax.Array:
    """Melee when possible; otherwise, within `orb_reach` u of the bot, fire an
    orb with probability `fire_prob`, else walk at the bot.

    The orb cooldown is not in the observation and firing on cooldown wastes
    the tick, hence a random mix rather than "always fire". Distances assume
    the default 30x30 arena.
    """
    del params
    d = obs[..., BOT_DISTANCE] * arena_diagonal(EnvParams())
    fire = (d < orb_reach) & (jax.random.uniform(key, d.shape) < fire_prob)
    return jnp.where(obs[..., BOT_CAN_ATTACK] > 0.5, MELEE, jnp.where(fire, RANGED, MOVE_TO_BOT)).astype(jnp.int32)


#: The scripted squads by name, as the protocol's "scripted:NAME" policy specs use them.
SCRIPTED = {
    "random": random_policy,
    "focus_fire": focus_fire_policy,
    "chase_and_orb": chase_and_orb_policy,
}
