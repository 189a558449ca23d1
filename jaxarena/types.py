"""Typed containers of the arena: parameters, state and named constants.

Everything the paper fixes (Table 1, Table 5, the 30x30 arena, the 120 s
timeout) and every default we chose where it is silent lives in `EnvParams`.
Params are a pytree, passed explicitly to `reset`/`step`, so one jitted
program can `vmap` over them (bot types, unit stats) as well as over keys.
`docs/arena.md` documents each field.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .names import BOT_BALANCED, BOT_MAX_HP, DECISION_PERIOD_S, DT, EPISODE_S, NPC_MAX_HP


@struct.dataclass
class BotWeights:
    """The learned bot's MLP, obs -> hidden -> hidden -> out with tanh: `w*` (in, out) kernels, `b*` biases.

    `jaxarena.learned_bot.init_bot_weights` makes the policy (`NUM_BOT_ACTIONS` outputs),
    `init_bot_value_weights` a critic of the same layout (one output); it lives here, beside the
    params that hold it, so the params need no import of the bot's rules. A frozen pytree, so params
    holding it vmap and stack like any other leaves; serialised (flax.serialization, msgpack) it is the
    dict of the same keys. The fields are in the order that dict flattens in (sorted keys),
    so a tree of `BotWeights` has the leaves, and an optimiser the arithmetic, of that dict.
    """

    b0: jax.Array  # (H,)
    b1: jax.Array  # (H,)
    b2: jax.Array  # (out,)
    w0: jax.Array  # (BOT_OBS_SIZE, H)
    w1: jax.Array  # (H, H)
    w2: jax.Array  # (H, out)


OBS_SIZE = 23
ORBS_PER_NPC = 2

# Default obstacles as (x_min, z_min, x_max, z_max). Every box keeps at least
# 2 u from the walls, from every other box and from both spawn zones, so a
# disc of radius 0.5 never touches two solids at once and one push-out pass
# per step resolves every contact exactly (see physics.resolve_collisions).
DEFAULT_BOXES = np.array(
    [
        [13.0, 13.0, 17.0, 17.0],  # central block
        [5.0, 9.0, 9.0, 11.0],  # south-west wall
        [21.0, 9.0, 25.0, 11.0],  # south-east wall
        [5.0, 19.0, 9.0, 21.0],  # north-west wall
        [21.0, 19.0, 25.0, 21.0],  # north-east wall
    ],
    dtype=np.float32,
)
DEFAULT_NPC_SPAWN = np.array([6.0, 1.5, 24.0, 5.0], dtype=np.float32)
DEFAULT_BOT_SPAWN = np.array([10.0, 25.0, 20.0, 28.5], dtype=np.float32)


def _f32(x):
    return jnp.asarray(x, dtype=jnp.float32)


@struct.dataclass
class EnvParams:
    """Rules and constants of one arena. All fields are pytree leaves.

    Units: distances in arena units (u), times in seconds, HP in hit points.
    """

    # Table 1: bot.
    bot_hp: float = BOT_MAX_HP
    bot_speed: float = 5.0
    bot_melee_range: float = 3.0
    bot_melee_damage: float = 15.0
    bot_melee_cooldown: float = 0.8
    # Table 1: each of the five NPCs.
    npc_hp: float = NPC_MAX_HP
    npc_speed: float = 4.0
    npc_melee_range: float = 2.5
    npc_melee_damage: float = 15.0
    npc_melee_cooldown: float = 0.5
    # Orb (ranged attack); the paper names it but gives no numbers.
    orb_range: float = 12.0
    orb_speed: float = 12.0
    orb_damage: float = 5.0
    orb_cooldown: float = 1.0
    # An NPC fires an orb only at a bot at least this far away (0: anywhere in range). A ranged
    # attack that needs room to aim is one way a squad can beat a fleeing bot and lose a brawl.
    orb_min_range: float = 0.0
    # Geometry (Fig. 4 gives the layout, not the numbers).
    arena_size: float = 30.0
    unit_radius: float = 0.5
    boxes: jax.Array = struct.field(default_factory=lambda: jnp.asarray(DEFAULT_BOXES))
    npc_spawn: jax.Array = struct.field(default_factory=lambda: jnp.asarray(DEFAULT_NPC_SPAWN))
    bot_spawn: jax.Array = struct.field(default_factory=lambda: jnp.asarray(DEFAULT_BOT_SPAWN))
    # Time.
    dt: float = DT
    episode_s: float = EPISODE_S
    decision_period_s: float = DECISION_PERIOD_S
    # Which bot: 0 aggressive, 1 evasive, 2 balanced (see BOT_TYPES), 3 learned (BOT_LEARNED).
    bot_type: int = BOT_BALANCED
    # Balanced bot: phase lengths are drawn per episode in [min, max] seconds.
    balanced_phase_min_s: float = 6.0
    balanced_phase_max_s: float = 18.0
    # Bots steer around solids they come within this distance of.
    bot_avoid_distance: float = 2.0
    # Team reward and the Table 5 shaping (docs/arena.md).
    damage_reward_scale: float = 1.0 / 300.0
    kill_reward: float = 1.0
    wipe_penalty: float = -1.0
    # Off by default: `Arena-v0` pays the team reward alone (Combination A's).
    # Whoever plays with tags (recipe B, the protocol's B cells, tag_response)
    # switches the Table 5 shaping on explicitly.
    shaping_weight: float = 0.0
    # Which shaping `shaping_weight` scales: 0 Table 5's ("paper" recipe), 1 the
    # engagement-gated intent terms ("intent"), 2 the per-expert terms ("obey");
    # see `rewards.tag_shaping`.
    shaping_recipe: int = 0
    # Scenario rules beyond the paper (jaxarena/scenarios.py); traced, so one
    # compiled program serves several scenarios. 1.0: the bot's melee strikes
    # every living NPC within its range at once (cleave), not just its target.
    bot_cleave: float = 0.0
    # The learned bot's policy (a `BotWeights`, from `jaxarena.learned_bot.init_bot_weights`),
    # used where `bot_type` is BOT_LEARNED (3). None, an empty pytree, by default: the
    # scripted arena's params, programs and speed are unchanged by the field.
    bot_weights: BotWeights | None = None


@struct.dataclass
class EnvState:
    """One episode's state. Shapes are for a single, unbatched arena."""

    npc_pos: jax.Array  # (5, 2) float32, (x, z)
    npc_hp: jax.Array  # (5,) float32
    npc_melee_cd: jax.Array  # (5,) int32, ticks until the melee is ready
    npc_orb_cd: jax.Array  # (5,) int32, ticks until an orb can be fired
    orb_pos: jax.Array  # (5, 2, 2) float32, per NPC and slot
    orb_dir: jax.Array  # (5, 2, 2) float32, unit flight direction
    orb_travel: jax.Array  # (5, 2) float32, distance flown so far
    orb_block: jax.Array  # (5, 2) float32, distance from launch at which the path enters a box (inf: never)
    orb_active: jax.Array  # (5, 2) bool
    bot_pos: jax.Array  # (2,) float32
    bot_hp: jax.Array  # () float32
    bot_melee_cd: jax.Array  # () int32
    bot_facing: jax.Array  # (2,) float32 unit vector
    bot_moving: jax.Array  # () bool, moved during the last step
    bot_mode: jax.Array  # () int32, 0 aggressive / 1 evasive (the phase in force)
    bot_phase_ticks: jax.Array  # () int32, ticks left in the balanced bot's phase
    bot_phase_s: jax.Array  # (2,) float32, this episode's base phase lengths
    tag: jax.Array  # () int32, active strategy tag (0..3)
    t: jax.Array  # () int32, ticks since the episode started
    damage_dealt: jax.Array  # () float32, team damage to the bot this episode
    damage_taken: jax.Array  # () float32, damage the bot dealt this episode
    episode: jax.Array  # () int32, episodes finished by this arena slot


def ticks(seconds, dt) -> jax.Array:
    """Whole simulation ticks in `seconds`; rounding avoids 0.8/0.1 = 7.999..."""
    return jnp.round(_f32(seconds) / _f32(dt)).astype(jnp.int32)


def arena_diagonal(params: EnvParams) -> jax.Array:
    """d_max in Table 5: the arena's diagonal."""
    return _f32(params.arena_size) * jnp.sqrt(2.0).astype(jnp.float32)
