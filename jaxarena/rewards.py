"""The shared team reward and the Table 5 strategy shaping (docs/arena.md, "Rewards")."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .physics import norm
from .types import NUM_TAGS, EnvParams, arena_diagonal


def bearing_cos_sin(npc_pos: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array):
    """cos and sin of theta, each NPC's bearing from the bot's facing direction.

    Computed from dot and cross products rather than atan2: Table 5 only ever
    needs |sin theta| and whether 60 < |theta| < 120 degrees, i.e. |cos| < 1/2.
    An NPC exactly on the bot's centre counts as straight ahead (theta = 0).
    """
    v = npc_pos - bot_pos
    d = norm(v)
    safe_d = jnp.maximum(d, 1e-6)
    cos = jnp.where(d > 1e-6, (v @ bot_facing) / safe_d, 1.0)
    sin = jnp.where(d > 1e-6, (bot_facing[0] * v[:, 1] - bot_facing[1] * v[:, 0]) / safe_d, 0.0)
    return cos, sin


def shaping(tag: jax.Array, npc_pos, bot_pos, bot_facing, params: EnvParams) -> jax.Array:
    """Table 5's per-step shaping term of `tag` for each NPC: (5,) float32."""
    cos, sin = bearing_cos_sin(npc_pos, bot_pos, bot_facing)
    d = norm(npc_pos - bot_pos)
    d_rel = d / arena_diagonal(params)
    terms = jnp.stack(
        [
            0.005 * jnp.abs(sin),  # 0 Surround
            0.01 * (1.0 - d_rel),  # 1 Aggressive
            jnp.where(jnp.abs(cos) < 0.5, 0.0075, 0.0),  # 2 Flank: 60 < |theta| < 120
            jnp.minimum(0.005 * d_rel, 0.005) - jnp.where(d < 8.0, 0.005, 0.0),  # 3 Retreat
        ]
    )
    return terms[jnp.clip(tag, 0, NUM_TAGS - 1)]


def team_reward(damage_to_bot, bot_killed, squad_wiped, params: EnvParams) -> jax.Array:
    """The reward every NPC shares: damage / 300, +1 for the kill, -1 for a wipe."""
    return (
        damage_to_bot * params.damage_reward_scale
        + jnp.where(bot_killed, params.kill_reward, 0.0)
        + jnp.where(squad_wiped, params.wipe_penalty, 0.0)
    )
