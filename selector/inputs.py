"""What the RL selector sees at a decision: the state, the LLM's deduction and its candidate tags.

One function, `selector_inputs`, builds it, for training (the decision-level
environment) and for play (the tag source) alike, so the two cannot drift.
The LLM's answers come from a `StrategyTable` (llm/strategy_table.py): the
deduction from the history of decision points, then the candidates from the
Table 10 state and the deduced opponent.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxarena.llm.candidates import candidate_cell
from jaxarena.llm.history import HISTORY_LEN, NEAREST, NUM_OPPONENT_CLASSES, NUM_POINT_FEATURES, DecisionHistory
from jaxarena.llm.strategy_table import deduce, propose
from jaxarena.names import NUM_NPCS, NUM_TAGS
from jaxarena.types import EnvParams

#: The Werewolf agents' N: the LLM proposes three candidates.
NUM_CANDIDATES = 3
#: "vanilla" and "iterative" are two ways to get N = 3 from the LLM; "all-tags" offers
#: the selector every tag, ranked by the LLM's probabilities: what the selector could do if the
#: LLM's proposals never left the best tag out.
CANDIDATE_STYLES = ("vanilla", "iterative", "all-tags")
#: Table 10 state (5) + history points and their valid flags + deduction + time + previous tag.
STATE_SIZE = 5 + HISTORY_LEN * (NUM_POINT_FEATURES + 1) + NUM_OPPONENT_CLASSES + 1 + NUM_TAGS
#: Tag one-hot + the LLM's probability of it + its rank one-hot (up to four candidates).
CANDIDATE_SIZE = NUM_TAGS + 1 + NUM_TAGS
#: The candidate table's "no assessment" row: the candidate prompt without a deduction line.
NO_ASSESSMENT = NUM_OPPONENT_CLASSES


@dataclasses.dataclass(frozen=True)
class InputConfig:
    """Which LLM outputs the selector gets (the Werewolf agents' ablations switch these off).

    style: how the candidates are proposed ("vanilla": the top three of one
      reply; "iterative": three replies, each asked for a different tactic;
      "all-tags": all four tags, in the order of the LLM's probabilities).
    deduction: whether the LLM's deduction is used (in the candidate prompt and
      as a selector input); False is the no-deduction ablation.
    num_candidates: how many of the proposals may be chosen; None for all of
      them; 1 is the no-diversity ablation (the LLM's first proposal only).
    """

    style: str = "iterative"
    deduction: bool = True
    num_candidates: int | None = None

    def __post_init__(self):
        if self.style not in CANDIDATE_STYLES:
            raise ValueError(f"unknown candidate style {self.style!r}; choose from {', '.join(CANDIDATE_STYLES)}")
        if self.num_candidates is not None and not 1 <= int(self.num_candidates) <= self.proposals:
            raise ValueError(f"num_candidates must be in 1..{self.proposals} for style {self.style!r}")

    @property
    def proposals(self) -> int:
        """Candidates per decision (the network's K)."""
        return NUM_TAGS if self.style == "all-tags" else NUM_CANDIDATES

    @property
    def choosable(self) -> int:
        return self.proposals if self.num_candidates is None else int(self.num_candidates)


class SelectorObs(NamedTuple):
    state: jax.Array  # (STATE_SIZE,) float32
    candidates: jax.Array  # (K, CANDIDATE_SIZE) float32, K = InputConfig.proposals
    valid: jax.Array  # (K,) bool: the candidate may be chosen


class LLMAdvice(NamedTuple):
    """What the LLM said at one decision, for the log."""

    deduction: jax.Array  # (NUM_OPPONENT_CLASSES,) float32 probabilities (uniform when switched off)
    tags: jax.Array  # (K,) int32 candidate tags, in proposal order
    probs: jax.Array  # (K,) float32 each candidate's LLM probability


def selector_inputs(
    table,
    history: DecisionHistory,
    features: jax.Array,
    prev_tag: jax.Array,
    time_s: jax.Array,
    params: EnvParams,
    config: InputConfig,
) -> tuple[SelectorObs, LLMAdvice]:
    """The selector's observation at one decision of one arena, and the LLM's advice behind it.

    `history` must already hold this decision point (`jaxarena.llm.history.push`);
    `features` are its Table 10 `llm_features`.
    """
    if config.deduction:
        deduction = deduce(table, history)
        assessment = jnp.argmax(deduction).astype(jnp.int32)
    else:
        deduction = jnp.full((NUM_OPPONENT_CLASSES,), 1.0 / NUM_OPPONENT_CLASSES, jnp.float32)
        assessment = jnp.int32(NO_ASSESSMENT)
    if config.style == "all-tags":
        every = jnp.asarray(table.vanilla_probs)[candidate_cell(features, assessment, params)]
        tags = jnp.argsort(-every, stable=True).astype(jnp.int32)
        probs = every[tags]
    else:
        tags, probs = propose(table, features, assessment, params, config.style)

    points = history.points.at[:, NEAREST].divide(params.arena_size)
    state = jnp.concatenate(
        [
            features[0:1] / params.bot_hp,
            features[1:2] / params.npc_hp,
            features[2:3] / NUM_NPCS,
            features[3:4],
            features[4:5] / params.arena_size,
            points.reshape(-1),
            history.valid.astype(jnp.float32),
            deduction if config.deduction else jnp.zeros_like(deduction),
            jnp.reshape(time_s / params.episode_s, (1,)),
            jax.nn.one_hot(prev_tag, NUM_TAGS),
        ]
    ).astype(jnp.float32)
    candidates = jnp.concatenate(
        [jax.nn.one_hot(tags, NUM_TAGS), probs[:, None], jnp.eye(config.proposals, NUM_TAGS)], axis=-1
    ).astype(jnp.float32)
    valid = jnp.arange(config.proposals) < config.choosable
    return SelectorObs(state, candidates, valid), LLMAdvice(deduction, tags.astype(jnp.int32), probs)
