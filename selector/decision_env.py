"""The 5 s decision MDP the selector is trained on: one step is one decision period of the arena.

A step takes the selector's choice (an index into the LLM's candidates),
sets that tag, and lets the frozen squad policy play the period's 50 ticks.
The period is played by the one episode runner (`jaxarena.runner`), one
arena per lane continued with `Start`, so training meets exactly the game
the protocol evaluates. The reward is the team reward over the period
(Combination A's: damage to the bot, +1 for the kill, -1 for a wipe; the
population's params keep the Table 5 shaping off). An episode that ends is
replaced by a new one against an opponent drawn from the population.

Its params are that `Population`: `reset(key, params)` and
`step(key, state, action, params)` take one (the constructor's by default),
as the arena takes its `EnvParams`. With `num_envs=None` it is one unbatched
lane, the gymnax way, and `jaxarena.make("SelectorDecision-v0", squad=...)`
builds it so; an unbatched lane plays exactly lane 0 of a batch of one on
the same keys.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxarena.checks import check_key, check_range
from jaxarena.env import Arena
from jaxarena.environment import Environment
from jaxarena.llm.history import DecisionHistory, empty_history, push
from jaxarena.names import BOT_TYPES, NPC_WIN
from jaxarena.observe import llm_features
from jaxarena.policies import refuse_memory
from jaxarena.runner import Start, make_runner, schedule_of
from jaxarena.spaces import Box, Discrete, Tree
from jaxarena.tag_sources import hold_tags
from jaxarena.types import EnvParams, EnvState

from .inputs import CANDIDATE_SIZE, STATE_SIZE, InputConfig, LLMAdvice, SelectorObs, selector_inputs
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


class DecisionEnv(Environment):
    """Batched, auto-resetting decision-level arena for `algorithms.ppo_core` (one unbatched lane if num_envs is None).

    Args:
      arena: the squad policy's arena variant (its observation layout).
      squad_policy, squad_params: the frozen tag-conditioned squad (B).
      population: the opponents; episodes draw theirs by weight. The default params.
      table: the LLM's `StrategyTable`.
      inputs: which LLM outputs the selector sees.
      num_envs: lanes in the batch; None for one unbatched lane.

    Batched, the state is a `DecisionEnvState` (lanes and the population);
    unbatched, it is the lane's `DecisionState` alone, and the population
    comes from `params`. A population passed as params must share the
    constructor's dt, decision period and episode length (the compiled
    period's length). The observation is a `SelectorObs`, the action the
    index of the chosen candidate, in 0..inputs.choosable - 1. One lane is an
    `Environment` (`reset_env`, `step_env`, `next_episode`), whose `step_lane`
    the batched `step` vmaps.
    """

    name = "SelectorDecision-v0"

    def __init__(
        self,
        arena: Arena,
        squad_policy,
        squad_params,
        population: Population,
        table,
        inputs: InputConfig,
        num_envs: int | None,
    ):
        if num_envs is not None and (isinstance(num_envs, bool) or int(num_envs) != num_envs or num_envs < 1):
            raise ValueError(f"num_envs must be a positive int (or None for one unbatched lane), got {num_envs!r}")
        # Each decision restarts the runner from the stored state, which holds no squad memory.
        refuse_memory(squad_policy, "the RL selector's decision env")
        self.arena, self.squad_params, self.population = arena, squad_params, population  # the initial population
        self.table, self.inputs = table, inputs
        self.num_envs = None if num_envs is None else int(num_envs)
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

    def step_env(self, key, ds: DecisionState, action, population: Population):
        """One decision period of one lane, never a reset: (state, reward, terminated, truncated, info)."""
        del key  # the period plays on the episode's own key, so it is the runner's episode decision by decision
        tag = ds.advice.tags[action]
        start = Start(jax.tree.map(lambda x: x[None], ds.arena), ds.period)
        result = self._play(self.squad_params, ds.params, ds.key, initial_tag=tag, start=start)
        arena = jax.tree.map(lambda x: x[0], result.final_state)
        outcome = result.outcome[0]
        done = outcome != 0
        period = ds.period + 1
        history = push(ds.history, arena, ds.params)
        _, advice = self._observe(arena, history, ds.params, period)
        continued = DecisionState(arena, history, ds.params, ds.member, period, ds.key, advice)
        win = (outcome == NPC_WIN).astype(jnp.float32)
        info = {"win": win, "duration_s": result.duration_s[0], "damage_dealt": arena.damage_dealt}
        # Per bot type (a scripted bot with its variants, or the learned bots): the host
        # divides win/<bot> by episodes/<bot> (both means over ended episodes).
        for code, bot in enumerate(BOT_TYPES + ("learned",)):
            is_bot = (ds.params.bot_type == code).astype(jnp.float32)
            info[f"win/{bot}"], info[f"episodes/{bot}"] = win * is_bot, is_bot
        return continued, result.team_return[0], done, jnp.zeros_like(done), info

    def observe(self, ds: DecisionState, population: Population):
        return self._observe(ds.arena, ds.history, ds.params, ds.period)[0]

    def reset_env(self, key: jax.Array, population: Population):
        state, obs = self._new_episode(population, key)
        return obs, state

    def next_episode(self, key: jax.Array, ds: DecisionState, population: Population) -> DecisionState:
        """A fresh episode against an opponent drawn from `population`."""
        return self._new_episode(population, key)[0]

    @property
    def batched(self) -> bool:
        return self.num_envs is not None

    @property
    def default_params(self) -> Population:
        return self.population

    def _lead(self) -> tuple[int, ...]:
        return (self.num_envs,) if self.batched else ()

    def observation_space(self, params: Population | None = None) -> Tree:
        """A `SelectorObs` of spaces. The state's entries lie in [-1, sqrt 2]: the bot's approach runs
        from -1, and a distance over the arena's side reaches its diagonal; candidates lie in [0, 1]."""
        lead, k = self._lead(), self.inputs.proposals
        return Tree(
            SelectorObs(
                state=Box(-1.0, np.sqrt(2.0), lead + (STATE_SIZE,), jnp.float32),
                candidates=Box(0.0, 1.0, lead + (k, CANDIDATE_SIZE), jnp.float32),
                valid=Discrete(2, shape=lead + (k,), dtype=jnp.bool_),
            )
        )

    def action_space(self, params: Population | None = None) -> Discrete:
        """The chosen candidate's index, one per lane."""
        return Discrete(self.inputs.choosable, shape=self._lead(), dtype=jnp.int32)

    def reset(self, key: jax.Array, params: Population | None = None):
        """(obs, state) of fresh episodes against opponents drawn from `params` (default: the constructor's)."""
        check_key(key, "reset's key")
        population = self.checked_params(params)
        keys = jax.random.split(key, self.num_envs or 1)
        if not self.batched:
            return self.reset_env(keys[0], population)
        obs, lanes = jax.vmap(self.reset_env, in_axes=(0, None))(keys, population)
        return obs, DecisionEnvState(lanes, population)

    def step(self, key, state, action, params: Population | None = None):
        """One decision period of every lane: (obs, state, reward, done, info); ended episodes restart.

        Batched, the population is `params` if given, else the state's own (which
        the trainer may have refilled); unbatched, `params` or the constructor's.
        """
        check_key(key, "step's key")
        raw, action = action, jnp.asarray(action)
        if action.shape != self._lead() or not jnp.issubdtype(action.dtype, jnp.integer):
            raise ValueError(
                f"action must be integers of shape {self._lead()}, a candidate index per lane, "
                f"got {action.dtype}{list(action.shape)}"
            )
        check_range(raw, self.inputs.choosable, "the chosen candidate's index")
        keys = jax.random.split(key, self.num_envs or 1)
        if not self.batched:
            return self.step_lane(keys[0], state, action, self.checked_params(params))
        population = state.population if params is None else params
        step_lanes = jax.vmap(self.step_lane, in_axes=(0, 0, 0, None))
        obs, lanes, reward, done, info = step_lanes(keys, state.lanes, action, population)
        return obs, DecisionEnvState(lanes, population), reward, done, info


