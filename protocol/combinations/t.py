"""Combination T: B's policy with tags drawn at the paper's Table 9 frequencies, one per decision period.

The paper's LLM chose Surround in 83.8% of its 2,430 decisions, Aggressive 4.2%, Flank 4.4% and
Retreat 7.6%, "regardless of opponent type". T replays that taste without the LLM: each period,
each episode's tag is drawn afresh from those frequencies (`jaxarena.tag_sources.frequency_tags`),
on B's paired episodes. It is a chooser with the paper's LLM's habits and no sight of the game, and
the report calls it that, never an LLM. Beside B (the embedded LLM) it says how much of the paper's
B row its tag mix alone explains; its section gives each bot's win % and the paired difference from B.
"""

from __future__ import annotations

from jaxarena.names import TAG_NAMES

from ..combination import Combination
from ..tables import PAPER_TABLE9
from .beside_b import beside_b, play_b_squad

#: Table 9's counts of each tag (Surround, Aggressive, Flank, Retreat), the draw's weights.
WEIGHTS = PAPER_TABLE9["counts"]


def _table9_draws(env_params):
    from jaxarena.tag_sources import frequency_tags  # JAX loads when a cell plays, not when the registry is read

    return frequency_tags(WEIGHTS)


_MIX = ", ".join(f"{TAG_NAMES[t]} {100 * w / sum(WEIGHTS):.1f}%" for t, w in enumerate(WEIGHTS))

COMBINATION = Combination(
    name="T",
    about="B's policy with tags drawn at the paper's Table 9 frequencies (mostly Surround), not an LLM",
    squads=lambda context, label: {label: context.config.policy_b},
    play=play_b_squad(_table9_draws),
    fingerprint=lambda context, label: {"table9_counts": list(WEIGHTS)},
    sections=(
        beside_b(
            "T",
            "table9_chooser",
            f"Table 9's chooser (T): B's policy with tags drawn at the paper's LLM's frequencies ({_MIX}), not an LLM",
            rank=41,
            extra={"counts": list(WEIGHTS), "tags": list(TAG_NAMES)},
        ),
    ),
)
