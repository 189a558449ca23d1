"""Memory in the PPO core: a recurrent network's state through rollouts and minibatches.

The shape is PureJaxRL's recurrent PPO:
- the memory rides in the runner state, one row per sample (an arena's 5 NPCs each carry their own);
- it is reset to the network's `initial_memory` where a sample's trajectory ends (an episode's end,
  or an NPC's death), so a new episode never sees the last one;
- the update re-runs the network over each sample's whole rollout from the memory it started with,
  so minibatches split over samples (sequences), never over time.

The runner state's memory is the one the next rollout starts from (already reset where the last
rollout ended); the steps where the memory was reset follow from the trajectory's `end`. Replaying
the network over the rollout from there gives the rollout's own logits and values exactly.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp


class Sequences(NamedTuple):
    """What the update's loss reads as `obs` for a recurrent network: whole sequences.

    obs: (T, B, ...) the rollout's observations; first: (T, B) the memory was reset just before the
    step; memory: (B, memory) the memory before the first step.
    """

    obs: Any
    first: jax.Array
    memory: jax.Array


def reset_where(memory: jax.Array, ended: jax.Array) -> jax.Array:
    """`memory` with the rows of samples whose trajectory `ended` back at zeros (`initial_memory`)."""
    return jnp.where(ended[..., None], jnp.zeros_like(memory), memory)


def first_steps(end: jax.Array) -> jax.Array:
    """(T, ...) bool: the memory was reset before step t because step t - 1 ended a trajectory.

    The rollout's own first step is False: the memory it starts from was reset already.
    """
    return jnp.concatenate([jnp.zeros_like(end[:1]), end[:-1]], axis=0)


class SequenceNetwork:
    """A recurrent network seen as the loss wants one: `apply(params, Sequences) -> (logits, value)`,
    both (T, B, ...), by scanning the network over time with the resets of `first`."""

    def __init__(self, network):
        self.network = network

    def apply(self, params, seqs: Sequences):
        def step(memory, inputs):
            obs, first = inputs
            memory, logits, value = self.network.apply(params, reset_where(memory, first), obs)
            return memory, (logits, value)

        _, (logits, value) = jax.lax.scan(step, seqs.memory, (seqs.obs, seqs.first))
        return logits, value


def sequence_minibatches(tree, memory: jax.Array, perm: jax.Array, num_minibatches: int):
    """Split time-major leaves (T, B, ...) and the start memory (B, ...) over samples, not time.

    Returns (leaves (M, T, B / M, ...), memory (M, B / M, ...)), the samples shuffled by `perm`.
    """

    def split(x):
        x = x[:, perm]
        x = x.reshape((x.shape[0], num_minibatches, -1) + x.shape[2:])
        return jnp.swapaxes(x, 0, 1)

    memory = memory[perm].reshape((num_minibatches, -1) + memory.shape[1:])
    return jax.tree.map(split, tree), memory


def as_sequences(x: jax.Array, lead: int) -> jax.Array:
    """(T, envs[, agents], ...) -> (T, B, ...): every (env, agent) is one sequence."""
    return x.reshape((x.shape[0], -1) + x.shape[lead:])
