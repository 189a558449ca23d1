"""LogWrapper statistics and the JaxMARL-compatible multi-agent view."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.wrappers import GymnaxWrapper, LogWrapper


def test_log_wrapper_reports_finished_episodes():
    env, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=3.0)
    env = LogWrapper(env)
    obs, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    total = np.zeros(5)
    for t in range(30):
        obs, state, reward, done, info = step(jax.random.key(t), state, jnp.full((5,), 4, jnp.int32), params)
        total += np.asarray(reward)
    assert bool(info["returned_episode"]) and int(info["returned_episode_outcome"]) == 3
    assert int(info["returned_episode_lengths"]) == 30 and float(info["returned_episode_seconds"]) == 3.0
    np.testing.assert_allclose(info["returned_episode_returns"], total, rtol=1e-5)
    assert int(state.episode_length) == 0 and np.all(np.asarray(state.episode_returns) == 0)


def test_log_wrapper_timestep_counts_the_steps_of_each_episode():
    env, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=0.5)  # 5 ticks
    env = LogWrapper(env)
    _, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    seen = []
    for t in range(12):
        _, state, _, done, info = step(jax.random.key(t), state, jnp.full((5,), 4, jnp.int32), params)
        chex.assert_type(info["timestep"], jnp.int32)
        seen.append((int(info["timestep"]), bool(done)))
    assert [s for s, _ in seen] == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2]
    assert [d for _, d in seen] == [s == 5 for s, _ in seen]
    assert int(info["returned_episode_lengths"]) == 5


def test_wrappers_pass_attributes_through_to_the_env():
    env, params = jaxarena.make("ArenaFacing-v0", scenario="raid")
    wrapped = GymnaxWrapper(LogWrapper(env))  # however deep
    assert wrapped.obs_size == 25 and wrapped.env_id == wrapped.name == "ArenaFacing-v0"
    assert wrapped.agents == env.agents and wrapped.num_agents == 5 and wrapped.num_actions == 6
    assert wrapped.scenario == "raid" and wrapped.default_params is env.default_params
    assert wrapped.observation_space(params).shape == (5, 25) and wrapped.action_space(params).shape == (5,)
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = wrapped.no_such_thing
    view = jaxarena.make_jaxmarl("ArenaFacing-v0")
    assert view.env_id == "ArenaFacing-v0" and view.scenario == "paper" and view.num_tags == 4
    # The view's own JaxMARL methods win over the arena's gymnax ones.
    assert view.observation_space("npc_0").shape == (25,)


@pytest.mark.parametrize(("env_id", "obs_size"), [("Arena-v0", 23), ("ArenaFacing-v0", 25)])
def test_jaxmarl_view_spaces_contain_observations_and_sample_actions(env_id, obs_size):
    env = jaxarena.make_jaxmarl(env_id, bot="balanced")
    assert env.name == f"jaxarena.{env_id}"
    assert env.agents == [f"npc_{i}" for i in range(5)] and env.num_agents == 5
    obs, state = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    key = jax.random.key(1)
    for t in range(300):
        key, *ks = jax.random.split(key, 7)
        actions = {a: env.action_space(a).sample(ks[i]) for i, a in enumerate(env.agents)}
        assert all(env.action_space(a).contains(actions[a]) for a in env.agents)
        obs, state, rewards, dones, infos = step(ks[5], state, actions)
        for a in env.agents:
            assert env.observation_space(a).contains(obs[a]), (t, a)
    assert env.observation_space("npc_0").shape == (obs_size,) and env.action_space("npc_0").n == 6
    avail = env.get_avail_actions(state)
    assert set(avail) == set(env.agents) and avail["npc_3"].shape == (6,)


class JaxMARLStyleLogWrapper:
    """Mirrors how JaxMARL's baselines LogWrapper uses an env (no jaxmarl import)."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self, key):
        obs, env_state = self._env.reset(key)
        zeros = jnp.zeros((self._env.num_agents,))
        return obs, (env_state, zeros, zeros, zeros)

    def step(self, key, state, action):
        env_state, ep_ret, _, returned = state
        obs, env_state, reward, done, info = self._env.step(key, env_state, action)
        ep_done = done["__all__"]
        ret = ep_ret + jnp.stack([reward[a] for a in self._env.agents])
        returned = jnp.where(ep_done, ret, returned)
        info["returned_episode_returns"] = returned
        info["returned_episode"] = jnp.full((self._env.num_agents,), ep_done)
        return obs, (env_state, ret * (1 - ep_done), ret, returned), reward, done, info


