"""The three scripted opponents, as pure per-step policy functions.

Every bot is `policy(key, bot_state, world, params) -> (move, attack, target, bot_state)`
(the design's bot signature, docs/arena.md, plus explicit params and the
chosen target, which the arena needs to apply the strike):
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
import numpy as np

from .names import BOT_AGGRESSIVE, BOT_BALANCED, BOT_EVASIVE
from .physics import closest_box_points, norm, rotate_left, safe_unit
from .types import EnvParams, ticks

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
    """Repulsion from boxes in the way plus a slide towards the nearer corner.

    Pure repulsion would pin a bot pushing straight into a face, and a slide
    signed by the goal flips sides when the goal is straight behind the box.
    Sliding towards the side of the face the bot is already on is stable.
    """
    closest = closest_box_points(pos, params.boxes)  # (K, 2)
    away = pos - closest
    gap = norm(away) - params.unit_radius
    weight = jnp.clip((params.bot_avoid_distance - gap) / params.bot_avoid_distance, 0.0, 1.0)
    normal = safe_unit(away)
    tangent = rotate_left(normal)
    centre = 0.5 * (params.boxes[:, :2] + params.boxes[:, 2:])
    side = jnp.where(jnp.sum(tangent * (pos - centre), axis=-1) >= 0.0, 1.0, -1.0)
    blocking = jnp.sum(normal * desired, axis=-1) < 0.0  # only boxes in the way deflect
    steer = weight[:, None] * (normal + side[:, None] * tangent) * blocking[:, None]
    return jnp.sum(steer, axis=0)


# The evasive bot checks for walls and boxes this far ahead along each of
# these headings, and judges its distance from the squad farther out, so a
# temporary approach to one NPC on the way out of a corner is accepted.
_LOOKAHEAD = 2.5
_FARSIGHT = 6.0
_ANGLES = np.linspace(0.0, 2.0 * np.pi, 12, endpoint=False)
_HEADINGS = np.stack([np.cos(_ANGLES), np.sin(_ANGLES)], axis=-1).astype(np.float32)


def _blocked(points, params: EnvParams) -> jax.Array:
    """(H,) bool: a disc centred at each point would overlap a wall or a box."""
    r = params.unit_radius
    out = jnp.any((points < r) | (points > params.arena_size - r), axis=-1)
    offset = points[:, None, :] - closest_box_points(points, params.boxes)
    inside = jnp.sum(offset * offset, axis=-1) < r * r  # squared: no sqrt per heading
    return out | jnp.any(inside, axis=-1)


def aggressive_move(world: World, params: EnvParams) -> jax.Array:
    """Close on the nearest living NPC; hold once comfortably inside melee range."""
    target, dist = nearest_npc(world)
    desired = safe_unit(world.npc_pos[target] - world.bot_pos)
    desired = jnp.where(dist > 0.8 * params.bot_melee_range, desired, 0.0)
    return safe_unit(desired + _steer_around_boxes(world.bot_pos, desired, params) * norm(desired))


def evasive_move(world: World, params: EnvParams) -> jax.Array:
    """Head where the nearest living NPC will be farthest, never into a wall or box.

    It scores 12 headings by the distance to the nearest living NPC from a
    point far ahead (clamped to the arena), among the headings where a disc
    2.5 u ahead would be clear of walls and boxes. So it runs from the squad,
    slides along walls and leaves corners. (A box thinner than 1.5 u could
    hide behind the look-ahead point; the bot would then just slide on it.)
    """
    headings = jnp.asarray(_HEADINGS)
    ahead = world.bot_pos + _LOOKAHEAD * headings  # (H, 2)
    far = jnp.clip(world.bot_pos + _FARSIGHT * headings, 0.0, params.arena_size)
    offset = far[:, None, :] - world.npc_pos[None, :, :]  # (H, 5, 2)
    gaps2 = jnp.sum(offset * offset, axis=-1)  # squared distances rank the same
    clearance = jnp.min(jnp.where(world.npc_alive, gaps2, jnp.inf), axis=-1)
    blocked = _blocked(ahead, params)
    score = jnp.where(blocked, -jnp.inf, clearance)
    return jnp.where(jnp.any(~blocked), headings[jnp.argmax(score)], 0.0)


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
