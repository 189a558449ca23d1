"""Wrappers: episode logging, and a JaxMARL-compatible multi-agent view.

Every wrapper passes the attributes it does not define through to the env it
wraps (`GymnaxWrapper.__getattr__`, as gymnax's wrappers do), so
`LogWrapper(env).obs_size`, `.agents`, `.observation_space(params)` and the
like keep working however deep the wrapping.

`LogWrapper` keeps running and last-finished episode statistics in the state,
so a jitted training loop can report returns, lengths and outcomes.

`MultiAgentArena` speaks JaxMARL's `MultiAgentEnv` interface (dict
observations, actions, rewards and dones keyed by agent name, `dones["__all__"]`,
`observation_space(agent)`, `action_space(agent)`, `get_avail_actions`,
params bound at construction), so JaxMARL's IPPO/MAPPO baselines run on the
arena with only the env constructor changed. It does not import jaxmarl.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from .env import Arena, observation_low
from .names import NUM_ACTIONS, NUM_NPCS
from .spaces import Box, Discrete
from .types import EnvParams, EnvState


class GymnaxWrapper:
    """Base of the wrappers: holds the wrapped env as `_env` and passes unknown attributes through to it."""

    def __init__(self, env):
        self._env = env

    def __getattr__(self, name: str):
        # Only called for names the wrapper lacks. `_env` itself and dunders are never delegated,
        # so copying or unpickling a half-built wrapper fails cleanly instead of recursing.
        if name == "_env" or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._env, name)


@struct.dataclass
class LogState:
    env_state: EnvState
    episode_returns: jax.Array  # (5,) running return of each NPC
    episode_length: jax.Array  # () ticks so far
    returned_episode_returns: jax.Array  # (5,) of the last finished episode
    returned_episode_length: jax.Array  # () ticks
    returned_episode_outcome: jax.Array  # () 1 NPC win, 2 bot win, 3 timeout (0 before any)


class LogWrapper(GymnaxWrapper):
    """Adds episode returns, lengths and outcomes to `info` (PureJaxRL style) of an `Arena`.

    info gains: "returned_episode" (bool, an episode ended on this step),
    "returned_episode_returns" (5,), "returned_episode_lengths" (ticks),
    "returned_episode_seconds", "returned_episode_outcome"; each holds the
    most recently *finished* episode, so averaging them where
    "returned_episode" is true gives per-episode statistics. "timestep" is
    the step's place in its episode: 1 on an episode's first step, the
    episode's length on its last. (PureJaxRL's "timestep" counts steps since
    the wrapper's reset, across episodes; this one restarts with each episode,
    and keeps the state, and so training checkpoints, as they were.)
    """

    def __init__(self, env: Arena):
        super().__init__(env)

    def reset(self, key: jax.Array, params: EnvParams | None = None):
        obs, env_state = self._env.reset(key, params)
        zero = jnp.zeros((NUM_NPCS,), jnp.float32)
        return obs, LogState(env_state, zero, jnp.int32(0), zero, jnp.int32(0), jnp.int32(0))

    def step(self, key: jax.Array, state: LogState, actions, params: EnvParams | None = None):
        params = self._env.default_params if params is None else params
        obs, env_state, reward, done, info = self._env.step(key, state.env_state, actions, params)
        returns = state.episode_returns + reward
        length = state.episode_length + 1
        state = LogState(
            env_state=env_state,
            episode_returns=jnp.where(done, 0.0, returns),
            episode_length=jnp.where(done, 0, length),
            returned_episode_returns=jnp.where(done, returns, state.returned_episode_returns),
            returned_episode_length=jnp.where(done, length, state.returned_episode_length),
            returned_episode_outcome=jnp.where(done, info["outcome"], state.returned_episode_outcome),
        )
        info = dict(info)
        info.update(
            returned_episode=done,
            returned_episode_returns=state.returned_episode_returns,
            returned_episode_lengths=state.returned_episode_length,
            returned_episode_seconds=state.returned_episode_length.astype(jnp.float32) * params.dt,
            returned_episode_outcome=state.returned_episode_outcome,
            timestep=length,
        )
        return obs, state, reward, done, info

    def set_tag(self, state: LogState, tag) -> LogState:
        return state.replace(env_state=self._env.set_tag(state.env_state, tag))

    def retag(self, obs: jax.Array, state: LogState, tag, params: EnvParams | None = None):
        obs, env_state = self._env.retag(obs, state.env_state, tag, params)
        return obs, state.replace(env_state=env_state)


class MultiAgentArena(GymnaxWrapper):
    """The arena through JaxMARL's `MultiAgentEnv` interface.

    Agents are "npc_0" ... "npc_4". Per-agent dones are true once that NPC
    is dead or the episode is over; `dones["__all__"]` ends the episode. Every
    entry of `infos` has shape (num_agents,), which is what JaxMARL's
    baselines reshape to (num_actors,). `world_state=True` also puts a
    global state (all five observations concatenated) under obs["world_state"]
    for centralised critics (MAPPO).
    """

    def __init__(self, env: Arena | None = None, params: EnvParams | None = None, world_state: bool = False):
        super().__init__(env if env is not None else Arena())
        self.params = params if params is not None else self._env.default_params
        self.num_agents = NUM_NPCS
        self.agents = [f"npc_{i}" for i in range(NUM_NPCS)]
        self.world_state = world_state
        self.obs_size = self._env.obs_size
        # Table 3's floats lie in [0, 1]; the facing and slot features in [-1, 1].
        low = observation_low(self.obs_size)
        self.observation_spaces = {a: Box(low, 1.0, (self.obs_size,)) for a in self.agents}
        self.action_spaces = {a: Discrete(NUM_ACTIONS) for a in self.agents}

    @property
    def name(self) -> str:
        return f"jaxarena.{self._env.env_id}"

    @property
    def agent_classes(self) -> dict:
        return {"npc": list(self.agents)}

    def _check_agent(self, agent: str) -> str:
        if agent not in self.agents:
            raise ValueError(f"no agent {agent!r}; the agents are {', '.join(self.agents)}")
        return agent

    def observation_space(self, agent: str) -> Box:
        return self.observation_spaces[self._check_agent(agent)]

    def action_space(self, agent: str) -> Discrete:
        return self.action_spaces[self._check_agent(agent)]

    def world_state_size(self) -> int:
        return NUM_NPCS * self.obs_size

    def _obs_dict(self, obs: jax.Array) -> dict[str, jax.Array]:
        out = {a: obs[i] for i, a in enumerate(self.agents)}
        if self.world_state:
            out["world_state"] = jnp.broadcast_to(obs.reshape(-1), (NUM_NPCS, NUM_NPCS * self.obs_size))
        return out

    def reset(self, key: jax.Array):
        obs, state = self._env.reset(key, self.params)
        return self._obs_dict(obs), state

    def get_obs(self, state: EnvState) -> dict[str, jax.Array]:
        return self._obs_dict(self._env.observe(state, self.params))

    def step(self, key: jax.Array, state: EnvState, actions: dict[str, Any], reset_state: EnvState | None = None):
        missing = [a for a in self.agents if a not in actions]
        unknown = [a for a in actions if a not in self.agents]
        if missing or unknown:  # the dict's keys are static, so this holds under jit too
            raise ValueError(
                f"actions needs one entry per agent ({', '.join(self.agents)}); "
                + "; ".join(
                    p for p in (f"missing {missing}" if missing else "", f"unknown {unknown}" if unknown else "") if p
                )
                + " (a dead NPC's action is ignored: pass any, e.g. 0)"
            )
        # Not cast: env.step refuses float (and NaN) actions, and concrete ones out of range, in its own words.
        stacked = jnp.stack([jnp.asarray(actions[a]).reshape(()) for a in self.agents])
        obs, next_state, reward, done, info = self._env.step(key, state, stacked, self.params)
        if reset_state is not None:
            next_state = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_state, next_state)
            obs = jnp.where(done, self._env.observe(reset_state, self.params), obs)
        dead = next_state.npc_hp <= 0.0
        dones = {a: dead[i] | done for i, a in enumerate(self.agents)}
        dones["__all__"] = done
        rewards = {a: reward[i] for i, a in enumerate(self.agents)}
        # final_obs is per-episode, not per-agent, so it can't take JaxMARL's shape.
        infos = {k: jnp.broadcast_to(v, (NUM_NPCS,)) for k, v in info.items() if k != "final_obs"}
        return self._obs_dict(obs), next_state, rewards, dones, infos

    def get_avail_actions(self, state: EnvState) -> dict[str, jax.Array]:
        """Every action is always legal (an unusable one is a no-op)."""
        return {a: jnp.ones((NUM_ACTIONS,), bool) for a in self.agents}
