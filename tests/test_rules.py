"""Table 1 (unit stats) and Table 4 (actions), each checked through `step`.

Every test builds a state by hand, steps the real jitted env and compares
with what the paper's numbers imply, so a wrong constant or rule fails.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SPREAD, actions, build_state

import jaxarena
from jaxarena.names import MELEE, MOVE_TO_BOT, RANGED, RETREAT, STRAFE_LEFT, STRAFE_RIGHT

HOLD = MELEE  # a melee with nothing in range: the NPC stands still and does nothing


# Params are traced arguments, so one compilation serves every test's params.
_STEP = jax.jit(jaxarena.Arena().step_env)


def run(params, state, action_seq):
    """Step `state` through `action_seq` with the shared jitted step_env."""
    infos = []
    for a in action_seq:
        state, reward, terminated, truncated, info = _STEP(jax.random.key(1), state, jnp.asarray(a, jnp.int32), params)
        infos.append(info)
    return state, infos


def test_table1_defaults_match_the_paper():
    _, p = jaxarena.make("Arena-v0")
    assert (p.bot_hp, p.bot_speed, p.bot_melee_range, p.bot_melee_damage, p.bot_melee_cooldown) == (
        300,
        5,
        3.0,
        15,
        0.8,
    )
    assert (p.npc_hp, p.npc_speed, p.npc_melee_range, p.npc_melee_damage, p.npc_melee_cooldown) == (60, 4, 2.5, 15, 0.5)
    assert p.arena_size == 30.0 and p.episode_s == 120.0 and p.decision_period_s == 5.0


def test_npc_speed_is_4_units_per_second(still_bot):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 8.0])
    state, _ = run(params, state, [[HOLD, HOLD, MOVE_TO_BOT, HOLD, HOLD]] * 5)  # 0.5 s
    np.testing.assert_allclose(state.npc_pos[2], [15.0, 5.0], atol=1e-5)
    np.testing.assert_allclose(np.asarray(state.npc_pos)[[0, 1, 3, 4]], SPREAD[[0, 1, 3, 4]], atol=1e-6)


def test_bot_speed_is_5_units_per_second():
    _, params = jaxarena.make("Arena-v0", bot="aggressive", bot_melee_damage=0.0)
    state = build_state(params, SPREAD, [14.0, 27.0])
    state, _ = run(params, state, [[HOLD] * 5] * 4)  # 0.4 s straight towards npc 2 at (14, 3)
    np.testing.assert_allclose(state.bot_pos, [14.0, 25.0], atol=1e-4)


@pytest.mark.parametrize(
    "action,expected",
    [
        (MOVE_TO_BOT, [15.0, 3.4]),
        (STRAFE_LEFT, [14.6, 3.0]),  # facing +z (the bot), left is -x
        (STRAFE_RIGHT, [15.4, 3.0]),
        (RETREAT, [15.0, 2.6]),
        (MELEE, [15.0, 3.0]),
        (RANGED, [15.0, 3.0]),
    ],
)
def test_table4_each_action_moves_as_named(still_bot, action, expected):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 9.0])
    state, _ = run(params, state, [[HOLD, HOLD, action, HOLD, HOLD]])
    np.testing.assert_allclose(state.npc_pos[2], expected, atol=1e-5)


@pytest.mark.parametrize("distance,lands", [(2.49, True), (2.51, False)])
def test_npc_melee_range_is_2_5(still_bot, distance, lands):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 3.0 + distance])
    state, infos = run(params, state, [[HOLD, HOLD, MELEE, HOLD, HOLD]])
    assert float(state.bot_hp) == (285.0 if lands else 300.0)
    assert float(infos[0]["damage_dealt"][2]) == (15.0 if lands else 0.0)


def test_npc_melee_cooldown_allows_one_hit_per_half_second(still_bot):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 5.0])
    state, infos = run(params, state, [[HOLD, HOLD, MELEE, HOLD, HOLD]] * 20)  # 2 s
    hits = [float(i["damage_dealt"][2]) for i in infos]
    assert hits == [15.0 if t % 5 == 0 else 0.0 for t in range(20)]
    assert float(state.bot_hp) == 300.0 - 4 * 15.0


@pytest.mark.parametrize("distance,lands", [(2.99, True), (3.01, False)])
def test_bot_melee_range_damage_and_cooldown(distance, lands):
    _, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0)
    npc = SPREAD.copy()
    npc[2] = [15.0, 27.0 - distance]  # open ground north of the boxes
    state = build_state(params, npc, [15.0, 27.0])
    state, infos = run(params, state, [[RETREAT, RETREAT, HOLD, RETREAT, RETREAT]] * 17)  # 1.7 s
    taken = [float(i["damage_taken"][2]) for i in infos]
    if lands:  # 15 damage every 0.8 s: ticks 0, 8, 16
        assert taken == [15.0 if t % 8 == 0 else 0.0 for t in range(17)]
        assert float(state.npc_hp[2]) == 60.0 - 45.0
    else:
        assert sum(taken) == 0.0


def test_npc_dies_after_four_bot_hits_and_then_does_nothing():
    _, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0)
    npc = SPREAD.copy()
    npc[2] = [15.0, 25.0]
    state = build_state(params, npc, [15.0, 27.0])
    state, infos = run(params, state, [[HOLD, HOLD, HOLD, HOLD, HOLD]] * 26)
    assert float(state.npc_hp[2]) == 0.0  # 4 x 15 = 60 HP
    before = np.asarray(state.npc_pos[2])
    state, infos = run(params, state, [[HOLD, HOLD, MOVE_TO_BOT, HOLD, HOLD], [HOLD, HOLD, MELEE, HOLD, HOLD]])
    np.testing.assert_array_equal(state.npc_pos[2], before)
    assert float(infos[1]["damage_dealt"][2]) == 0.0 and not bool(infos[1]["alive"][2])


@pytest.mark.parametrize("surface,hit_tick", [(4.7, 3), (4.9, 4), (5.5, 4), (5.9, 4), (6.1, 5)])
def test_orb_flies_at_12_units_per_second_and_deals_5(still_bot, surface, hit_tick):
    # 1.2 u per tick, starting on the firing tick: the hit tick pins the speed.
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 3.0 + surface + 0.5])
    state, infos = run(params, state, [[HOLD, HOLD, RANGED, HOLD, HOLD]] + [[HOLD] * 5] * 6)
    dealt = [float(i["damage_dealt"][2]) for i in infos]
    assert dealt == [5.0 if t == hit_tick else 0.0 for t in range(7)]
    assert float(state.bot_hp) == 295.0 and not bool(state.orb_active.any())


@pytest.mark.parametrize("bot_x,hits", [(14.0, True), (14.6, False)])
def test_orb_range_is_12_units(still_bot, bot_x, hits):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[0] = [2.0, 25.0]  # bot surface at 11.5 u (hit) or 12.1 u (out of range)
    state = build_state(params, npc, [bot_x, 25.0])
    state, _ = run(params, state, [[RANGED, HOLD, HOLD, HOLD, HOLD]] + [[HOLD] * 5] * 12)
    assert float(state.bot_hp) == (295.0 if hits else 300.0)
    assert not bool(state.orb_active.any())


def test_orbs_are_stopped_by_boxes(still_bot):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 10.0]  # the central box (13..17) stands between
    state = build_state(params, npc, [15.0, 19.0])
    state, _ = run(params, state, [[HOLD, HOLD, RANGED, HOLD, HOLD]] + [[HOLD] * 5] * 10)
    assert float(state.bot_hp) == 300.0 and not bool(state.orb_active.any())


def test_orb_cooldown_is_one_second(still_bot):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 9.0])
    # 2.2 s of firing: orbs leave on ticks 0, 10 and 20 and land 4 ticks later.
    state, infos = run(params, state, [[HOLD, HOLD, RANGED, HOLD, HOLD]] * 22)
    assert [float(i["damage_dealt"][2]) for i in infos] == [5.0 if t in (4, 14) else 0.0 for t in range(22)]
    assert int(state.orb_active.sum()) == 1  # the third orb is still flying


@pytest.mark.parametrize("min_range,hits", [(0.0, True), (5.9, True), (6.1, False)])
def test_no_orb_is_fired_at_a_bot_closer_than_the_orb_min_range(min_range, hits):
    _, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, orb_min_range=min_range)
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 9.0])  # 6 u apart, centre to centre
    state, infos = run(params, state, [[HOLD, HOLD, RANGED, HOLD, HOLD]] + [[HOLD] * 5] * 6)
    assert float(state.bot_hp) == (295.0 if hits else 300.0)
    assert int(state.npc_orb_cd[2]) == (3 if hits else 0)  # ticks left; no orb fired: no cooldown spent


def test_at_most_two_orbs_in_flight_per_npc():
    _, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, orb_cooldown=0.1)
    npc = SPREAD.copy()
    npc[2] = [15.0, 22.0]
    state = build_state(params, npc, [15.0, 29.0])  # 6.5 u away: each orb flies 6 ticks
    state, _ = run(params, state, [[HOLD, HOLD, RANGED, HOLD, HOLD]] * 4)
    assert int(state.orb_active[2].sum()) == 2 and float(state.bot_hp) == 300.0


@pytest.mark.parametrize("bot_speed,hit", [(5.0, False), (0.0, True)])
def test_moving_bot_dodges_an_orb(bot_speed, hit):
    # Four NPCs press from the west, so the evasive bot runs east, across the
    # path of an orb fired from the south: it escapes only if it moves.
    _, params = jaxarena.make("Arena-v0", bot="evasive", bot_melee_damage=0.0, bot_speed=bot_speed)
    npc = np.array([[15.0, 21.5], [11.0, 27.0], [11.0, 26.0], [11.0, 28.0], [10.5, 27.0]], np.float32)
    state = build_state(params, npc, [15.0, 27.0])
    state, infos = run(params, state, [[RANGED, HOLD, HOLD, HOLD, HOLD]] + [[HOLD] * 5] * 10)
    assert float(state.bot_hp) == (295.0 if hit else 300.0)
    if not hit:
        assert float(state.bot_pos[0]) > 17.0  # it moved sideways, not along the orb's line


def test_units_cannot_enter_boxes_or_leave_the_arena(still_bot):
    _, params = still_bot
    npc = SPREAD.copy()
    npc[2] = [15.0, 11.0]  # walks north into the central box
    npc[0] = [0.6, 3.0]  # retreats west into the wall
    state = build_state(params, npc, [15.0, 27.0])
    state, _ = run(params, state, [[STRAFE_LEFT, HOLD, MOVE_TO_BOT, HOLD, HOLD]] * 20)
    assert float(state.npc_pos[2, 1]) == pytest.approx(12.5, abs=1e-5)  # touching: 13 - radius
    assert float(state.npc_pos[0, 0]) >= 0.5 - 1e-6


def test_out_of_range_actions_are_no_ops(still_bot):
    env, params = still_bot
    state = build_state(params, SPREAD, [15.0, 5.0])
    step = jax.jit(env.step)
    _, after, _, _, info = step(jax.random.key(0), state, actions(-1, 6, 99, -7, 1_000_000), params)
    np.testing.assert_array_equal(after.npc_pos, state.npc_pos)
    assert float(after.bot_hp) == 300.0 and not bool(after.orb_active.any())
    chex.assert_trees_all_equal(info["damage_dealt"], jnp.zeros(5))


def test_team_reward_damage_kill_and_wipe():
    _, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, shaping_weight=0.0)
    npc = SPREAD.copy()
    npc[2] = [15.0, 3.0]
    state = build_state(params, npc, [15.0, 5.0])
    _, reward, term, _, _ = _STEP(jax.random.key(0), state, actions(HOLD, HOLD, MELEE, HOLD, HOLD), params)
    np.testing.assert_allclose(reward, np.full(5, 15.0 / 300.0), rtol=1e-6)
    assert not bool(term)

    low = state.replace(bot_hp=jnp.float32(10.0))
    _, reward, term, _, _ = _STEP(jax.random.key(0), low, actions(HOLD, HOLD, MELEE, HOLD, HOLD), params)
    np.testing.assert_allclose(reward, np.full(5, 10.0 / 300.0 + 1.0), rtol=1e-6)  # only 10 HP could be taken
    assert bool(term)

    hp = jnp.array([0.0, 0.0, 15.0, 0.0, 0.0])
    doomed = build_state(params, npc, [15.0, 5.5], npc_hp=hp)
    _, reward, term, _, _ = _STEP(jax.random.key(0), doomed, actions(HOLD, HOLD, RETREAT, HOLD, HOLD), params)
    np.testing.assert_allclose(reward, np.full(5, -1.0))
    assert bool(term)


def test_kill_and_wipe_on_one_tick_is_an_npc_win_without_wipe_penalty():
    env, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, shaping_weight=0.0)
    npc = SPREAD.copy()
    npc[2] = [15.0, 25.0]
    hp = jnp.array([0.0, 0.0, 15.0, 0.0, 0.0])
    state = build_state(params, npc, [15.0, 27.0], npc_hp=hp, bot_hp=jnp.float32(10.0))
    _, obs_state, reward, done, info = jax.jit(env.step)(
        jax.random.key(0), state, actions(HOLD, HOLD, MELEE, HOLD, HOLD), params
    )
    assert bool(done) and int(info["outcome"]) == jaxarena.OUTCOMES.index("npc_win")
    np.testing.assert_allclose(reward, np.full(5, 10.0 / 300.0 + 1.0), rtol=1e-6)
    assert float(info["damage_dealt"][2]) == pytest.approx(10.0)  # credited with what was left


def test_the_tag_carries_over_an_auto_reset():
    env, params = jaxarena.make("Arena-v0", episode_s=0.5)
    _, state = env.reset(jax.random.key(0), params)
    state = env.set_tag(state, 3)
    step = jax.jit(env.step)
    for t in range(5):
        obs, state, _, done, _ = step(jax.random.key(t), state, actions(0, 0, 0, 0, 0), params)
    assert bool(done) and int(state.t) == 0 and int(state.tag) == 3
    np.testing.assert_allclose(obs[:, 22], 1.0)
