"""The batched rollout: jit + outer/inner lax.scan + vmapped arenas + io_callback.

The LLM path uses the real OllamaBackend against the real test-server process.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from llm_servers import digit_server, server  # noqa: F401 - pytest fixtures

import jaxarena
from jaxarena.llm.backends.ollama import OllamaBackend
from jaxarena.llm.prompt import build_prompt
from jaxarena.llm.rollout import make_rollout, rollout_with_llm
from jaxarena.llm.selector import TagSelector
from jaxarena.llm.testing import hash_digit
from jaxarena.tag_sources import fixed_tags, schedule_tags

N = 12


def random_policy(params, obs, key):
    assert obs.shape == (5, 23)
    return jax.random.randint(key, (5,), 0, 6)


def passive_policy(params, obs, key):
    """Always retreats: episodes against the evasive bot run their full length."""
    return jnp.full((5,), 4, jnp.int32)


@pytest.fixture(scope="module")
def arena():
    return jaxarena.make("Arena-v0", bot="evasive")


def test_llm_rollout_under_jit_matches_the_log(arena, server, tmp_path):
    env, params = arena
    log = tmp_path / "decisions.jsonl"
    with TagSelector(OllamaBackend("mistral", server.url), log_path=log) as selector:
        result = rollout_with_llm(
            env, params, random_policy, None, jax.random.key(1), selector, num_episodes=N, num_periods=4
        )
        records = [json.loads(line) for line in log.read_text().splitlines()]
        assert selector.stats.calls == 4

    active = np.asarray(result.decision_active)
    tags = np.asarray(result.decision_tags)
    assert tags.shape == (4, N) and active[0].all()
    # One log line per decision actually made, and the same tag in both places.
    assert len(records) == int(active.sum())
    for record in records:
        assert active[record["call"], record["episode"]]
        assert tags[record["call"], record["episode"]] == record["tag"]
        assert record["time_s"] == 5.0 * record["call"]
        expected = int(
            hash_digit(
                build_prompt(
                    *np.asarray(result.decision_features)[record["call"], record["episode"]].astype(np.float64)
                )
            )
        )
        assert record["tag"] == expected
    # The chosen tag is what the env actually ran with (no latency).
    steps = np.asarray(result.tag_steps)
    assert steps.sum(axis=1).max() <= 4 * 50
    first = tags[0]
    assert all(steps[i, first[i]] > 0 for i in range(N))
    # Each unique prompt of a call went to the server once; the cache served repeats across calls.
    assert server.stats()["requests"] == selector.stats.llm_requests
    assert server.stats()["duplicate_requests"] == 0


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_fallback_keeps_the_tag_inside_the_rollout(arena, server):
    env, params = arena
    server.set_faults(p_garbage=1.0)
    with TagSelector(OllamaBackend("mistral", server.url), cache=False) as selector:
        result = rollout_with_llm(
            env, params, passive_policy, None, jax.random.key(2), selector, num_episodes=4, num_periods=3, initial_tag=2
        )
    assert (np.asarray(result.decision_tags) == 2).all()
    assert (np.asarray(result.tag_steps)[:, 2] == 150).all()
    assert selector.stats.fallbacks["non_numeric"] == 12


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_same_code_path_for_fixed_schedule_and_learned_sources(arena):
    env, params = arena
    key = jax.random.key(3)

    def run(src, **kw):
        return rollout_with_llm(env, params, passive_policy, None, key, src, num_episodes=4, num_periods=4, **kw)

    fixed_int = run(0)
    fixed_fn = run(fixed_tags(0))
    np.testing.assert_array_equal(fixed_int.outcome, fixed_fn.outcome)
    np.testing.assert_array_equal(fixed_int.tag_steps[:, 0], 200)
    scheduled = run(schedule_tags([0, 1, 2, 3]))
    np.testing.assert_array_equal(scheduled.decision_tags, np.repeat(np.arange(4)[:, None], 4, axis=1))
    np.testing.assert_array_equal(scheduled.tag_steps, 50)

    def learned(features, prev_tags, done, time_s, key):  # a jittable "selector": retreat when hurt
        return jnp.where(features[:, 1] < 30.0, 3, 1).astype(jnp.int32)

    np.testing.assert_array_equal(run(learned).tag_steps[:, 1], 200)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_latency_steps_delays_the_new_tag(arena):
    env, params = arena
    result = rollout_with_llm(
        env,
        params,
        passive_policy,
        None,
        jax.random.key(4),
        schedule_tags([0, 1]),
        num_episodes=3,
        num_periods=2,
        latency_steps=10,
    )
    # Period 0 keeps the initial tag 0; period 1 chooses 1 but runs 10 more steps of tag 0.
    np.testing.assert_array_equal(result.tag_steps[:, 0], 60)
    np.testing.assert_array_equal(result.tag_steps[:, 1], 40)
    with pytest.raises(ValueError, match="latency_steps"):
        make_rollout(env, params, passive_policy, 0, 2, latency_steps=50)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_the_policy_sees_the_tag_it_acts_under(arena):
    """The tag changes at a period's first tick; that tick's action must already see it in obs[22]."""
    env, params = arena
    seen = []

    def recording_policy(params, obs, key):
        jax.debug.callback(lambda t: seen.append(np.asarray(t)), obs[..., 22])
        return passive_policy(params, obs, key)

    rollout_with_llm(
        env,
        params,
        recording_policy,
        None,
        jax.random.key(6),
        schedule_tags([2, 1]),
        num_episodes=3,
        num_periods=2,
        initial_tag=0,
    )
    tags = np.round(np.concatenate([np.ravel(t) for t in seen]) * 3).astype(int)
    assert tags.size == 3 * 5 * 100 and (tags > 0).all(), np.unique(tags, return_counts=True)
    np.testing.assert_array_equal(np.unique(tags, return_counts=True)[1], [750, 750])


def test_finished_episodes_are_frozen():
    # Short episodes: every one times out at 10 s, within the 3 periods run.
    env, params = jaxarena.make("Arena-v0", bot="evasive", episode_s=10.0)
    result = rollout_with_llm(
        env, params, passive_policy, None, jax.random.key(5), schedule_tags([1, 2, 3]), num_episodes=3, num_periods=3
    )
    outcome = np.asarray(result.outcome)
    assert set(outcome) <= {1, 2, 3} and (outcome == 3).all()
    np.testing.assert_allclose(result.duration_s, 10.0, atol=1e-4)
    assert np.asarray(result.tag_steps).sum(axis=1).tolist() == [100] * 3  # nothing counted after the end
    active = np.asarray(result.decision_active)
    assert active[:2].all() and not active[2].any()
    # The finished episodes kept their tag at the third decision.
    np.testing.assert_array_equal(result.decision_tags[2], result.decision_tags[1])


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_paired_seeds_and_no_recompile_across_bots():
    env, params = jaxarena.make("Arena-v0", bot="aggressive")
    rollout = make_rollout(env, params, random_policy, 0, num_episodes=4, num_periods=2)
    a = rollout(None, params, jax.random.key(6))
    b = rollout(None, params, jax.random.key(6))
    np.testing.assert_array_equal(a.decision_features, b.decision_features)
    _, balanced = jaxarena.make("Arena-v0", bot="balanced")
    rollout(None, balanced, jax.random.key(6))
    assert rollout._cache_size() == 1
