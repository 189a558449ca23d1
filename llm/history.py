"""What a player can read off the last few decision points: the input of opponent deduction.

The Werewolf agents of "Language Agents with Reinforcement Learning for Strategic Play in the Werewolf Game"
(Xu et al.) deduce hidden information before they act. In the arena the
hidden part is which bot the squad faces and, for the balanced bot, the mode
it is in. Neither is in the Table 10 state, but both show in how the bot moves
between decisions: the aggressive bot closes on the squad, the evasive one
runs, the balanced one alternates. So a `DecisionHistory` keeps, for the last
`HISTORY_LEN` decision points (5 s apart), a few features a player sees on
screen, the bot's approach to the squad among them.

Pure JAX, one arena at a time (vmap for a batch). `push` is called at every
decision point, before the tag source answers.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxarena.bots import MODE_EVASIVE
from jaxarena.names import BOT_AGGRESSIVE, BOT_BALANCED, BOT_EVASIVE
from jaxarena.physics import norm, safe_unit
from jaxarena.types import EnvParams, EnvState

HISTORY_LEN = 3

#: Per decision point, in this order:
#: nearest_distance: the nearest living NPC's distance to the bot, u;
#: bot_approach: the bot's move since the previous decision point towards the living squad's
#:   centroid there, as a fraction of what it could have run in that time (+1 straight at the
#:   squad at full speed, -1 straight away; 0 at the first point, where there is no previous);
#: bot_hp_frac, squad_hp_frac: HP left over max HP (the squad's summed over all five NPCs);
#: alive_frac: living NPCs over five.
POINT_FEATURES = ("nearest_distance", "bot_approach", "bot_hp_frac", "squad_hp_frac", "alive_frac")
NUM_POINT_FEATURES = len(POINT_FEATURES)
NEAREST, APPROACH, BOT_HP, SQUAD_HP, ALIVE = range(NUM_POINT_FEATURES)

#: What the deduction infers: the bot's style and, for the balanced bot, its mode now.
OPPONENT_CLASSES = ("aggressive", "evasive", "balanced_attacking", "balanced_evading")
NUM_OPPONENT_CLASSES = len(OPPONENT_CLASSES)


class DecisionHistory(NamedTuple):
    """The last `HISTORY_LEN` decision points of one arena, oldest first."""

    points: jax.Array  # (HISTORY_LEN, NUM_POINT_FEATURES) float32; zeros where not yet seen
    valid: jax.Array  # (HISTORY_LEN,) bool: the point has been seen
    bot_pos: jax.Array  # (2,) float32: the bot at the latest point
    centroid: jax.Array  # (2,) float32: the living squad's centroid at the latest point


def _centroid(state: EnvState) -> jax.Array:
    alive = (state.npc_hp > 0.0).astype(jnp.float32)
    return jnp.sum(state.npc_pos * alive[:, None], axis=0) / jnp.maximum(jnp.sum(alive), 1.0)


def empty_history(state: EnvState) -> DecisionHistory:
    """A history with no point seen yet (`push` the first decision point next)."""
    return DecisionHistory(
        points=jnp.zeros((HISTORY_LEN, NUM_POINT_FEATURES), jnp.float32),
        valid=jnp.zeros((HISTORY_LEN,), bool),
        bot_pos=state.bot_pos,
        centroid=_centroid(state),
    )


def blank_histories(num_episodes: int) -> DecisionHistory:
    """A batch of histories with no point seen: the initial carry of a tag source that keeps them.

    Unlike `empty_history`, it needs no state: `push` reads `bot_pos` and `centroid` only once a
    point is valid, so the first push records approach 0 whatever they hold.
    """
    n = num_episodes
    return DecisionHistory(
        points=jnp.zeros((n, HISTORY_LEN, NUM_POINT_FEATURES), jnp.float32),
        valid=jnp.zeros((n, HISTORY_LEN), bool),
        bot_pos=jnp.zeros((n, 2), jnp.float32),
        centroid=jnp.zeros((n, 2), jnp.float32),
    )


def point_features(history: DecisionHistory, state: EnvState, params: EnvParams) -> jax.Array:
    """(NUM_POINT_FEATURES,) float32: the features of the decision point `state`, given the history so far."""
    alive = state.npc_hp > 0.0
    dist = jnp.where(alive, norm(state.npc_pos - state.bot_pos), jnp.inf)
    nearest = jnp.where(jnp.any(alive), jnp.min(dist), 0.0)
    reach = params.bot_speed * params.decision_period_s
    toward = safe_unit(history.centroid - history.bot_pos)
    approach = jnp.sum((state.bot_pos - history.bot_pos) * toward) / reach
    approach = jnp.where(history.valid[-1], jnp.clip(approach, -1.0, 1.0), 0.0)
    return jnp.stack(
        [
            nearest,
            approach,
            state.bot_hp / params.bot_hp,
            jnp.sum(state.npc_hp) / (params.npc_hp * state.npc_hp.shape[0]),
            jnp.mean(alive.astype(jnp.float32)),
        ]
    ).astype(jnp.float32)


def push(history: DecisionHistory, state: EnvState, params: EnvParams) -> DecisionHistory:
    """The history with decision point `state` appended (the oldest point drops out)."""
    point = point_features(history, state, params)
    return DecisionHistory(
        points=jnp.concatenate([history.points[1:], point[None]]),
        valid=jnp.concatenate([history.valid[1:], jnp.ones((1,), bool)]),
        bot_pos=state.bot_pos,
        centroid=_centroid(state),
    )


def opponent_class(state: EnvState, params: EnvParams) -> jax.Array:
    """() int32: the truth the deduction is scored against, an index into `OPPONENT_CLASSES`;
    -1 for a bot outside them (the learned bot, `BOT_LEARNED`)."""
    bot_type = jnp.asarray(params.bot_type, jnp.int32)
    balanced = jnp.where(state.bot_mode == MODE_EVASIVE, 3, 2)
    by_type = [bot_type == BOT_AGGRESSIVE, bot_type == BOT_EVASIVE, bot_type == BOT_BALANCED]
    return jnp.select(by_type, [0, 1, balanced], -1).astype(jnp.int32)
