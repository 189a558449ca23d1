"""Scripted squads, written as policies: `policy(params, obs, key) -> actions`.

Every actor in the arena has this one signature (a trained PPO network, a
scripted squad, a program written by the LLM coder), so the episode runner
(`jaxarena.runner`) plays any of them. `params` is whatever the policy needs
(network weights; `None` for the scripted squads here). `obs` is one arena's
(5, obs_size) observation or any batch of them, and the actions come back
with shape `obs.shape[:-1]`, one of the six codes of `jaxarena.names.ACTIONS`
per NPC.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from .names import MELEE, MOVE_TO_BOT, NUM_ACTIONS, NUM_NPCS, NUM_TAGS, RANGED, RETREAT, STRAFE_LEFT, STRAFE_RIGHT
from .observe import ALLIES, BOT, BOT_CAN_ATTACK, BOT_DISTANCE, FACING, SELF, TAG
from .types import EnvParams, arena_diagonal

#: policy(params, obs (..., 5, obs_size) float32, key) -> actions (..., 5) int32; jittable.
Policy = Callable[[Any, jax.Array, jax.Array], jax.Array]


def has_memory(policy: Callable) -> bool:
    """Whether `policy` carries a memory between ticks (a squad with a GRU): it has `initial_memory`."""
    return hasattr(policy, "initial_memory")


def with_memory(policy: Callable) -> tuple[Callable, Callable]:
    """Any policy as `(initial_memory(batch_shape), step(params, obs, key, memory) -> (actions, memory))`.

    A policy with memory is called `policy(params, obs, key, memory) -> (actions, memory)` and starts
    each episode from `policy.initial_memory(obs.shape[:-1])`; every other policy carries an empty
    memory, (), so one loop plays both.
    """
    if has_memory(policy):
        return policy.initial_memory, policy
    return (lambda batch_shape: ()), (lambda params, obs, key, memory: (policy(params, obs, key), memory))


def refuse_memory(policy: Callable, where: str) -> None:
    """A ValueError for a squad with memory where only a memoryless one can play (it would lose its memory)."""
    if has_memory(policy):
        raise ValueError(f"{where} plays squads without memory; this squad carries a GRU state (PPOConfig.memory)")


def random_policy(params: Any, obs: jax.Array, key: jax.Array) -> jax.Array:
    """Uniformly random actions (a floor for comparisons)."""
    del params
    return jax.random.randint(key, obs.shape[:-1], 0, NUM_ACTIONS, dtype=jnp.int32)


def focus_fire_policy(params: Any, obs: jax.Array, key: jax.Array | None = None) -> jax.Array:
    """Every NPC walks at the bot and melees when its strike would land."""
    del params, key
    return jnp.where(obs[..., BOT_CAN_ATTACK] > 0.5, MELEE, MOVE_TO_BOT).astype(jnp.int32)


def chase_and_orb_policy(
    params: Any, obs: jax.Array, key: jax.Array, fire_prob: float = 0.8, orb_reach: float = 11.0
) -> jax.Array:
    """Melee when possible; otherwise, within `orb_reach` u of the bot, fire an
    orb with probability `fire_prob`, else walk at the bot.

    The orb cooldown is not in the observation and firing on cooldown wastes
    the tick, hence a random mix rather than "always fire". Distances assume
    the default 30x30 arena.
    """
    del params
    d = obs[..., BOT_DISTANCE] * arena_diagonal(EnvParams())
    fire = (d < orb_reach) & (jax.random.uniform(key, d.shape) < fire_prob)
    return jnp.where(obs[..., BOT_CAN_ATTACK] > 0.5, MELEE, jnp.where(fire, RANGED, MOVE_TO_BOT)).astype(jnp.int32)


# The intent squads (docs/arena.md, "Scenarios"): one tactic each, for probing
# whether a scenario rewards choosing the tactic by situation. Distances and
# positions are read back from the normalised observation of the default
# 30x30 arena.
_SIZE = 30.0
_D_MAX = _SIZE * 2.0**0.5


def _bot_distance(obs: jax.Array) -> jax.Array:
    return obs[..., BOT_DISTANCE] * _D_MAX


def rush_policy(params: Any, obs: jax.Array, key: jax.Array | None = None) -> jax.Array:
    """RUSH: walk in and melee (the same squad as `focus_fire_policy`)."""
    return focus_fire_policy(params, obs, key)


def kite_policy(
    params: Any,
    obs: jax.Array,
    key: jax.Array,
    near: float = 6.0,
    far: float = 11.0,
    fire_prob: float = 0.8,
) -> jax.Array:
    """KITE: keep `near`..`far` u from the bot and fire orbs.

    Inside `near` it backs off, beyond `far` it closes in; in the band it
    fires with probability `fire_prob` (the orb cooldown is not observed, and
    a shot on cooldown costs the tick) and otherwise steers for the band's
    middle, so a fleeing bot does not walk out of range between shots.
    """
    del params
    d = _bot_distance(obs)
    fire = jax.random.uniform(key, d.shape) < fire_prob
    steer = jnp.where(d > 0.5 * (near + far), MOVE_TO_BOT, RETREAT)
    band = jnp.where(fire, RANGED, steer)
    return jnp.where(d < near, RETREAT, jnp.where(d > far, MOVE_TO_BOT, band)).astype(jnp.int32)


def hybrid_policy(params: Any, obs: jax.Array, key: jax.Array, fire_prob: float = 0.25) -> jax.Array:
    """HYBRID: melee if it lands, else (within 11 u) an orb with probability `fire_prob`, else walk in.

    The orb cooldown is not observed, so the squad fires at random: a low
    `fire_prob` keeps it closing in between the ready orbs (one per second).
    """
    return chase_and_orb_policy(params, obs, key, fire_prob=fire_prob)


def _bearings(obs: jax.Array):
    """Each NPC's bearing from the bot and the bearing of the squad's centroid (radians)."""
    own = obs[..., SELF.start : SELF.start + 2]
    bot = obs[..., BOT.start : BOT.start + 2]
    allies = obs[..., ALLIES].reshape(obs.shape[:-1] + (NUM_NPCS - 1, 3))[..., :2]
    centroid = (own + jnp.sum(allies, axis=-2)) / NUM_NPCS  # the same point in every row
    rel, crel = own - bot, centroid - bot
    return jnp.arctan2(rel[..., 1], rel[..., 0]), jnp.arctan2(crel[..., 1], crel[..., 0])


def _take_slots(obs: jax.Array, offsets: jax.Array, tolerance: float = 0.35, approach: float = 8.0) -> jax.Array:
    """Close in to `approach` u, strafe round the bot to the squad's bearing + offsets[i], then close in.

    Every NPC melees whenever its strike would land. Strafing left turns an
    NPC clockwise round the bot, right counter-clockwise.
    """
    bearing, centre = _bearings(obs)
    error = jnp.mod(centre + offsets - bearing + jnp.pi, 2.0 * jnp.pi) - jnp.pi  # wrapped into [-pi, pi)
    d = _bot_distance(obs)
    turn = jnp.where(error > 0.0, STRAFE_RIGHT, STRAFE_LEFT)
    move = jnp.where((d <= approach) & (jnp.abs(error) > tolerance), turn, MOVE_TO_BOT)
    # A strike that lands is never passed up for a better position.
    return jnp.where(obs[..., BOT_CAN_ATTACK] > 0.5, MELEE, move).astype(jnp.int32)


def surround_policy(params: Any, obs: jax.Array, key: jax.Array | None = None) -> jax.Array:
    """SURROUND: take points 72 degrees apart round the bot (centred on the squad's side), then melee."""
    del params, key
    offsets = jnp.deg2rad(72.0 * (jnp.arange(NUM_NPCS) - NUM_NPCS // 2))
    return _take_slots(obs, offsets)


def flank_policy(params: Any, obs: jax.Array, key: jax.Array | None = None) -> jax.Array:
    """FLANK: come at the bot from its sides, 90 degrees either way of the squad's bearing, then melee.

    The observation has no facing; a bot that attacks faces the squad, so
    its sides are taken as square to the bot-to-squad line.
    """
    del params, key
    offsets = jnp.deg2rad(jnp.where(jnp.arange(NUM_NPCS) % 2 == 0, 90.0, -90.0))
    return _take_slots(obs, offsets)


def make_side_keeper(near: float = 5.0, far: float = 7.5, tolerance_deg: float = 15.0) -> Policy:
    """FLANK by the bot's facing: each NPC strafes round to the nearer of the bot's sides and shoots.

    Unlike `flank_policy`, which takes the sides of the bot-to-squad line,
    this reads the facing (obs[23:25], so "ArenaFacing-v0" or a later id) and
    takes the bearing 90 degrees off it on whichever side the NPC already is,
    keeping `near`-`far` u from the bot (outside its 3 u melee) and firing orbs
    once within `tolerance_deg` of the side. A reference for what a
    memoryless Flank squad can reach on the lateral-share measure
    (docs/history/obeying-tags.md, "Aggressive measured by its damage rate").
    """

    def policy(params: Any, obs: jax.Array, key: jax.Array | None = None) -> jax.Array:
        del params, key
        if obs.shape[-1] < FACING.stop:
            raise ValueError(f"the side keeper reads the bot's facing: use ArenaFacing-v0 (got {obs.shape[-1]} floats)")
        rel = obs[..., SELF.start : SELF.start + 2] - obs[..., BOT.start : BOT.start + 2]
        facing = obs[..., FACING]
        cos = jnp.sum(rel * facing, axis=-1)
        sin = facing[..., 0] * rel[..., 1] - facing[..., 1] * rel[..., 0]
        off = jnp.degrees(jnp.arctan2(sin, cos))  # the NPC's bearing off the facing, left positive
        side = jnp.where(off >= 0.0, 90.0, -90.0)
        # Strafing right turns an NPC counter-clockwise round the bot, which raises `off`.
        turn = jnp.where(off < side, STRAFE_RIGHT, STRAFE_LEFT)
        act = jnp.where(jnp.abs(off - side) < tolerance_deg, RANGED, turn)
        d = _bot_distance(obs)
        return jnp.where(d > far, MOVE_TO_BOT, jnp.where(d < near, RETREAT, act)).astype(jnp.int32)

    return policy


side_keeper_policy = make_side_keeper()


def tag_switch_policy(*policies: Policy) -> Policy:
    """A policy that plays `policies[tag]` for the tag in the observation (tags past the end: the last).

    With `true_mode_tags` as the tag source the tag is the bot's mode (0
    aggressive, 1 evasive), so `tag_switch_policy(rush_policy, kite_policy)`
    melees a charging bot and kites a fleeing one.
    """
    if not policies:
        raise ValueError("tag_switch_policy needs at least one policy")

    def policy(params, obs, key):
        tag = jnp.round(obs[..., TAG] * (NUM_TAGS - 1)).astype(jnp.int32)
        keys = jax.random.split(key, len(policies))
        acts = jnp.stack([p(params, obs, k) for p, k in zip(policies, keys, strict=True)])
        return jnp.take_along_axis(acts, jnp.clip(tag, 0, len(policies) - 1)[None], axis=0)[0]

    return policy


def true_mode_tags():
    """A tag source that reads the bot's true mode (0 aggressive, 1 evasive) from the state.

    A probe's oracle, not a player: the observation does not show the mode.
    Plug it into `jaxarena.runner.make_runner` with `tag_switch_policy`.
    """
    from .tag_sources import TagSource

    return TagSource.of_state(lambda state, params, features, prev_tags, done, time_s, key: state.bot_mode)


#: The scripted squads by name, as the protocol's "scripted:NAME" policy specs use them.
SCRIPTED = {
    "random": random_policy,
    "focus_fire": focus_fire_policy,
    "chase_and_orb": chase_and_orb_policy,
    "rush": rush_policy,
    "kite": kite_policy,
    "surround": surround_policy,
    "flank": flank_policy,
    "hybrid": hybrid_policy,
}
