"""Opponent deduction (Combination C): which bot is this, and is the balanced one attacking now?

The Werewolf paper's agents first deduce hidden information, then act. Here the hidden
part is the opponent class (`jaxarena.llm.history.OPPONENT_CLASSES`), and the
evidence is the last three decision points of a `DecisionHistory`: how far the
nearest NPC is, and whether the bot closed in, held or ran since the point
before.

The LLM is far too slow to ask in-graph for every PPO decision, so each
history is quantised into one of `NUM_DEDUCTION_CELLS` cells, every cell is
put to the LLM once (`strategy_table.build_table`), and the jitted loop looks
the answer up. Per point there are 3 distance bins x 3 approach bins plus
"not seen"; the cell's three decimal digits are the three points' states,
oldest first (cell 999: nothing seen yet).

- `deduction_cell(history)`: pure JAX, the table key of a history.
- `deduction_prompt(cell)`: the prompt for a cell, written with each bin's
  representative distance, on the host.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from .history import APPROACH, HISTORY_LEN, NEAREST, OPPONENT_CLASSES, DecisionHistory
from .types import Prompt

#: Nearest-NPC distance bins, in arena units: < 4 (in melee reach soon), 4-10, >= 10.
DISTANCE_EDGES = (4.0, 10.0)
#: What a prompt says for a distance bin (a typical distance inside it).
DISTANCE_VALUES = (2.0, 7.0, 14.0)
#: Approach bins (`history.POINT_FEATURES`' bot_approach, a fraction of the bot's reach):
#: <= -0.2 moved away, between holding, >= 0.2 moved toward the squad.
APPROACH_EDGES = (-0.2, 0.2)
AWAY, HOLDING, TOWARD = range(3)
APPROACH_WORDS = ("the bot moved away from the squad", "the bot held its distance", "the bot moved toward the squad")

NUM_DISTANCE_BINS = len(DISTANCE_EDGES) + 1
NUM_APPROACH_BINS = len(APPROACH_EDGES) + 1
#: A point's state: distance bin x approach bin, plus one for a point not seen yet.
NOT_SEEN = NUM_DISTANCE_BINS * NUM_APPROACH_BINS
NUM_POINT_STATES = NOT_SEEN + 1
NUM_DEDUCTION_CELLS = NUM_POINT_STATES**HISTORY_LEN

#: How the prompts name each opponent class (indices of `OPPONENT_CLASSES`); the candidate
#: prompt's "Opponent assessment" line uses the same words.
OPPONENT_LABELS = (
    "aggressive bot (always chases the squad)",
    "evasive bot (always runs away)",
    "balanced bot, attacking now",
    "balanced bot, evading now",
)
assert len(OPPONENT_LABELS) == len(OPPONENT_CLASSES)

DEDUCTION_SYSTEM: str = (
    "You watch an enemy bot fighting a squad of NPC soldiers and work out which kind of bot it is. "
    "The squad sees it at decision points 5 s apart.\n"
    "Reply with exactly one digit: " + ", ".join(f"{i} = {label}" for i, label in enumerate(OPPONENT_LABELS)) + "."
)

#: When each history point was seen, oldest first (`HISTORY_LEN` points, 5 s apart).
POINT_TIMES = ("10 s ago", "5 s ago", "now")
assert len(POINT_TIMES) == HISTORY_LEN


def distance_bin(distance: jax.Array) -> jax.Array:
    """int32 bin of a nearest-NPC distance: 0 below `DISTANCE_EDGES[0]`, 1 below `[1]`, else 2."""
    d = jnp.asarray(distance, jnp.float32)
    return sum((d >= edge).astype(jnp.int32) for edge in DISTANCE_EDGES)


def approach_bin(approach: jax.Array) -> jax.Array:
    """int32 `AWAY` (<= -0.2), `HOLDING` or `TOWARD` (>= 0.2)."""
    a = jnp.asarray(approach, jnp.float32)
    low, high = APPROACH_EDGES
    return (a > low).astype(jnp.int32) + (a >= high).astype(jnp.int32)


def point_states(history: DecisionHistory) -> jax.Array:
    """(HISTORY_LEN,) int32: each point's state, `NOT_SEEN` where the point has not been seen."""
    dist = distance_bin(history.points[:, NEAREST])
    move = approach_bin(history.points[:, APPROACH])
    # A point right after an unseen one has no movement to read (history.push writes 0 there):
    # keep it in the holding bin whatever the array says, so such cells are one per distance.
    first_seen = jnp.concatenate([jnp.zeros((1,), bool), ~history.valid[:-1]])
    move = jnp.where(first_seen, HOLDING, move)
    return jnp.where(history.valid, dist * NUM_APPROACH_BINS + move, NOT_SEEN).astype(jnp.int32)


def deduction_cell(history: DecisionHistory) -> jax.Array:
    """() int32 in [0, NUM_DEDUCTION_CELLS): the table key of one arena's history (vmap for a batch)."""
    weights = NUM_POINT_STATES ** jnp.arange(HISTORY_LEN - 1, -1, -1, dtype=jnp.int32)
    return jnp.sum(point_states(history) * weights).astype(jnp.int32)


def cell_point_states(cell: int) -> tuple[int, ...]:
    """The three point states of a cell, oldest first (the inverse of `deduction_cell`'s packing)."""
    cell = int(cell)
    if not 0 <= cell < NUM_DEDUCTION_CELLS:
        raise ValueError(f"deduction cell must be in [0, {NUM_DEDUCTION_CELLS}), got {cell}")
    states = []
    for _ in range(HISTORY_LEN):
        cell, state = divmod(cell, NUM_POINT_STATES)
        states.append(state)
    return tuple(reversed(states))


def describe_point(state: int, previous_seen: bool) -> str:
    """One point in words: "nearest NPC 7.0 units away, the bot moved toward the squad"."""
    if state == NOT_SEEN:
        return "no data yet"
    dist, move = divmod(state, NUM_APPROACH_BINS)
    movement = APPROACH_WORDS[move] if previous_seen else "first sighting"
    return f"nearest NPC {DISTANCE_VALUES[dist]:.1f} units away, {movement}"


def deduction_prompt(cell: int) -> Prompt:
    """The deduction prompt of a cell (host side).

    The oldest point's movement is always described from its bin: whether the
    point before it was seen is no longer in the history.
    """
    states = cell_point_states(cell)
    parts = []
    for i, (when, state) in enumerate(zip(POINT_TIMES, states, strict=True)):
        previous_seen = i == 0 or states[i - 1] != NOT_SEEN
        parts.append(f"{when}: {describe_point(state, previous_seen)}")
    user = "The last three decision points, oldest first. " + "; ".join(parts) + "."
    return Prompt(system=DEDUCTION_SYSTEM, user=user)
