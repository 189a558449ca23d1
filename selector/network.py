"""The RL selector's network, after appendix C.1 of
"Language Agents with Reinforcement Learning for Strategic Play in the Werewolf Game".

The state and each candidate are embedded by their own small MLPs; a
candidate's logit is the scaled dot product of the two embeddings, so the
selection probabilities are the softmax of that attention over the
candidates. A value head sits on the state embedding. Candidates that may not
be chosen (the N = 1 ablation) get a logit of -inf.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from .inputs import SelectorObs


class CandidateSelector(nn.Module):
    embed: int = 64
    hidden: int = 64

    @nn.compact
    def __call__(self, obs: SelectorObs) -> tuple[jax.Array, jax.Array]:
        """(logits (..., K), value (...)) for a (batch of) `SelectorObs` with K candidates."""
        init = nn.initializers.orthogonal(np.sqrt(2))
        h = nn.tanh(nn.Dense(self.hidden, kernel_init=init, name="state_hidden")(obs.state))
        query = nn.Dense(self.embed, kernel_init=nn.initializers.orthogonal(1.0), name="state_embed")(h)
        c = nn.tanh(nn.Dense(self.hidden, kernel_init=init, name="candidate_hidden")(obs.candidates))
        keys = nn.Dense(self.embed, kernel_init=nn.initializers.orthogonal(1.0), name="candidate_embed")(c)
        logits = jnp.einsum("...e,...ke->...k", query, keys) / jnp.sqrt(float(self.embed))
        logits = jnp.where(obs.valid, logits, -jnp.inf)
        v = nn.tanh(nn.Dense(self.hidden, kernel_init=init, name="value_hidden")(h))
        value = nn.Dense(1, kernel_init=nn.initializers.orthogonal(1.0), name="value")(v)[..., 0]
        return logits, value
