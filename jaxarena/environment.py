"""The base of the single-arena environments, in gymnax's shape: a subclass writes one episode's
rules, this class checks what `reset` and `step` are given and resets a finished episode, the one
place that happens.

A subclass gives
- `default_params` (a property) and `observation_space(params)`, `action_space(params)`;
- `reset_env(key, params) -> (obs, state)`: a fresh episode;
- `step_env(key, state, action, params) -> (state, reward, terminated, truncated, info)`: one step,
  never a reset;
- `observe(state, params) -> obs`;
- `next_episode(key, state, params) -> state`: where the episode that `state` was in goes on once
  it is over (its next start);

and may refine `checked_params` (the params a call plays: the given ones, or the default),
`checked_action` (what `step` accepts) and `episode_record(info, stepped, done, terminated,
truncated, params)` (what `info` says of an episode that ended). `Arena` (every registered
variant) and the RL selector's `DecisionEnv` are environments; `BatchedArena` is a batched wrapper
over the arena's rules, and the learned bot's `BotArena` steps its lanes with one shared key draw.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from .checks import check_key


class Environment:
    """A single-arena environment: `reset(key, params=None)` and `step(key, state, action, params=None)`
    (see the module docstring for what a subclass writes)."""

    @property
    def default_params(self) -> Any:
        raise NotImplementedError

    def reset_env(self, key: jax.Array, params) -> tuple[Any, Any]:
        raise NotImplementedError

    def step_env(self, key: jax.Array, state, action, params):
        raise NotImplementedError

    def observe(self, state, params) -> Any:
        raise NotImplementedError

    def next_episode(self, key: jax.Array, state, params):
        raise NotImplementedError

    def checked_params(self, params):
        """The params a call plays: `params`, or the default ones where it is None."""
        return self.default_params if params is None else params

    def checked_action(self, action):
        return action

    def episode_record(self, info: dict, stepped, done, terminated, truncated, params) -> dict:
        """`info` with what it says of an episode that ended this step (nothing more by default)."""
        return info

    def reset(self, key: jax.Array, params=None):
        """A fresh episode: (obs, state)."""
        check_key(key, "reset's key")
        return self.reset_env(key, self.checked_params(params))

    def step(self, key: jax.Array, state, action, params=None):
        """One step: (obs, state, reward, done, info); an episode that ends here is replaced by the next
        one (`next_episode`, drawn from `key`), and `info` records how it ended (`episode_record`)."""
        check_key(key, "step's key")
        params = self.checked_params(params)
        return self.step_lane(key, state, self.checked_action(action), params)

    def step_lane(self, key: jax.Array, state, action, params):
        """`step` without its checks: what a batched caller vmaps over lanes."""
        stepped, reward, terminated, truncated, info = self.step_env(key, state, action, params)
        done = terminated | truncated
        info = self.episode_record(info, stepped, done, terminated, truncated, params)
        next_state = jax.tree.map(
            lambda new, old: jnp.where(done, new, old), self.next_episode(key, state, params), stepped
        )
        return self.observe(next_state, params), next_state, reward, done, info
