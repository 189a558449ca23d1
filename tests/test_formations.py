"""Formation slots: where Surround and Flank ask each NPC to stand, the shaping and the observation of them."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build_state

import jaxarena
from jaxarena.formations import (
    FLANK_RADIUS,
    FLANK_SIDE_RADIUS,
    SURROUND_RADIUS,
    slot_closeness,
    slot_features,
    slot_positions,
)
from jaxarena.names import (
    AGGRESSIVE,
    FLANK,
    MELEE,
    MOVE_TO_BOT,
    RETREAT,
    RETREAT_TAG,
    STRAFE_LEFT,
    STRAFE_RIGHT,
    SURROUND,
)
from jaxarena.physics import norm
from jaxarena.rewards import (
    FLANK_REACH,
    INTENT_SCALE,
    SLOT_GAIN,
    bearing_cos_sin,
    intent_shaping,
    obey_shaping,
    tag_shaping,
)

BOT = jnp.array([15.0, 15.0])
EAST, NORTH = jnp.array([1.0, 0.0]), jnp.array([0.0, 1.0])
ALIVE = jnp.ones(5, bool)
PARAMS = jaxarena.make("Arena-v0")[1]


def bearings_deg(points, centre, facing):
    v = np.asarray(points - centre)
    a = np.degrees(np.arctan2(v[:, 1], v[:, 0]) - np.arctan2(float(facing[1]), float(facing[0])))
    return (a + 180.0) % 360.0 - 180.0


def test_slots_beyond_a_wall_are_pulled_inside():
    corner = jnp.array([2.0, 2.0])
    slots, _ = slot_positions(jnp.int32(SURROUND), corner, EAST, PARAMS)
    assert float(slots.min()) >= PARAMS.unit_radius and float(slots.max()) <= PARAMS.arena_size - PARAMS.unit_radius


def test_surround_is_an_even_world_fixed_ring_and_flank_hugs_the_bots_sides():
    ring, has = slot_positions(jnp.int32(SURROUND), BOT, EAST, PARAMS)
    ring_turned, _ = slot_positions(jnp.int32(SURROUND), BOT, NORTH, PARAMS)
    assert bool(has)
    np.testing.assert_allclose(norm(ring - BOT), SURROUND_RADIUS, rtol=1e-5)
    np.testing.assert_allclose(ring, ring_turned)  # the ring does not turn with the bot
    gaps = np.diff(np.sort(bearings_deg(ring, BOT, EAST)))
    np.testing.assert_allclose(gaps, 72.0, atol=1e-3)
    for facing in (EAST, NORTH, jnp.array([0.6, -0.8])):
        flank, has = slot_positions(jnp.int32(FLANK), BOT, facing, PARAMS)
        assert bool(has)
        np.testing.assert_allclose(norm(flank - BOT), FLANK_RADIUS, rtol=1e-5)
        off = np.abs(bearings_deg(flank, BOT, facing))
        assert np.all((off > 60.0) & (off < 120.0)), off  # all inside Flank's arcs, whichever way the bot faces
        sides = np.sign(bearings_deg(flank, BOT, facing))
        assert 0 < np.sum(sides > 0) < 5  # both sides taken
    for tag in (AGGRESSIVE, RETREAT_TAG):
        assert not bool(slot_positions(jnp.int32(tag), BOT, EAST, PARAMS)[1])


def test_closeness_is_one_at_the_slot_zero_far_away_and_zero_without_a_slot():
    ring, _ = slot_positions(jnp.int32(SURROUND), BOT, EAST, PARAMS)
    np.testing.assert_allclose(slot_closeness(jnp.int32(SURROUND), ring, BOT, EAST, PARAMS), 1.0, atol=1e-6)
    # The same points are far from Flank's slots and pay nothing there or under Aggressive.
    assert float(jnp.max(slot_closeness(jnp.int32(FLANK), ring + 10.0, BOT, EAST, PARAMS))) == 0.0
    assert float(jnp.max(slot_closeness(jnp.int32(AGGRESSIVE), ring, BOT, EAST, PARAMS))) == 0.0
    # Half the fading distance away pays half.
    shifted = ring + jnp.array([4.0, 0.0])
    np.testing.assert_allclose(slot_closeness(jnp.int32(SURROUND), shifted, BOT, EAST, PARAMS), 0.5, atol=1e-5)


def test_features_point_the_way_to_the_slot():
    ring, _ = slot_positions(jnp.int32(SURROUND), BOT, EAST, PARAMS)
    at = slot_features(jnp.int32(SURROUND), ring, BOT, EAST, PARAMS)
    chex.assert_shape(at, (5, 3))
    np.testing.assert_allclose(at, np.tile([0.0, 1.0, 0.0], (5, 1)), atol=1e-5)
    # An NPC 30 degrees clockwise of its slot, twice as far out: the slot lies counter-clockwise and closer.
    a = np.deg2rad(-30.0)
    npc = BOT + 2.0 * SURROUND_RADIUS * jnp.array([np.cos(a), np.sin(a)])
    f = slot_features(jnp.int32(SURROUND), jnp.tile(npc, (5, 1)), BOT, EAST, PARAMS)[0]
    assert float(f[0]) == pytest.approx(np.sin(np.deg2rad(30.0)), abs=1e-5)
    assert float(f[1]) == pytest.approx(np.cos(np.deg2rad(30.0)), abs=1e-5)
    assert float(f[2]) < 0.0  # step in
    np.testing.assert_allclose(slot_features(jnp.int32(RETREAT_TAG), ring, BOT, EAST, PARAMS), 0.0)


def test_intent_shaping_pays_the_slot_and_nothing_far_from_it():
    params = jaxarena.make("Arena-v0")[1]
    for tag in (SURROUND, FLANK):
        slots, _ = slot_positions(jnp.int32(tag), BOT, EAST, PARAMS)
        pay = intent_shaping(jnp.int32(tag), slots, BOT, EAST, ALIVE, params)
        np.testing.assert_allclose(pay, SLOT_GAIN * INTENT_SCALE, rtol=1e-5)
        far = BOT + jnp.array([[14.0, 0.0]] * 5)
        assert float(jnp.max(intent_shaping(jnp.int32(tag), far, BOT, EAST, ALIVE, params))) == 0.0
    # Aggressive pays more in contact than at Surround's ring; Retreat's sign flips at 8 u.
    ring, _ = slot_positions(jnp.int32(SURROUND), BOT, EAST, PARAMS)
    touching = BOT + 0.5 * (ring - BOT) / SURROUND_RADIUS
    assert float(intent_shaping(jnp.int32(AGGRESSIVE), touching, BOT, EAST, ALIVE, params).min()) > float(
        intent_shaping(jnp.int32(AGGRESSIVE), ring, BOT, EAST, ALIVE, params).max()
    )
    np.testing.assert_allclose(intent_shaping(jnp.int32(RETREAT_TAG), ring, BOT, EAST, ALIVE, params), -INTENT_SCALE)
    far = BOT + jnp.array([[9.0, 0.0]] * 5)
    np.testing.assert_allclose(intent_shaping(jnp.int32(RETREAT_TAG), far, BOT, EAST, ALIVE, params), INTENT_SCALE)


def test_obey_shaping_pays_aggressive_nothing_and_flank_for_the_sides_within_reach():
    params = jaxarena.make("Arena-v0", shaping_recipe=2)[1]
    ring, _ = slot_positions(jnp.int32(SURROUND), BOT, EAST, PARAMS)
    touching = BOT + 0.5 * (ring - BOT) / SURROUND_RADIUS
    for where in (ring, touching, BOT + jnp.array([[20.0, 0.0]] * 5)):
        np.testing.assert_array_equal(obey_shaping(jnp.int32(AGGRESSIVE), where, BOT, EAST, params), 0.0)
    np.testing.assert_allclose(obey_shaping(jnp.int32(SURROUND), ring, BOT, EAST, params), SLOT_GAIN * INTENT_SCALE)
    # Flank: 90 degrees off the facing pays within reach, not beyond it; ahead and behind never pay.
    for degrees, distance, paid in (
        (90, 5.0, True),
        (-70, 2.0, True),
        (90, FLANK_REACH + 1.0, False),
        (0, 3.0, False),
        (180, 3.0, False),
    ):
        a = np.deg2rad(degrees)
        npc = jnp.tile(BOT + distance * jnp.array([np.cos(a), np.sin(a)]), (5, 1))
        pay = obey_shaping(jnp.int32(FLANK), npc, BOT, EAST, params)
        np.testing.assert_allclose(pay, SLOT_GAIN * INTENT_SCALE if paid else 0.0, rtol=1e-5, err_msg=f"{degrees} deg")
    np.testing.assert_allclose(obey_shaping(jnp.int32(RETREAT_TAG), ring, BOT, EAST, params), -INTENT_SCALE)
    # The env's dispatcher picks the recipe from the params.
    for tag in range(4):
        np.testing.assert_array_equal(
            tag_shaping(jnp.int32(tag), ring, BOT, EAST, ALIVE, params),
            obey_shaping(jnp.int32(tag), ring, BOT, EAST, params),
        )


def test_the_formation_observation_carries_the_slots_and_follows_a_retag():
    env, params = jaxarena.make("ArenaFormation-v0")
    assert env.obs_size == 28 and env.env_id == "ArenaFormation-v0"
    obs, state = env.reset(jax.random.key(0), params)
    chex.assert_shape(obs, (5, 28))
    np.testing.assert_allclose(obs[:, 23:25], jnp.broadcast_to(state.bot_facing, (5, 2)))
    slots = slot_features(state.tag, state.npc_pos, state.bot_pos, state.bot_facing, params)
    np.testing.assert_allclose(obs[:, 25:], slots)
    retagged, state2 = env.retag(obs, state, FLANK)
    np.testing.assert_allclose(retagged, env.observe(state2, params), atol=1e-6)  # as if observed afresh
    assert not np.allclose(retagged[:, 25:], obs[:, 25:])
    # Without the formation, the first 25 floats are ArenaFacing-v0's.
    facing_env, _ = jaxarena.make("ArenaFacing-v0")
    np.testing.assert_allclose(facing_env.observe(state, params), obs[:, :25])


def steer_to_slot(obs):
    """Reach the slot with Table 4's bot-relative actions, reading only the slot features."""
    sin_e, cos_e, radial = obs[..., 25], obs[..., 26], obs[..., 27]
    strafe = jnp.where(sin_e > 0, STRAFE_RIGHT, STRAFE_LEFT)
    radial_move = jnp.where(radial > 0, RETREAT, MOVE_TO_BOT)
    off_bearing = (cos_e < 0.0) | (jnp.abs(sin_e) > 0.05)
    action = jnp.where(off_bearing, strafe, MELEE)
    return jnp.where(jnp.abs(radial) > 0.05, radial_move, action).astype(jnp.int32)


