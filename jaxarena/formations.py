"""Where a strategy tag asks each NPC to stand: one formation slot per NPC around the bot.

Surround and Flank are about *where around the bot* the squad stands, and a
squad-level reward for that (ring coverage, lateral share) proved too weak a
signal for one shared policy to learn: trained squads played both tags alike,
since five NPCs in melee reach surround the bot anyway (docs/training.md).
A slot per NPC turns each tag into a per-NPC target:

- Surround: NPC i's slot is at world bearing 2 pi i / 5 from the bot, at
  SURROUND_RADIUS, outside the bot's melee reach and inside orb range: an
  evenly spaced ring that shoots, unlike a melee scrum.
- Flank: slots on both sides of the bot, 75-105 degrees off its facing
  (inside Flank's 60-120 degree arcs), at FLANK_RADIUS, in melee reach.
- Flank, "ArenaFormation-v2" (`sides=True`): the nearer of the bot's two
  sides, 90 degrees off its facing, at FLANK_SIDE_RADIUS: outside its melee
  reach (away from walls, which pull a slot in), so the slot can be held
  while the bot turns to it (the scripted `policies.make_side_keeper`
  reaches the aggressive bot's lateral arcs so).
- Aggressive and Retreat have no slot: they ask for a distance, not a place.

`rewards.intent_shaping` and `rewards.obey_shaping` pay an NPC for nearing its
slot (obey: Surround's, and Flank's side slot on ArenaFormation-v2), and the
"ArenaFormation-v0" and "-v2" observations show it where the slot is (`slot_features`),
so a memoryless shared policy can tell its own slot from its squadmates'.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .names import FLANK, NUM_NPCS, SURROUND
from .physics import norm
from .types import EnvParams

SURROUND_RADIUS = 6.0  # u: beyond the bot's 3 u melee, within the 12 u orb range, short of Retreat's 8 u
FLANK_RADIUS = 2.3  # u: within the NPCs' 2.5 u melee range
FLANK_SIDE_RADIUS = 6.0  # u: "ArenaFormation-v2"'s sides; beyond the bot's 3 u melee, within Retreat's 8 u
# World bearings of the Surround ring, NPC i at 2 pi i / 5.
SURROUND_BEARINGS = 2.0 * np.pi * np.arange(NUM_NPCS) / NUM_NPCS
# Bearings off the bot's facing (left positive): alternate sides, inside 60-120 degrees and
# 25 degrees apart, which at FLANK_RADIUS leaves room for two 0.5 u units side by side.
FLANK_BEARINGS = np.deg2rad(np.array([65.0, -77.5, 115.0, -102.5, 90.0]))
# Distance to the slot over which the shaping and the radial feature fade to nothing.
SLOT_SCALE = 8.0  # u
SLOT_FEATURES = 3  # sin and cos of the bearing error, radial error


def _rotate(facing: jax.Array, angles: np.ndarray) -> jax.Array:
    """(5, 2) unit vectors at `angles` (radians, counter-clockwise) from the unit vector `facing`."""
    c, s = np.cos(angles), np.sin(angles)
    return jnp.stack([c * facing[0] - s * facing[1], s * facing[0] + c * facing[1]], axis=-1)


def nearer_sides(npc_pos: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array) -> jax.Array:
    """(5, 2) for each NPC the point FLANK_SIDE_RADIUS off the bot, 90 degrees off its facing, on the NPC's side.

    An NPC straight ahead of or behind the bot takes its left side.
    """
    left = jnp.stack([-bot_facing[1], bot_facing[0]])
    # An elementwise sum, not a matmul: a reduced-precision product could flip an NPC dead ahead.
    side = jnp.where(jnp.sum((npc_pos - bot_pos) * left, axis=-1) >= 0.0, 1.0, -1.0)
    return bot_pos + FLANK_SIDE_RADIUS * side[:, None] * left


def slot_positions(
    tag: jax.Array,
    bot_pos: jax.Array,
    bot_facing: jax.Array,
    params: EnvParams,
    npc_pos: jax.Array | None = None,
    sides: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """(slots (5, 2), has_slot ()): each NPC's slot under `tag`; has_slot is False for Aggressive and Retreat.

    `sides` ("ArenaFormation-v2") puts Flank's slots at the bot's nearer side
    (`nearer_sides`), which needs `npc_pos`. Slots beyond a wall are pulled
    inside it, so every slot can be reached.
    """
    world_x = jnp.array([1.0, 0.0])
    surround = bot_pos + SURROUND_RADIUS * _rotate(world_x, SURROUND_BEARINGS)
    if sides:
        if npc_pos is None:
            raise ValueError("Flank's side slots depend on where each NPC stands: pass npc_pos")
        flank = nearer_sides(npc_pos, bot_pos, bot_facing)
    else:
        flank = bot_pos + FLANK_RADIUS * _rotate(bot_facing, FLANK_BEARINGS)
    slots = jnp.where(tag == FLANK, flank, surround)
    slots = jnp.clip(slots, params.unit_radius, params.arena_size - params.unit_radius)
    return slots, (tag == SURROUND) | (tag == FLANK)


def slot_closeness(
    tag, npc_pos: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array, params: EnvParams, sides: bool = False
) -> jax.Array:
    """(5,) 1 at the NPC's slot, falling linearly to 0 at SLOT_SCALE from it; 0 under a tag with no slot."""
    slots, has_slot = slot_positions(tag, bot_pos, bot_facing, params, npc_pos, sides)
    closeness = 1.0 - jnp.minimum(norm(npc_pos - slots) / SLOT_SCALE, 1.0)
    return jnp.where(has_slot, closeness, 0.0)


def slot_features(
    tag, npc_pos: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array, params: EnvParams, sides: bool = False
) -> jax.Array:
    """(5, 3) what each NPC needs to reach its slot with the bot-relative actions of Table 4.

    [sin e, cos e, r] with e the slot's bearing around the bot minus the NPC's
    (positive: the slot lies counter-clockwise) and r = (slot radius - NPC
    distance) / SLOT_SCALE clipped to [-1, 1] (positive: step back). All zero
    under a tag with no slot. `sides` as in `slot_positions`.
    """
    slots, has_slot = slot_positions(tag, bot_pos, bot_facing, params, npc_pos, sides)
    mine, target = npc_pos - bot_pos, slots - bot_pos
    cross = mine[:, 0] * target[:, 1] - mine[:, 1] * target[:, 0]
    dot = jnp.sum(mine * target, axis=-1)
    scale = jnp.maximum(norm(mine) * norm(target), 1e-6)
    radial = jnp.clip((norm(target) - norm(mine)) / SLOT_SCALE, -1.0, 1.0)
    features = jnp.stack([cross / scale, dot / scale, radial], axis=-1)
    return jnp.where(has_slot, features, 0.0)
