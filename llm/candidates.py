"""Diverse candidate tags (Combination C): N = 3 proposals per decision, in two styles.

*Language Agents with Reinforcement Learning for Strategic Play in the Werewolf Game*
lets the LLM propose several strategically different actions and a
small RL policy choose among them, because a single LLM pick inherits the
model's bias (ours picks Aggressive in every state). The candidate prompt is
the Table 10 prompt (`prompt.SYSTEM`, `prompt.format_state`) plus one line
naming the deduced opponent class, or no line for the "no deduction" ablation.

- *vanilla*: the top 3 tags by that prompt's choice probabilities.
- *iterative*: three prompts in sequence; each after the first is told the
  tags already proposed and asked for a strategically different one. Its
  proposal is its reply's most probable option; a repeat of an earlier
  proposal is replaced by that reply's most probable option not yet proposed
  (`dedup`).

As for deduction, the Table 10 state is quantised (`candidate_cell`, pure JAX)
and every cell is put to the LLM once (`strategy_table.build_table`). HP is
binned as a fraction of the scenario's maximum, so a preset with 5x the bot's
HP maps onto the same cells; prompts are written with the paper's maxima.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxarena.names import BOT_MAX_HP, NPC_MAX_HP, NUM_TAGS, TAG_NAMES
from jaxarena.types import EnvParams

from .deduction import DISTANCE_VALUES, OPPONENT_LABELS, distance_bin
from .prompt import SYSTEM, format_state
from .types import Prompt

N_CANDIDATES = 3
CANDIDATE_STYLES = ("vanilla", "iterative")

#: HP fraction bins (bot HP over its max; average living-NPC HP over the NPC max): thirds.
HP_FRACTION_EDGES = (1.0 / 3.0, 2.0 / 3.0)
#: What a prompt says for each HP bin, as a fraction of the max (the bin centres).
HP_FRACTION_VALUES = (1.0 / 6.0, 0.5, 5.0 / 6.0)
#: Living NPCs: 1-2, 3-4, 5 (an empty squad ends the episode; it joins the first bin).
ALIVE_EDGES = (3, 5)
#: What a prompt says for each alive bin (the upper count of each).
ALIVE_VALUES = (2, 4, 5)

NUM_STATE_CELLS = len(HP_FRACTION_VALUES) ** 2 * len(ALIVE_VALUES) * 2 * len(DISTANCE_VALUES)
#: The assessment a candidate prompt states: an `OPPONENT_CLASSES` index, or `NO_ASSESSMENT`.
NO_ASSESSMENT = len(OPPONENT_LABELS)
NUM_ASSESSMENTS = NO_ASSESSMENT + 1
NUM_CANDIDATE_CELLS = NUM_ASSESSMENTS * NUM_STATE_CELLS


def _bins(x: jax.Array, edges) -> jax.Array:
    x = jnp.asarray(x, jnp.float32)
    return sum((x >= edge).astype(jnp.int32) for edge in edges)


def state_cell(features: jax.Array, params: EnvParams) -> jax.Array:
    """() int32 in [0, NUM_STATE_CELLS): the quantised Table 10 state (`llm_features` order)."""
    features = jnp.asarray(features, jnp.float32)
    bot_hp, avg_npc_hp, alive, moving, nearest = (features[i] for i in range(5))
    bot = _bins(bot_hp / params.bot_hp, HP_FRACTION_EDGES)
    npc = _bins(avg_npc_hp / params.npc_hp, HP_FRACTION_EDGES)
    alive = _bins(alive, ALIVE_EDGES)
    moving = (moving > 0.5).astype(jnp.int32)
    cell = (((bot * 3 + npc) * 3 + alive) * 2 + moving) * 3 + distance_bin(nearest)
    return cell.astype(jnp.int32)


def candidate_cell(features: jax.Array, assessment: jax.Array, params: EnvParams) -> jax.Array:
    """() int32 in [0, NUM_CANDIDATE_CELLS): the table key of (state, assessment) for one arena.

    `assessment` is an `OPPONENT_CLASSES` index, or `NO_ASSESSMENT` (4); it is
    clipped into that range.
    """
    assessment = jnp.clip(jnp.asarray(assessment, jnp.int32), 0, NO_ASSESSMENT)
    return (assessment * NUM_STATE_CELLS + state_cell(features, params)).astype(jnp.int32)


def _split(cell: int) -> tuple[int, tuple[int, int, int, int, int]]:
    cell = int(cell)
    if not 0 <= cell < NUM_CANDIDATE_CELLS:
        raise ValueError(f"candidate cell must be in [0, {NUM_CANDIDATE_CELLS}), got {cell}")
    assessment, rest = divmod(cell, NUM_STATE_CELLS)
    rest, dist = divmod(rest, 3)
    rest, moving = divmod(rest, 2)
    rest, alive = divmod(rest, 3)
    bot, npc = divmod(rest, 3)
    return assessment, (bot, npc, alive, moving, dist)


def cell_features(cell: int) -> tuple[float, float, float, float, float]:
    """The representative Table 10 state of a cell (paper maxima), in `llm_features` order."""
    _, (bot, npc, alive, moving, dist) = _split(cell)
    return (
        HP_FRACTION_VALUES[bot] * BOT_MAX_HP,
        HP_FRACTION_VALUES[npc] * NPC_MAX_HP,
        float(ALIVE_VALUES[alive]),
        float(moving),
        DISTANCE_VALUES[dist],
    )


def candidate_prompt(cell: int) -> Prompt:
    """Table 10's prompt for the cell's state, plus the assessment line (none for `NO_ASSESSMENT`)."""
    assessment, _ = _split(cell)
    user = format_state(*cell_features(cell))
    if assessment != NO_ASSESSMENT:
        user += f"\nOpponent assessment: {OPPONENT_LABELS[assessment]}."
    return Prompt(system=SYSTEM, user=user)


def iterative_prompt(cell: int, proposed: Sequence[int] = ()) -> Prompt:
    """Prompt k of an iterative chain: the candidate prompt, told the `proposed` tags (none for k = 0)."""
    base = candidate_prompt(cell)
    if not proposed:
        return base
    names = ", ".join(f"{int(t)} = {TAG_NAMES[int(t)]}" for t in proposed)
    return Prompt(base.system, f"{base.user}\nAlready proposed: {names}. Propose a strategically different tactic.")


def vanilla_candidates(probs: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The top-3 tags by probability (ties to the lower tag) and their probabilities; rank = position."""
    p = np.asarray(probs, np.float64)
    if p.shape != (NUM_TAGS,):
        raise ValueError(f"probs must have shape ({NUM_TAGS},), got {p.shape}")
    order = np.argsort(-p, kind="stable")[:N_CANDIDATES]
    return order.astype(np.int32), p[order].astype(np.float32)