# Flank's slots turn with the bot, which keeps facing its nearest NPC, so they are chased, not held.
@pytest.mark.parametrize("tag, reached", [(SURROUND, 0.8), (FLANK, 0.6)])
def test_the_features_suffice_to_reach_the_slots(tag, reached):
    env, params = jaxarena.make("ArenaFormation-v0", bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0)
    # The bot north of the central box, the squad scattered around it: every slot is in reach.
    angles = np.deg2rad([10.0, 100.0, 170.0, 250.0, 300.0])
    npc = np.array([15.0, 24.0]) + 4.0 * np.stack([np.cos(angles), np.sin(angles)], axis=-1)
    state = build_state(params, npc_pos=npc, bot_pos=[15.0, 24.0], bot_facing=jnp.array([0.0, -1.0]))
    state = env.set_tag(state, tag)
    obs = env.observe(state, params)

    def tick(carry, key):
        obs, state = carry
        state, *_ = env.step_env(key, state, steer_to_slot(obs), params)
        return (env.observe(state, params), state), None

    (_, state), _ = jax.lax.scan(tick, (obs, state), jax.random.split(jax.random.key(1), 200))
    close = slot_closeness(state.tag, state.npc_pos, state.bot_pos, state.bot_facing, params)
    assert float(jnp.mean(close)) > reached, close


