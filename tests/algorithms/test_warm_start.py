"""Warm starts across observation variants and into per-tag experts: the seeded network acts as its source."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxarena
from jaxarena.algorithms.networks import ActorCritic
from jaxarena.algorithms.warm_start import as_experts, forget_tag_input, input_rows, keep_fresh_experts, widen_params
from jaxarena.observe import TAG


def formation_obs(tag):
    env, params = jaxarena.make("ArenaFormation-v0")
    obs, state = env.reset(jax.random.key(1), params)
    return env.retag(obs, state, tag, params)[0]


@pytest.fixture(scope="module")
def source():
    net = ActorCritic(hidden=16)
    return net, net.init(jax.random.key(0), jnp.zeros((1, 23)))


def test_a_widened_network_computes_its_source_on_the_shared_inputs(source):
    net, params = source
    wide = ActorCritic(hidden=16, tag_one_hot=True)
    template = wide.init(jax.random.key(9), jnp.zeros((1, 28)))
    seeded = widen_params(params, template, input_rows(23, False, 28, True))
    obs = formation_obs(0)
    for method in ("logits", "value"):  # summing extra zero terms may round the last bit
        got, want = wide.apply(seeded, obs, method=method), net.apply(params, obs[:, :23], method=method)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    # The new inputs start with zero weight; the template's random ones would not.
    kernel = seeded["params"]["actor_layers_0"]["kernel"]
    assert np.all(np.asarray(kernel[23:]) == 0.0) and np.any(
        np.asarray(template["params"]["actor_layers_0"]["kernel"][23:])
    )


def test_experts_start_as_the_source_under_every_tag_and_then_act_by_tag(source):
    net, params = source
    experts = ActorCritic(hidden=16, tag_experts=True)
    template = experts.init(jax.random.key(9), jnp.zeros((1, 28)))
    seeded = widen_params(as_experts(forget_tag_input(params)), template, input_rows(23, False, 28, False))
    for tag in range(4):
        obs = formation_obs(tag)
        expected = net.apply(params, obs[:, :23].at[:, TAG].set(0.0), method="logits")
        got = experts.apply(seeded, obs, method="logits")
        chex.assert_shape(got, (5, 6))
        np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)
    # Change expert 2 only: tag 2's actions move, tag 1's do not.
    moved = jax.tree.map(lambda x: x, seeded)
    moved["params"]["expert_actor_out_2"]["bias"] = moved["params"]["expert_actor_out_2"]["bias"] + 3.0
    assert float(jnp.max(jnp.abs(experts.apply(moved, formation_obs(2), method="logits") - got))) > 1.0
    np.testing.assert_allclose(
        experts.apply(moved, formation_obs(1), method="logits"),
        experts.apply(seeded, formation_obs(1), method="logits"),
    )
    # Seeded experts must not share buffers (training donates them).
    leaves = jax.tree.leaves(seeded)
    assert len({id(x) for x in leaves}) == len(leaves)


def test_a_fresh_expert_acts_as_the_fresh_network_and_the_others_as_the_warm_start(source):
    net, params = source
    experts = ActorCritic(hidden=16, tag_experts=True)
    fresh = experts.init(jax.random.key(9), jnp.zeros((1, 28)))
    warm = widen_params(as_experts(forget_tag_input(params)), fresh, input_rows(23, False, 28, False))
    seeded = keep_fresh_experts(warm, fresh, (3,))
    for tag, want in ((0, warm), (1, warm), (2, warm), (3, fresh)):
        for method in ("logits", "value"):
            got = experts.apply(seeded, formation_obs(tag), method=method)
            np.testing.assert_array_equal(got, experts.apply(want, formation_obs(tag), method=method))
    # The fresh expert acts differently from the warm start's, and no tags changes nothing.
    obs = formation_obs(3)
    moved = experts.apply(seeded, obs, method="logits") - experts.apply(warm, obs, method="logits")
    assert float(jnp.max(jnp.abs(moved))) > 1e-3
    chex.assert_trees_all_equal(keep_fresh_experts(warm, fresh, ()), warm)


def test_forget_tag_input_zeroes_only_the_tag_row_of_first_layers(source):
    _, params = source
    forgotten = forget_tag_input(params)["params"]
    for head in ("actor", "critic"):
        kernel = np.asarray(forgotten[f"{head}_layers_0"]["kernel"])
        assert np.all(kernel[TAG] == 0.0)
        np.testing.assert_array_equal(
            np.delete(kernel, TAG, 0), np.delete(params["params"][f"{head}_layers_0"]["kernel"], TAG, 0)
        )
    np.testing.assert_array_equal(forgotten["actor_layers_1"]["kernel"], params["params"]["actor_layers_1"]["kernel"])


def test_a_source_that_reads_more_than_the_destination_is_refused():
    with pytest.raises(ValueError, match="25-float observation from a 28-float"):
        input_rows(28, False, 25, False)
    with pytest.raises(ValueError, match="one-hot"):
        input_rows(23, True, 28, False)
    np.testing.assert_array_equal(input_rows(25, True, 28, True), [*range(25), 28, 29, 30, 31])
