"""The scripted bots behave as named: chase, flee, and switch mid-episode."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from conftest import build_state

import jaxarena
from jaxarena.bots import MODE_AGGRESSIVE, MODE_EVASIVE
from jaxarena.physics import norm

HOLD = jnp.full((5,), 3, jnp.int32)  # stand still (melee with nothing in range)


def trace(bot: str, state_fn, n_ticks: int, **overrides):
    """Distance from the bot to the nearest NPC and its mode, tick by tick, NPCs standing still."""
    env, params = jaxarena.make("Arena-v0", bot=bot, bot_melee_damage=0.0, **overrides)
    state = state_fn(params)

    @jax.jit
    def run(state):
        def tick(state, key):
            state, *_ = env.step_env(key, state, HOLD, params)
            nearest = jnp.min(norm(state.npc_pos - state.bot_pos))
            return state, (nearest, state.bot_mode, state.bot_pos)

        return jax.lax.scan(tick, state, jax.random.split(jax.random.key(0), n_ticks))[1]

    return jax.tree.map(np.asarray, run(state))


def spawn(params):
    return jaxarena.Arena(params).reset(jax.random.key(7), params)[1]


def test_aggressive_bot_closes_distance_and_strikes():
    dist, mode, _ = trace("aggressive", spawn, 100)
    assert dist[0] > 15.0 and dist[-1] <= 3.0  # from its spawn zone into striking range
    assert np.all(mode == MODE_AGGRESSIVE)
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    step = jax.jit(env.step_env)
    state = spawn(params)
    for key in jax.random.split(jax.random.key(1), 100):
        state, *_ = step(key, state, HOLD, params)
    assert float(state.npc_hp.sum()) < 300.0  # it did strike


def test_aggressive_bot_finds_its_way_around_the_central_box():
    npc = np.tile([15.0, 5.0], (5, 1)).astype(np.float32)  # the whole squad due south of the box
    dist, _, pos = trace("aggressive", lambda p: build_state(p, npc, [15.0, 22.0]), 120)
    assert dist[-1] <= 3.0


def test_evasive_bot_opens_distance():
    npc = np.array([[13.0, 22.0], [14.0, 22.0], [15.0, 22.0], [16.0, 22.0], [17.0, 22.0]], np.float32)
    dist, mode, _ = trace("evasive", lambda p: build_state(p, npc, [15.0, 24.0]), 60)
    assert dist[0] < 3.0 and dist[-1] > 8.0
    assert np.all(mode == MODE_EVASIVE)


def test_evasive_bot_does_not_pin_itself_in_a_corner():
    # The squad closes in from the west; the only way out is south along the wall.
    npc = np.array([[23.0, 27.0], [23.0, 28.5], [24.0, 26.0], [22.0, 27.5], [23.5, 25.0]], np.float32)
    dist, _, pos = trace("evasive", lambda p: build_state(p, npc, [28.5, 28.5]), 80)
    assert dist[-1] > dist[0] + 3.0
    assert pos[-1, 1] < 24.0 and pos[:, 0].min() > 26.0  # it slid down the east wall


def test_balanced_bot_switches_tactics_within_one_episode():
    dist, mode, _ = trace("balanced", spawn, 1200)
    switches = np.flatnonzero(np.diff(mode) != 0)
    assert len(switches) >= 2, "the balanced bot should change phase several times in 120 s"
    # It closes in during aggressive phases and opens distance during evasive ones.
    d = np.diff(dist)
    assert d[mode[1:] == MODE_AGGRESSIVE].mean() < 0
    assert d[mode[1:] == MODE_EVASIVE].mean() > 0


def test_balanced_schedule_differs_between_episodes_and_depends_on_hp():
    env, params = jaxarena.make("Arena-v0", bot="balanced")
    s1, s2 = spawn(params), env.reset(jax.random.key(8), params)[1]
    assert not np.allclose(s1.bot_phase_s, s2.bot_phase_s)
    from jaxarena.bots import BotState, next_phase

    expiring = BotState(jnp.int32(MODE_EVASIVE), jnp.int32(1), jnp.array([10.0, 10.0]))
    healthy = next_phase(expiring, jnp.float32(1.0), params)
    hurt = next_phase(expiring, jnp.float32(0.5), params)
    assert int(healthy.mode) == int(hurt.mode) == MODE_AGGRESSIVE
    assert int(hurt.phase_ticks) < int(healthy.phase_ticks)  # a hurt bot attacks for shorter spells


def test_balanced_phases_last_exactly_their_drawn_length():
    env, params = jaxarena.make("Arena-v0", bot="balanced")
    state = spawn(params)
    first = int(jnp.round(state.bot_phase_s[state.bot_mode] / params.dt))
    _, mode, _ = trace("balanced", spawn, first + 5)
    switches = np.flatnonzero(np.diff(np.concatenate([[int(state.bot_mode)], mode])) != 0)
    assert switches[0] == first  # ticks 0..first-1 in the first phase