# "ArenaFormation-v2": Flank's slot is the bot's nearer side, 6 u off it (v1 was a roles formation, reverted).


def test_the_side_slot_is_the_nearer_side_at_its_radius_and_turns_with_the_bot():
    for facing in (EAST, NORTH, jnp.array([0.6, -0.8])):
        left = jnp.array([-facing[1], facing[0]])
        # Two NPCs on the left (one far off), two on the right, one dead ahead.
        npc = BOT + jnp.stack([3.0 * left, 9.0 * left + 4.0 * facing, -2.0 * left, -7.0 * left - facing, 5.0 * facing])
        slots, has = slot_positions(jnp.int32(FLANK), BOT, facing, PARAMS, npc, sides=True)
        assert bool(has)
        np.testing.assert_allclose(norm(slots - BOT), FLANK_SIDE_RADIUS, rtol=1e-5)
        np.testing.assert_allclose(bearings_deg(slots, BOT, facing), [90, 90, -90, -90, 90], atol=1e-3)
    # Surround is untouched by the option; Aggressive and Retreat still have no slot.
    npc = BOT + jnp.ones((5, 2))
    np.testing.assert_allclose(
        slot_positions(jnp.int32(SURROUND), BOT, EAST, PARAMS, npc, sides=True)[0],
        slot_positions(jnp.int32(SURROUND), BOT, EAST, PARAMS)[0],
    )
    for tag in (AGGRESSIVE, RETREAT_TAG):
        assert not bool(slot_positions(jnp.int32(tag), BOT, EAST, PARAMS, npc, sides=True)[1])
    with pytest.raises(ValueError, match="npc_pos"):
        slot_positions(jnp.int32(FLANK), BOT, EAST, PARAMS, sides=True)


