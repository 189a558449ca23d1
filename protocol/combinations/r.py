"""Combination R: B's policy with the tags in a fixed rotation, one tag per decision period.

A tag source that knows nothing of the game: 0, 1, 2, 3, 0, ... every 5 s
(`jaxarena.tag_sources.schedule_tags`), on B's paired episodes. Beside B it says
how much of B's result a schedule without information reaches; its section
(`beside_b`) gives each bot's win % and, where the run has B, the paired difference.
"""

from __future__ import annotations

from jaxarena.names import TAG_NAMES

from ..combination import Combination
from ..playing import period_s
from .beside_b import beside_b, play_b_squad

#: The tags in turn, one per decision period.
ROTATION = (0, 1, 2, 3)


def _rotation(env_params):
    from jaxarena.tag_sources import schedule_tags  # JAX loads when a cell plays, not when the registry is read

    return schedule_tags(ROTATION, period_s(env_params))


COMBINATION = Combination(
    name="R",
    about="B's policy with the tags in a fixed rotation (0, 1, 2, 3, ...), one per decision period",
    squads=lambda context, label: {label: context.config.policy_b},
    play=play_b_squad(_rotation),
    fingerprint=lambda context, label: {"rotation": list(ROTATION)},
    sections=(
        beside_b(
            "R",
            "rotation",
            f"Rotation (R): B's policy with the tags in turn ({' → '.join(TAG_NAMES[t] for t in ROTATION)}), one per "
            "period",
            rank=40,
            extra={"rotation": [TAG_NAMES[t] for t in ROTATION]},
        ),
    ),
)