def make_decision_env(
    squad=None,
    *,
    bot: str | int | None = None,
    scenario: str = "paper",
    table="smollm2-135m",
    inputs: InputConfig | None = None,
    variants: bool = True,
    **overrides,
) -> tuple[DecisionEnv, Population]:
    """`jaxarena.make("SelectorDecision-v0", squad=...)`: one unbatched `DecisionEnv` and its population.

    `squad` is required: a shipped policy's name (the shipped selectors train
    with "B-experts") or a run directory (loaded with
    `jaxarena.algorithms.checkpoint.load_policy`), or a `(policy, params)`
    pair. `table` is the LLM's `StrategyTable` or its name or path
    (`jaxarena.llm.strategy_table.load_table`; default the shipped one).
    The population is the three scripted bots on
    `jaxarena.make(policy.env_id, scenario=scenario, **overrides)`'s rules,
    and with `variants` their faster, slower and scenario variants
    (`selector.population.make_population`; learned-bot slots need a trained
    bot, so this builder leaves them out). `inputs` defaults to `InputConfig()`.
    """
    from jaxarena.bot_arena import resolve_squad
    from jaxarena.registry import make

    from .population import make_population

    if bot is not None:
        raise ValueError("SelectorDecision-v0 draws its opponents from a population; pass no bot")
    policy, squad_params = resolve_squad(squad, "SelectorDecision-v0", example="B-experts")
    if isinstance(table, (str, os.PathLike)):
        from jaxarena.llm.strategy_table import load_table

        table = load_table(table)
    arena, base = make(getattr(policy, "env_id", "Arena-v0"), scenario=scenario, **overrides)
    population = make_population(base, variants=variants)
    env = DecisionEnv(arena, policy, squad_params, population, table, inputs or InputConfig(), num_envs=None)
    return env, population