def test_an_ippo_style_loop_runs_with_only_the_constructor_changed():
    num_envs, num_steps = 8, 64
    env = JaxMARLStyleLogWrapper(jaxarena.make_jaxmarl("Arena-v0", bot="aggressive"))
    num_actors = env.num_agents * num_envs
    obs_dim = env.observation_space(env.agents[0]).shape[0]
    n_actions = env.action_space(env.agents[0]).n
    w = jax.random.normal(jax.random.key(0), (obs_dim, n_actions)) * 0.1

    def batchify(x):
        return jnp.stack([x[a] for a in env.agents]).reshape((num_actors, -1))

    def unbatchify(x):
        x = x.reshape((env.num_agents, num_envs))
        return {a: x[i] for i, a in enumerate(env.agents)}

    @jax.jit
    def rollout(key):
        obs, state = jax.vmap(env.reset)(jax.random.split(key, num_envs))

        def env_step(carry, key):
            obs, state = carry
            k_act, k_step = jax.random.split(key)
            logits = batchify(obs) @ w
            action = jax.random.categorical(k_act, logits)
            obs, state, reward, done, info = jax.vmap(env.step)(
                jax.random.split(k_step, num_envs), state, unbatchify(action)
            )
            info = jax.tree.map(lambda x: x.reshape(num_actors), info)  # exactly what IPPO does
            return (obs, state), (batchify(reward).squeeze(-1), batchify(done).squeeze(-1), info)

        return jax.lax.scan(env_step, (obs, state), jax.random.split(key, num_steps))[1]

    reward, done, info = rollout(jax.random.key(1))
    chex.assert_shape(reward, (num_steps, num_actors))
    chex.assert_tree_all_finite(reward)
    assert info["returned_episode"].shape == (num_steps, num_actors)


def test_jaxmarl_view_per_agent_dones_and_world_state():
    env = jaxarena.make_jaxmarl("Arena-v0", bot="aggressive", world_state=True, bot_speed=0.0)
    obs, state = env.reset(jax.random.key(0))
    assert obs["world_state"].shape == (5, env.world_state_size())
    state = state.replace(npc_hp=state.npc_hp.at[2].set(0.0))
    actions = {a: jnp.int32(3) for a in env.agents}
    obs, state, rewards, dones, infos = env.step(jax.random.key(1), state, actions)
    assert bool(dones["npc_2"]) and not bool(dones["npc_0"]) and not bool(dones["__all__"])
    assert all(v.shape == (5,) for v in infos.values())


def test_make_jaxmarl_serves_the_arena_variants_only():
    assert set(jaxarena.ARENA_IDS) < set(jaxarena.REGISTERED_IDS)
    for env_id in jaxarena.ARENA_IDS:
        assert jaxarena.make_jaxmarl(env_id).name == f"jaxarena.{env_id}"
    with pytest.raises(ValueError, match="make_jaxmarl serves the arena variants"):
        jaxarena.make_jaxmarl("BotArena-v0")


def test_multi_agent_view_names_missing_and_unknown_agents():
    env = jaxarena.make_jaxmarl("Arena-v0")
    obs, state = env.reset(jax.random.key(0))
    actions = {a: jnp.int32(0) for a in env.agents}
    with pytest.raises(ValueError, match=r"missing \['npc_4'\]"):
        env.step(jax.random.key(1), state, {a: v for a, v in actions.items() if a != "npc_4"})
    with pytest.raises(ValueError, match=r"unknown \['npc_9'\]"):
        env.step(jax.random.key(1), state, {**actions, "npc_9": jnp.int32(0)})
    with pytest.raises(ValueError, match="the agents are npc_0, npc_1"):
        env.action_space("npc_9")
    with pytest.raises(ValueError, match="no agent 'bot'"):
        env.observation_space("bot")
    _, _, rewards, _, _ = env.step(jax.random.key(1), state, actions)  # the whole dict still steps
    assert set(rewards) == set(env.agents)


@pytest.mark.parametrize("bad", [2.7, float("nan"), np.float32(1.0), jnp.float32(0.0)], ids=repr)
def test_the_jaxmarl_view_refuses_float_actions_in_the_words_env_step_uses(bad):
    marl = jaxarena.make_jaxmarl("Arena-v0")
    env, params = jaxarena.make("Arena-v0")
    _, state = marl.reset(jax.random.key(0))
    actions = {a: (bad if i == 2 else 0) for i, a in enumerate(marl.agents)}
    with pytest.raises(TypeError) as want:
        env.step(jax.random.key(1), state, jnp.stack([jnp.asarray(v) for v in actions.values()]), params)
    with pytest.raises(TypeError) as got:
        marl.step(jax.random.key(1), state, actions)
    assert str(got.value) == str(want.value) and "actions must be integers in 0..5" in str(got.value)
    with pytest.raises(TypeError, match="actions must be integers in 0..5"):  # a dtype is known under jit too
        jax.jit(marl.step)(jax.random.key(1), state, {a: jnp.float32(0.0) for a in marl.agents})
