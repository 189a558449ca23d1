"""The selector as a tag source: Combination C and its ablations, for the one episode runner.

Every decision it pushes the decision point onto each episode's history,
asks the LLM table for the deduction and the candidates, and picks one
candidate. How it picks is the `chooser`:

- "selector": the trained network's most likely candidate (Combination C);
- "random": a uniformly random candidate (the random-selector ablation);
- "llm": the candidate the LLM gave the highest probability (the LLM
  choosing among its own candidates; read from the table, no fourth prompt);
- "top1": the first proposal (with `num_candidates=1`, the no-diversity ablation).

Its aux logs, per decision: the deduction, the candidates and their
probabilities, the chosen index, and the true opponent class (for the
deduction's accuracy).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxarena.llm.history import blank_histories, opponent_class, push
from jaxarena.tag_sources import TagSource

from .inputs import InputConfig, selector_inputs
from .network import CandidateSelector

CHOOSERS = ("selector", "random", "llm", "top1")


def selector_tag_source(
    table,
    inputs: InputConfig,
    chooser: str = "selector",
    network: CandidateSelector | None = None,
    network_params=None,
) -> TagSource:
    """A `TagSource` that plays Combination C or one of its ablations: it reads the env state and
    carries each episode's decision history."""
    if chooser not in CHOOSERS:
        raise ValueError(f"unknown chooser {chooser!r}; choose from {', '.join(CHOOSERS)}")
    if chooser == "selector" and (network is None or network_params is None):
        raise ValueError("the 'selector' chooser needs the trained network and its params")
    observe = jax.vmap(selector_inputs, in_axes=(None, 0, 0, 0, None, None, None))

    def step(histories, features, prev_tags, done, time_s, key, state=None, params=None):
        histories = jax.vmap(push, in_axes=(0, 0, None))(histories, state, params)
        obs, advice = observe(table, histories, features, prev_tags, time_s, params, inputs)
        if chooser == "selector":
            logits, _ = network.apply(network_params, obs)
            choice = jnp.argmax(logits, axis=-1)
        elif chooser == "random":
            choice = jax.random.randint(key, prev_tags.shape, 0, inputs.choosable)
        elif chooser == "llm":
            choice = jnp.argmax(jnp.where(obs.valid, advice.probs, -1.0), axis=-1)
        else:
            choice = jnp.zeros_like(prev_tags)
        tags = jnp.take_along_axis(advice.tags, choice[:, None], axis=-1)[:, 0]
        aux = {
            "deduction": advice.deduction,
            "candidates": advice.tags,
            "candidate_probs": advice.probs,
            "choice": choice.astype(jnp.int32),
            "truth": jax.vmap(opponent_class, in_axes=(0, None))(state, params),
        }
        return tags, aux, histories

    return TagSource(step, blank_histories, reads_state=True)
