"""Every registered id keeps gymnax's environment contract (in the spirit of JaxMARL's base-API test).

For each id of `jaxarena.REGISTERED_IDS`: reset/step outputs match
`observation_space`/`action_space` in shape and dtype and lie inside them;
`jit` and `vmap` of reset and step agree with the plain calls; the same key
gives the same episode and another key another; finished episodes reset
themselves; `done` (and `terminated`/`truncated` where reported) are scalar
bools; a non-key key and a concrete out-of-range action fail with errors
that say what to pass, while a jitted step carries no host check.
"""

from __future__ import annotations

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.policies import focus_fire_policy

SQUAD = (focus_fire_policy, None)  # a scripted squad: no checkpoint to load
# How to build each id cheaply, with episodes short enough to end within `MAX_STEPS` steps.
SETUP = {
    "Arena-v0": dict(episode_s=1.0),
    "ArenaFacing-v0": dict(episode_s=1.0),
    "ArenaFormation-v0": dict(episode_s=1.0),
    "ArenaFormation-v2": dict(episode_s=1.0),
    "BotArena-v0": dict(squad=SQUAD, episode_s=1.0),
    "SelectorDecision-v0": dict(squad=SQUAD, decision_period_s=0.5, episode_s=1.5, variants=False),
}
MAX_STEPS = 12
# Where each env's state keeps the episode's clock (ticks, or decisions for the decision-level env).
CLOCK = {"BotArena-v0": lambda s: s.env.t, "SelectorDecision-v0": lambda s: s.period}
IDS = list(jaxarena.REGISTERED_IDS)


def test_every_registered_id_is_covered():
    assert set(SETUP) == set(jaxarena.REGISTERED_IDS)


@functools.cache
def built(env_id):
    """(env, params, jitted reset, jitted step), built once per id for the whole module."""
    env, params = jaxarena.make(env_id, **SETUP[env_id])
    return env, params, jax.jit(env.reset), jax.jit(env.step)


def comparable(tree):
    """`tree` with typed PRNG keys (the decision-level env keeps each episode's) as their raw words."""

    def raw(x):
        return jax.random.key_data(x) if jnp.issubdtype(x.dtype, jax.dtypes.prng_key) else x

    return jax.tree.map(raw, tree)


def clock(env_id, state):
    return CLOCK.get(env_id, lambda s: s.t)(state)


def actions_for(env, params, key, n):
    """n actions sampled from the action space, stacked."""
    return jax.vmap(env.action_space(params).sample)(jax.random.split(key, n))


def check_obs(env, params, obs):
    space = env.observation_space(params)
    obs_leaves = jax.tree.leaves(obs)
    assert len(obs_leaves) == len(jaxarena.spaces.leaves(space))
    for leaf, s in zip(obs_leaves, jaxarena.spaces.leaves(space), strict=True):
        chex.assert_shape(leaf, s.shape)
        chex.assert_type(leaf, s.dtype)
    assert bool(space.contains(obs))


@pytest.mark.parametrize("env_id", IDS)
def test_api_names_params_and_spaces(env_id):
    env, params, *_ = built(env_id)
    assert env.name == env_id
    chex.assert_trees_all_equal_structs(env.default_params, params)
    action_space = env.action_space(params)
    sample = action_space.sample(jax.random.key(0))
    chex.assert_shape(sample, action_space.shape)
    chex.assert_type(sample, action_space.dtype)
    assert bool(action_space.contains(sample))
    assert not bool(action_space.contains(jnp.full(action_space.shape, action_space.n, sample.dtype)))
    assert bool(env.observation_space(params).contains(env.observation_space(params).sample(jax.random.key(1))))
    if hasattr(env, "agents"):
        assert env.agents == [f"npc_{i}" for i in range(env.num_agents)]


@pytest.mark.parametrize("env_id", IDS)
def test_reset_and_step_match_the_spaces_and_types(env_id):
    env, params, reset, step = built(env_id)
    obs, state = reset(jax.random.key(0), params)
    check_obs(env, params, obs)
    for t, action in enumerate(actions_for(env, params, jax.random.key(1), 3)):
        assert bool(env.action_space(params).contains(action))
        obs, state, reward, done, info = step(jax.random.key(10 + t), state, action, params)
        check_obs(env, params, obs)
        chex.assert_type(reward, jnp.float32)
        assert reward.shape in ((), (getattr(env, "num_agents", 1),))
        chex.assert_shape(done, ())
        chex.assert_type(done, bool)
        assert isinstance(info, dict)
        chex.assert_tree_all_finite({k: v for k, v in info.items() if jnp.issubdtype(v.dtype, jnp.floating)})
        if "terminated" in info:
            chex.assert_type([info["terminated"], info["truncated"]], bool)
            chex.assert_shape([info["terminated"], info["truncated"]], ())
            assert bool(done) == bool(info["terminated"] | info["truncated"])


