"""The 5 s decision MDP the selector is trained on: one step is one decision period of the arena.

A step takes the selector's choice (an index into the LLM's candidates),
sets that tag, and lets the frozen squad policy play the period's 50 ticks.
The period is played by the one episode runner (`jaxarena.runner`), one
arena per lane continued with `Start`, so training meets exactly the game
the protocol evaluates. The reward is the team reward over the period
(Combination A's: damage to the bot, +1 for the kill, -1 for a wipe; the
population's params keep the Table 5 shaping off). An episode that ends is
replaced by a new one against an opponent drawn from the population.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxarena.env import Arena
from jaxarena.history import DecisionHistory, empty_history, push
from jaxarena.names import BOT_TYPES, NPC_WIN
from jaxarena.observe import llm_features
from jaxarena.runner import Start, hold_tags, make_runner, schedule_of
from jaxarena.types import EnvParams, EnvState

from .inputs import InputConfig, LLMAdvice, SelectorObs, selector_inputs
from .population import Population


@struct.dataclass
class DecisionState:
    """Every lane's game between decisions; leaves (num_envs, ...)."""

    arena: EnvState
    history: DecisionHistory
    params: EnvParams  # the lane's opponent
    member: jax.Array  # population index of the opponent
    period: jax.Array  # decision periods played in this episode
    key: jax.Array  # the episode's key: its spawn and every tick's randomness
    advice: LLMAdvice  # what the LLM proposed at this decision


@struct.dataclass
class DecisionEnvState:
    """The lanes, and the population new episodes draw from: state, not a constant of the
    compiled program, so the trainer can fill a learned-bot slot between updates."""

    lanes: DecisionState
    population: Population


class DecisionEnv:
    """Batched, auto-resetting decision-level arena for `algorithms.ppo_core`.

    Args:
      arena: the squad policy's arena variant (its observation layout).
      squad_policy, squad_params: the frozen tag-conditioned squad (B).
      population: the opponents; episodes draw theirs by weight.
      table: the LLM's `StrategyTable`.
      inputs: which LLM outputs the selector sees.
    """

    def __init__(
        self,
        arena: Arena,
        squad_policy,
        squad_params,
        population: Population,
        table,
        inputs: InputConfig,
        num_envs: int,
    ):
        self.arena, self.squad_params, self.population = arena, squad_params, population  # the initial population
        self.table, self.inputs, self.num_envs = table, inputs, int(num_envs)
        members = [jax.tree.map(lambda x, i=i: np.asarray(x[i]), population.params) for i in range(population.size)]
        schedules = {schedule_of(member) for member in members}
        if len(schedules) != 1:
            raise ValueError(f"population members must share dt, decision period and episode length; got {schedules}")
        self.steps_per_period, self.num_periods, self.period_s = schedules.pop()
        self._play = make_runner(arena, members[0], squad_policy, hold_tags, num_episodes=1, num_periods=1)

    def _observe(self, state: EnvState, history: DecisionHistory, params: EnvParams, period):
        features = llm_features(state, params)
        time_s = period.astype(jnp.float32) * self.period_s
        return selector_inputs(self.table, history, features, state.tag, time_s, params, self.inputs)

    def _new_episode(self, population: Population, key: jax.Array):
        k_member, k_episode = jax.random.split(key)
        params, member = population.sample(k_member)
        # The runner's own key schedule (episode key = split(key, 1)[0], reset key = fold_in(., 0)),
        # so an episode played decision by decision is the runner's episode on the same key.
        _, state = self.arena.reset(jax.random.fold_in(jax.random.split(k_episode, 1)[0], 0), params)
        history = push(empty_history(state), state, params)
        period = jnp.int32(0)
        obs, advice = self._observe(state, history, params, period)
        return DecisionState(state, history, params, member.astype(jnp.int32), period, k_episode, advice), obs

    def reset(self, key: jax.Array) -> tuple[SelectorObs, DecisionEnvState]:
        keys = jax.random.split(key, self.num_envs)
        lanes, obs = jax.vmap(self._new_episode, in_axes=(None, 0))(self.population, keys)
        return obs, DecisionEnvState(lanes, self.population)

    def _step_one(self, population: Population, key, ds: DecisionState, action):
        tag = ds.advice.tags[action]
        start = Start(jax.tree.map(lambda x: x[None], ds.arena), ds.period)
        result = self._play(self.squad_params, ds.params, ds.key, initial_tag=tag, start=start)
        arena = jax.tree.map(lambda x: x[0], result.final_state)
        outcome = result.outcome[0]
        done = outcome != 0
        period = ds.period + 1
        history = push(ds.history, arena, ds.params)
        obs, advice = self._observe(arena, history, ds.params, period)
        continued = DecisionState(arena, history, ds.params, ds.member, period, ds.key, advice)
        fresh, fresh_obs = self._new_episode(population, key)
        pick = lambda new, old: jnp.where(done, new, old)  # noqa: E731
        next_state = jax.tree.map(pick, fresh, continued)
        next_obs = jax.tree.map(pick, fresh_obs, obs)
        win = (outcome == NPC_WIN).astype(jnp.float32)
        info = {"win": win, "duration_s": result.duration_s[0], "damage_dealt": arena.damage_dealt}
        # Per bot type (a scripted bot with its variants, or the learned bots): the host
        # divides win/<bot> by episodes/<bot> (both means over ended episodes).
        for code, bot in enumerate(BOT_TYPES + ("learned",)):
            is_bot = (ds.params.bot_type == code).astype(jnp.float32)
            info[f"win/{bot}"], info[f"episodes/{bot}"] = win * is_bot, is_bot
        return next_obs, next_state, result.team_return[0], done, info

    def step(self, key, state: DecisionEnvState, action):
        keys = jax.random.split(key, self.num_envs)
        step_one = jax.vmap(self._step_one, in_axes=(None, 0, 0, 0))
        obs, lanes, reward, done, info = step_one(state.population, keys, state.lanes, action)
        return obs, DecisionEnvState(lanes, state.population), reward, done, info
