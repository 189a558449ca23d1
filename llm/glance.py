"""The glance prompt: what the squad's commander sees every 0.2 s, as a finite set of prompts.

Table 10's prompt holds five numbers taken every 5 s. On `raid` the gain
against the aggressive bot is in the first seconds, before the paper's first
decision can tell the bots apart (the look-first study, studies/look_first.py).
A glance is what a player sees at a much shorter period: how long the fight
has lasted, how far the nearest NPC is, and whether the bot closed in, held or
ran since the last glance. Each is binned, so there are `NUM_GLANCE_CELLS` prompts:

- time since the fight began: under `EARLY_S` seconds, or later;
- nearest-NPC distance bin and approach bin: `deduction`'s bins.

Every prompt is put to the LLM once per adapter (one forward pass over all
cells), and the rollout looks the answer up, as the deduction table does.
`glance_source` is that lookup: its carry holds one table (cell -> tag) per
episode, so a training step can play a different table in every lane
and an evaluation the same table in all of them, in one compiled rollout.

Pure JAX except `glance_prompts` (host text).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import NUM_TAGS, TAG_NAMES
from jaxarena.tag_sources import TagSource
from jaxarena.types import ticks

from .deduction import APPROACH_WORDS, DISTANCE_VALUES, NUM_APPROACH_BINS, NUM_DISTANCE_BINS, approach_bin, distance_bin
from .history import APPROACH, NEAREST, blank_histories, push

#: The decision period the prompt speaks of ("since the last look, 0.2 s ago").
GLANCE_PERIOD_S = 0.2
#: The fight's opening: where a glance at the bot's first moves is worth most (studies/look_first.py).
EARLY_S = 1.4
TIME_WORDS = (f"under {EARLY_S:g} s", f"{EARLY_S:g} s or more")
NUM_TIME_BINS = len(TIME_WORDS)
NUM_GLANCE_CELLS = NUM_TIME_BINS * NUM_DISTANCE_BINS * NUM_APPROACH_BINS
AGGRESSIVE = TAG_NAMES.index("Aggressive")

GLANCE_SYSTEM: str = (
    "You control a squad of NPC soldiers fighting an enemy bot. "
    f"You glance at the fight every {GLANCE_PERIOD_S:g} s and choose the squad's tactic.\n"
    "Reply with exactly one digit: " + ", ".join(f"{i} = {name}" for i, name in enumerate(TAG_NAMES)) + "."
)


def glance_cell(history, time_s: jax.Array, dt: jax.Array) -> jax.Array:
    """() int32: the cell of one arena's latest glance (its history `push`ed already).

    Time is compared in whole ticks, so float rounding of the clock cannot move
    a glance across `EARLY_S`.
    """
    point = history.points[-1]
    later = (ticks(time_s, dt) >= ticks(EARLY_S, dt)).astype(jnp.int32)
    cell = (later * NUM_DISTANCE_BINS + distance_bin(point[NEAREST])) * NUM_APPROACH_BINS
    return (cell + approach_bin(point[APPROACH])).astype(jnp.int32)


def cell_parts(cell: int) -> tuple[int, int, int]:
    """(time bin, distance bin, approach bin) of a cell."""
    rest, approach = divmod(int(cell), NUM_APPROACH_BINS)
    time, distance = divmod(rest, NUM_DISTANCE_BINS)
    return time, distance, approach


def glance_prompt(cell: int) -> str:
    """The user message of a cell, e.g. "Time since the fight began: under 1.4 s. Nearest NPC ..."."""
    time, distance, approach = cell_parts(cell)
    return (
        f"Time since the fight began: {TIME_WORDS[time]}. "
        f"Nearest NPC to the bot: about {DISTANCE_VALUES[distance]:g} units. "
        f"Since the last glance: {APPROACH_WORDS[approach]}."
    )


def glance_prompts() -> list[str]:
    """Every cell's user message, in cell order."""
    return [glance_prompt(c) for c in range(NUM_GLANCE_CELLS)]


def glance_source() -> TagSource:
    """A tag source whose carry is (tables (N, NUM_GLANCE_CELLS) int32, the batch's histories).

    Each decision's tag is its episode's table at the glance's cell; the cell
    is the decision's aux (`RolloutResult.decision_aux`), so a trainer knows
    which cells an episode visited. Run it with `decision_period_s =
    GLANCE_PERIOD_S`, the period its prompt speaks of.
    """

    def step(carry, features, prev_tags, done, time_s, key, state=None, params=None):
        tables, histories = carry
        histories = jax.vmap(push, in_axes=(0, 0, None))(histories, state, params)
        time = jnp.broadcast_to(time_s, done.shape)
        cells = jax.vmap(glance_cell, in_axes=(0, 0, None))(histories, time, params.dt)
        tags = jnp.take_along_axis(tables, cells[:, None], axis=1)[:, 0]
        return tags, cells, (tables, histories)

    return TagSource(step, lambda n: initial_carry(np.full(NUM_GLANCE_CELLS, AGGRESSIVE), n), reads_state=True)


def initial_carry(tables, num_episodes: int):
    """The carry for one table (NUM_GLANCE_CELLS,) shared by every episode, or one per episode (N, C).

    A table given as host values (a list or numpy array) is checked here; a traced one is the caller's.
    """
    if not isinstance(tables, jax.Array):
        values = np.asarray(tables)
        if values.size and (values.min() < 0 or values.max() >= NUM_TAGS):
            raise ValueError(f"glance table tags must be in 0..{NUM_TAGS - 1}, got {sorted(set(values.ravel()))}")
    tables = jnp.asarray(tables, jnp.int32)
    if tables.ndim == 1:
        tables = jnp.broadcast_to(tables, (num_episodes, tables.shape[0]))
    if tables.shape != (num_episodes, NUM_GLANCE_CELLS):
        raise ValueError(f"glance tables have shape ({num_episodes}, {NUM_GLANCE_CELLS}), got {tables.shape}")
    return tables, blank_histories(num_episodes)
