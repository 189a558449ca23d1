"""The RL selector's pieces: its inputs, network, population, decision-level env and tag source."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.algorithms.checkpoint import load_policy
from jaxarena.llm.history import HISTORY_LEN, empty_history, push
from jaxarena.llm.strategy_table import load_table, propose
from jaxarena.names import BOT_TYPES
from jaxarena.observe import llm_features
from jaxarena.runner import make_runner
from jaxarena.selector.decision_env import DecisionEnv
from jaxarena.selector.inputs import (
    CANDIDATE_SIZE,
    NO_ASSESSMENT,
    NUM_CANDIDATES,
    STATE_SIZE,
    InputConfig,
    SelectorObs,
    selector_inputs,
)
from jaxarena.selector.network import CandidateSelector
from jaxarena.selector.population import make_population, stack_members
from jaxarena.selector.source import selector_tag_source


@pytest.fixture(scope="module")
def table():
    return load_table("smollm2-135m")


@pytest.fixture(scope="module")
def arena():
    return jaxarena.make("Arena-v0")


def _state(arena, seed=0):
    env, params = arena
    _, state = env.reset(jax.random.PRNGKey(seed), params)
    return state, params


BAD_INPUTS = [
    {"style": "greedy"},
    {"num_candidates": 0},
    {"num_candidates": 4},
    {"style": "all-tags", "num_candidates": 5},
]


@pytest.mark.parametrize("bad", BAD_INPUTS)
def test_input_config_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        InputConfig(**bad)


def test_selector_inputs_shapes_and_advice(table, arena):
    state, params = _state(arena)
    history = push(empty_history(state), state, params)
    features = llm_features(state, params)
    obs, advice = jax.jit(selector_inputs, static_argnums=6)(
        table, history, features, state.tag, jnp.float32(0.0), params, InputConfig()
    )
    chex.assert_shape(obs.state, (STATE_SIZE,))
    chex.assert_shape(obs.candidates, (NUM_CANDIDATES, CANDIDATE_SIZE))
    chex.assert_tree_all_finite(obs)
    tags = np.asarray(advice.tags)
    assert len(set(tags.tolist())) == NUM_CANDIDATES  # the table's candidates are deduplicated
    # The candidate rows carry the tag one-hot and the LLM's probability.
    np.testing.assert_array_equal(np.argmax(np.asarray(obs.candidates)[:, :4], axis=-1), tags)
    np.testing.assert_allclose(np.asarray(obs.candidates)[:, 4], np.asarray(advice.probs))
    assert np.isclose(float(advice.deduction.sum()), 1.0, atol=1e-4)


def test_no_deduction_uses_the_prompt_without_an_assessment(table, arena):
    state, params = _state(arena)
    history = push(empty_history(state), state, params)
    features = llm_features(state, params)
    config = InputConfig(deduction=False, style="vanilla")
    obs, advice = selector_inputs(table, history, features, state.tag, jnp.float32(0.0), params, config)
    expected_tags, _ = propose(table, features, jnp.int32(NO_ASSESSMENT), params, "vanilla")
    np.testing.assert_array_equal(np.asarray(advice.tags), np.asarray(expected_tags))
    np.testing.assert_allclose(np.asarray(advice.deduction), 0.25)
    deduction_slice = slice(5 + HISTORY_LEN * 6, 5 + HISTORY_LEN * 6 + 4)
    np.testing.assert_array_equal(np.asarray(obs.state)[deduction_slice], 0.0)


def test_all_tags_offers_every_tag_in_the_llms_order(table, arena):
    state, params = _state(arena)
    history = push(empty_history(state), state, params)
    features = llm_features(state, params)
    config = InputConfig(style="all-tags")
    obs, advice = selector_inputs(table, history, features, state.tag, jnp.float32(0.0), params, config)
    chex.assert_shape(obs.candidates, (4, CANDIDATE_SIZE))
    assert sorted(np.asarray(advice.tags).tolist()) == [0, 1, 2, 3]
    assert np.all(np.diff(np.asarray(advice.probs)) <= 0)  # ranked by the LLM's probability
    vanilla, _ = propose(table, features, jnp.argmax(advice.deduction), params, "vanilla")
    np.testing.assert_array_equal(np.asarray(advice.tags)[:3], np.asarray(vanilla))


def _random_obs(key, batch=()):
    k1, k2 = jax.random.split(key)
    return SelectorObs(
        jax.random.normal(k1, batch + (STATE_SIZE,)),
        jax.random.normal(k2, batch + (NUM_CANDIDATES, CANDIDATE_SIZE)),
        jnp.ones(batch + (NUM_CANDIDATES,), bool),
    )


def test_network_is_attention_over_candidates():
    net = CandidateSelector()
    obs = _random_obs(jax.random.PRNGKey(0), (7,))
    params = net.init(jax.random.PRNGKey(1), obs)
    logits, value = net.apply(params, obs)
    chex.assert_shape(logits, (7, NUM_CANDIDATES))
    chex.assert_shape(value, (7,))
    # Reordering the candidates reorders their logits and leaves the value alone.
    perm = jnp.array([2, 0, 1])
    swapped = obs._replace(candidates=obs.candidates[:, perm])
    logits2, value2 = net.apply(params, swapped)
    np.testing.assert_allclose(np.asarray(logits2), np.asarray(logits)[:, perm], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(value2), np.asarray(value), rtol=1e-6)
    # A candidate that may not be chosen gets probability 0.
    masked = obs._replace(valid=obs.valid.at[:, 1:].set(False))
    probs = jax.nn.softmax(net.apply(params, masked)[0])
    np.testing.assert_allclose(np.asarray(probs)[:, 0], 1.0)


def test_population_members_and_sampling(arena):
    _, params = arena
    scripted = make_population(params, variants=False)
    assert scripted.names == BOT_TYPES
    full = make_population(params, variants=True)
    assert full.size > 10 and len(set(full.names)) == full.size
    assert {int(b) for b in np.asarray(full.params.bot_type)} == {0, 1, 2}
    draws = jax.vmap(lambda k: scripted.sample(k)[1])(jax.random.split(jax.random.PRNGKey(0), 3000))
    counts = np.bincount(np.asarray(draws), minlength=3)
    assert counts.min() > 900  # uniform over the three
    # An empty slot (weight 0) is never drawn.
    partial = stack_members([(n, params.replace(bot_type=jnp.int32(i))) for i, n in enumerate(BOT_TYPES)], filled=2)
    draws = jax.vmap(lambda k: partial.sample(k)[1])(jax.random.split(jax.random.PRNGKey(1), 500))
    assert int(np.max(np.asarray(draws))) == 1
    with pytest.raises(ValueError, match="repeat"):
        stack_members([("a", params), ("a", params)])
    with pytest.raises(ValueError, match="bot_weights_template"):
        make_population(params, learned_slots=1)
    from jaxarena.learned_bot import init_bot_weights

    weights = init_bot_weights(jax.random.PRNGKey(0))
    learned = make_population(params, variants=False, learned_slots=2, bot_weights_template=weights)
    assert learned.learned_filled == 0 and float(learned.weights[-1]) == 0.0
    learned = learned.with_learned_bot(0, weights)
    assert learned.learned_filled == 1 and float(learned.weights[3]) == 1.0 and float(learned.weights[4]) == 0.0
    np.testing.assert_array_equal(np.asarray(learned.params.bot_weights.w0[3]), np.asarray(weights.w0))
    with pytest.raises(ValueError, match="out of range"):
        learned.with_learned_bot(2, weights)


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_decision_env_replays_the_runners_episode(table, arena):
    """An episode played decision by decision equals the one runner's episode on the same key."""
    env, params = arena
    policy, squad_params = load_policy("B-paper")  # Arena-v0, as the fixture
    population = make_population(params.replace(bot_type=jnp.int32(2)), variants=False)
    population = population.replace(weights=jnp.array([0.0, 0.0, 1.0]))  # the balanced bot only
    inputs = InputConfig(style="iterative")
    denv = DecisionEnv(env, policy, squad_params, population, table, inputs, num_envs=1)
    obs, state = denv.reset(jax.random.PRNGKey(3))
    episode_key = state.lanes.key[0]
    step = jax.jit(denv.step)
    rewards, tags = [], []
    for t in range(30):
        tags.append(int(state.lanes.advice.tags[0, 0]))
        obs, state, reward, done, info = step(jax.random.PRNGKey(100 + t), state, jnp.zeros((1,), jnp.int32))
        rewards.append(float(reward[0]))
        if bool(done[0]):
            break
    assert bool(done[0]), "the episode did not end within 30 decisions"
    source = selector_tag_source(table, InputConfig(style="iterative", num_candidates=1), chooser="top1")
    run = make_runner(env, params, policy, source, num_episodes=1)
    result = run(squad_params, population.sample(jax.random.PRNGKey(0))[0], episode_key)
    played = np.asarray(result.decision_tags)[np.asarray(result.decision_active)[:, 0], 0].tolist()
    assert played == tags
    np.testing.assert_allclose(sum(rewards), float(result.team_return[0]), rtol=1e-4, atol=1e-4)
    assert float(info["duration_s"][0]) == pytest.approx(float(result.duration_s[0]))


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_tag_source_choosers(table, arena):
    env, params = arena
    policy, squad_params = load_policy("B-paper")  # Arena-v0, as the fixture
    inputs = InputConfig()
    net = CandidateSelector()
    net_params = net.init(jax.random.PRNGKey(0), _random_obs(jax.random.PRNGKey(1), (1,)))
    results = {}
    for chooser in ("selector", "random", "llm", "top1"):
        source = selector_tag_source(table, inputs, chooser, net, net_params)
        run = make_runner(env, params, policy, source, num_episodes=8, num_periods=4)
        results[chooser] = run(squad_params, params, jax.random.PRNGKey(5))
    for chooser, r in results.items():
        aux = r.decision_aux
        chex.assert_shape(aux["candidates"], (4, 8, NUM_CANDIDATES))
        chosen = np.take_along_axis(np.asarray(aux["candidates"]), np.asarray(aux["choice"])[..., None], -1)[..., 0]
        active = np.asarray(r.decision_active)
        np.testing.assert_array_equal(chosen[active], np.asarray(r.decision_tags)[active], err_msg=chooser)
        np.testing.assert_array_equal(np.asarray(aux["truth"])[active] >= 2, True)  # the balanced bot
    np.testing.assert_array_equal(np.asarray(results["top1"].decision_aux["choice"]), 0)
    llm_choice = np.asarray(results["llm"].decision_aux["choice"])
    probs = np.asarray(results["llm"].decision_aux["candidate_probs"])
    np.testing.assert_array_equal(llm_choice, np.argmax(probs, axis=-1))
    with pytest.raises(ValueError, match="chooser"):
        selector_tag_source(table, inputs, "oracle")
    with pytest.raises(ValueError, match="network"):
        selector_tag_source(table, inputs, "selector")