@pytest.mark.parametrize("env_id", IDS)
def test_jit_agrees_with_plain_calls(env_id):
    # Reset, plain and jitted, for every id. A plain step dispatches its ops one by one (10-20 s on two
    # cores), so steps are checked jitted and vmapped here, and plain in the slow test below.
    env, params, reset, step = built(env_id)
    key = jax.random.key(3)
    eager_obs, eager_state = env.reset(key, params)
    jit_obs, jit_state = reset(key, params)
    chex.assert_trees_all_close(comparable((eager_obs, eager_state)), comparable((jit_obs, jit_state)), atol=1e-5)


@pytest.mark.slow  # a plain (op-by-op) step takes 10-20 s on two cores
def test_a_plain_step_agrees_with_the_jitted_one():
    env, params, reset, step = built("Arena-v0")
    action = env.action_space(params).sample(jax.random.key(4))
    _, state = reset(jax.random.key(3), params)
    eager = env.step(jax.random.key(5), state, action, params)
    jitted = step(jax.random.key(5), state, action, params)
    chex.assert_trees_all_close(comparable(eager), comparable(jitted), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("env_id", IDS)
def test_vmap_runs_independent_lanes(env_id):
    env, params, reset, step = built(env_id)
    n = 3
    keys = jax.random.split(jax.random.key(7), n)
    actions = actions_for(env, params, jax.random.key(8), n)
    obs, state = jax.jit(jax.vmap(env.reset, in_axes=(0, None)))(keys, params)
    out = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))(keys, state, actions, params)
    space = env.observation_space(params)
    assert bool(jnp.all(jax.vmap(space.contains)(out[0])))
    for i in range(n):  # each lane is the unbatched env on its own key
        lane = jax.tree.map(lambda x, i=i: x[i], (obs, state, out))
        obs_i, state_i = reset(keys[i], params)
        out_i = step(keys[i], state_i, actions[i], params)
        chex.assert_trees_all_close(comparable(lane), comparable((obs_i, state_i, out_i)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("env_id", IDS)
def test_same_key_same_episode_other_key_another(env_id):
    env, params, reset, step = built(env_id)

    def play(key):
        obs, state = reset(key, params)
        trail = [obs]
        for t, action in enumerate(actions_for(env, params, jax.random.fold_in(key, 1), 4)):
            obs, state, reward, done, _ = step(jax.random.fold_in(key, 10 + t), state, action, params)
            trail.append((obs, reward, done))
        return trail

    chex.assert_trees_all_equal(play(jax.random.key(11)), play(jax.random.key(11)))
    first, other = play(jax.random.key(11))[0], play(jax.random.key(12))[0]
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(other), strict=True))


@pytest.mark.parametrize("env_id", IDS)
def test_finished_episodes_reset_themselves(env_id):
    env, params, reset, step = built(env_id)
    obs, state = reset(jax.random.key(0), params)
    action = env.action_space(params).sample(jax.random.key(2))
    episodes = 0
    for t in range(2 * MAX_STEPS):
        before = int(clock(env_id, state))
        obs, state, reward, done, info = step(jax.random.key(100 + t), state, action, params)
        check_obs(env, params, obs)
        if bool(done):
            episodes += 1
            assert int(clock(env_id, state)) == 0, "a finished episode must hand back a fresh one"
        else:
            assert int(clock(env_id, state)) > before
    assert episodes >= 2, f"expected an episode to end within {MAX_STEPS} steps"


@pytest.mark.parametrize("env_id", IDS)
def test_bad_keys_and_out_of_range_actions_fail_clearly(env_id):
    env, params, reset, step = built(env_id)
    _, state = reset(jax.random.key(0), params)
    with pytest.raises(TypeError, match=r"jax\.random\.key\(seed\)"):
        env.reset(0, params)
    action = env.action_space(params).sample(jax.random.key(1))
    with pytest.raises(TypeError, match=r"jax\.random\.key\(seed\)"):
        env.step(42, state, action, params)
    n = env.action_space(params).n
    for bad in (n, -1, 99):
        with pytest.raises(ValueError, match=rf"0\.\.{n - 1}"):
            env.step(jax.random.key(1), state, jnp.full_like(action, bad), params)
    # Under jit the values are traced: no check, no error, and no host callback in the program.
    step(jax.random.key(1), state, jnp.full_like(action, 99), params)
    jaxpr = str(jax.make_jaxpr(env.step)(jax.random.key(1), state, action, params))
    assert "callback" not in jaxpr