def test_obey_shaping_with_sides_pays_flank_for_nearing_the_side_slot():
    params = jaxarena.make("Arena-v0", shaping_recipe=2)[1]
    on_side = BOT + jnp.tile(jnp.array([0.0, FLANK_SIDE_RADIUS]), (5, 1))  # facing east: the left side
    np.testing.assert_allclose(
        obey_shaping(jnp.int32(FLANK), on_side, BOT, EAST, params, sides=True), SLOT_GAIN * INTENT_SCALE, rtol=1e-5
    )
    # Half the slot scale off the slot, straight behind it: half the pay.
    halfway = on_side + jnp.array([0.0, 4.0])
    np.testing.assert_allclose(
        obey_shaping(jnp.int32(FLANK), halfway, BOT, EAST, params, sides=True),
        0.5 * SLOT_GAIN * INTENT_SCALE,
        rtol=1e-5,
    )
    # Without the option, Flank pays the lateral arcs within reach: at 9 u on the side v0 pays and v2 pays less.
    far_side = BOT + jnp.tile(jnp.array([0.0, 9.0]), (5, 1))
    v0 = obey_shaping(jnp.int32(FLANK), far_side, BOT, EAST, params)
    v2 = obey_shaping(jnp.int32(FLANK), far_side, BOT, EAST, params, sides=True)
    assert float(v0[0]) == pytest.approx(SLOT_GAIN * INTENT_SCALE) and float(v2[0]) < float(v0[0])
    for tag in (SURROUND, AGGRESSIVE, RETREAT_TAG):
        np.testing.assert_array_equal(
            obey_shaping(jnp.int32(tag), far_side, BOT, EAST, params, sides=True),
            obey_shaping(jnp.int32(tag), far_side, BOT, EAST, params),
        )


