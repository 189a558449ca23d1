"""The one episode runner, the tag-change call and the shared vocabulary."""

import subprocess
import sys

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.names import NUM_TAGS, TIMEOUT
from jaxarena.observe import TAG
from jaxarena.policies import SCRIPTED, focus_fire_policy, random_policy
from jaxarena.runner import Accumulator, make_runner
from jaxarena.tag_sources import fixed_tags, hold_tags, schedule_tags


def test_the_vocabulary_imports_without_jax():
    code = (
        "import sys, jaxarena, jaxarena.names as n; assert 'jax' not in sys.modules; print(n.NUM_TAGS, jaxarena.TAGS)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == "4"


def test_jaxarena_observe_is_the_module_not_a_function():
    import jaxarena.observe

    assert hasattr(jaxarena.observe, "with_tag") and hasattr(jaxarena.observe, "observe")


def test_retag_changes_state_and_observation_together():
    env, params = jaxarena.make("ArenaFacing-v0")
    obs, state = env.reset(jax.random.key(0), params)
    obs2, state2 = env.retag(obs, state, 3)
    assert int(state2.tag) == 3
    np.testing.assert_allclose(obs2[:, TAG], 1.0)
    np.testing.assert_array_equal(obs2, env.observe(state2, params))  # the same as observing anew
    with pytest.raises(ValueError, match="0..3"):
        env.retag(obs, state, NUM_TAGS)


def _manual_first_episodes(env, params, policy, key, n, tag, ticks):
    """The runner's contract, written as a plain Python loop over env.step."""
    episode_keys = jax.random.split(key, n)
    step = jax.jit(env.step)
    out = []
    for i in range(n):
        obs, state = env.reset(jax.random.fold_in(episode_keys[i], 0), params)
        obs, state = env.retag(obs, state, tag)
        ret = 0.0
        for t in range(ticks):
            k_act, k_step = jax.random.split(jax.random.fold_in(episode_keys[i], t + 1))
            obs, state, reward, done, info = step(k_step, state, policy(None, obs, k_act), params)
            ret += float(jnp.mean(reward))
            if done:
                out.append((int(info["outcome"]), float(info["episode_time"]), ret))
                break
    return out


def test_runner_matches_a_plain_loop_over_env_step():
    env, params = jaxarena.make("Arena-v0", bot="aggressive", episode_s=2.0)
    key = jax.random.key(3)
    run = make_runner(env, params, random_policy, 2, num_episodes=3)
    result = run(None, params, key)
    chex.assert_shape(result.outcome, (3,))
    chex.assert_shape(result.decision_tags, (1, 3))
    chex.assert_tree_all_finite((result.team_return, result.duration_s))
    expected = _manual_first_episodes(env, params, random_policy, key, 3, 2, 20)
    assert [o for o, _, _ in expected] == [TIMEOUT] * 3
    np.testing.assert_array_equal(result.outcome, [o for o, _, _ in expected])
    np.testing.assert_allclose(result.duration_s, [t for _, t, _ in expected], rtol=1e-6)
    np.testing.assert_allclose(result.team_return, [r for _, _, r in expected], rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(result.tag_steps[:, 2], 20)  # every tick under the fixed tag 2


@pytest.mark.slow  # compiles the runner at several batch sizes: `-m core` stays under two minutes
def test_episode_keys_do_not_depend_on_the_batch_size():
    env, params = jaxarena.make("Arena-v0", bot="balanced")
    small = make_runner(env, params, random_policy, 0, num_episodes=3)(None, params, jax.random.key(9))
    large = make_runner(env, params, random_policy, 0, num_episodes=7)(None, params, jax.random.key(9))
    np.testing.assert_array_equal(small.outcome, large.outcome[:3])
    np.testing.assert_array_equal(small.duration_s, large.duration_s[:3])


def test_accumulators_fold_only_running_ticks_and_held_tags_stay():
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    counter = Accumulator(
        init=lambda n: jnp.zeros(n, jnp.int32),
        update=lambda acc, tick: acc + tick.running.astype(jnp.int32),
    )
    run = make_runner(env, params, focus_fire_policy, hold_tags, 8, accumulators={"ticks": counter})
    result = jax.device_get(run(None, params, jax.random.key(1), jnp.int32(1)))
    assert np.all(result.outcome > 0)  # the focus-fire squad finishes every episode
    np.testing.assert_array_equal(result.extras["ticks"], np.round(result.duration_s / 0.1).astype(int))
    np.testing.assert_array_equal(result.tag_steps[:, 1], result.extras["ticks"])  # the held tag, every tick
    assert result.tag_steps.sum() == result.extras["ticks"].sum()


def test_trace_hook_and_schedule_tag_source():
    env, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=10.0)
    run = make_runner(env, params, random_policy, schedule_tags([3, 1]), 2, trace=lambda tick: tick.state.tag)
    result = run(None, params, jax.random.key(2))
    chex.assert_shape(result.trace, (100, 2))
    np.testing.assert_array_equal(result.trace[:50], 3)
    np.testing.assert_array_equal(result.trace[50:], 1)


def test_latency_delays_the_tag_and_bad_latency_is_refused():
    env, params = jaxarena.make("Arena-v0", episode_s=5.0)
    run = make_runner(env, params, random_policy, fixed_tags(2), 1, latency_steps=10, trace=lambda t: t.obs[:, 0, TAG])
    seen = np.asarray(run(None, params, jax.random.key(0)).trace[:, 0])
    np.testing.assert_allclose(seen[:10], 0.0)  # the initial tag until the reply "arrives"
    np.testing.assert_allclose(seen[10:], 2 / 3, rtol=1e-6)
    with pytest.raises(ValueError, match="latency_steps"):
        make_runner(env, params, random_policy, 0, 1, latency_steps=50)


@pytest.mark.parametrize("name", sorted(SCRIPTED))
def test_scripted_policies_share_the_policy_signature(name):
    env, params = jaxarena.make("Arena-v0")
    obs, _ = env.reset(jax.random.key(0), params)
    policy = SCRIPTED[name]
    one = policy(None, obs, jax.random.key(1))
    batch = policy(None, jnp.stack([obs, obs]), jax.random.key(1))
    chex.assert_shape(one, (5,))
    chex.assert_shape(batch, (2, 5))
    assert one.dtype == jnp.int32 and bool(jnp.all((one >= 0) & (one < jaxarena.NUM_ACTIONS)))


def test_every_public_name_resolves():
    import jaxarena.llm
    import jaxarena.protocol

    for module in (jaxarena, jaxarena.llm, jaxarena.protocol):
        for name in module.__all__:
            assert getattr(module, name) is not None, (module.__name__, name)


def test_runner_checks_the_policy_actions_like_env_step():
    env, params = jaxarena.make("Arena-v0", episode_s=1.0)

    def float_policy(params, obs, key):
        return obs[:, 0] * 5.9  # not integers

    def wrong_shape(params, obs, key):
        return jnp.zeros((5, 1), jnp.int32)

    with pytest.raises(TypeError, match="integers"):
        make_runner(env, params, float_policy, 0, 2)(None, params, jax.random.key(0))
    with pytest.raises(ValueError, match="shape"):
        make_runner(env, params, wrong_shape, 0, 2)(None, params, jax.random.key(0))


def test_an_ended_episode_keeps_its_final_state_and_tags_are_recorded_as_run():
    env, params = jaxarena.make("Arena-v0", bot="aggressive")

    def out_of_range(features, prev_tags, done, time_s, key):
        return jnp.full_like(prev_tags, 9)

    run = make_runner(env, params, focus_fire_policy, out_of_range, 4, trace=lambda tick: tick.next_state.t)
    result = jax.device_get(run(None, params, jax.random.key(5)))
    assert np.all(result.outcome == 1)  # the focus-fire squad kills the aggressive bot
    assert np.all(result.decision_tags == NUM_TAGS - 1)  # clipped, as the arena ran it
    end = np.round(result.duration_s / 0.1).astype(int)
    assert len(set(end.tolist())) > 1  # some lanes idle while others still play
    for i in range(4):
        # From its last tick on, an ended episode's clock stands still (zeros: periods skipped by the batch).
        after = result.trace[end[i] - 1 :, i]
        assert np.all((after == end[i]) | (after == 0)) and after[0] == end[i]
    dead_bot = result.decision_features[:, :, 0][~result.decision_active]
    assert dead_bot.size > 0 and np.all(dead_bot <= 0.0)  # features of ended episodes: the final state
