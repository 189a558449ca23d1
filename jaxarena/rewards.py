"""The shared team reward and the Table 5 strategy shaping (docs/arena.md, "Rewards")."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .physics import norm
from .types import NUM_TAGS, EnvParams, arena_diagonal

RETREAT_DISTANCE = 8.0  # u, Table 5's Retreat threshold
# The "intent" recipe's engagement ramp: full pay within NEAR, none beyond FAR.
ENGAGE_NEAR, ENGAGE_FAR = 4.0, 8.0
# Its terms' scale before `shaping_weight`: Table 5's largest per-step term.
INTENT_SCALE = 0.0075
# Surround's and Flank's extra gain in the intent recipe (see `intent_shaping`).
SPACING_GAIN = 2.0
PAPER_RECIPE, INTENT_RECIPE = 0, 1


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


def angular_gap(npc_pos: jax.Array, bot_pos: jax.Array, alive: jax.Array) -> jax.Array:
    """(5,) each living NPC's bearing gap (around the bot) to its nearest living squadmate.

    In units of the even spacing 2 pi / living NPCs and capped at 1, so 1 means
    "as far from the others as an even ring allows". A lone NPC scores 1.
    """
    v = npc_pos - bot_pos
    unit = v / jnp.maximum(norm(v), 1e-6)[:, None]
    angle = jnp.arccos(jnp.clip(unit @ unit.T, -1.0, 1.0))
    others = alive[None, :] & ~jnp.eye(alive.shape[0], dtype=bool)
    nearest = jnp.min(jnp.where(others, angle, jnp.pi), axis=1)
    spacing = 2.0 * jnp.pi / jnp.maximum(jnp.sum(alive), 2)  # a lone NPC: pi / pi = 1
    return jnp.minimum(nearest / spacing, 1.0)


def intent_shaping(
    tag: jax.Array, npc_pos: jax.Array, bot_pos: jax.Array, bot_facing: jax.Array, alive: jax.Array, params: EnvParams
) -> jax.Array:
    """The "intent" recipe's per-step shaping of `tag` for each NPC: (5,) float32, before `shaping_weight`.

    Table 5's terms (`shaping`) pay at any distance, so a squad can collect
    Surround or Flank pay from 35 u away and never fight (measured: B never
    engaged the evasive bot under three tags). Here every term but Retreat's
    pays only near the bot, and each pays for what only its own tag asks:

    - Surround: the NPC's bearing gap to its nearest squadmate (`angular_gap`),
      while engaged (full within ENGAGE_NEAR, none beyond ENGAGE_FAR);
    - Aggressive: half closeness (1 - d / d_max, a pull from anywhere, which
      a chase of the evasive bot needs) and half being in melee reach (full
      within the NPC's melee range, none beyond ENGAGE_FAR);
    - Flank: standing 60-120 degrees off the bot's facing, while engaged;
    - Retreat: +1 at 8 u or more, -1 inside, as Table 5's sign.

    Each term is per NPC, so each NPC's own move earns it (a squad-level term
    such as `coverage` measured the intent but was a weak signal to train on),
    and at most 1 before `INTENT_SCALE` and the weight, except that Surround
    and Flank, which both pay engaged NPCs and differ only in where around the
    bot they stand, get SPACING_GAIN to make that difference worth learning.
    """
    d = norm(npc_pos - bot_pos)
    engaged = jnp.clip((ENGAGE_FAR - d) / (ENGAGE_FAR - ENGAGE_NEAR), 0.0, 1.0)
    # A melee range at or beyond ENGAGE_FAR (allowed by `make`) must not divide by zero.
    reach_span = jnp.maximum(ENGAGE_FAR - params.npc_melee_range, 1e-3)
    in_reach = jnp.clip((ENGAGE_FAR - d) / reach_span, 0.0, 1.0)
    cos, _ = bearing_cos_sin(npc_pos, bot_pos, bot_facing)
    closeness = 1.0 - d / arena_diagonal(params)
    terms = jnp.stack(
        [
            SPACING_GAIN * angular_gap(npc_pos, bot_pos, alive) * engaged,  # 0 Surround
            0.5 * (closeness + in_reach),  # 1 Aggressive
            SPACING_GAIN * (jnp.abs(cos) < 0.5) * engaged,  # 2 Flank
            jnp.where(d >= RETREAT_DISTANCE, 1.0, -1.0),  # 3 Retreat
        ]
    )
    return INTENT_SCALE * terms[jnp.clip(tag, 0, NUM_TAGS - 1)]


def tag_shaping(tag, npc_pos, bot_pos, bot_facing, alive, params: EnvParams) -> jax.Array:
    """The active recipe's shaping of `tag` per NPC: Table 5 (`shaping_recipe` 0) or intent (1)."""
    paper = shaping(tag, npc_pos, bot_pos, bot_facing, params)
    intent = intent_shaping(tag, npc_pos, bot_pos, bot_facing, alive, params)
    return jnp.where(params.shaping_recipe == INTENT_RECIPE, intent, paper)
