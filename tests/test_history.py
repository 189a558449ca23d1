"""The decision history: what the deduction reads, and the truth it is scored against."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.bots import MODE_AGGRESSIVE, MODE_EVASIVE
from jaxarena.llm.history import (
    APPROACH,
    HISTORY_LEN,
    NEAREST,
    NUM_POINT_FEATURES,
    empty_history,
    opponent_class,
    push,
)


@pytest.fixture(scope="module")
def start():
    env, params = jaxarena.make("Arena-v0")
    _, state = env.reset(jax.random.PRNGKey(0), params)
    return state, params


def test_push_shifts_points_and_flags(start):
    state, params = start
    history = jax.jit(push)(empty_history(state), state, params)
    chex.assert_shape(history.points, (HISTORY_LEN, NUM_POINT_FEATURES))
    np.testing.assert_array_equal(np.asarray(history.valid), [False, False, True])
    assert float(history.points[-1, APPROACH]) == 0.0  # no previous point to measure from
    nearest = float(jnp.min(jnp.linalg.norm(state.npc_pos - state.bot_pos, axis=-1)))
    assert float(history.points[-1, NEAREST]) == pytest.approx(nearest, rel=1e-5)
    for _ in range(3):
        history = push(history, state, params)
    np.testing.assert_array_equal(np.asarray(history.valid), True)


def test_approach_is_signed_by_the_bots_move_towards_the_squad(start):
    state, params = start
    history = push(empty_history(state), state, params)
    centroid = jnp.mean(state.npc_pos, axis=0)
    toward = (centroid - state.bot_pos) / jnp.linalg.norm(centroid - state.bot_pos)
    reach = params.bot_speed * params.decision_period_s
    closer = push(history, state.replace(bot_pos=state.bot_pos + 0.5 * reach * toward), params)
    away = push(history, state.replace(bot_pos=state.bot_pos - reach * toward), params)
    sideways = push(history, state.replace(bot_pos=state.bot_pos + 3.0 * jnp.array([toward[1], -toward[0]])), params)
    assert float(closer.points[-1, APPROACH]) == pytest.approx(0.5, abs=1e-5)
    assert float(away.points[-1, APPROACH]) == pytest.approx(-1.0, abs=1e-5)
    assert abs(float(sideways.points[-1, APPROACH])) < 1e-5


def test_opponent_class_is_the_bot_and_the_balanced_bots_mode(start):
    state, params = start
    truth = {}
    for bot_type in range(4):
        for mode in (MODE_AGGRESSIVE, MODE_EVASIVE):
            p = params.replace(bot_type=jnp.int32(bot_type))
            truth[bot_type, mode] = int(opponent_class(state.replace(bot_mode=jnp.int32(mode)), p))
    assert truth[0, MODE_AGGRESSIVE] == 0 and truth[1, MODE_EVASIVE] == 1
    assert truth[2, MODE_AGGRESSIVE] == 2 and truth[2, MODE_EVASIVE] == 3
    assert truth[3, MODE_AGGRESSIVE] == -1  # the learned bot has no class