def test_formation_v2_observes_and_pays_the_side_slot():
    env, params = jaxarena.make("ArenaFormation-v2", shaping_recipe=2, shaping_weight=1.0)
    assert env.obs_size == 28 and env.env_id == "ArenaFormation-v2" and env.flank_sides
    _, state = env.reset(jax.random.key(0), params)
    state = env.set_tag(state, FLANK)
    obs = env.observe(state, params)
    sides = slot_features(state.tag, state.npc_pos, state.bot_pos, state.bot_facing, params, sides=True)
    np.testing.assert_allclose(obs[:, 25:], sides, atol=1e-6)
    v0_env, _ = jaxarena.make("ArenaFormation-v0")
    assert not np.allclose(v0_env.observe(state, params)[:, 25:], obs[:, 25:])
    np.testing.assert_allclose(v0_env.observe(state, params)[:, :25], obs[:, :25])
    # A retag to Flank shows the side slot at once, as if observed afresh.
    surround = env.set_tag(state, SURROUND)
    retagged, flank_state = env.retag(env.observe(surround, params), surround, FLANK)
    np.testing.assert_allclose(retagged, obs, atol=1e-6)
    assert int(flank_state.tag) == FLANK
    # The step pays the side slot: the same state and actions, v0 and v2 differ by the Flank term alone.
    actions = jnp.zeros(5, jnp.int32)
    key = jax.random.key(1)
    next_v2, r2, *_ = env.step_env(key, state, actions, params)
    next_v0, r0, *_ = v0_env.step_env(key, state, actions, params)
    chex.assert_trees_all_close(next_v2, next_v0)
    alive = next_v2.npc_hp > 0.0
    pay = obey_shaping(jnp.int32(FLANK), next_v2.npc_pos, next_v2.bot_pos, next_v2.bot_facing, params, sides=True)
    old = obey_shaping(jnp.int32(FLANK), next_v2.npc_pos, next_v2.bot_pos, next_v2.bot_facing, params)
    np.testing.assert_allclose(r2 - r0, (pay - old) * alive, atol=1e-6)


def lateral_share_when_steering_to_flank_slots(env_id):
    """Share of NPC-ticks in the bot's 60-120 degree arcs over ticks 200-400, and the mean distance then."""
    env, params = jaxarena.make(env_id, bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0)
    angles = np.deg2rad([10.0, 100.0, 170.0, 250.0, 300.0])
    npc = np.array([15.0, 24.0]) + 4.0 * np.stack([np.cos(angles), np.sin(angles)], axis=-1)
    state = build_state(params, npc_pos=npc, bot_pos=[15.0, 24.0], bot_facing=jnp.array([0.0, -1.0]))
    state = env.set_tag(state, FLANK)

    def tick(carry, key):
        obs, state = carry
        state, *_ = env.step_env(key, state, steer_to_slot(obs), params)
        return (env.observe(state, params), state), state

    keys = jax.random.split(jax.random.key(1), 400)
    _, trajectory = jax.lax.scan(tick, (env.observe(state, params), state), keys)
    late = jax.tree.map(lambda x: x[200:], trajectory)
    cos, _ = jax.vmap(bearing_cos_sin)(late.npc_pos, late.bot_pos, late.bot_facing)
    return float(jnp.mean(jnp.abs(cos) < 0.5)), float(jnp.mean(norm(late.npc_pos - late.bot_pos[:, None])))


@pytest.mark.slow  # over ~5 s on 2 cores: `-m core` stays under two minutes
def test_steering_by_the_side_features_holds_more_of_a_turning_bots_sides_than_v0():
    # The standing bot still turns to face its nearest NPC, so no slot is held for good.
    sides, sides_distance = lateral_share_when_steering_to_flank_slots("ArenaFormation-v2")
    hug, hug_distance = lateral_share_when_steering_to_flank_slots("ArenaFormation-v0")
    assert sides > 0.45 and sides > hug + 0.1, (sides, hug)
    assert 3.0 < sides_distance < 8.0 and hug_distance < 3.0  # v2 outside the bot's melee, v0 inside it
