"""The Environment base: a subclass writes one episode's rules, the base checks and auto-resets in one place."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.env import Arena
from jaxarena.environment import Environment
from jaxarena.names import RUNNING


class Countdown(Environment):
    """An episode counts down from `params` to 0; the next one starts at the step's draw."""

    default_params = 3

    def reset_env(self, key, params):
        state = jnp.int32(params)
        return self.observe(state, params), state

    def step_env(self, key, state, action, params):
        stepped = state - action
        return stepped, jnp.float32(action), stepped <= 0, jnp.bool_(False), {}

    def observe(self, state, params):
        return state.astype(jnp.float32)

    def next_episode(self, key, state, params):
        return jnp.int32(params) + jax.random.randint(key, (), 0, 2)

    def checked_action(self, action):
        if int(action) not in (0, 1):
            raise ValueError("action must be 0 or 1")
        return jnp.int32(action)


def test_the_base_resets_a_finished_episode_and_nowhere_else():
    env = Countdown()
    key = jax.random.PRNGKey(0)
    obs, state = env.reset(key)
    assert int(state) == 3 and float(obs) == 3.0
    for expected in (2, 1):
        obs, state, reward, done, _ = env.step(key, state, 1)
        assert int(state) == expected and not bool(done) and float(reward) == 1.0
    obs, state, _, done, _ = env.step(key, state, 1)  # reaches 0: the next episode starts at once
    assert bool(done) and int(state) == int(env.next_episode(key, state, 3)) and float(obs) == float(state)
    with pytest.raises(ValueError, match="0 or 1"):
        env.step(key, state, 2)
    with pytest.raises(TypeError):
        env.reset(0)  # a key is checked before anything runs


def test_the_arena_is_an_environment_whose_step_is_its_rules_then_the_next_episode():
    env, params = jaxarena.make("Arena-v0", bot="aggressive", episode_s=0.3)
    assert isinstance(env, Arena) and isinstance(env, Environment)
    key = jax.random.PRNGKey(1)
    obs, state = env.reset(key, params)
    actions = jnp.zeros((5,), jnp.int32)
    for _ in range(2):
        obs, state, _, done, info = env.step(key, state, actions, params)
        assert not bool(done) and int(info["outcome"]) == RUNNING
    stepped, _, _, truncated, _ = env.step_env(key, state, actions, params)
    obs, after, _, done, info = env.step(key, state, actions, params)  # the clock runs out
    assert bool(done) and bool(truncated)
    chex.assert_trees_all_equal(after, env.next_episode(key, state, params))
    np.testing.assert_array_equal(info["final_obs"], env.observe(stepped, params))
    np.testing.assert_array_equal(obs, env.observe(after, params))
    assert int(after.episode) == int(state.episode) + 1 and int(after.tag) == int(state.tag)
