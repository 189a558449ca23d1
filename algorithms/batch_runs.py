"""One run or a batch of runs of a PPO `Trainer`: PureJaxRL's `train(rng)`, and the init / update pair
with a leading run axis that every trainer checkpointing between chunks uses."""

from __future__ import annotations

import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp

from .ppo_core import Trainer


def is_key_batch(keys) -> bool:
    """True for a batch of PRNG keys: typed keys of rank >= 1, or raw uint32 keys of shape (N, 2)."""
    keys = jnp.asarray(keys) if not isinstance(keys, jax.Array) else keys
    if jnp.issubdtype(keys.dtype, jax.dtypes.prng_key):
        return keys.ndim >= 1
    return keys.ndim >= 2


def train_fn(trainer: Trainer, num_updates: int) -> Callable:
    """PureJaxRL's `train(rng) -> (state, metrics)`: `num_updates` updates of a fresh run from `rng`.

    Given a batch of keys (`jax.random.split(key, n)`), it trains one run per key in one program
    (vmapped; every leaf of the result gains a leading axis of n). Jit it.
    """

    def train(rng):
        init, run_updates = run_fns(trainer, batched=is_key_batch(rng))
        return run_updates(init(rng), num_updates)

    return train


def run_fns(trainer: Trainer, batched: bool) -> tuple[Callable, Callable]:
    """`(init(keys), run_updates(state, n))` for one run, or with `batched` for a run per key with a
    leading run axis: the inits loop over the keys (`init_runs`), the updates are vmapped. The
    one place every trainer (`train_fn`, and those that checkpoint between chunks) gets its batched
    pair; jit both (n static).
    """
    if not batched:
        return trainer.init, trainer.run_updates
    return functools.partial(init_runs, trainer), lambda state, n: jax.vmap(lambda s: trainer.run_updates(s, n))(state)


def init_runs(trainer: Trainer, keys: jax.Array, hypers: dict | None = None):
    """A fresh run per key (and per `hypers` row), stacked along a leading run axis.

    A loop (`lax.map`), not `vmap`: a vmapped init batches the orthogonal initializer's QR
    factorisation, and on CPU jaxlib 0.10 runs batched LAPACK calls on the same thread pool that
    waits for them, so two at once can deadlock it (a program that never ends and uses no CPU;
    seen with 2 seeds on 2 cores). Init runs once per training, so the loop costs nothing.
    """
    if hypers is None:
        return jax.lax.map(trainer.init, keys)
    return jax.lax.map(lambda key_and_hyper: trainer.init(*key_and_hyper), (keys, hypers))
