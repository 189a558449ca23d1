"""One selector run or a batch of seeds' runs (every leaf with a leading seed axis): slicing, stacking, resuming."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from jaxarena.algorithms.ppo_core import run_fns

CHECKPOINT = "selector.msgpack"


def updates_done(state) -> int:
    """The updates done (the same for every seed of a batch)."""
    return int(np.asarray(state.update).reshape(-1)[0])


def take_run(tree, i: int, batched: bool):
    return jax.tree.map(lambda x: x[i], tree) if batched else tree


def stack_runs(trees: list):
    return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def resume_runs(trainer, state, dirs: list[Path], batched: bool, population):
    """The saved runs: network, optimiser, population and progress restored; the episodes in flight restart on
    fresh lanes drawn from the restored population."""
    saved = []
    for i, d in enumerate(dirs):
        one = take_run(state, i, batched)
        target = dict(train_state=one.train_state, population=population, rng=one.rng, update=0)
        saved.append(
            serialization.from_state_dict(target, serialization.msgpack_restore((d / CHECKPOINT).read_bytes()))
        )
    pick = (lambda name: stack_runs([s[name] for s in saved])) if batched else (lambda name: saved[0][name])
    rng = jnp.asarray(pick("rng"))
    fresh = jax.jit(run_fns(trainer, batched)[0])(rng)
    env_state = fresh.env_state.replace(population=pick("population"))
    update = jnp.asarray(pick("update"), jnp.int32)
    return fresh.replace(train_state=pick("train_state"), env_state=env_state, update=update)