def dedup(proposals: Sequence[int], probs: Sequence[Sequence[float]]) -> tuple[list[int], list[float], int]:
    """Distinct candidates from an iterative chain's replies.

    `proposals[k]` is what reply k proposed and `probs[k]` its four option
    probabilities. A proposal that repeats an earlier candidate is replaced by
    the most probable option of the same reply not yet taken (ties to the lower
    tag) and counted as a repeat. Returns (tags, each tag's probability in its
    own reply, number of repeats).
    """
    if len(proposals) != len(probs):
        raise ValueError(f"{len(proposals)} proposals but {len(probs)} probability vectors")
    if len(proposals) > NUM_TAGS:
        raise ValueError(f"at most {NUM_TAGS} distinct tags exist, got {len(proposals)} proposals")
    tags: list[int] = []
    tag_probs: list[float] = []
    repeats = 0
    for proposal, p in zip(proposals, probs, strict=True):
        p = np.asarray(p, np.float64)
        tag = int(proposal)
        if not 0 <= tag < NUM_TAGS or p.shape != (NUM_TAGS,):
            raise ValueError(f"a proposal is a tag in 0..{NUM_TAGS - 1} with {NUM_TAGS} probabilities")
        if tag in tags:
            repeats += 1
            tag = next(int(t) for t in np.argsort(-p, kind="stable") if int(t) not in tags)
        tags.append(tag)
        tag_probs.append(float(p[tag]))
    return tags, tag_probs, repeats
