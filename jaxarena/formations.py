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
- Flank with roles ("ArenaFormation-v1", `roles=True`): the bot faces the
  NPC it attacks, its nearest, so no NPC in melee can hold its side for
  long. One NPC, the nearest living one, is the bait: its slot is in front of
  the bot, BAIT_RADIUS off, where the bot already faces and attacks. The other
  four take the bot's sides at FLANKER_RADIUS, farther than the bait, so the
  bot keeps its bait as its target and its sides to them.
- Aggressive and Retreat have no slot: they ask for a distance, not a place.

`rewards.intent_shaping` pays an NPC for nearing its slot, and the
"ArenaFormation-v0" observation shows it where the slot is (`slot_features`),
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
# World bearings of the Surround ring, NPC i at 2 pi i / 5.
SURROUND_BEARINGS = 2.0 * np.pi * np.arange(NUM_NPCS) / NUM_NPCS
# Bearings off the bot's facing (left positive): alternate sides, inside 60-120 degrees and
# 25 degrees apart, which at FLANK_RADIUS leaves room for two 0.5 u units side by side.
FLANK_BEARINGS = np.deg2rad(np.array([65.0, -77.5, 115.0, -102.5, 90.0]))
# Flank with roles: the bait stands inside the bot's 2.4 u hold distance and the NPCs' 2.5 u melee;
# the four flankers beyond the bot's 3 u melee (it only strikes its target, but it targets the
# nearest NPC) and inside orb range, two a side, 25 degrees apart.
BAIT_RADIUS = 2.0  # u
FLANKER_RADIUS = 3.5  # u
FLANKER_BEARINGS = np.deg2rad(np.array([80.0, -80.0, 105.0, -105.0]))
# Distance to the slot over which the shaping and the radial feature fade to nothing.
SLOT_SCALE = 8.0  # u
SLOT_FEATURES = 3  # sin and cos of the bearing error, radial error


def _rotate(facing: jax.Array, angles: np.ndarray) -> jax.Array:
    """(5, 2) unit vectors at `angles` (radians, counter-clockwise) from the unit vector `facing`."""
    c, s = np.cos(angles), np.sin(angles)
    return jnp.stack([c * facing[0] - s * facing[1], s * facing[0] + c * facing[1]], axis=-1)


def flank_role_slots(npc_pos: jax.Array, alive: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array) -> jax.Array:
    """(5, 2) Flank with roles: the nearest living NPC's slot in front of the bot, the others' at its sides.

    The others take FLANKER_BEARINGS in index order, skipping the bait, so
    every NPC's slot follows from the state alone.
    """
    dist = jnp.where(alive, norm(npc_pos - bot_pos), jnp.inf)
    index = jnp.arange(NUM_NPCS)
    bait = jnp.argmin(dist)  # the bot's own choice of target (ties: lowest index)
    rank = jnp.minimum(index - (index > bait), len(FLANKER_BEARINGS) - 1)
    flankers = bot_pos + FLANKER_RADIUS * _rotate(bot_facing, FLANKER_BEARINGS)[rank]
    return jnp.where((index == bait)[:, None], bot_pos + BAIT_RADIUS * bot_facing, flankers)


def slot_positions(
    tag: jax.Array,
    bot_pos: jax.Array,
    bot_facing: jax.Array,
    params: EnvParams,
    *,
    roles: bool = False,
    npc_pos: jax.Array | None = None,
    alive: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """(slots (5, 2), has_slot ()): each NPC's slot under `tag`; has_slot is False for Aggressive and Retreat.

    `roles` (static) picks Flank's bait-and-flankers formation, which needs the
    NPCs' positions and who is alive (default: all). Slots beyond a wall are
    pulled inside it, so every slot can be reached.
    """
    world_x = jnp.array([1.0, 0.0])
    surround = bot_pos + SURROUND_RADIUS * _rotate(world_x, SURROUND_BEARINGS)
    if roles:
        if npc_pos is None:
            raise ValueError("Flank's roles depend on where the NPCs are: pass npc_pos")
        alive = jnp.ones(NUM_NPCS, bool) if alive is None else alive
        flank = flank_role_slots(npc_pos, alive, bot_pos, bot_facing)
    else:
        flank = bot_pos + FLANK_RADIUS * _rotate(bot_facing, FLANK_BEARINGS)
    slots = jnp.where(tag == FLANK, flank, surround)
    slots = jnp.clip(slots, params.unit_radius, params.arena_size - params.unit_radius)
    return slots, (tag == SURROUND) | (tag == FLANK)


def slot_closeness(
    tag, npc_pos: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array, params: EnvParams, *, roles=False, alive=None
) -> jax.Array:
    """(5,) 1 at the NPC's slot, falling linearly to 0 at SLOT_SCALE from it; 0 under a tag with no slot."""
    slots, has_slot = slot_positions(tag, bot_pos, bot_facing, params, roles=roles, npc_pos=npc_pos, alive=alive)
    closeness = 1.0 - jnp.minimum(norm(npc_pos - slots) / SLOT_SCALE, 1.0)
    return jnp.where(has_slot, closeness, 0.0)


def slot_features(
    tag, npc_pos: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array, params: EnvParams, *, roles=False, alive=None
) -> jax.Array:
    """(5, 3) what each NPC needs to reach its slot with the bot-relative actions of Table 4.

    [sin e, cos e, r] with e the slot's bearing around the bot minus the NPC's
    (positive: the slot lies counter-clockwise) and r = (slot radius - NPC
    distance) / SLOT_SCALE clipped to [-1, 1] (positive: step back). All zero
    under a tag with no slot. `roles` and `alive` as in `slot_positions`.
    """
    slots, has_slot = slot_positions(tag, bot_pos, bot_facing, params, roles=roles, npc_pos=npc_pos, alive=alive)
    mine, target = npc_pos - bot_pos, slots - bot_pos
    cross = mine[:, 0] * target[:, 1] - mine[:, 1] * target[:, 0]
    dot = jnp.sum(mine * target, axis=-1)
    scale = jnp.maximum(norm(mine) * norm(target), 1e-6)
    radial = jnp.clip((norm(target) - norm(mine)) / SLOT_SCALE, -1.0, 1.0)
    features = jnp.stack([cross / scale, dot / scale, radial], axis=-1)
    return jnp.where(has_slot, features, 0.0)
