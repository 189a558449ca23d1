"""The shared NPC actor-critics: two small MLPs, or an MLP around a GRU (the squad with memory)."""

from __future__ import annotations

from typing import Any

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import NUM_ACTIONS, NUM_TAGS
from jaxarena.observe import TAG as TAG_INDEX


def tag_of(obs: jax.Array) -> jax.Array:
    """The tag code each row's obs[..., 22] = tag / 3 encodes."""
    return jnp.round(obs[..., TAG_INDEX] * (NUM_TAGS - 1)).astype(jnp.int32)


def with_tag_one_hot(obs: jax.Array) -> jax.Array:
    """`obs` with a one-hot of its tag appended, so tag-specific tactics need not be carved out of one float."""
    return jnp.concatenate([obs, jax.nn.one_hot(tag_of(obs), NUM_TAGS, dtype=obs.dtype)], axis=-1)


def _dense(n: int, scale: float) -> nn.Dense:
    # PPO's usual init: sqrt(2) for hidden layers, a small final policy layer so the first policy is
    # near-uniform, unit gain for the value.
    return nn.Dense(n, kernel_init=nn.initializers.orthogonal(scale), bias_init=nn.initializers.zeros)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs (2 hidden layers each), orthogonal init.

    `__call__(obs) -> (pi, value)` with `pi` a `distrax.Categorical` over the
    6 actions of Table 4 and `value` of shape `obs.shape[:-1]`; works on any
    leading batch shape. `value(obs)` runs the critic alone (used for the
    truncation bootstrap, where the policy head would be wasted work).
    """

    hidden: int = 64
    activation: str = "tanh"
    num_actions: int = NUM_ACTIONS
    # Append a one-hot of the strategy tag (decoded from obs[..., 22] = tag/3)
    # to the input, so tag-specific tactics need not be carved out of one float.
    tag_one_hot: bool = False
    # One actor and one critic per strategy tag, the tag (decoded from obs[..., 22])
    # choosing which acts: tags that ask for opposite tactics (close in, stay away)
    # then do not share weights. Every expert runs and one is kept, 4x the compute.
    tag_experts: bool = False

    def setup(self):
        dense = _dense
        g = np.sqrt(2.0)
        if self.tag_experts:
            # Flat lists (expert k's layers at 2k, 2k + 1) keep flax's parameter names simple.
            self.expert_actor_layers = [dense(self.hidden, g) for _ in range(2 * NUM_TAGS)]
            self.expert_actor_out = [dense(self.num_actions, 0.01) for _ in range(NUM_TAGS)]
            self.expert_critic_layers = [dense(self.hidden, g) for _ in range(2 * NUM_TAGS)]
            self.expert_critic_out = [dense(1, 1.0) for _ in range(NUM_TAGS)]
            return
        self.actor_layers = [dense(self.hidden, g), dense(self.hidden, g)]
        self.actor_out = dense(self.num_actions, 0.01)
        self.critic_layers = [dense(self.hidden, g), dense(self.hidden, g)]
        self.critic_out = dense(1, 1.0)

    def _features(self, obs):
        return with_tag_one_hot(obs) if self.tag_one_hot else obs

    def _act(self, x):
        return jnp.tanh(x) if self.activation == "tanh" else nn.relu(x)

    def _mlp(self, x, layers, out):
        for layer in layers:
            x = self._act(layer(x))
        return out(x)

    def _by_tag(self, obs, layers, outs):
        """Every expert's output, then the one of each row's tag."""
        x = self._features(obs)
        each = jnp.stack([self._mlp(x, layers[2 * k : 2 * k + 2], outs[k]) for k in range(NUM_TAGS)], axis=-2)
        tag = jnp.clip(tag_of(obs), 0, NUM_TAGS - 1)
        return jnp.take_along_axis(each, tag[..., None, None], axis=-2)[..., 0, :]

    def logits(self, obs: jax.Array) -> jax.Array:
        if self.tag_experts:
            return self._by_tag(obs, self.expert_actor_layers, self.expert_actor_out)
        return self._mlp(self._features(obs), self.actor_layers, self.actor_out)

    def value(self, obs: jax.Array) -> jax.Array:
        if self.tag_experts:
            return jnp.squeeze(self._by_tag(obs, self.expert_critic_layers, self.expert_critic_out), -1)
        return jnp.squeeze(self._mlp(self._features(obs), self.critic_layers, self.critic_out), -1)

    def __call__(self, obs: jax.Array):
        return distrax.Categorical(logits=self.logits(obs)), self.value(obs)


def expert_mask(params, tags) -> Any:
    """A pytree of bools like `params`: True on the layers of the experts of `tags`.

    Expert k owns `expert_{actor,critic}_layers_{2k, 2k + 1}` and `expert_{actor,critic}_out_{k}`.
    """
    names = set()
    for k in tags:
        for part in ("actor", "critic"):
            names |= {f"expert_{part}_layers_{2 * k}", f"expert_{part}_layers_{2 * k + 1}", f"expert_{part}_out_{k}"}
    return jax.tree_util.tree_map_with_path(lambda path, _: any(getattr(p, "key", None) in names for p in path), params)


class RecurrentActorCritic(nn.Module):
    """The squad with memory, in the shape of PureJaxRL's recurrent PPO: an embedding layer, a GRU
    whose state each NPC carries from tick to tick, then an actor and a critic head.

    `__call__(memory, obs) -> (memory, logits, value)` on any leading batch shape: memory
    (..., memory), obs (..., obs_size). `initial_memory(batch_shape)` is the state an episode starts
    from (zeros); the trainer and the episode runner reset to it where an episode ends.
    """

    hidden: int = 64
    memory: int = 64
    activation: str = "tanh"
    num_actions: int = NUM_ACTIONS
    tag_one_hot: bool = False

    def _act(self, x):
        return jnp.tanh(x) if self.activation == "tanh" else nn.relu(x)

    @nn.compact
    def __call__(self, memory: jax.Array, obs: jax.Array):
        g = np.sqrt(2.0)
        x = with_tag_one_hot(obs) if self.tag_one_hot else obs
        x = self._act(_dense(self.hidden, g)(x))
        memory, x = nn.GRUCell(features=self.memory)(memory, x)
        logits = _dense(self.num_actions, 0.01)(self._act(_dense(self.hidden, g)(x)))
        value = _dense(1, 1.0)(self._act(_dense(self.hidden, g)(x)))
        return memory, logits, jnp.squeeze(value, -1)

    def initial_memory(self, batch_shape: tuple[int, ...]) -> jax.Array:
        return jnp.zeros(tuple(batch_shape) + (self.memory,), jnp.float32)


def network_of(kwargs: dict[str, Any]) -> nn.Module:
    """The actor-critic a config's `network_kwargs()` describe: recurrent where they give `memory`."""
    return RecurrentActorCritic(**kwargs) if kwargs.get("memory") else ActorCritic(**kwargs)


def init_params(network: nn.Module, key: jax.Array, obs_size: int):
    """Fresh parameters of `network` for `obs_size`-float observations (a template to restore into)."""
    obs = jnp.zeros((1, obs_size), jnp.float32)
    if is_recurrent(network):
        return network.init(key, network.initial_memory((1,)), obs)
    return network.init(key, obs)


def is_recurrent(network) -> bool:
    """Whether `network` carries memory between steps (it has `initial_memory`)."""
    return hasattr(type(network), "initial_memory")
