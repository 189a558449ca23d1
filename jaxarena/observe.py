"""The 23-float observation of Table 3 and the state features the LLM reads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .names import NUM_NPCS, NUM_TAGS
from .physics import nearest_box_point, norm
from .types import EnvParams, EnvState, arena_diagonal

# Row i lists the four allies of NPC i, in index order, skipping i itself.
ALLY_INDEX = np.array([[j for j in range(NUM_NPCS) if j != i] for i in range(NUM_NPCS)])

# Observation layout, index ranges into the 23 floats.
SELF = slice(0, 3)  # x/size, z/size, hp/npc_hp
BOT = slice(3, 10)  # x/size, z/size, hp/bot_hp, dist/d_max, can_attack, cover x/size, cover z/size
ALLIES = slice(10, 22)  # 4 x (x/size, z/size, hp/npc_hp), dead allies have hp 0
TAG = 22  # tag / 3
# Appended by "ArenaFacing-v0" and "ArenaFormation-v0"/"-v2" (`Arena.observe`): the bot's facing, unit x and z.
FACING = slice(23, 25)
# Single fields that scripted squads and training code read by name.
OWN_HP = SELF.start + 2
BOT_DISTANCE = BOT.start + 3  # distance / d_max
BOT_CAN_ATTACK = BOT.start + 4  # 1.0 when this NPC's melee would land now


def can_melee(state: EnvState, params: EnvParams) -> jax.Array:
    """(5,) bool: a melee action this tick would land (alive, ready, in range)."""
    in_range = norm(state.npc_pos - state.bot_pos) <= params.npc_melee_range
    return (state.npc_hp > 0.0) & (state.npc_melee_cd == 0) & in_range


def observe(state: EnvState, params: EnvParams) -> jax.Array:
    """Every NPC's observation, (5, 23) float32, laid out as in Table 3."""
    size = params.arena_size
    pos = state.npc_pos / size
    hp = state.npc_hp / params.npc_hp
    own = jnp.concatenate([pos, hp[:, None]], axis=-1)  # (5, 3)
    dist = norm(state.npc_pos - state.bot_pos) / arena_diagonal(params)
    cover = nearest_box_point(state.npc_pos, params.boxes) / size
    bot_xyhp = jnp.broadcast_to(
        jnp.concatenate([state.bot_pos / size, (state.bot_hp / params.bot_hp)[None]]), (NUM_NPCS, 3)
    )
    bot = jnp.concatenate(
        [bot_xyhp, dist[:, None], can_melee(state, params)[:, None].astype(jnp.float32), cover], axis=-1
    )
    # Static row picks rather than own[ALLY_INDEX]: a gather does not fuse on CPU.
    allies = jnp.stack([jnp.concatenate([own[int(j)] for j in row]) for row in ALLY_INDEX])
    tag = jnp.broadcast_to(state.tag.astype(jnp.float32) / (NUM_TAGS - 1), (NUM_NPCS, 1))
    return jnp.concatenate([own, bot, allies, tag], axis=-1)


def with_tag(obs: jax.Array, tag) -> jax.Array:
    """`obs` (..., 5, obs_size) with its tag slot rewritten for `tag` (one per arena, shape obs.shape[:-2]).

    For callers that change the tag between observing and acting (`set_tag`
    does not re-observe): cheaper than a new observation, and the same value.
    """
    value = jnp.asarray(tag).astype(jnp.float32) / (NUM_TAGS - 1)
    return obs.at[..., TAG].set(value[..., None])


def llm_features(state: EnvState, params: EnvParams) -> jax.Array:
    """The Table 10 state the LLM reads, (5,) float32 in `LLM_FEATURES` order.

    bot_hp and avg_npc_hp are in hit points (the average is over living NPCs,
    0 when none is left), npcs_alive a count, bot_moving 0/1, and the nearest
    living NPC's distance in arena units (0 when none is left).
    """
    alive = state.npc_hp > 0.0
    n_alive = jnp.sum(alive)
    avg_hp = jnp.sum(state.npc_hp * alive) / jnp.maximum(n_alive, 1)
    dist = jnp.where(alive, norm(state.npc_pos - state.bot_pos), jnp.inf)
    nearest = jnp.where(n_alive > 0, jnp.min(dist), 0.0)
    return jnp.stack(
        [state.bot_hp, avg_hp, n_alive.astype(jnp.float32), state.bot_moving.astype(jnp.float32), nearest]
    ).astype(jnp.float32)
