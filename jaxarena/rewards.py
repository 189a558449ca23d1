"""The shared team reward and the Table 5 strategy shaping (docs/arena.md, "Rewards")."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .formations import slot_closeness
from .names import FLANK, NUM_TAGS, SURROUND
from .physics import norm
from .types import EnvParams, arena_diagonal

RETREAT_DISTANCE = 8.0  # u, Table 5's Retreat threshold
# The "intent" recipe's Aggressive contact term fades to nothing at ENGAGE_FAR.
ENGAGE_FAR = 8.0
# Its terms' scale before `shaping_weight`: Table 5's largest per-step term.
INTENT_SCALE = 0.0075
# Surround's and Flank's slot gain in the intent recipe (see `intent_shaping`).
SLOT_GAIN = 2.0
PAPER_RECIPE, INTENT_RECIPE, OBEY_RECIPE = 0, 1, 2
# The "obey" recipe pays Flank for the bot's 60-120 degree arcs within this distance (the orb range
# is 12 u): near enough to take part in the fight, so a distant bearing earns nothing.
FLANK_REACH = 10.0


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


def intent_shaping(
    tag: jax.Array,
    npc_pos: jax.Array,
    bot_pos: jax.Array,
    bot_facing: jax.Array,
    alive: jax.Array,
    params: EnvParams,
    sides: bool = False,
) -> jax.Array:
    """The "intent" recipe's per-step shaping of `tag` for each NPC: (5,) float32, before `shaping_weight`.

    Table 5's terms (`shaping`) pay at any distance, so a squad can collect
    Surround or Flank pay from 35 u away and never fight, and squad-level
    terms for where around the bot the squad stands were too weak to tell
    Surround from Flank (docs/training.md). Here each term pays each NPC for
    its own move:

    - Surround and Flank: nearness to the NPC's formation slot
      (`formations.slot_closeness`: a ring at 6 u that shoots, or melee from
      the bot's sides; with `sides`, "ArenaFormation-v2", its nearer side at
      6 u), times SLOT_GAIN so a slot outweighs a melee scrum;
    - Aggressive: half closeness (1 - d / d_max, a pull from anywhere, which
      a chase of the evasive bot needs) and half contact (1 - min(d /
      ENGAGE_FAR, 1), which keeps pulling into contact);
    - Retreat: +1 at 8 u or more, -1 inside, as Table 5's sign.

    Known flaw, measured (docs/training.md): pay per tick is a reason to make
    the episode last, and a policy can learn to hover near enough to be paid
    and far enough not to finish the bot. The same terms as costs (<= 0) made
    ending the fight fast dominate, and every tag collapsed into a rush.
    """
    del alive  # the slots are per NPC; kept for the shared signature of `tag_shaping`
    d = norm(npc_pos - bot_pos)
    closeness = 1.0 - d / arena_diagonal(params)
    contact = 1.0 - jnp.minimum(d / ENGAGE_FAR, 1.0)
    slot = SLOT_GAIN * slot_closeness(tag, npc_pos, bot_pos, bot_facing, params, sides)
    terms = jnp.stack(
        [
            slot,  # 0 Surround
            0.5 * (closeness + contact),  # 1 Aggressive
            slot,  # 2 Flank
            jnp.where(d >= RETREAT_DISTANCE, 1.0, -1.0),  # 3 Retreat
        ]
    )
    return INTENT_SCALE * terms[jnp.clip(tag, 0, NUM_TAGS - 1)]


def obey_shaping(
    tag: jax.Array,
    npc_pos: jax.Array,
    bot_pos: jax.Array,
    bot_facing: jax.Array,
    params: EnvParams,
    sides: bool = False,
):
    """The "obey" recipe's per-step shaping of `tag` for each NPC: (5,) float32, before `shaping_weight`.

    Trained with the tag held for whole episodes and one expert per tag
    (docs/training.md, "The per-tag expert squads"), so each expert's return is its own tag's shaping
    plus the team reward, and no tag's pay leaks into another's values:

    - Aggressive pays nothing: its expert keeps A's objective, win fast.
      Every pay-per-tick term for nearness was farmed by a hover that does
      not finish the bot, and winning is what Aggressive means.
    - Surround: the intent recipe's slot ring (it separated in earlier per-tag squads).
    - Flank: SLOT_GAIN while the NPC stands 60-120 degrees off the bot's
      facing within FLANK_REACH; earlier slots 2.3 u off the bot's sides
      sat inside its melee reach and turned with it, and were never held.
      With `sides` ("ArenaFormation-v2"), SLOT_GAIN times nearness to the
      bot's nearer side 6 u off it (`formations.nearer_sides`), the slot its
      observation shows.
    - Retreat: +1 at 8 u or more, -1 inside, as in the intent recipe.
    """
    d = norm(npc_pos - bot_pos)
    if sides:
        flank = slot_closeness(FLANK, npc_pos, bot_pos, bot_facing, params, sides=True)
    else:
        cos, _ = bearing_cos_sin(npc_pos, bot_pos, bot_facing)
        flank = ((jnp.abs(cos) < 0.5) & (d <= FLANK_REACH)).astype(jnp.float32)
    terms = jnp.stack(
        [
            SLOT_GAIN * slot_closeness(SURROUND, npc_pos, bot_pos, bot_facing, params),  # 0 Surround
            jnp.zeros_like(d),  # 1 Aggressive
            SLOT_GAIN * flank,  # 2 Flank
            jnp.where(d >= RETREAT_DISTANCE, 1.0, -1.0),  # 3 Retreat
        ]
    )
    return INTENT_SCALE * terms[jnp.clip(tag, 0, NUM_TAGS - 1)]


def tag_shaping(tag, npc_pos, bot_pos, bot_facing, alive, params: EnvParams, sides: bool = False) -> jax.Array:
    """The active recipe's shaping of `tag` per NPC: Table 5 (`shaping_recipe` 0), intent (1) or obey (2).

    `sides` (static; "ArenaFormation-v2") gives Flank the nearer-side slot.
    """
    paper = shaping(tag, npc_pos, bot_pos, bot_facing, params)
    intent = intent_shaping(tag, npc_pos, bot_pos, bot_facing, alive, params, sides)
    obey = obey_shaping(tag, npc_pos, bot_pos, bot_facing, params, sides)
    return jnp.select(
        [params.shaping_recipe == INTENT_RECIPE, params.shaping_recipe == OBEY_RECIPE], [intent, obey], paper
    )