@pytest.mark.slow  # over ~10 s on 2 cores: the default suite stays an inner loop
def test_an_unbatched_decision_env_plays_lane_zero_of_a_batch_of_one(table):
    from jaxarena.policies import chase_and_orb_policy

    env, params = jaxarena.make("Arena-v0", decision_period_s=1.0, episode_s=4.0)
    population = make_population(params, variants=False)
    batched = DecisionEnv(env, chase_and_orb_policy, None, population, table, InputConfig(), num_envs=1)
    single = DecisionEnv(env, chase_and_orb_policy, None, population, table, InputConfig(), num_envs=None)
    assert single.action_space().shape == () and batched.action_space().shape == (1,)
    assert single.observation_space().shape == SelectorObs((STATE_SIZE,), (NUM_CANDIDATES, CANDIDATE_SIZE), (3,))
    lane0 = lambda tree: jax.tree.map(lambda x: x[0], tree)  # noqa: E731
    obs_b, state_b = batched.reset(jax.random.PRNGKey(1))
    obs_s, state_s = single.reset(jax.random.PRNGKey(1), population)
    chex.assert_trees_all_close(lane0(obs_b), obs_s, atol=1e-6)
    step_b, step_s = jax.jit(batched.step), jax.jit(single.step)
    for t in range(8):
        action = jnp.int32(t % 3)
        key = jax.random.PRNGKey(10 + t)
        out_b = step_b(key, state_b, action[None])
        out_s = step_s(key, state_s, action, population)
        state_b, state_s = out_b[1], out_s[1]
        chex.assert_trees_all_close(lane0(out_b[:1] + out_b[2:]), out_s[:1] + out_s[2:], atol=1e-5)
        assert int(state_b.lanes.member[0]) == int(state_s.member)


def test_make_decision_env_needs_a_squad():
    with pytest.raises(TypeError, match=r"SelectorDecision-v0 needs the frozen squad.*'B-experts'"):
        jaxarena.make("SelectorDecision-v0")
    with pytest.raises(ValueError, match="pass no bot"):
        jaxarena.make("SelectorDecision-v0", squad=(None, None), bot="evasive")
    with pytest.raises(FileNotFoundError, match="no strategy table"):
        jaxarena.make("SelectorDecision-v0", squad=(lambda p, o, k: o[..., 0], None), table="no-such-table")
