"""Table 3: the 23-float observation, element by element, on a hand-built state."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import build_state

import jaxarena
from jaxarena.observe import ALLY_INDEX, llm_features, observe


def test_observation_layout_matches_table3_element_by_element():
    _, params = jaxarena.make("Arena-v0")
    npc = np.array([[3.0, 4.0], [13.0, 10.5], [16.0, 11.5], [27.0, 26.0], [20.0, 2.0]], np.float32)
    hp = np.array([60.0, 45.0, 0.0, 15.0, 30.0], np.float32)
    bot = np.array([14.0, 12.0], np.float32)
    cd = np.array([0, 0, 0, 0, 3], np.int32)
    state = build_state(params, npc, bot, npc_hp=hp, bot_hp=jnp.float32(240.0), npc_melee_cd=cd, tag=jnp.int32(2))
    obs = np.asarray(observe(state, params))
    chex.assert_shape(obs, (5, 23))
    assert obs.dtype == np.float32

    d_max = 30.0 * np.sqrt(2.0)
    # Nearest cover points, worked out by hand from the default boxes.
    cover = np.array([[5.0, 9.0], [13.0, 13.0], [16.0, 13.0], [25.0, 21.0], [21.0, 9.0]])
    for i in range(5):
        dist = np.hypot(*(npc[i] - bot))
        can = float(hp[i] > 0 and cd[i] == 0 and dist <= 2.5)
        expected = [npc[i, 0] / 30, npc[i, 1] / 30, hp[i] / 60]
        expected += [bot[0] / 30, bot[1] / 30, 240.0 / 300, dist / d_max, can, cover[i, 0] / 30, cover[i, 1] / 30]
        for j in (j for j in range(5) if j != i):
            expected += [npc[j, 0] / 30, npc[j, 1] / 30, hp[j] / 60]
        expected += [2.0 / 3.0]
        np.testing.assert_allclose(obs[i], expected, rtol=1e-6, atol=1e-6, err_msg=f"npc {i}")
    # NPC 2 is dead (hp 0) but in range: it cannot attack; NPC 1 is in range and ready.
    assert obs[2, 7] == 0.0 and obs[1, 7] == 1.0
    # Dead allies appear as (x, z, 0).
    np.testing.assert_allclose(obs[0, 10 + 3 * 1 : 10 + 3 * 2], [16.0 / 30, 11.5 / 30, 0.0], rtol=1e-6)


def test_ally_order_skips_self():
    assert ALLY_INDEX.tolist() == [[1, 2, 3, 4], [0, 2, 3, 4], [0, 1, 3, 4], [0, 1, 2, 4], [0, 1, 2, 3]]


def test_tag_slot_is_zero_in_combination_a_and_tag_over_three_otherwise():
    env, params = jaxarena.make("Arena-v0")
    obs, state = env.reset(jax.random.key(0), params)
    assert np.all(np.asarray(obs[:, 22]) == 0.0)
    for tag in range(4):
        np.testing.assert_allclose(observe(env.set_tag(state, tag), params)[:, 22], tag / 3.0)


def test_observations_stay_in_unit_box_over_a_rollout():
    env, params = jaxarena.make("Arena-v0", bot="balanced")

    @jax.jit
    def rollout(key):
        obs, state = env.reset(key, params)

        def tick(state, key):
            k1, k2 = jax.random.split(key)
            obs, state, *_ = env.step(k2, state, jax.random.randint(k1, (5,), 0, 6), params)
            return state, obs

        return jax.lax.scan(tick, state, jax.random.split(key, 600))[1]

    obs = jax.vmap(rollout)(jax.random.split(jax.random.key(3), 16))
    chex.assert_tree_all_finite(obs)
    assert float(obs.min()) >= 0.0 and float(obs.max()) <= 1.0


def test_llm_features_are_the_table10_state():
    _, params = jaxarena.make("Arena-v0")
    npc = np.array([[3.0, 4.0], [13.0, 10.5], [16.0, 11.5], [27.0, 26.0], [20.0, 2.0]], np.float32)
    hp = np.array([60.0, 45.0, 0.0, 15.0, 30.0], np.float32)
    state = build_state(params, npc, [14.0, 12.0], npc_hp=hp, bot_hp=jnp.float32(240.0), bot_moving=jnp.asarray(True))
    feats = np.asarray(llm_features(state, params))
    nearest = min(np.hypot(*(npc[i] - [14.0, 12.0])) for i in range(5) if hp[i] > 0)  # NPC 2 is dead
    np.testing.assert_allclose(feats, [240.0, 150.0 / 4, 4.0, 1.0, nearest], rtol=1e-6)
    assert jaxarena.LLM_FEATURES == ("bot_hp", "avg_npc_hp", "npcs_alive", "bot_moving", "nearest_npc_distance")


def test_facing_variant_appends_the_bots_facing_to_table3():
    """ "ArenaFacing-v0" = Table 3's 23 floats, then the bot's facing (x, z), at reset, step and final_obs."""
    plain, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=10.0)  # 100-tick episodes: resets happen
    facing, _ = jaxarena.make("ArenaFacing-v0", bot="evasive", episode_s=10.0)
    assert (plain.obs_size, facing.obs_size) == (23, 25)
    assert (plain.env_id, facing.env_id) == ("Arena-v0", "ArenaFacing-v0")

    def with_facing(state):
        return jnp.concatenate([plain.observe(state, params), jnp.broadcast_to(state.bot_facing, (5, 2))], -1)

    @jax.jit
    def rollout(key):
        obs, state = facing.reset(key, params)
        first = (obs, with_facing(state))

        def tick(state, key):
            actions = jax.random.randint(key, (5,), 0, 6)
            ended, *_ = facing.step_env(key, state, actions, params)  # the pre-reset state `step` reports on
            obs, state, _, done, info = facing.step(key, state, actions, params)
            return state, (obs, with_facing(state), info["final_obs"], with_facing(ended), done)

        return first, jax.lax.scan(tick, state, jax.random.split(key, 300))[1]

    (obs0, want0), (obs, want, final_obs, want_final, done) = rollout(jax.random.key(3))
    chex.assert_shape([obs0, obs, final_obs], [(5, 25), (300, 5, 25), (300, 5, 25)])
    assert int(np.sum(done)) >= 2
    np.testing.assert_array_equal(obs0, want0)
    np.testing.assert_array_equal(obs, want)
    np.testing.assert_array_equal(final_obs, want_final)
    np.testing.assert_allclose(np.linalg.norm(obs[..., 23:], axis=-1), 1.0, atol=1e-5)
    # The evasive bot turns: the appended facing is live, not a constant.
    assert np.unique(np.round(obs[:, 0, 23:], 3), axis=0).shape[0] > 3


@pytest.mark.train  # a trained policy, not the env: outside the core tier
def test_a_policy_refuses_an_observation_of_the_wrong_size():
    from jaxarena.algorithms.checkpoint import make_policy
    from jaxarena.algorithms.config import PPOConfig
    from jaxarena.algorithms.networks import ActorCritic

    config = PPOConfig(combination="B", env_id="ArenaFacing-v0")
    net = ActorCritic(**config.network_kwargs())
    params = net.init(jax.random.key(0), jnp.zeros((1, 25)))
    policy = make_policy(config, greedy=True)
    assert policy.env_id == "ArenaFacing-v0"
    assert policy(params, jnp.zeros((5, 25))).shape == (5,)
    with pytest.raises(ValueError, match="ArenaFacing-v0"):
        policy(params, jnp.zeros((5, 23)))
