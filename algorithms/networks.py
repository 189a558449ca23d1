"""The shared NPC actor-critic: two small MLPs and a Categorical over 6 actions."""

from __future__ import annotations

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.observe import TAG as TAG_INDEX
from jaxarena.types import NUM_ACTIONS, NUM_TAGS


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

    def setup(self):
        # PPO's usual init: sqrt(2) for hidden layers, small final policy
        # layer so the initial policy is near-uniform, unit gain for the value.
        def dense(n, scale):
            return nn.Dense(n, kernel_init=nn.initializers.orthogonal(scale), bias_init=nn.initializers.zeros)

        g = np.sqrt(2.0)
        self.actor_layers = [dense(self.hidden, g), dense(self.hidden, g)]
        self.actor_out = dense(self.num_actions, 0.01)
        self.critic_layers = [dense(self.hidden, g), dense(self.hidden, g)]
        self.critic_out = dense(1, 1.0)

    def _features(self, obs):
        if not self.tag_one_hot:
            return obs
        tag = jnp.round(obs[..., TAG_INDEX] * (NUM_TAGS - 1)).astype(jnp.int32)
        return jnp.concatenate([obs, jax.nn.one_hot(tag, NUM_TAGS, dtype=obs.dtype)], axis=-1)

    def _act(self, x):
        return jnp.tanh(x) if self.activation == "tanh" else nn.relu(x)

    def logits(self, obs: jax.Array) -> jax.Array:
        x = self._features(obs)
        for layer in self.actor_layers:
            x = self._act(layer(x))
        return self.actor_out(x)

    def value(self, obs: jax.Array) -> jax.Array:
        x = self._features(obs)
        for layer in self.critic_layers:
            x = self._act(layer(x))
        return jnp.squeeze(self.critic_out(x), -1)

    def __call__(self, obs: jax.Array):
        return distrax.Categorical(logits=self.logits(obs)), self.value(obs)
