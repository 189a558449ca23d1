"""The arena from the bot's side: a single-agent environment for training a learned bot.

    squad, squad_params = load_policy("B-paper")      # jaxarena.algorithms.checkpoint
    env = BotArena(squad, squad_params, env_params, num_envs=64)
    obs, state = env.reset(key)                       # obs (num_envs, BOT_OBS_SIZE)
    obs, state, reward, done, info = env.step(key, state, action)   # action (num_envs,) int32

With `num_envs=None` it is one unbatched arena, the gymnax way (vmap it for a
batch), and `jaxarena.make("BotArena-v0", squad=...)` builds it so:

    env, params = jaxarena.make("BotArena-v0", squad="B-paper")
    obs, state = env.reset(key, params)                                 # obs (BOT_OBS_SIZE,)
    obs, state, reward, done, info = env.step(key, state, action, params)   # action () int32

An unbatched arena plays exactly lane 0 of a batch of one on the same keys.
`params` (optional everywhere; the constructor's by default) are the arena's
`EnvParams`; whatever their bot, it is the learned one, driven by `action`.

The bot is the learner: each tick it picks one of `NUM_BOT_ACTIONS` moves
(`jaxarena.learned_bot`), and strikes by the scripted rule. The squad is a
frozen NPC policy `policy(params, obs (5, obs_size), key) -> actions (5,)`,
e.g. the shipped B. Its strategy tag is redrawn uniformly from `tags` at
every decision period (`decision_period_s`, 5 s) through `Arena.retag`, so the
bot meets every squad strategy, switched as a tag source would switch them.

Reward per tick (bot's view): damage dealt to the squad / (5 x npc_hp) minus
damage taken / bot_hp, plus `WIPE_REWARD` (+1) on the tick the squad is wiped
out and `DEATH_PENALTY` (-1) on the tick the bot dies (both on one tick counts
as the bot dying, as the arena scores it). Over a whole episode the damage terms
lie in [-1, 1].

`approach_shaping` > 0 adds potential-based shaping (Ng et al., 1999), which
leaves the best policy unchanged: gamma x phi(next) - phi(now), with phi =
-approach_shaping x (distance to the nearest living NPC beyond the bot's melee
range) / arena diagonal, and phi = 0 once the episode has ended. The squad
keeps away from a bot that does not come to it (the paper recipe's B-paper does), so a
bot exploring at random almost never lands a strike; the shaping leads it
in. `info["episode_return"]` sums the unshaped reward, so runs with and
without shaping compare.

Episodes auto-reset. `info` entries are (num_envs,) (scalars unbatched) and are meaningful on the
ticks an episode ends (zero elsewhere): `bot_win`, `npc_win`, `timeout`
(1.0 for the way it ended), `damage_dealt` and `damage_taken` (the bot's, over
the episode, in HP), `episode_return` and `episode_s`. A timeout ends the game
as a win or a wipe does, so `done` needs no bootstrap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from .checks import check_key, check_range, checked_actions
from .learned_bot import BOT_OBS_SIZE, NUM_BOT_ACTIONS, bot_observation
from .names import BOT_LEARNED, NUM_NPCS, NUM_TAGS
from .physics import norm
from .policies import refuse_memory
from .registry import OBSERVATIONS, arena_for, make
from .spaces import Box, Discrete
from .spawn import initial_state
from .types import EnvParams, EnvState, arena_diagonal, ticks

WIPE_REWARD = 1.0
DEATH_PENALTY = -1.0


@struct.dataclass
class BotArenaState:
    """The batch's arenas and what the bot's side keeps between ticks; leaves lead with num_envs."""

    env: EnvState
    squad_obs: jax.Array  # (num_envs, 5, obs_size), the squad's observation, tag slot current
    episode_return: jax.Array  # (num_envs,) float32, the bot's reward so far this episode


def approach_potential(state: EnvState, params: EnvParams) -> jax.Array:
    """() float32: -(distance to the nearest living NPC beyond the bot's melee range) / arena diagonal."""
    dist = jnp.where(state.npc_hp > 0.0, norm(state.npc_pos - state.bot_pos), jnp.inf)
    gap = jnp.maximum(jnp.min(dist) - params.bot_melee_range, 0.0)
    return jnp.where(jnp.isfinite(gap), -gap / arena_diagonal(params), 0.0).astype(jnp.float32)


def bot_reward(state: EnvState, stepped: EnvState, params: EnvParams) -> jax.Array:
    """() float32: the bot's reward for the tick from `state` to `stepped` (module docstring)."""
    dealt = jnp.sum(state.npc_hp - stepped.npc_hp) / (NUM_NPCS * params.npc_hp)
    taken = (state.bot_hp - stepped.bot_hp) / params.bot_hp
    died = stepped.bot_hp <= 0.0
    wiped = jnp.all(stepped.npc_hp <= 0.0) & ~died
    return (dealt - taken + WIPE_REWARD * wiped + DEATH_PENALTY * died).astype(jnp.float32)


def _lane0(tree):
    return jax.tree.map(lambda x: x[0], tree)


def _batch_of_one(tree):
    return jax.tree.map(lambda x: x[None], tree)


class BotArena:
    """`num_envs` arenas (one unbatched if None) where the learner is the bot and a frozen squad plays the NPCs.

    See the module docstring. Spaces (`jaxarena.spaces`): observations are a
    `Box` in [-1, 1] of shape (num_envs, BOT_OBS_SIZE), actions a
    `Discrete(NUM_BOT_ACTIONS)` of shape (num_envs,); without the leading
    axis when unbatched.
    """

    num_actions = NUM_BOT_ACTIONS
    obs_size = BOT_OBS_SIZE
    name = "BotArena-v0"

    def __init__(
        self,
        squad_policy: Callable,
        squad_params: Any,
        env_params: EnvParams,
        num_envs: int | None,
        env_id: str | None = None,
        tags: tuple[int, ...] = tuple(range(NUM_TAGS)),
        approach_shaping: float = 0.0,
        gamma: float = 0.99,
        stagger: bool = False,
    ):
        """`env_id` is the arena variant whose observation the squad reads; default
        `squad_policy.env_id` ("Arena-v0" if it has none). `env_params` gives the
        rules (a scenario's, e.g. `jaxarena.make("Arena-v0", scenario="headroom")[1]`);
        its bot becomes the learned one, driven by the actions passed to `step`.
        `tags` are the squad strategies drawn from; `approach_shaping` and
        `gamma` (the learner's discount) set the shaping of the module docstring.
        `stagger` starts each arena's first episode at a random tick (its clock,
        which the bot observes, runs from there), so the batch does not play
        every episode in lockstep: a learner's update then sees all phases of
        a fight rather than the same few seconds of each. `num_envs=None`
        makes one unbatched arena (no leading axis anywhere).
        """
        refuse_memory(squad_policy, "the learned bot's arena")  # its state holds no squad memory
        if num_envs is not None and (
            isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1
        ):
            raise ValueError(f"num_envs must be a positive int (or None for one unbatched arena), got {num_envs!r}")
        env_id = env_id or getattr(squad_policy, "env_id", "Arena-v0")
        if env_id not in OBSERVATIONS:
            raise ValueError(f"unknown env id {env_id!r}; the squad can read {', '.join(OBSERVATIONS)}")
        tags = tuple(int(t) for t in tags)
        if not tags or any(not 0 <= t < NUM_TAGS for t in tags):
            raise ValueError(f"tags must be a non-empty tuple of codes in 0..{NUM_TAGS - 1}, got {tags}")
        period = float(np.asarray(env_params.decision_period_s)) / float(np.asarray(env_params.dt))
        if round(period) < 1 or abs(period - round(period)) > 1e-6:
            raise ValueError("decision_period_s must be a whole, positive number of ticks of dt")
        self.num_envs = None if num_envs is None else int(num_envs)
        self.params = as_bot_side(env_params)
        self.arena = arena_for(env_id, self.params)
        self.squad_policy = squad_policy
        self.squad_params = squad_params
        self.tags = jnp.asarray(tags, jnp.int32)
        self.period_ticks = int(round(period))
        if not (np.isfinite(approach_shaping) and approach_shaping >= 0.0) or not 0.0 <= gamma <= 1.0:
            raise ValueError(f"need approach_shaping >= 0 and gamma in [0, 1], got {approach_shaping}, {gamma}")
        self.approach_shaping = float(approach_shaping)
        self.gamma = float(gamma)
        self.stagger = bool(stagger)

    @property
    def batched(self) -> bool:
        return self.num_envs is not None

    @property
    def default_params(self) -> EnvParams:
        return self.params

    def _lead(self) -> tuple[int, ...]:
        return (self.num_envs,) if self.batched else ()

    def observation_space(self, params: EnvParams | None = None) -> Box:
        """Every entry of the bot's observation lies in [-1, 1] (`jaxarena.learned_bot`'s layout)."""
        return Box(-1.0, 1.0, self._lead() + (BOT_OBS_SIZE,), jnp.float32)

    def action_space(self, params: EnvParams | None = None) -> Discrete:
        """One of `NUM_BOT_ACTIONS` moves per arena (8 headings, then hold)."""
        return Discrete(NUM_BOT_ACTIONS, shape=self._lead(), dtype=jnp.int32)

    def _params(self, params: EnvParams | None) -> EnvParams:
        return self.params if params is None else as_bot_side(params)

    def _observe(self, state: EnvState, params: EnvParams) -> jax.Array:
        return jax.vmap(bot_observation, in_axes=(0, None))(state, params)

    def reset(self, key: jax.Array, params: EnvParams | None = None) -> tuple[jax.Array, BotArenaState]:
        """Fresh arenas: (obs (num_envs, BOT_OBS_SIZE), state). Tags are drawn on the first step."""
        check_key(key, "reset's key")
        params = self._params(params)
        obs, state = self._reset_batch(key, params, self.num_envs or 1)
        return (obs, state) if self.batched else (obs[0], _lane0(state))

    def step(self, key: jax.Array, state: BotArenaState, action: jax.Array, params: EnvParams | None = None):
        """One tick of every arena: (obs, state, reward, done, info), finished episodes reset."""
        check_key(key, "step's key")
        raw, action = action, jnp.asarray(action)
        if action.shape != self._lead() or not jnp.issubdtype(action.dtype, jnp.integer):
            want = f"of shape ({self.num_envs},), one in" if self.batched else "of shape (), a move in"
            raise ValueError(
                f"action must be int32 {want} 0..{NUM_BOT_ACTIONS - 1} per arena, "
                f"got {action.dtype}{list(action.shape)}"
            )
        check_range(raw, NUM_BOT_ACTIONS, "the bot's action")
        params = self._params(params)
        if self.batched:
            return self._step_batch(key, state, action, params, self.num_envs)
        out = self._step_batch(key, _batch_of_one(state), action[None], params, 1)
        return _lane0(out)

    def _reset_batch(self, key: jax.Array, params: EnvParams, n: int) -> tuple[jax.Array, BotArenaState]:
        k_reset, k_clock = jax.random.split(key)
        squad_obs, env_state = jax.vmap(self.arena.reset, in_axes=(0, None))(jax.random.split(k_reset, n), params)
        if self.stagger:
            last = ticks(params.episode_s, params.dt)
            env_state = env_state.replace(t=jax.random.randint(k_clock, (n,), 0, last, jnp.int32))
        state = BotArenaState(env_state, squad_obs, jnp.zeros((n,), jnp.float32))
        return self._observe(env_state, params), state

    def _step_batch(self, key: jax.Array, state: BotArenaState, action: jax.Array, params: EnvParams, n: int):
        k_tag, k_squad, k_env = jax.random.split(key, 3)
        env_state = state.env
        # Traced from params (not the constructor's), so a caller's params set the tag period too.
        period = jnp.maximum(ticks(params.decision_period_s, params.dt), 1)

        # A new squad strategy at each decision point, the episode's first tick included.
        drawn = self.tags[jax.random.randint(k_tag, (n,), 0, self.tags.shape[0])]
        tag = jnp.where(env_state.t % period == 0, drawn, env_state.tag)
        squad_obs, env_state = jax.vmap(self.arena.retag, in_axes=(0, 0, 0, None))(
            state.squad_obs, env_state, tag, params
        )
        squad_act = jax.vmap(lambda o, k: checked_actions(self.squad_policy(self.squad_params, o, k)))(
            squad_obs, jax.random.split(k_squad, n)
        )
        env_keys = jax.random.split(k_env, n)
        stepped, _, terminated, truncated, _ = jax.vmap(self.arena.step_env, in_axes=(0, 0, 0, None, 0))(
            env_keys, env_state, squad_act, params, action
        )
        game_reward = jax.vmap(bot_reward, in_axes=(0, 0, None))(env_state, stepped, params)
        done = terminated | truncated
        episode_return = state.episode_return + game_reward
        reward = game_reward
        if self.approach_shaping > 0.0:
            potential = jax.vmap(approach_potential, in_axes=(0, None))
            after = jnp.where(done, 0.0, potential(stepped, params))
            reward = reward + self.approach_shaping * (self.gamma * after - potential(env_state, params))

        # Auto-reset as `Arena.step` does: a fresh draw salted with the episode count.
        fresh = jax.vmap(lambda k, s: initial_state(k, params, salt=s.episode + 1).replace(episode=s.episode + 1))(
            env_keys, stepped
        )
        next_state = jax.tree.map(
            lambda a, b: jnp.where(done.reshape((-1,) + (1,) * (a.ndim - 1)), a, b), fresh, stepped
        )
        died = stepped.bot_hp <= 0.0
        wiped = jnp.all(stepped.npc_hp <= 0.0, axis=-1) & ~died
        ended = done.astype(jnp.float32)
        info = {
            "bot_win": ended * wiped,
            "npc_win": ended * died,
            "timeout": ended * (truncated & ~terminated),
            # EnvState counts from the squad's side: its damage_taken is what the bot dealt.
            "damage_dealt": ended * stepped.damage_taken,
            "damage_taken": ended * stepped.damage_dealt,
            "episode_return": ended * episode_return,
            "episode_s": ended * stepped.t.astype(jnp.float32) * params.dt,
        }
        next_squad_obs = jax.vmap(self.arena.observe, in_axes=(0, None))(next_state, params)
        new = BotArenaState(next_state, next_squad_obs, jnp.where(done, 0.0, episode_return))
        return self._observe(next_state, params), new, reward, done, info


def as_bot_side(params: EnvParams) -> EnvParams:
    """`params` with the learned bot in the bot's slot and no weights: the actions passed to `step` drive it."""
    return params.replace(bot_type=BOT_LEARNED, bot_weights=None)


def resolve_squad(squad, env_id: str, example: str = "B-paper"):
    """`(policy, params)` of a builder's `squad=`: a shipped policy's name or a run directory (loaded with
    `jaxarena.algorithms.checkpoint.load_policy`), or a `(policy, params)` pair. A clear error if missing."""
    if squad is None:
        raise TypeError(
            f"{env_id} needs the frozen squad that plays the NPCs: pass squad= a shipped policy's name "
            f"(e.g. {example!r}; docs/training.md lists them) or a run directory, loaded with "
            "jaxarena.algorithms.checkpoint.load_policy, or a (policy, params) pair such as "
            "(jaxarena.policies.focus_fire_policy, None)"
        )
    if isinstance(squad, tuple) and len(squad) == 2 and callable(squad[0]):
        return squad
    if isinstance(squad, str) or hasattr(squad, "__fspath__"):
        from jaxarena.algorithms.checkpoint import load_policy  # flax/orbax: only when a checkpoint is named

        return load_policy(squad)
    raise TypeError(f"squad must be a policy name, a run directory or a (policy, params) pair, got {squad!r}")


def make_bot_arena(
    squad=None,
    *,
    bot: str | int | None = None,
    scenario: str = "paper",
    squad_env_id: str | None = None,
    tags: tuple[int, ...] = tuple(range(NUM_TAGS)),
    approach_shaping: float = 0.0,
    gamma: float = 0.99,
    stagger: bool = False,
    **overrides,
) -> tuple[BotArena, EnvParams]:
    """`jaxarena.make("BotArena-v0", squad=...)`: one unbatched `BotArena` and its params.

    `squad` is required: a shipped policy's name ("B-paper") or a run directory
    (loaded with `jaxarena.algorithms.checkpoint.load_policy`), or a
    `(policy, params)` pair such as `(jaxarena.policies.focus_fire_policy, None)`.
    The rules are `jaxarena.make(squad_env_id, scenario=scenario, **overrides)`'s
    (`squad_env_id`: the arena whose observation the squad reads, by default
    its `policy.env_id`, else "Arena-v0"); the bot is always the learned one,
    driven by the actions passed to `step`. `tags`, `approach_shaping`,
    `gamma` and `stagger` are `BotArena`'s.
    """
    if bot is not None and bot != "learned" and bot != BOT_LEARNED:
        raise ValueError(f"BotArena-v0's bot is the learner, driven by step's actions; got bot={bot!r}")
    policy, squad_params = resolve_squad(squad, "BotArena-v0")
    env_id = squad_env_id or getattr(policy, "env_id", "Arena-v0")
    if env_id not in OBSERVATIONS:
        raise ValueError(f"unknown squad env id {env_id!r}; the squad can read {', '.join(OBSERVATIONS)}")
    _, params = make(env_id, scenario=scenario, **overrides)
    env = BotArena(
        policy,
        squad_params,
        params,
        None,
        env_id=env_id,
        tags=tags,
        approach_shaping=approach_shaping,
        gamma=gamma,
        stagger=stagger,
    )
    return env, env.params
