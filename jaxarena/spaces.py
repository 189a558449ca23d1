"""Observation and action spaces, gymnax-style: `Discrete` and `Box`, plus `Tree` for pytree observations.

Every space has `shape`, `dtype`, `sample(key)` and `contains(x)`. Both
methods are pure JAX, so they run under `jit` and `vmap`: `contains` returns
a scalar bool array (`bool(...)` it on the host). A wrong shape or dtype is
known at trace time and gives `False` without touching the values.

`Discrete` takes an optional `shape`, because an arena's action is one
choice per NPC: `Discrete(6, shape=(5,))`. gymnax's `Discrete(n)` is the
`shape=()` case.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _static_false() -> jax.Array:
    return jnp.asarray(False)


class Discrete:
    """Integers in `0..num_categories - 1`, over an array of `shape`."""

    def __init__(self, num_categories: int, shape: tuple = (), dtype=jnp.int32):
        if isinstance(num_categories, bool) or int(num_categories) != num_categories or num_categories < 1:
            raise ValueError(f"num_categories must be a positive int, got {num_categories!r}")
        self.n = self.num_categories = int(num_categories)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = jnp.dtype(dtype)
        if not (jnp.issubdtype(self.dtype, jnp.integer) or self.dtype == jnp.bool_):
            raise TypeError(f"a Discrete space holds integers or bools, got dtype {self.dtype}")

    def sample(self, key: jax.Array) -> jax.Array:
        """A uniform draw of every entry."""
        if self.dtype == jnp.bool_:
            return jax.random.randint(key, self.shape, 0, self.n) > 0
        return jax.random.randint(key, self.shape, 0, self.n, self.dtype)

    def contains(self, x) -> jax.Array:
        """() bool: `x` has this shape, an integer (or bool) dtype, and every entry in range."""
        x = jnp.asarray(x)
        if x.shape != self.shape or not (jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_):
            return _static_false()
        return jnp.all((x >= 0) & (x < self.n))

    def __repr__(self) -> str:
        return f"Discrete({self.n}, shape={self.shape}, dtype={self.dtype})"


class Box:
    """Reals in `[low, high]` (scalars or arrays broadcastable to `shape`), over an array of `shape`."""

    def __init__(self, low, high, shape: tuple, dtype=jnp.float32):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = jnp.dtype(dtype)
        # numpy, not jax: a space is a constant of the program, built once on the host.
        self.low = np.broadcast_to(np.asarray(low, self.dtype), self.shape)
        self.high = np.broadcast_to(np.asarray(high, self.dtype), self.shape)
        if np.any(self.low > self.high):
            raise ValueError("every low must be <= its high")

    def sample(self, key: jax.Array) -> jax.Array:
        """A uniform draw inside the bounds (finite bounds only)."""
        return jax.random.uniform(key, self.shape, self.dtype, self.low, self.high)

    def contains(self, x) -> jax.Array:
        """() bool: `x` has this shape, a float dtype, and every entry within the bounds (NaN is outside)."""
        x = jnp.asarray(x)
        if x.shape != self.shape or not jnp.issubdtype(x.dtype, jnp.floating):
            return _static_false()
        return jnp.all((x >= self.low) & (x <= self.high))

    def __repr__(self) -> str:
        return f"Box(low={self.low.min()}, high={self.high.max()}, shape={self.shape}, dtype={self.dtype})"


def is_space(x: Any) -> bool:
    return isinstance(x, (Discrete, Box))


def leaves(space) -> list:
    """The `Box`/`Discrete` spaces of `space`, in pytree order (itself, unless it is a `Tree`)."""
    return list(space.leaves()) if isinstance(space, Tree) else [space]


class Tree:
    """A pytree of spaces (a NamedTuple, dict or tuple of `Box`/`Discrete`) for pytree observations.

    `sample` returns the same structure; `contains` is true where every leaf's space contains its leaf.
    """

    def __init__(self, spaces: Any):
        self.spaces = spaces
        self._leaves, self._treedef = jax.tree.flatten(spaces, is_leaf=is_space)
        if not self._leaves or not all(is_space(s) for s in self._leaves):
            raise TypeError("a Tree space needs a non-empty pytree whose leaves are Box or Discrete spaces")

    @property
    def shape(self):
        """The leaves' shapes, in the tree's structure."""
        return jax.tree.unflatten(self._treedef, [s.shape for s in self._leaves])

    @property
    def dtype(self):
        """The leaves' dtypes, in the tree's structure."""
        return jax.tree.unflatten(self._treedef, [s.dtype for s in self._leaves])

    def leaves(self) -> list:
        """The leaf spaces, in the order `jax.tree.leaves` gives the observation's arrays."""
        return list(self._leaves)

    def sample(self, key: jax.Array):
        keys = jax.random.split(key, len(self._leaves))
        return jax.tree.unflatten(self._treedef, [s.sample(k) for s, k in zip(self._leaves, keys, strict=True)])

    def contains(self, x) -> jax.Array:
        leaves, treedef = jax.tree.flatten(x)
        if treedef != self._treedef:
            return _static_false()
        return jnp.all(jnp.stack([s.contains(v) for s, v in zip(self._leaves, leaves, strict=True)]))

    def __repr__(self) -> str:
        return f"Tree({self.spaces!r})"
