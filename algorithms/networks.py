"""The shared NPC actor-critic: two small MLPs and a Categorical over 6 actions."""

from __future__ import annotations

from typing import Any

import distrax
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import NUM_ACTIONS, NUM_TAGS
from jaxarena.observe import TAG as TAG_INDEX


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
        # PPO's usual init: sqrt(2) for hidden layers, small final policy
        # layer so the initial policy is near-uniform, unit gain for the value.
        def dense(n, scale):
            return nn.Dense(n, kernel_init=nn.initializers.orthogonal(scale), bias_init=nn.initializers.zeros)

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

    @staticmethod
    def _tag(obs):
        """The tag code each row's obs[..., 22] = tag / 3 encodes."""
        return jnp.round(obs[..., TAG_INDEX] * (NUM_TAGS - 1)).astype(jnp.int32)

    def _features(self, obs):
        if not self.tag_one_hot:
            return obs
        return jnp.concatenate([obs, jax.nn.one_hot(self._tag(obs), NUM_TAGS, dtype=obs.dtype)], axis=-1)

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
        tag = jnp.clip(self._tag(obs), 0, NUM_TAGS - 1)
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
