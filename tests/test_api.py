"""The public API: make, reset/step, set_tag, jit/vmap, determinism, bad input."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import jaxarena
from jaxarena.spawn import episode_uniforms


def test_make_returns_env_and_params_with_the_named_bot():
    for i, name in enumerate(jaxarena.BOT_TYPES):
        env, params = jaxarena.make("Arena-v0", bot=name)
        assert isinstance(env, jaxarena.Arena) and params.bot_type == i
    _, params = jaxarena.make("Arena-v0", bot="Evasive", episode_s=60.0, npc_hp=jnp.float32(50.0))
    assert params.bot_type == 1 and params.episode_s == 60.0 and params.npc_hp == 50.0


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(env_id="Arena-v9"), ValueError, "unknown env id"),
        (dict(bot="sneaky"), ValueError, "unknown bot"),
        (dict(bot=7), ValueError, "bot must be"),
        (dict(npc_hp="sixty"), TypeError, "npc_hp must be a number"),
        (dict(npc_hitpoints=60.0), TypeError, "unknown EnvParams field"),
        (dict(bot_hp=float("nan")), ValueError, "finite"),
        (dict(boxes=np.zeros((3, 3))), ValueError, "boxes must have shape"),
        (dict(boxes=[[10.0, 10.0, 12.0, 12.0], [12.5, 10.0, 14.0, 12.0]]), ValueError, "closer than"),
        (dict(boxes=[[0.5, 10.0, 3.0, 12.0]]), ValueError, "from the walls"),
        (dict(bot="evasive", bot_type=1), TypeError, "either bot"),
        (dict(boxes=np.zeros((0, 4))), ValueError, "at least one box"),
        (dict(npc_spawn=[13.5, 13.5, 16.5, 16.5]), ValueError, "from every box"),
        (dict(bot_spawn=[10.0, 25.0, 20.0, 40.0]), ValueError, "inside the walls"),
        (dict(dt=0.5), ValueError, "per tick"),
        (dict(npc_speed=[4.0]), TypeError, "must be a number"),
    ],
)
def test_make_rejects_bad_input_clearly(kwargs, error, match):
    env_id = kwargs.pop("env_id", "Arena-v0")
    with pytest.raises(error, match=match):
        jaxarena.make(env_id, **kwargs)


@pytest.mark.parametrize(
    "field",
    [
        "bot_hp",
        "npc_hp",
        "bot_melee_range",
        "npc_melee_range",
        "orb_range",
        "orb_speed",
        "bot_melee_cooldown",
        "npc_melee_cooldown",
        "orb_cooldown",
        "dt",
        "episode_s",
        "decision_period_s",
        "balanced_phase_min_s",
        "balanced_phase_max_s",
        "unit_radius",
        "arena_size",
        "bot_avoid_distance",
    ],
)
@pytest.mark.parametrize("value", [0.0, -5.0])
def test_make_rejects_non_positive_hp_ranges_cooldowns_and_times(field, value):
    with pytest.raises(ValueError, match=f"{field} must be > 0, got {value}"):
        jaxarena.make("Arena-v0", **{field: value})


@pytest.mark.parametrize(
    "field", ["bot_speed", "npc_speed", "bot_melee_damage", "npc_melee_damage", "orb_damage", "orb_min_range"]
)
def test_make_rejects_negative_speeds_and_damage_but_allows_a_harmless_still_dummy(field):
    with pytest.raises(ValueError, match=f"{field} must be >= 0, got -1.0"):
        jaxarena.make("Arena-v0", **{field: -1.0})
    _, params = jaxarena.make("Arena-v0", **{field: 0.0})
    assert float(getattr(params, field)) == 0.0


def test_make_rejects_phase_bounds_with_min_above_max_and_a_half_cleave():
    with pytest.raises(ValueError, match=r"balanced_phase_min_s \(10.0\) must be <= balanced_phase_max_s \(5.0\)"):
        jaxarena.make("Arena-v0", balanced_phase_min_s=10.0, balanced_phase_max_s=5.0)
    _, params = jaxarena.make("Arena-v0", balanced_phase_min_s=7.0, balanced_phase_max_s=7.0)  # a fixed length is fine
    assert float(params.balanced_phase_min_s) == float(params.balanced_phase_max_s) == 7.0
    with pytest.raises(ValueError, match="bot_cleave must be 0"):
        jaxarena.make("Arena-v0", bot_cleave=0.5)
    with pytest.raises(ValueError, match="shaping_recipe must be 0"):
        jaxarena.make("Arena-v0", shaping_recipe=3)


def test_make_checks_values_after_a_scenario_is_applied():
    # A scenario's values are checked like explicit ones; an override can fix or break them.
    with pytest.raises(ValueError, match="bot_hp must be > 0"):
        jaxarena.make("Arena-v0", scenario="headroom", bot_hp=0.0)


def test_step_rejects_wrong_action_shape_and_dtype_at_trace_time():
    env, params = jaxarena.make("Arena-v0")
    _, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    with pytest.raises(ValueError, match=r"shape \(5,\)"):
        step(jax.random.key(0), state, jnp.zeros((4,), jnp.int32), params)
    with pytest.raises(ValueError, match="vmap"):
        step(jax.random.key(0), state, jnp.zeros((2, 5), jnp.int32), params)
    with pytest.raises(TypeError, match="integers"):
        step(jax.random.key(0), state, jnp.zeros((5,), jnp.float32), params)


def test_set_tag_checks_concrete_tags_and_clips_traced_ones():
    env, params = jaxarena.make("Arena-v0")
    _, state = env.reset(jax.random.key(0), params)
    assert int(env.set_tag(state, 3).tag) == 3
    for bad in (4, -1):
        with pytest.raises(ValueError, match="0..3"):
            env.set_tag(state, bad)
    with pytest.raises(TypeError, match="scalar integer"):
        env.set_tag(state, 1.5)
    with pytest.raises(TypeError, match="scalar integer"):
        env.set_tag(state, jnp.array([1, 2]))
    assert int(jax.jit(env.set_tag)(state, jnp.int32(9)).tag) == 3  # documented clip under jit
    # Names work wherever codes do, in any case; an unknown name lists the tags.
    obs, _ = env.reset(jax.random.key(0), params)
    named_obs, named = env.retag(obs, state, "Aggressive")
    coded_obs, coded = env.retag(obs, state, 1)
    assert int(named.tag) == 1 and int(env.set_tag(state, "flank").tag) == 2
    chex.assert_trees_all_equal(named_obs, coded_obs)
    with pytest.raises(ValueError, match="choose one of surround, aggressive, flank, retreat"):
        env.retag(obs, state, "Charge")


def _trajectory(env, params, key, n=200):
    def tick(state, key):
        k1, k2 = jax.random.split(key)
        obs, state, reward, done, info = env.step(k2, state, jax.random.randint(k1, (5,), 0, 6), params)
        return state, (obs, reward, done, info["outcome"])

    _, state = env.reset(key, params)
    return jax.lax.scan(tick, state, jax.random.split(key, n))


def test_same_key_gives_bit_identical_trajectories_and_other_keys_differ():
    env, params = jaxarena.make("Arena-v0", bot="balanced")
    run = jax.jit(lambda k: _trajectory(env, params, k))
    a, b, c = run(jax.random.key(5)), run(jax.random.key(5)), run(jax.random.key(6))
    chex.assert_trees_all_equal(a, b)
    assert not np.array_equal(a[1][0], c[1][0])


def test_jit_and_vmap_over_keys_and_over_params():
    env, base = jaxarena.make("Arena-v0")
    params = jax.vmap(lambda b, hp: base.replace(bot_type=b, bot_hp=hp))(
        jnp.array([0, 1, 2, 0]), jnp.array([300.0, 300.0, 300.0, 150.0])
    )
    keys = jax.random.split(jax.random.key(0), 4)
    final, (obs, reward, done, outcome) = jax.jit(jax.vmap(lambda k, p: _trajectory(env, p, k)))(keys, params)
    chex.assert_shape(obs, (4, 200, 5, 23))
    chex.assert_shape(reward, (4, 200, 5))
    chex.assert_tree_all_finite((obs, reward))
    np.testing.assert_array_equal(final.bot_mode[:2], [0, 1])  # each env runs its own bot
    # The same thing unbatched gives the same numbers as each batch row.
    single = jax.jit(lambda k: _trajectory(env, base.replace(bot_type=1), k))(keys[1])
    np.testing.assert_allclose(single[1][0], obs[1], rtol=1e-6, atol=1e-6)
    assert float(final.bot_hp[3]) <= 150.0


def test_typed_and_legacy_keys_both_work():
    env, params = jaxarena.make("Arena-v0")
    obs_typed, _ = env.reset(jax.random.key(3), params)
    obs_raw, _ = env.reset(jax.random.PRNGKey(3), params)
    np.testing.assert_array_equal(obs_typed, obs_raw)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_spawns_fall_inside_their_zones(seed):
    env, params = jaxarena.make("Arena-v0")
    _, state = env.reset(jax.random.key(seed), params)
    npc_zone, bot_zone = np.asarray(params.npc_spawn), np.asarray(params.bot_spawn)
    assert np.all((state.npc_pos >= npc_zone[:2]) & (state.npc_pos <= npc_zone[2:]))
    assert np.all((state.bot_pos >= bot_zone[:2]) & (state.bot_pos <= bot_zone[2:]))


def test_episode_uniforms_look_uniform_and_independent():
    u = jax.vmap(episode_uniforms)(jax.random.split(jax.random.key(0), 20000))
    u = np.asarray(u)
    assert np.all((u >= 0) & (u < 1))
    np.testing.assert_allclose(u.mean(0), 0.5, atol=0.01)
    np.testing.assert_allclose(u.var(0), 1 / 12, atol=0.005)
    corr = np.corrcoef(u.T)[np.triu_indices(u.shape[1], 1)]
    assert np.abs(corr).max() < 0.05


def test_reusing_one_key_still_gives_new_episodes():
    env, params = jaxarena.make("Arena-v0", bot="aggressive", episode_s=1.0)
    _, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    starts = []
    for _ in range(30):  # 3 episodes of 1 s, the same key at every step
        _, state, _, done, _ = step(jax.random.key(0), state, jnp.zeros(5, jnp.int32), params)
        if bool(done):
            starts.append(np.asarray(state.npc_pos))
    assert len(starts) == 3 and not np.allclose(starts[0], starts[1])


def test_info_reports_episode_end_with_final_obs():
    env, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=2.0)
    obs, state = env.reset(jax.random.key(0), params)
    step = jax.jit(env.step)
    for t in range(20):
        obs, state, reward, done, info = step(jax.random.key(t), state, jnp.zeros(5, jnp.int32), params)
    assert bool(done) and bool(info["truncated"]) and not bool(info["terminated"])
    assert int(info["outcome"]) == jaxarena.OUTCOMES.index("timeout")
    assert float(info["episode_time"]) == pytest.approx(2.0)
    assert int(state.t) == 0 and not np.array_equal(info["final_obs"], obs)
    for key in ("damage_dealt", "damage_taken", "alive"):
        chex.assert_shape(info[key], (5,))


def test_arena_has_gymnax_and_jaxmarl_names_and_keeps_its_attributes():
    for env_id, obs_size in (("Arena-v0", 23), ("ArenaFacing-v0", 25), ("ArenaFormation-v0", 28)):
        env, params = jaxarena.make(env_id)
        assert env.name == env.env_id == env_id
        assert env.agents == ["npc_0", "npc_1", "npc_2", "npc_3", "npc_4"] and env.num_agents == 5
        assert (env.num_actions, env.num_tags, env.obs_size, env.scenario) == (6, 4, obs_size, "paper")
        obs_space, action_space = env.observation_space(params), env.action_space(params)
        assert obs_space.shape == (5, obs_size) and obs_space.dtype == jnp.float32
        assert action_space.shape == (5,) and action_space.n == 6 and action_space.dtype == jnp.int32
        obs, _ = env.reset(jax.random.key(0), params)
        assert bool(obs_space.contains(obs))


@pytest.mark.parametrize("bad", [0, 7, 1.5, np.int64(3), jnp.zeros((2,), jnp.float32), "seed"])
def test_a_non_key_key_is_a_type_error_that_says_what_to_pass(bad):
    env, params = jaxarena.make("Arena-v0")
    with pytest.raises(TypeError, match=r"reset's key must be a PRNG key.*jax\.random\.key\(seed\)"):
        env.reset(bad, params)
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(TypeError, match=r"step's key must be a PRNG key.*jax\.random\.key\(seed\)"):
        env.step(bad, state, jnp.zeros((5,), jnp.int32), params)


def test_a_batch_of_keys_is_refused_with_the_vmap_hint():
    env, params = jaxarena.make("Arena-v0")
    for keys in (jax.random.split(jax.random.key(0), 4), jax.random.split(jax.random.PRNGKey(0), 4)):
        with pytest.raises(ValueError, match="one PRNG key, got a batch of shape \\(4,\\).*vmap"):
            env.reset(keys, params)


@pytest.mark.parametrize("bad", [[0, 0, 99, 0, 0], np.array([0, -1, 0, 0, 0]), jnp.array([6, 0, 0, 0, 7])])
def test_a_concrete_out_of_range_action_names_the_valid_range(bad):
    env, params = jaxarena.make("Arena-v0")
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match=r"action \(Table 4\) must be in 0\.\.5, got"):
        env.step(jax.random.key(1), state, bad, params)
    # Traced: not checked (no host round trip in the program), and a no-op as documented.
    jax.jit(env.step)(jax.random.key(1), state, jnp.asarray(bad, jnp.int32), params)


def test_the_jitted_step_has_no_host_check():
    # A traced action skips the value check and the key check reads only static dtype and shape,
    # so nothing of either reaches the compiled program: no callback to the host.
    env, params = jaxarena.make("Arena-v0")
    _, state = env.reset(jax.random.key(0), params)
    lowered = jax.jit(env.step).lower(jax.random.key(1), state, jnp.zeros((5,), jnp.int32), params)
    assert "callback" not in lowered.as_text()


def test_the_key_error_names_both_ways_to_make_a_key():
    env, params = jaxarena.make("Arena-v0")
    with pytest.raises(TypeError, match=r"jax\.random\.key\(0\).*jax\.random\.PRNGKey\(0\)"):
        env.reset(0, params)


def test_the_wrappers_keep_the_checks():
    from jaxarena.wrappers import LogWrapper

    logged = LogWrapper(jaxarena.make("Arena-v0")[0])
    _, state = logged.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"must be in 0\.\.5, got 99"):
        logged.step(jax.random.key(1), state, [0, 0, 99, 0, 0])
    with pytest.raises(TypeError, match="PRNG key"):
        logged.reset(0)
    marl = jaxarena.make_jaxmarl("Arena-v0")
    _, state = marl.reset(jax.random.key(0))
    with pytest.raises(ValueError, match=r"must be in 0\.\.5, got -1"):
        marl.step(jax.random.key(1), state, {a: (-1 if i == 3 else 0) for i, a in enumerate(marl.agents)})
    with pytest.raises(TypeError, match="PRNG key"):
        marl.step(7, state, {a: 0 for a in marl.agents})


@pytest.mark.slow  # jit and vmap of every id are checked by the conformance test; this adds the unbatched lane
def test_jitted_and_vmapped_steps_still_run_with_the_checks():
    env, params = jaxarena.make("Arena-v0")
    keys = jax.random.split(jax.random.key(0), 3)
    obs, states = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    actions = jnp.array([[0, 1, 2, 3, 4], [5, 5, 5, 5, 5], [0, 0, 0, 0, 0]], jnp.int32)
    step = jax.jit(jax.vmap(env.step, in_axes=(0, 0, 0, None)))
    obs2, states2, reward, done, _ = step(keys, states, actions, params)
    assert obs2.shape == (3, 5, obs.shape[-1]) and reward.shape == (3, 5) and done.shape == (3,)
    # The same step unbatched gives the same state as lane 1 of the batched one.
    _, single, _, _, _ = jax.jit(env.step)(keys[1], jax.tree.map(lambda x: x[1], states), actions[1], params)
    chex.assert_trees_all_close(single, jax.tree.map(lambda x: x[1], states2))


# (field, bad value, the words of the refusal): what `params.replace` lets through, caught where the params enter.
BAD_PARAMS = [
    ("arena_size", 0.0, "arena_size must be > 0, got 0.0"),
    ("npc_speed", -1.0, "npc_speed must be >= 0, got -1.0"),
    ("bot_hp", float("nan"), "bot_hp must be > 0, got nan"),
    ("wipe_penalty", float("inf"), "wipe_penalty must be finite, got inf"),
    ("bot_type", 7, "bot_type must be 0 (aggressive), 1 (evasive), 2 (balanced) or 3 (learned), got 7"),
]


@pytest.mark.parametrize("field, value, words", BAD_PARAMS, ids=[c[0] for c in BAD_PARAMS])
def test_concrete_params_from_replace_are_checked_where_reset_and_step_take_them(field, value, words):
    import re

    env, params = jaxarena.make("Arena-v0")
    key = jax.random.key(0)
    _, state = env.reset(key, params)
    bad = params.replace(**{field: value})
    with pytest.raises(ValueError, match=re.escape(words)):
        env.reset(key, bad)
    with pytest.raises(ValueError, match=re.escape(words)):
        env.step(key, state, jnp.zeros((5,), jnp.int32), bad)
    with pytest.raises(ValueError, match=re.escape(words)):  # shared by a vmap: still concrete, still checked
        jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, 2), bad)
    with pytest.raises(ValueError, match=re.escape(words)):  # an env built on them refuses them at its first reset
        jaxarena.Arena(bad).reset(key)
    with pytest.raises(ValueError, match=re.escape(words)):  # a batch of concrete values is checked value by value
        env.reset(key, params.replace(**{field: jnp.asarray([getattr(params, field), value])}))


def test_traced_params_are_not_checked_and_no_check_enters_the_compiled_step():
    env, params = jaxarena.make("Arena-v0")
    key = jax.random.key(0)
    _, state = env.reset(key, params)
    jax.jit(env.reset)(key, params.replace(arena_size=0.0))  # traced: a Python check cannot read it
    actions = jnp.zeros((5,), jnp.int32)
    traced = jax.jit(env.step).lower(key, state, actions, params).as_text()
    closed = jax.jit(lambda k, s, a: env.step(k, s, a, params)).lower(key, state, actions).as_text()
    assert "callback" not in traced and "callback" not in closed
