"""The three scripted opponents, as pure per-step policy functions.

Every bot is `policy(key, bot_state, world, params) -> (move, attack, bot_state)`:
`move` is a unit (or zero) direction, `attack` whether it strikes its target
this tick. The Balanced bot owns a little state (its current phase and the
ticks left in it); the other two carry it unchanged. `scripted_bot` picks the
behaviour from the integer `params.bot_type`, so one jitted program can
`vmap` over bot types.

- Aggressive: chases the nearest living NPC and strikes it when in range.
- Evasive: flees the living NPCs' centroid, steering off walls and around
  boxes; strikes only what is already in range.
- Balanced: alternates aggressive and evasive phases. Each episode draws its
  own base phase lengths, and the bot's HP stretches them: the more damaged
  it is, the shorter its aggressive phases and the longer its evasive ones.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .physics import closest_box_points, norm, rotate_left, safe_unit
from .types import BOT_AGGRESSIVE, BOT_BALANCED, BOT_EVASIVE, EnvParams, ticks

MODE_AGGRESSIVE, MODE_EVASIVE = 0, 1


class BotState(NamedTuple):
    mode: jax.Array  # () int32: MODE_AGGRESSIVE or MODE_EVASIVE
    phase_ticks: jax.Array  # () int32: ticks left in the balanced phase
    phase_s: jax.Array  # (2,) float32: this episode's base phase lengths


class World(NamedTuple):
    """What a bot sees at the start of a tick."""

    bot_pos: jax.Array  # (2,)
    bot_hp: jax.Array  # ()
    npc_pos: jax.Array  # (5, 2)
    npc_alive: jax.Array  # (5,) bool


def nearest_npc(world: World) -> tuple[jax.Array, jax.Array]:
    """Index of and distance to the nearest living NPC (distance inf if none).

    Ties go to the lowest index (argmin's rule).
    """
    dist = jnp.where(world.npc_alive, norm(world.npc_pos - world.bot_pos), jnp.inf)
    target = jnp.argmin(dist)
    return target, dist[target]


def _steer_around_boxes(pos, desired, params: EnvParams) -> jax.Array:
    """Repulsion from nearby boxes plus a slide along them towards `desired`.

    Pure repulsion would pin a bot pushing straight into a face, so each
    nearby box also adds its tangent, signed to agree with where the bot
    wants to go.
    """
    away = pos - closest_box_points(pos, params.boxes)  # (K, 2)
    dist = norm(away)
    gap = dist - params.unit_radius
    weight = jnp.clip((params.bot_avoid_distance - gap) / params.bot_avoid_distance, 0.0, 1.0)
    normal = safe_unit(away)
    tangent = rotate_left(normal)
    side = jnp.where(jnp.sum(tangent * desired, axis=-1) >= 0.0, 1.0, -1.0)
    # Only boxes that stand in the way (desired points into them) deflect.
    blocking = jnp.sum(normal * desired, axis=-1) < 0.0
    steer = weight[:, None] * (normal + side[:, None] * tangent) * blocking[:, None]
    return jnp.sum(steer, axis=0)


def _wall_repulsion(pos, params: EnvParams) -> jax.Array:
    """Push away from the arena's walls when closer than bot_avoid_distance."""
    reach = params.bot_avoid_distance + params.unit_radius
    from_low = jnp.clip((reach - pos) / reach, 0.0, 1.0)
    from_high = jnp.clip((reach - (params.arena_size - pos)) / reach, 0.0, 1.0)
    return from_low - from_high


def aggressive_move(world: World, params: EnvParams) -> jax.Array:
    """Close on the nearest living NPC; hold once comfortably inside melee range."""
    target, dist = nearest_npc(world)
    desired = safe_unit(world.npc_pos[target] - world.bot_pos)
    desired = jnp.where(dist > 0.8 * params.bot_melee_range, desired, 0.0)
    return safe_unit(desired + _steer_around_boxes(world.bot_pos, desired, params) * norm(desired))


def evasive_move(world: World, params: EnvParams) -> jax.Array:
    """Run from the living NPCs' centroid, bending off walls and around boxes."""
    alive = world.npc_alive[:, None]
    centroid = jnp.sum(world.npc_pos * alive, axis=0) / jnp.maximum(jnp.sum(alive), 1)
    desired = safe_unit(world.bot_pos - centroid)
    desired = safe_unit(desired + _wall_repulsion(world.bot_pos, params))
    return safe_unit(desired + _steer_around_boxes(world.bot_pos, desired, params))


def next_phase(bot: BotState, hp_frac: jax.Array, params: EnvParams) -> BotState:
    """Count down the balanced bot's phase; on expiry switch and draw its length."""
    expired = bot.phase_ticks <= 1
    mode = jnp.where(expired, 1 - bot.mode, bot.mode)
    # HP in [0.25, 1] scales the new phase: aggressive x hp, evasive x (2 - hp).
    hp = jnp.clip(hp_frac, 0.25, 1.0)
    scale = jnp.where(mode == MODE_AGGRESSIVE, hp, 2.0 - hp)
    new_ticks = jnp.maximum(ticks(bot.phase_s[mode] * scale, params.dt), 1)
    phase_ticks = jnp.where(expired, new_ticks, bot.phase_ticks - 1)
    return BotState(mode, phase_ticks, bot.phase_s)


def scripted_bot(key: jax.Array, bot: BotState, world: World, params: EnvParams):
    """The bot of `params.bot_type` for one tick: (move, attack, target, bot_state).

    `key` is unused by the shipped bots (their randomness is drawn once per
    episode), but it is part of the signature so stochastic bots fit in.
    """
    del key
    bot_type = jnp.asarray(params.bot_type, jnp.int32)
    balanced = next_phase(bot, world.bot_hp / params.bot_hp, params)
    mode = jnp.select(
        [bot_type == BOT_AGGRESSIVE, bot_type == BOT_EVASIVE],
        [jnp.int32(MODE_AGGRESSIVE), jnp.int32(MODE_EVASIVE)],
        balanced.mode,
    )
    bot = BotState(mode, jnp.where(bot_type == BOT_BALANCED, balanced.phase_ticks, bot.phase_ticks), bot.phase_s)
    # Both movement rules are a handful of ops for one unit; computing both
    # and selecting is cheaper under vmap than a cond.
    move = jnp.where(mode == MODE_AGGRESSIVE, aggressive_move(world, params), evasive_move(world, params))
    target, dist = nearest_npc(world)
    attack = dist <= params.bot_melee_range
    return move, attack, target, bot
