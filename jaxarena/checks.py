"""Fail-fast argument checks for `reset`/`step` that cost nothing inside a compiled program.

`check_key` reads only a key's dtype and shape, which JAX knows at trace
time, so under `jit` it runs once while tracing and leaves no operation in
the program. `check_range` looks at values only when they are concrete (a
Python number, a numpy array, an eager JAX array): a traced value is skipped,
so no host round trip and no `jax.debug` callback ever enters a jitted step.
"""

from __future__ import annotations

import jax
import numpy as np

_HOW = "pass jax.random.key(seed), e.g. jax.random.key(0), or a legacy jax.random.PRNGKey(0) (or a split of one)"


def is_concrete(x) -> bool:
    """True unless `x` is a tracer: its values can be read on the host now."""
    return not isinstance(x, jax.core.Tracer)


def check_key(key, where: str = "key") -> None:
    """TypeError unless `key` is one PRNG key: a typed key (`jax.random.key`) or a legacy uint32 one.

    A batch of keys is a ValueError: vmap the environment over them instead.
    """
    dtype, shape = getattr(key, "dtype", None), getattr(key, "shape", None)
    if dtype is None or shape is None:
        raise TypeError(f"{where} must be a PRNG key, got {type(key).__name__} {key!r}; {_HOW}")
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        batch = tuple(shape)
    elif np.dtype(dtype) == np.uint32 and len(shape) >= 1:
        batch = tuple(shape[:-1])  # legacy raw key: uint32[2] (threefry) or uint32[4] (rbg)
    else:
        raise TypeError(f"{where} must be a PRNG key, got an array of {dtype}{list(shape)}; {_HOW}")
    if batch:
        raise ValueError(f"{where} must be one PRNG key, got a batch of shape {batch}; jax.vmap over the keys instead")


def check_range(x, n: int, what: str) -> None:
    """ValueError naming the valid range if concrete `x` has a value outside 0..n-1; a traced `x` is not checked."""
    if not is_concrete(x):
        return
    value = np.asarray(x)
    if value.size == 0 or not np.issubdtype(value.dtype, np.integer):
        return  # dtype and shape errors are the caller's, with their own messages
    bad = (value < 0) | (value >= n)
    if np.any(bad):
        shown = sorted({int(v) for v in value[bad].reshape(-1)})[:5]
        raise ValueError(f"{what} must be in 0..{n - 1}, got {shown[0] if len(shown) == 1 else shown}")
