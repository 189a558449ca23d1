"""Episode generation: spawn positions and the balanced bot's schedule.

`step` auto-resets, and under `vmap` a reset branch is computed for every
arena on every step, then selected. A threefry draw there would cost a large
share of the step (measured on a peer env: about a third). The only
randomness the arena needs is a handful of uniforms per *episode*, so we
derive them from the key's raw bits with a counter-based integer hash: a few
dozen integer ops, no PRNG kernel, and still a pure function of the key.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .names import BOT_BALANCED, BOT_EVASIVE, NUM_NPCS
from .types import ORBS_PER_NPC, EnvParams, EnvState, ticks

# Uniforms drawn per episode: 5 NPC (x, z), bot (x, z), balanced bot's
# start phase and its two base phase lengths.
_NUM_UNIFORMS = 2 * NUM_NPCS + 2 + 3


def _mix32(x: jax.Array) -> jax.Array:
    """A 32-bit avalanche hash (xorshift-multiply), bijective on uint32."""
    x = x ^ (x >> 16)
    x = x * jnp.uint32(0x7FEB352D)
    x = x ^ (x >> 15)
    x = x * jnp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def key_bits(key: jax.Array) -> jax.Array:
    """The raw uint32 words of a typed or legacy (uint32[2]) PRNG key."""
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    return key.reshape(-1).astype(jnp.uint32)


def episode_uniforms(key: jax.Array, salt=0, n: int = _NUM_UNIFORMS) -> jax.Array:
    """`n` float32 uniforms in [0, 1) that depend on every bit of `key` and on `salt`."""
    words = key_bits(key)
    salt = jnp.asarray(salt).astype(jnp.uint32) * jnp.uint32(0x85EBCA6B)
    seed = _mix32(words[0] ^ _mix32(words[-1] + jnp.uint32(0x9E3779B9) + salt))
    counters = jnp.arange(n, dtype=jnp.uint32) * jnp.uint32(0x9E3779B9)
    bits = _mix32(seed ^ _mix32(counters + words[-1]))
    # The top 24 bits fill a float32 mantissa exactly.
    return (bits >> 8).astype(jnp.float32) * jnp.float32(1.0 / (1 << 24))


def _in_zone(u: jax.Array, zone: jax.Array) -> jax.Array:
    """Map uniforms u[..., 2] into the box zone = (x_min, z_min, x_max, z_max)."""
    return zone[:2] + u * (zone[2:] - zone[:2])


def initial_state(key: jax.Array, params: EnvParams, salt=0) -> EnvState:
    """A fresh episode: spawns drawn uniformly inside the two zones."""
    u = episode_uniforms(key, salt)
    npc_pos = _in_zone(u[: 2 * NUM_NPCS].reshape(NUM_NPCS, 2), params.npc_spawn)
    bot_pos = _in_zone(u[2 * NUM_NPCS : 2 * NUM_NPCS + 2], params.bot_spawn)
    start_evasive, phase_u = u[-3] < 0.5, u[-2:]

    lo, hi = jnp.float32(params.balanced_phase_min_s), jnp.float32(params.balanced_phase_max_s)
    phase_s = lo + phase_u * (hi - lo)  # base lengths of (aggressive, evasive) phases
    bot_type = jnp.asarray(params.bot_type, jnp.int32)
    bot_mode = jnp.where(
        bot_type == BOT_BALANCED,
        start_evasive.astype(jnp.int32),
        (bot_type == BOT_EVASIVE).astype(jnp.int32),
    )
    first_phase = jnp.where(bot_mode == 1, phase_s[1], phase_s[0])

    # The bot starts facing the squad's side of the arena (towards -z).
    facing = jnp.array([0.0, -1.0], jnp.float32)
    zeros5 = jnp.zeros((NUM_NPCS,), jnp.int32)
    return EnvState(
        npc_pos=npc_pos,
        npc_hp=jnp.full((NUM_NPCS,), params.npc_hp, jnp.float32),
        npc_melee_cd=zeros5,
        npc_orb_cd=zeros5,
        orb_pos=jnp.zeros((NUM_NPCS, ORBS_PER_NPC, 2), jnp.float32),
        orb_dir=jnp.zeros((NUM_NPCS, ORBS_PER_NPC, 2), jnp.float32),
        orb_travel=jnp.zeros((NUM_NPCS, ORBS_PER_NPC), jnp.float32),
        orb_block=jnp.full((NUM_NPCS, ORBS_PER_NPC), jnp.inf, jnp.float32),
        orb_active=jnp.zeros((NUM_NPCS, ORBS_PER_NPC), bool),
        bot_pos=bot_pos,
        bot_hp=jnp.asarray(params.bot_hp, jnp.float32),
        bot_melee_cd=jnp.int32(0),
        bot_facing=facing,
        bot_moving=jnp.asarray(False),
        bot_mode=bot_mode,
        # +1: the countdown switches on the tick it reads 1, so a phase of n
        # ticks starts from n + 1 (later phases are set on their switching tick).
        bot_phase_ticks=ticks(first_phase, params.dt) + 1,
        bot_phase_s=phase_s,
        tag=jnp.int32(0),
        t=jnp.int32(0),
        damage_dealt=jnp.float32(0.0),
        damage_taken=jnp.float32(0.0),
        episode=jnp.int32(0),
    )
