"""Table 5: each tag's shaping term at known angles and distances."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build_state
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxarena
from jaxarena.names import AGGRESSIVE, FLANK, RETREAT_TAG, SURROUND
from jaxarena.rewards import shaping

_, PARAMS = jaxarena.make("Arena-v0")
D_MAX = 30.0 * np.sqrt(2.0)
BOT = np.array([15.0, 15.0], np.float32)
FACING = np.array([0.0, 1.0], np.float32)  # the bot looks along +z


def at(theta_deg, d):
    """Five NPC positions at bearing theta (from the facing) and distance d."""
    t = np.deg2rad(theta_deg)
    offset = d * np.array([-np.sin(t), np.cos(t)])  # +theta turns left of the facing
    return jnp.asarray(np.tile(BOT + offset, (5, 1)), jnp.float32)


def term(tag, theta, d):
    return float(shaping(jnp.int32(tag), at(theta, d), jnp.asarray(BOT), jnp.asarray(FACING), PARAMS)[0])


@pytest.mark.parametrize("theta", [0.0, 30.0, 90.0, -90.0, 150.0, 180.0])
def test_surround_is_0_005_abs_sin_theta(theta):
    assert term(SURROUND, theta, 5.0) == pytest.approx(0.005 * abs(np.sin(np.deg2rad(theta))), abs=1e-7)


@pytest.mark.parametrize("d", [0.5, 3.0, 10.0, 30.0, D_MAX])
def test_aggressive_is_0_01_times_one_minus_d_over_dmax(d):
    assert term(AGGRESSIVE, 37.0, d) == pytest.approx(0.01 * (1.0 - d / D_MAX), abs=1e-7)


@pytest.mark.parametrize(
    "theta,inside",
    [
        (0.0, False),
        (59.0, False),
        (61.0, True),
        (90.0, True),
        (119.0, True),
        (121.0, False),
        (-61.0, True),
        (-119.0, True),
        (-121.0, False),
        (180.0, False),
    ],
)
def test_flank_pays_0_0075_only_in_the_lateral_arcs(theta, inside):
    assert term(FLANK, theta, 6.0) == pytest.approx(0.0075 if inside else 0.0, abs=1e-9)


@pytest.mark.parametrize("d", [1.0, 7.9, 8.1, 20.0, D_MAX])
def test_retreat_term_and_its_close_range_penalty(d):
    expected = min(0.005 * d / D_MAX, 0.005) - (0.005 if d < 8.0 else 0.0)
    assert term(RETREAT_TAG, 10.0, d) == pytest.approx(expected, abs=1e-7)


@settings(max_examples=60, deadline=None)
@given(st.floats(-179.0, 179.0), st.floats(0.1, 40.0), st.integers(0, 3))
def test_every_term_is_bounded_by_its_table5_maximum(theta, d, tag):
    value = term(tag, theta, d)
    bounds = {SURROUND: (0.0, 0.005), AGGRESSIVE: (0.0, 0.01), FLANK: (0.0, 0.0075), RETREAT_TAG: (-0.005, 0.005)}
    lo, hi = bounds[tag]
    assert lo - 1e-7 <= value <= hi + 1e-7


def test_env_reward_adds_weighted_shaping_for_living_npcs_only():
    env, params = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0, shaping_weight=2.0)
    npc = np.array([[4.0, 3.0], [9.0, 3.0], [14.0, 3.0], [19.0, 3.0], [24.0, 3.0]], np.float32)
    hp = jnp.array([60.0, 60.0, 0.0, 60.0, 60.0])
    state = build_state(params, npc, [15.0, 27.0], npc_hp=hp, tag=jnp.int32(AGGRESSIVE))
    hold = jnp.full((5,), 3, jnp.int32)  # melee out of range: stand still
    step = jax.jit(env.step_env)
    stepped, reward, *_ = step(jax.random.key(0), state, hold, params)
    expected = 2.0 * 0.01 * (1.0 - np.hypot(*(npc - [15.0, 27.0]).T) / D_MAX)
    expected[2] = 0.0
    np.testing.assert_allclose(reward, expected, rtol=1e-5)
    _, params_a = jaxarena.make("Arena-v0", bot="aggressive", bot_speed=0.0, bot_melee_damage=0.0, shaping_weight=0.0)
    _, reward_a, *_ = step(jax.random.key(0), state, hold, params_a)
    np.testing.assert_array_equal(reward_a, np.zeros(5))


@pytest.mark.analysis  # a claim over rollouts: outside the core tier
def test_default_reward_is_the_team_reward_alone_and_shaping_never_changes_outcomes():
    """Arena-v0's default params pay Combination A's reward; shaping is opt-in and reward-only."""
    from jaxarena.policies import focus_fire_policy
    from jaxarena.runner import make_runner

    env, plain = jaxarena.make("Arena-v0", bot="balanced")
    assert float(plain.shaping_weight) == 0.0
    # One program for both weights (params are traced), 32 paired episodes, tag 0 (Surround) held.
    run = make_runner(env, plain, focus_fire_policy, 0, 32, num_periods=6)
    key = jax.random.key(3)
    team = run(None, plain, key)
    shaped = run(None, plain.replace(shaping_weight=1.0), key)
    np.testing.assert_array_equal(team.outcome, shaped.outcome)
    np.testing.assert_array_equal(team.duration_s, shaped.duration_s)
    np.testing.assert_array_equal(team.damage_dealt, shaped.damage_dealt)
    # The team return is damage / 300 + kill - wipe; shaping adds a positive Surround stream.
    kills = np.asarray(team.outcome) == 1
    wipes = np.asarray(team.outcome) == 2
    np.testing.assert_allclose(team.team_return, np.asarray(team.damage_dealt) / 300.0 + kills - wipes, atol=1e-4)
    assert np.all(np.asarray(shaped.team_return) > np.asarray(team.team_return))
