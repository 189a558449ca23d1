"""`jaxarena.spaces`: sampling and membership of Discrete, Box and Tree, in and out of jit."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxarena.spaces import Box, Discrete, Tree, leaves


def test_discrete_samples_inside_and_checks_shape_dtype_and_range():
    space = Discrete(6, shape=(5,))
    x = space.sample(jax.random.key(0))
    chex.assert_shape(x, (5,))
    chex.assert_type(x, jnp.int32)
    assert bool(space.contains(x)) and bool(space.contains(np.array([0, 1, 2, 3, 5])))
    assert not bool(space.contains(jnp.array([0, 1, 2, 3, 6])))
    assert not bool(space.contains(jnp.array([0, -1, 2, 3, 4])))
    assert not bool(space.contains(jnp.zeros((4,), jnp.int32)))  # shape
    assert not bool(space.contains(jnp.zeros((5,), jnp.float32)))  # dtype
    scalar = Discrete(9)
    assert scalar.shape == () and scalar.n == scalar.num_categories == 9 and bool(scalar.contains(8))
    draws = jax.vmap(scalar.sample)(jax.random.split(jax.random.key(1), 2000))
    assert set(np.unique(np.asarray(draws)).tolist()) == set(range(9))
    flags = Discrete(2, shape=(3,), dtype=jnp.bool_)
    chex.assert_type(flags.sample(jax.random.key(2)), bool)
    assert bool(flags.contains(jnp.array([True, False, True])))
    with pytest.raises(ValueError, match="positive int"):
        Discrete(0)
    with pytest.raises(TypeError, match="integers or bools"):
        Discrete(3, dtype=jnp.float32)


def test_box_samples_inside_and_checks_bounds_per_entry():
    low = np.array([0.0, -1.0], np.float32)
    space = Box(low, 1.0, (5, 2))
    x = space.sample(jax.random.key(0))
    chex.assert_shape(x, (5, 2))
    chex.assert_type(x, jnp.float32)
    assert bool(space.contains(x))
    assert bool(space.contains(jnp.array([[0.0, -1.0]] * 5)))  # bounds are inclusive
    assert not bool(space.contains(jnp.array([[-0.5, 0.0]] * 5)))  # below the first column's 0
    assert not bool(space.contains(jnp.full((5, 2), jnp.nan)))
    assert not bool(space.contains(jnp.zeros((5, 3))))
    assert not bool(space.contains(jnp.zeros((5, 2), jnp.int32)))
    with pytest.raises(ValueError, match="low must be <="):
        Box(1.0, 0.0, (2,))


def test_contains_is_jittable_and_vmappable():
    space = Box(0.0, 1.0, (3,))
    batch = jnp.array([[0.5, 0.5, 0.5], [0.5, 2.0, 0.5]])
    np.testing.assert_array_equal(jax.jit(jax.vmap(space.contains))(batch), [True, False])
    actions = Discrete(4, shape=(2,))
    np.testing.assert_array_equal(jax.jit(jax.vmap(actions.contains))(jnp.array([[0, 3], [4, 0]])), [True, False])


def test_tree_space_follows_the_observation_structure():
    space = Tree({"a": Box(0.0, 1.0, (2,)), "b": Discrete(3, shape=(4,))})
    x = space.sample(jax.random.key(0))
    assert set(x) == {"a", "b"} and bool(space.contains(x))
    assert space.shape == {"a": (2,), "b": (4,)}
    assert [s.shape for s in leaves(space)] == [(2,), (4,)]
    scalar = Discrete(2)
    assert leaves(scalar) == [scalar]
    assert not bool(space.contains({"a": x["a"], "b": x["b"] + 3}))
    assert not bool(space.contains({"a": x["a"]}))  # another structure
    with pytest.raises(TypeError, match="leaves are Box or Discrete"):
        Tree({"a": 1.0})
